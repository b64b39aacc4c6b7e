"""GSC's equations (plugins/gsc.py, plugins/gsc_intra.py) against values computed by hand, and GSC end to end."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import MICRO_LOCAL_MODELS, TINY_MODEL, Interrupted, noisy_trainer, tiny_config
from safetensors.torch import load_file
from sklearn.mixture import GaussianMixture

from hfncl.data.synthetic import SyntheticConfig
from hfncl.demo import demo_runs, run_demo
from hfncl.engine.ledger import Ledger
from hfncl.engine.trainer import Trainer
from hfncl.experiment import DataArguments, run_experiment
from hfncl.models.heads import pack_local
from hfncl.types import Division
from hfncl_plugins import gsc
from hfncl_plugins.gsc import (
    correspondence_labels,
    cross_modal_indicator,
    cross_modal_loss,
    divide,
    fold_epoch,
    intra_modal_indicator,
    temporal_ensemble,
)
from hfncl_plugins.gsc_intra import (
    intra_modal_loss,
    intra_modal_similarity,
    structure_embeddings,
    structure_similarity,
)

LN2, LN3 = math.log(2.0), math.log(3.0)
# exp(S) = [[3, 1], [2, 1]] at temperature 1
S = torch.tensor([[LN3, 0.0], [LN2, 0.0]])


def test_cross_modal_indicator_eq3_by_hand():
    # pair 0: row share 3 / (3 + 1), column share 3 / (3 + 2); pair 1: row 1 / (2 + 1), column 1 / (1 + 1)
    expected = torch.tensor([(3 / 4 + 3 / 5) / 2, (1 / 3 + 1 / 2) / 2])
    torch.testing.assert_close(cross_modal_indicator(S, temperature=1.0), expected)
    torch.testing.assert_close(cross_modal_indicator(S * 0.07, temperature=0.07), expected)


def test_cross_modal_loss_eq6_by_hand():
    y = torch.tensor([1.0, 0.5])
    i2t = -(1.0 * math.log(3 / 4) + 0.5 * math.log(1 / 3))
    t2i = -(1.0 * math.log(3 / 5) + 0.5 * math.log(1 / 2))
    expected = torch.tensor((i2t + t2i) / (2 * 2))
    torch.testing.assert_close(cross_modal_loss(S, y, temperature=1.0), expected)


def test_cross_modal_loss_ignores_pairs_labelled_noisy():
    similarity = S.clone().requires_grad_(True)
    cross_modal_loss(similarity, torch.tensor([0.0, 1.0]), temperature=1.0).backward()
    # pair 0 has y = 0: only pair 1's terms remain, and they do not involve S_00
    assert similarity.grad[0, 0] == 0 and similarity.grad[1, 1] != 0


IMAGE_STRUCTURE = torch.tensor([[1.0, 0.5, 0.2], [0.5, 1.0, 0.4], [0.2, 0.4, 1.0]])
TEXT_STRUCTURE = torch.tensor([[1.0, 0.3, 0.9], [0.3, 1.0, 0.1], [0.9, 0.1, 1.0]])
Y = torch.tensor([1.0, 0.5, 0.0])


def test_structure_similarity_eq8_by_hand():
    # weighted rows (y_j <I_i,I_j>)_j and (y_j <T_i,T_j>)_j; pair 2 (y = 0) leaves every structure
    expected = torch.tensor(
        [
            (1 + 0.25 * 0.15) / math.sqrt((1 + 0.25**2) * (1 + 0.15**2)),  # [1, .25, 0] . [1, .15, 0]
            (0.5 * 0.3 + 0.5 * 0.5) / math.sqrt((0.5**2 + 0.5**2) * (0.3**2 + 0.5**2)),
            (0.2 * 0.9 + 0.2 * 0.05) / math.sqrt((0.2**2 + 0.2**2) * (0.9**2 + 0.05**2)),
        ]
    )
    torch.testing.assert_close(structure_similarity(IMAGE_STRUCTURE, TEXT_STRUCTURE, Y), expected)
    changed = IMAGE_STRUCTURE.clone()
    changed[:, 2] = torch.tensor([-0.9, 0.7, 1.0])
    torch.testing.assert_close(structure_similarity(changed, TEXT_STRUCTURE, Y), expected)


def test_structure_similarity_of_a_row_with_no_clean_neighbour_is_zero():
    assert torch.all(structure_similarity(IMAGE_STRUCTURE, TEXT_STRUCTURE, torch.zeros(3)) == 0)


def test_intra_modal_loss_eq7_by_hand():
    a, t = 0.5, 0.2
    image = torch.tensor([[1.0, a], [a, 1.0]])
    text = torch.tensor([[1.0, t], [t, 1.0]])
    y = torch.tensor([1.0, 0.5])
    # logit_ij = sum_k y_k <I_i,I_k> y_k <T_j,T_k>
    l00, l01 = 1 + 0.25 * a * t, t + 0.25 * a
    l10, l11 = a + 0.25 * t, a * t + 0.25
    term0 = -math.log(math.exp(l00) / (math.exp(l00) + math.exp(l01)))
    term1 = -math.log(math.exp(l11) / (math.exp(l10) + math.exp(l11)))
    expected = torch.tensor((1.0 * term0 + 0.5 * term1) / 2)
    torch.testing.assert_close(intra_modal_loss(image, text, y, temperature=1.0), expected)
    torch.testing.assert_close(
        intra_modal_loss(image, text, y, temperature=2.0),
        torch.tensor(
            (
                -math.log(1 / (1 + math.exp((l01 - l00) / 2)))
                - 0.5 * math.log(1 / (1 + math.exp((l10 - l11) / 2)))
            )
            / 2
        ),
    )


def test_intra_modal_similarity_is_the_cosine_of_the_embeddings():
    embeds = torch.tensor([[3.0, 4.0], [1.0, 0.0], [0.0, -2.0]])
    expected = torch.tensor([[1.0, 0.6, -0.8], [0.6, 1.0, 0.0], [-0.8, 0.0, 1.0]])
    torch.testing.assert_close(intra_modal_similarity(embeds), expected)


def test_structure_of_packed_local_features_is_the_cosine_of_their_masked_unit_means():
    generator = torch.Generator().manual_seed(3)
    states = torch.randn(3, 4, 5, generator=generator)
    lengths = [4, 2, 1]
    mask = torch.arange(4)[None, :] < torch.tensor(lengths)[:, None]
    packed = pack_local(states, mask)
    means = []
    for item, length in zip(states.numpy(), lengths, strict=True):
        rows = item[:length] / np.linalg.norm(item[:length], axis=1, keepdims=True)
        means.append(rows.mean(axis=0))
    means = np.stack(means)
    unit = means / np.linalg.norm(means, axis=1, keepdims=True)
    torch.testing.assert_close(structure_embeddings(packed), torch.from_numpy(means))
    torch.testing.assert_close(intra_modal_similarity(packed), torch.from_numpy(unit @ unit.T))
    pooled = torch.randn(3, 5, generator=generator)
    assert structure_embeddings(pooled) is pooled
    with pytest.raises(ValueError, match="packed"):
        intra_modal_similarity(torch.zeros(2, 3, 4, 5))


def test_intra_modal_indicator_eq4_is_the_higher_mean_posterior():
    scores = torch.tensor([0.05, 0.1, 0.12, 0.15, 0.7, 0.75, 0.8, 0.82, 0.85, 0.9])
    y_im = intra_modal_indicator(scores, seed=0)
    normalised = ((scores - scores.min()) / (scores.max() - scores.min())).double().numpy().reshape(-1, 1)
    mixture = GaussianMixture(2, max_iter=10, tol=1e-2, reg_covar=5e-4, random_state=0).fit(normalised)
    expected = mixture.predict_proba(normalised)[:, int(np.argmax(mixture.means_.ravel()))]
    np.testing.assert_allclose(y_im.numpy(), expected, atol=1e-6)
    assert torch.all(y_im[:4] < 0.01) and torch.all(y_im[4:] > 0.99)


def test_momentum_update_eq10_and_min_eq5_by_hand():
    current, previous = torch.tensor([0.2, 1.0]), torch.tensor([1.0, 0.5])
    torch.testing.assert_close(temporal_ensemble(current, previous, 0.7), torch.tensor([0.44, 0.85]))
    torch.testing.assert_close(temporal_ensemble(current, previous, 1.0), current)
    torch.testing.assert_close(
        correspondence_labels(torch.tensor([0.9, 0.2]), torch.tensor([0.4, 0.6])), torch.tensor([0.4, 0.2])
    )


def _fakenoisy_trainer(num_train: int = 6, networks: int = 2, **options) -> SimpleNamespace:
    """A trainer view of ``networks`` cosine-head networks (whose similarity module scores <X_i, X_k> as the cosine)."""
    from hfncl.models.configuration import NCLConfig
    from hfncl.models.modeling import MatchingNetwork

    values = dict(options)
    cosine = MatchingNetwork(NCLConfig(image_dim=4, vocab_size=10, embed_dim=4, word_dim=4))
    return SimpleNamespace(
        model=SimpleNamespace(networks=[cosine] * networks),
        ledger=Ledger(num_train),
        options_of=lambda kind: kind.read(values),
        num_train=num_train,
        num_networks=networks,
        config=SimpleNamespace(seed=0),
        in_warmup=False,
        divisions=[None] * networks,
    )


def test_fold_ensembles_with_the_previous_epoch_and_keeps_unseen_pairs():
    trainer = _fakenoisy_trainer()
    seen = torch.tensor([0, 1, 2, 3, 4])
    sims = torch.tensor([0.9, 0.85, 0.1, 0.8, 0.05])
    trainer.ledger.record(seen, gsc.STEP_CM.format(0), torch.tensor([0.8, 0.6, 0.1, 0.9, 0.0]))
    trainer.ledger.record(seen, gsc.STEP_SIM.format(0), sims)
    fold_epoch(trainer, 0, epoch=0)
    y_im = intra_modal_indicator(sims, seed=0)
    # first update: y[t-1] = 1 (the dataset's labels); pair 5 was not seen and keeps 1
    expected_cm = torch.tensor([0.86, 0.72, 0.37, 0.93, 0.3, 1.0])
    torch.testing.assert_close(trainer.ledger.get(gsc.Y_CM.format(0)), expected_cm)
    torch.testing.assert_close(trainer.ledger.get(gsc.Y_IM.format(0))[:5], 0.7 * y_im + 0.3)
    assert trainer.ledger.get(gsc.Y_IM.format(0))[5] == 1.0
    assert torch.isnan(trainer.ledger.get(gsc.STEP_CM.format(0))).all()

    trainer.ledger.record(torch.tensor([5, 0]), gsc.STEP_CM.format(0), torch.tensor([0.2, 0.0]))
    trainer.ledger.record(torch.tensor([5, 0]), gsc.STEP_SIM.format(0), torch.tensor([0.9, 0.1]))
    fold_epoch(trainer, 0, epoch=1)
    second = trainer.ledger.get(gsc.Y_CM.format(0))
    torch.testing.assert_close(second[[0, 5]], torch.tensor([0.3 * 0.86, 0.7 * 0.2 + 0.3]))
    torch.testing.assert_close(second[1:5], expected_cm[1:5])


def test_fold_without_momentum_replaces_the_labels():
    trainer = _fakenoisy_trainer(**{"gsc.momentum": False})
    index = torch.arange(6)
    trainer.ledger.record(index, gsc.STEP_CM.format(0), torch.tensor([0.8, 0.6, 0.1, 0.9, 0.0, 0.7]))
    trainer.ledger.record(index, gsc.STEP_SIM.format(0), torch.tensor([0.9, 0.85, 0.1, 0.8, 0.05, 0.9]))
    fold_epoch(trainer, 0, epoch=0)
    torch.testing.assert_close(trainer.ledger.get(gsc.Y_CM.format(0)), torch.tensor([0.8, 0.6, 0.1, 0.9, 0.0, 0.7]))


def test_each_network_is_divided_by_its_peer_and_alone_by_itself():
    trainer = _fakenoisy_trainer(num_train=3)
    everyone = torch.arange(3)
    trainer.ledger.record(everyone, gsc.Y_CM.format(1), torch.tensor([0.9, 0.3, 0.8]))
    trainer.ledger.record(everyone, gsc.Y_IM.format(1), torch.tensor([0.7, 0.9, 0.1]))
    net0, net1 = divide(trainer=trainer, epoch=1)
    torch.testing.assert_close(net0.clean_prob, torch.tensor([0.7, 0.3, 0.1]))
    assert net0.clean.tolist() == [True, False, False]
    torch.testing.assert_close(net0.extras["statistic"], net0.clean_prob)
    torch.testing.assert_close(net0.extras["y_im"], torch.tensor([0.7, 0.9, 0.1]))
    # network 1's source (network 0) has no estimate yet: the dataset's labels, y = 1
    assert torch.all(net1.clean_prob == 1) and "statistic" not in net1.extras

    alone = _fakenoisy_trainer(num_train=3, networks=1)
    alone.ledger.record(everyone, gsc.Y_CM.format(0), torch.tensor([0.2, 0.6, 1.0]))
    alone.ledger.record(everyone, gsc.Y_IM.format(0), torch.tensor([0.5, 0.5, 0.5]))
    [only] = divide(trainer=alone, epoch=1)
    torch.testing.assert_close(only.clean_prob, torch.tensor([0.2, 0.5, 0.5]))


def test_loss_uses_the_division_of_the_batch_and_records_its_statistics():
    trainer = _fakenoisy_trainer(num_train=5)
    trainer.divisions = [Division(torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]), torch.ones(5, dtype=torch.bool))] * 2
    generator = torch.Generator().manual_seed(0)
    images = torch.nn.functional.normalize(torch.randn(3, 4, generator=generator), dim=1)
    texts = torch.nn.functional.normalize(torch.randn(3, 4, generator=generator), dim=1)
    index = torch.tensor([4, 0, 2])
    outputs = SimpleNamespace(image_embeds=images, text_embeds=texts, similarity=images @ texts.t(), index=index)
    terms = gsc.loss(trainer=trainer, batch={}, outputs=outputs, targets=None, net=1)
    y = torch.tensor([0.5, 0.1, 0.3])
    image_structure, text_structure = images @ images.t(), texts @ texts.t()
    torch.testing.assert_close(terms["gsc_cross_modal"], cross_modal_loss(images @ texts.t(), y, 0.07))
    torch.testing.assert_close(
        terms["gsc_intra_modal"], 0.01 * intra_modal_loss(image_structure, text_structure, y, 1.0)
    )
    recorded = trainer.ledger.get(gsc.STEP_CM.format(1))
    torch.testing.assert_close(recorded[index], cross_modal_indicator(images @ texts.t(), 0.07))
    assert torch.isnan(recorded[[1, 3]]).all()
    torch.testing.assert_close(
        trainer.ledger.get(gsc.STEP_SIM.format(1))[index], structure_similarity(image_structure, text_structure, y)
    )
    no_intra = _fakenoisy_trainer(num_train=5, **{"gsc.intra_loss": False})
    no_intra.divisions = trainer.divisions
    assert set(gsc.loss(trainer=no_intra, batch={}, outputs=outputs, targets=None, net=0)) == {"gsc_cross_modal"}


def test_network_b_trains_in_epoch_t_on_network_a_s_estimate_of_epoch_t():
    """Algorithm 1, lines 3 and 12-13: A's pass folds A's estimate and hands it to B before B's pass."""
    trainer = _fakenoisy_trainer(num_train=4)
    trainer.passes, trainer.pass_index = [[0], [1]], 0
    index = torch.arange(4)
    step_cm, sims = torch.tensor([0.9, 0.2, 0.8, 0.1]), torch.tensor([0.9, 0.1, 0.85, 0.05])
    trainer.ledger.record(index, gsc.STEP_CM.format(0), step_cm)
    trainer.ledger.record(index, gsc.STEP_SIM.format(0), sims)
    gsc.pass_end(trainer=trainer, epoch=3, networks=[0])
    y_cm = 0.7 * step_cm + 0.3
    y_im = 0.7 * intra_modal_indicator(sims, seed=3) + 0.3
    torch.testing.assert_close(trainer.divisions[1].clean_prob, torch.minimum(y_cm, y_im))
    assert trainer.divisions[0] is None
    trainer.pass_index = 1
    trainer.ledger.record(index, gsc.STEP_CM.format(1), step_cm)
    trainer.ledger.record(index, gsc.STEP_SIM.format(1), sims)
    gsc.pass_end(trainer=trainer, epoch=3, networks=[1])
    # A trains next in epoch 4, labelled by divide() at that epoch's start
    assert trainer.divisions[0] is None and gsc.Y_CM.format(1) in trainer.ledger.columns
    torch.testing.assert_close(divide(trainer=trainer, epoch=4)[0].clean_prob, torch.minimum(y_cm, y_im))


@pytest.mark.parametrize("similarity", ["sgr", "saf"])
def test_gsc_trains_an_epoch_on_sgr_and_saf_with_b_labelled_by_a_of_the_same_epoch(
    micro_data_dir, tmp_path, similarity
):
    result = run_experiment(
        DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.4),
        tiny_config(tmp_path, ["gsc"], epochs=1, warmup_epochs=0, lr_decay_epochs=[], batch_size=16),
        MICRO_LOCAL_MODELS[similarity],
    )
    [epoch] = result["history"]
    assert all(
        math.isfinite(epoch[f"train/{term}/net{k}"]) for term in ("gsc_cross_modal", "gsc_intra_modal") for k in (0, 1)
    )
    # network 0 trained on y = 1 (no estimate yet); network 1 on network 0's estimate of this epoch
    assert epoch["division/net0/predicted_clean_ratio"] == 1.0 and epoch["division/net1/predicted_clean_ratio"] < 1.0


@pytest.mark.parametrize(
    ("name", "value"),
    [("gsc.beta1", 1.5), ("gsc.tau1", 0.0), ("gsc.dual", "no"), ("gsc.gamma", -1.0), ("gsc.gmm_max_iter", 0)],
)
def test_bad_options_are_named(name, value):
    with pytest.raises(ValueError, match=name):
        gsc.GSCOptions.read({name: value})


def test_gsc_killed_mid_epoch_resumes_to_the_same_labels_and_result(tiny_data_dir, tmp_path, monkeypatch):
    settings = {"epochs": 3, "warmup_epochs": 0, "save_steps": 4}
    reference = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "ref", ["gsc"], **settings))
    expected = reference.train()

    interrupted = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "run", ["gsc"], **settings))
    original_step = Trainer._step
    calls = {"n": 0}

    def dying_step(self, batch, networks):
        calls["n"] += 1
        if calls["n"] == 83:  # epoch 1, in network 1's pass, two steps after a checkpoint
            raise Interrupted
        return original_step(self, batch, networks)

    monkeypatch.setattr(Trainer, "_step", dying_step)
    with pytest.raises(Interrupted):
        interrupted.train()
    monkeypatch.setattr(Trainer, "_step", original_step)

    resumed = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "run", ["gsc"], resume=True, **settings))
    result = resumed.train()
    assert json.dumps(result["history"], sort_keys=True) == json.dumps(expected["history"], sort_keys=True)
    assert "division/net1/auc" in result["history"][-1]
    for name, column in reference.ledger.columns.items():
        torch.testing.assert_close(resumed.ledger.columns[name], column, equal_nan=True)
    ref_weights = load_file(str(tmp_path / "ref" / "best" / "model.safetensors"))
    run_weights = load_file(str(tmp_path / "run" / "best" / "model.safetensors"))
    assert all(torch.equal(ref_weights[k], run_weights[k]) for k in ref_weights)


def test_single_network_ablation_trains_without_momentum_and_intra_loss(tiny_data_dir, tmp_path):
    options = {"gsc.dual": False, "gsc.momentum": False, "gsc.intra_loss": False}
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["gsc"], epochs=2, warmup_epochs=1, options=options))
    history = trainer.train()["history"]
    assert trainer.num_networks == 1
    assert {k for k in history[-1] if k.startswith("train/")} == {"train/gsc_cross_modal"}
    assert 0.0 <= history[-1]["division/accuracy"] <= 1.0


def test_ncr_with_gsc_intra_modal_term_trains_and_evaluates(tiny_data_dir, tmp_path):
    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4),
        tiny_config(tmp_path, ["ncr", "gsc_intra"], epochs=2),
        TINY_MODEL,
    )
    history = result["history"]
    for epoch in history:
        assert {"train/gsc_intra_modal/net0", "train/gsc_intra_modal/net1"} <= set(epoch)
    assert "train/soft_margin_triplet/net0" in history[-1] and "train/warmup_lw/net0" in history[0]
    assert "division/net0/auc" in history[-1] and result["test"]["rsum"] > 0


SMALL_BENCHMARK = SyntheticConfig(num_train=1500, num_dev=300, num_test=500)


@pytest.fixture(scope="module")
def gsc_and_vsepp_at_40_percent(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """GSC and VSE++ with their demo settings on the small generated benchmark, 40% noise (about 100 s)."""
    runs = demo_runs((0.4,), ["gsc", "vsepp"])
    results = run_demo(tmp_path_factory.mktemp("gsc_vs_vsepp"), runs, SMALL_BENCHMARK, progress=False)
    by_label = {r["label"]: r for r in results}
    history = by_label["gsc"]["history"]
    print({
        "gsc rsum": by_label["gsc"]["test"]["rsum"],
        "vsepp rsum": by_label["vsepp"]["test"]["rsum"],
        "gsc auc": [epoch.get("division/net0/auc") for epoch in history],
        "gsc accuracy": [epoch.get("division/net0/accuracy") for epoch in history],
    })
    return by_label


@pytest.mark.slow
def test_gsc_ranks_the_noisy_pairs_and_beats_hard_negatives_at_40_percent(gsc_and_vsepp_at_40_percent):
    gsc_run, vsepp_run = gsc_and_vsepp_at_40_percent["gsc"], gsc_and_vsepp_at_40_percent["vsepp"]
    assert gsc_run["test"]["rsum"] >= vsepp_run["test"]["rsum"] + 80, "GSC should beat VSE++ by a wide margin"
    assert gsc_run["division"]["division/net0/auc"] >= 0.94
    assert gsc_run["division"]["division/net1/auc"] >= 0.94


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="after the demo's 8 epochs most clean pairs still have y_CM < 0.5 (a softmax share among 128 "
    "candidates that passes 0.5 only once the model is confident): the y >= 0.5 split reaches the issue's 0.9 "
    "only at epoch 29 of 32 (benchmarks/gsc_division.py), too long for the test suite",
)
def test_gsc_division_accuracy_reaches_0_9_at_40_percent(gsc_and_vsepp_at_40_percent):
    division = gsc_and_vsepp_at_40_percent["gsc"]["division"]
    assert division["division/net0/accuracy"] >= 0.9 and division["division/net1/accuracy"] >= 0.9


@pytest.mark.parametrize("similarity", ["sgr", "saf", "scan"])
def test_the_head_reading_scores_each_modality_s_pairs_through_the_similarity_module(similarity):
    """Sec. 3.5's two extra forward passes: <I_i, I_k> and <T_i, T_k> are the head's similarities of two images and of
    two captions (``gsc.structure = "head"``, the default), each entry depending on its two items only, and L_IM then
    trains the head; ``"pooled"`` is the cosine of the masked means, which no head parameter reaches."""
    from hfncl.models.configuration import NCLConfig
    from hfncl.models.modeling import MatchingNetwork

    torch.manual_seed(0)
    fields = {
        "sgr": {"similarity": "sgr", "sim_dim": 8},
        "saf": {"similarity": "saf", "sim_dim": 8},
        "scan": {"similarity": "scan"},
    }
    network = MatchingNetwork(
        NCLConfig(image_dim=12, vocab_size=30, embed_dim=16, word_dim=8, image_regions=6, **fields[similarity])
    )
    network.eval()
    images = network.encode_image(torch.randn(5, 6, 12))
    texts = network.encode_text(torch.randint(1, 30, (5, 7)), torch.tensor([7, 5, 4, 6, 3]))
    outputs = SimpleNamespace(image_embeds=images, text_embeds=texts)
    trainer = SimpleNamespace(options_of=lambda kind: kind.read({}), model=SimpleNamespace(networks=[network]))
    image_structure, text_structure = gsc.structures(trainer, outputs, 0)
    assert image_structure.shape == text_structure.shape == (5, 5)
    for embeds, structure, modality in ((images, image_structure, "image"), (texts, text_structure, "text")):
        torch.testing.assert_close(structure, network.within_similarity(embeds, modality))
        pair = network.within_similarity(embeds[[1, 3]], modality)
        torch.testing.assert_close(pair[0, 1], structure[1, 3])
        torch.testing.assert_close(pair[1, 0], structure[3, 1])
    pooled_trainer = SimpleNamespace(
        options_of=lambda kind: kind.read({"gsc.structure": "pooled"}), model=trainer.model
    )
    assert gsc.GSCOptions().structure == "head"
    pooled = gsc.structures(pooled_trainer, outputs, 0)
    torch.testing.assert_close(pooled[0], intra_modal_similarity(images))
    assert not torch.allclose(pooled[0], image_structure)
    if similarity != "scan":  # SCAN's score has no parameter
        network.train()
        image_structure, text_structure = gsc.structures(trainer, outputs, 0)
        intra_modal_loss(image_structure, text_structure, torch.ones(5)).backward()
        assert network.head.global_sim.transform.weight.grad.abs().sum() > 0


def test_with_a_cosine_head_both_readings_of_the_structure_are_the_cosine_of_the_embeddings():
    from hfncl.models.configuration import NCLConfig
    from hfncl.models.modeling import MatchingNetwork

    network = MatchingNetwork(NCLConfig(image_dim=12, vocab_size=30, embed_dim=16, word_dim=8))
    images = network.encode_image(torch.randn(5, 6, 12))
    texts = network.encode_text(torch.randint(1, 30, (5, 7)), torch.tensor([7, 5, 4, 6, 3]))
    outputs = SimpleNamespace(image_embeds=images, text_embeds=texts)
    for structure in ("head", "pooled"):
        trainer = SimpleNamespace(
            options_of=lambda kind, s=structure: kind.read({"gsc.structure": s}),
            model=SimpleNamespace(networks=[network]),
        )
        for got, embeds in zip(gsc.structures(trainer, outputs, 0), (images, texts), strict=True):
            torch.testing.assert_close(got, intra_modal_similarity(embeds))
