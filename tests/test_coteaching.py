"""Co-teaching (Han et al. 2018) on image-text pairs: R(T), the small-loss selection, the cross update, a run."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import noisy_trainer, tiny_config

from hfncl.experiment import DataArguments, ModelArguments, run_experiment
from hfncl.tasks.pairs import model_fields
from hfncl.types import Division
from hfncl_plugins import coteaching
from hfncl_plugins.coteaching import CoTeachingOptions


def test_kept_share_falls_linearly_to_one_minus_tau_over_t_k_epochs():
    """R(T) = 1 - tau min(T / T_k, 1), by hand for tau = 0.4, T_k = 4."""
    shares = [coteaching.kept_share(0.4, epoch, 4) for epoch in range(7)]
    assert shares == pytest.approx([1.0, 0.9, 0.8, 0.7, 0.6, 0.6, 0.6])


def test_small_loss_mask_keeps_the_ceiling_of_the_share_with_ties_to_the_lower_index():
    losses = torch.tensor([0.3, 0.1, 0.5, 0.1, 0.9])
    assert coteaching.small_loss_mask(losses, 0.5).tolist() == [True, True, False, True, False]  # ceil(2.5) = 3
    assert coteaching.small_loss_mask(losses, 0.2).tolist() == [False, True, False, False, False]
    assert coteaching.small_loss_mask(torch.arange(10.0), 0.7).sum() == 7  # 0.7 * 10 is not rounded up to 8
    assert coteaching.small_loss_mask(losses, 0.0).sum() == 1  # never an empty batch
    assert coteaching.small_loss_mask(losses, 1.0).all()


class _Ledger(dict):
    def record(self, index, name, values):
        self[name] = (index, values)


def _stub_trainer(similarities, epoch, options=None, divisions=(None, None), noise_rate=None):
    """What rectify and loss read of the trainer: options, the epoch, divisions, the known noise rate, forward and
    the ledger."""
    settings = CoTeachingOptions.read(options or {})
    return SimpleNamespace(
        options_of=lambda _: settings,
        noise_rate=noise_rate,
        epoch=epoch,
        divisions=list(divisions),
        ledger=_Ledger(),
        forward=lambda net, batch, grad=True: SimpleNamespace(similarity=similarities[net], index=batch["index"]),
    )


def _vsepp_pair_loss(similarity, i, margin=0.2):
    """VSE++'s hinge on the hardest negatives of pair i, written out over the row and the column."""
    row = max(float(similarity[i, j]) for j in range(len(similarity)) if j != i)
    column = max(float(similarity[j, i]) for j in range(len(similarity)) if j != i)
    positive = float(similarity[i, i])
    return max(0.0, margin - positive + row) + max(0.0, margin - positive + column)


def _sum_pair_loss(similarity, i, margin=0.2):
    """NCR's L_w of pair i: the hinge summed over every negative of the row and of the column."""
    positive = float(similarity[i, i])
    return sum(
        max(0.0, margin - positive + float(similarity[i, j])) + max(0.0, margin - positive + float(similarity[j, i]))
        for j in range(len(similarity))
        if j != i
    )


@pytest.mark.parametrize(("loss", "pair_loss"), [("hardest", _vsepp_pair_loss), ("sum", _sum_pair_loss)])
def test_each_network_learns_from_the_pairs_its_peer_finds_small_loss(loss, pair_loss):
    """Algorithm 1 steps 4-7 against a loop: network 0's loss sums its own per-pair losses over the
    ceil(R(T) b) pairs with the smallest losses under network 1, and the other way round."""
    generator = torch.Generator().manual_seed(0)
    similarities = [torch.rand(8, 8, generator=generator) for _ in range(2)]
    options = {"coteaching.forget_rate": 0.5, "coteaching.gradual_epochs": 2, "coteaching.loss": loss}
    trainer = _stub_trainer(similarities, epoch=1, options=options)
    batch = {"index": torch.arange(8)}
    share = 1 - 0.5 * 1 / 2
    for net, peer in ((0, 1), (1, 0)):
        peer_losses = [pair_loss(similarities[peer], i) for i in range(8)]
        kept = sorted(range(8), key=lambda i: (peer_losses[i], i))[: math.ceil(share * 8)]
        expected = sum(pair_loss(similarities[net], i) for i in kept)
        targets = coteaching.rectify(trainer, batch, net, None)
        assert sorted(targets["keep"].nonzero().squeeze(1).tolist()) == sorted(kept)
        outputs = trainer.forward(net, batch)
        terms = coteaching.loss(trainer, batch, outputs, targets, net)
        assert float(terms["small_loss_triplet"]) == pytest.approx(expected, rel=1e-6)
        index, recorded = trainer.ledger[f"coteaching.loss{net}"]
        assert recorded.tolist() == pytest.approx([pair_loss(similarities[net], i) for i in range(8)], rel=1e-6)


def test_forget_rate_is_the_option_the_known_noise_rate_or_the_gmm_s_noisy_share():
    division = Division(clean_prob=torch.tensor([0.9, 0.7, 0.2, 0.0]), clean=torch.tensor([True, True, False, False]))
    unknown = _stub_trainer([None, None], epoch=3, divisions=(None, division))
    assert coteaching.forget_rate(unknown, 1) == pytest.approx(1 - 0.45)
    assert coteaching.forget_rate(unknown, 0) == 0.0  # no division yet: keep every pair
    known = _stub_trainer([None, None], epoch=3, divisions=(None, division), noise_rate=0.6)
    assert coteaching.forget_rate(known, 0) == coteaching.forget_rate(known, 1) == 0.6  # Han et al.'s tau
    estimated = _stub_trainer(
        [None, None], epoch=3, options={"coteaching.estimate_forget_rate": True}, divisions=(None, division),
        noise_rate=0.6,
    )
    assert coteaching.forget_rate(estimated, 1) == pytest.approx(1 - 0.45)
    fixed = _stub_trainer(
        [None, None], epoch=3, options={"coteaching.forget_rate": 0.3}, divisions=(None, division), noise_rate=0.6
    )
    assert coteaching.forget_rate(fixed, 1) == 0.3


@pytest.mark.parametrize(
    ("name", "value"), [("coteaching.forget_rate", 1.0), ("coteaching.estimate_forget_rate", "yes")]
)
def test_a_bad_option_is_refused_by_name(tiny_data_dir, tmp_path, name, value):
    with pytest.raises(Exception, match=name):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["coteaching"], options={name: value}))


def test_coteaching_trains_and_its_gmm_finds_the_noise(tiny_data_dir, tmp_path):
    """Three epochs without warmup on 40% noise: every epoch trains both networks; from the second, each network's
    GMM on the losses of the previous epoch divides the pairs better than chance, and better as training goes on."""
    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4),
        tiny_config(tmp_path, ["coteaching"], warmup_epochs=0, options={"coteaching.gradual_epochs": 2}),
    )
    history = result["history"]
    assert all(math.isfinite(record[f"train/small_loss_triplet/net{net}"]) for record in history for net in (0, 1))
    assert "division/net0/auc" not in history[0]
    assert all(history[1][f"division/net{net}/auc"] > 0.55 for net in (0, 1))
    assert all(history[2][f"division/net{net}/auc"] > 0.7 for net in (0, 1))
    assert 0.0 < result["test"]["rsum"] <= 600.0


def test_coteaching_asks_for_fresh_heads_unless_told_otherwise():
    """f and g start apart on pretrained towers (``tests/test_towers.py`` shows the heads drawn); an explicit
    ``--pretrained-heads true`` keeps CLIP's projection."""
    assert model_fields(["coteaching"], None)["pretrained_heads"] is False
    assert model_fields(["coteaching"], ModelArguments(pretrained_heads=True))["pretrained_heads"] is True
    assert "pretrained_heads" not in model_fields(["vsepp"], None)
