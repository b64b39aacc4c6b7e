"""NCR's equations (plugins/ncr.py) against values computed by hand."""

import math

import pytest
import torch
from conftest import tiny_config

from hfncl.equations.losses import soft_margin
from hfncl_plugins.ncr import adaptive_prediction, rectified_labels

CO_RECTIFY_OPTIONS = {
    "ncr.alpha": 0.2,
    "ncr.division_statistics": "pass",
    "ncr.curve": 10.0,
    "ncr.top_fraction": 0.1,
    "ncr.co_rectify": True,
}
"""NCR's options with co-rectification, as the loss tests set them (alpha 0.2, division statistics per pass)."""
S = torch.tensor([[0.5, 0.6, 0.4], [0.3, 0.2, 0.5], [0.1, 0.3, 0.4]])


def test_adaptive_prediction_eq5_by_hand():
    # mean of the 2 negatives of each pair, image side and text side:
    # s_0 = 0.5 - ((0.6+0.4)/2 + (0.3+0.1)/2)/2 = 0.15   -> Theta = 0.15
    # s_1 = 0.2 - ((0.3+0.5)/2 + (0.6+0.3)/2)/2 = -0.225 -> Theta = 0
    # s_2 = 0.4 - ((0.1+0.3)/2 + (0.4+0.5)/2)/2 = 0.075  -> Theta = 0.075
    # top 10% of 3 pairs -> the best one (pair 0): tau = 0.15
    expected = torch.tensor([1.0, 0.0, 0.5])
    torch.testing.assert_close(adaptive_prediction(S, alpha=0.2, top_fraction=0.1), expected)


def test_adaptive_prediction_is_zero_when_no_pair_beats_its_negatives():
    assert torch.all(adaptive_prediction(torch.ones(4, 4), alpha=0.2) == 0)


def test_rectified_labels_eq4_by_hand():
    w = torch.tensor([0.9, 0.2, 0.6])
    clean = torch.tensor([True, False, True])
    own = torch.tensor([1.0, 0.0, 0.9166667])
    peer = torch.tensor([0.5, 0.4, 0.3])
    expected = torch.tensor([0.9 + 0.1 * 1.0, (0.0 + 0.4) / 2, 0.6 + 0.4 * 0.9166667])
    torch.testing.assert_close(rectified_labels(w, clean, own, peer), expected)


def test_soft_margin_eq7_closed_form():
    labels = torch.tensor([0.0, 0.5, 1.0])
    expected = torch.tensor([0.0, (math.sqrt(10) - 1) / 9 * 0.2, 0.2])
    torch.testing.assert_close(soft_margin(labels, margin=0.2, curve=10.0), expected)
    assert torch.all(soft_margin(torch.linspace(0, 1, 11), 0.2, 10.0).diff() > 0)


def test_soft_margin_loss_takes_hardest_negatives_within_the_clean_and_noisy_parts():
    from types import SimpleNamespace

    from hfncl.equations.losses import triplet_hardest_negative
    from hfncl_plugins.ncr import loss

    similarity = torch.tensor(
        [[0.9, 0.8, 0.1, 0.7], [0.2, 0.6, 0.3, 0.1], [0.95, 0.1, 0.4, 0.2], [0.1, 0.3, 0.5, 0.3]]
    )
    clean = torch.tensor([True, True, False, False])
    w = torch.tensor([0.9, 0.7, 0.2, 0.1])
    peer = torch.tensor([0.8, 0.4, 0.6, 0.0])
    options = CO_RECTIFY_OPTIONS
    trainer = SimpleNamespace(batch_part=None, options_of=lambda kind: kind.read(options))
    outputs = SimpleNamespace(similarity=similarity)
    targets = {"clean": clean, "clean_prob": w, "peer_prediction": peer}
    term = loss(trainer=trainer, batch={}, outputs=outputs, targets=targets, net=0)
    # own predictions within each 2 x 2 part (Eq. 5, one negative each, tau = the best pair's Theta(s)):
    # clean part: s = 0.9 - (0.8 + 0.2)/2 = 0.4 -> 0.2; s = 0.6 - (0.2 + 0.8)/2 = 0.1 -> P = 0.1 / 0.2
    # noisy part: s = 0.4 - (0.2 + 0.5)/2 = 0.05; s = 0.3 - (0.5 + 0.2)/2 = -0.05 -> P = 1, 0
    own = torch.tensor([1.0, 0.5, 1.0, 0.0])
    labels = rectified_labels(w, clean, own, peer)
    torch.testing.assert_close(labels, torch.tensor([1.0, 0.7 + 0.3 * 0.5, 0.8, 0.0]))
    margins = soft_margin(labels, 0.2, 10.0)
    expected = triplet_hardest_negative(similarity[:2, :2], margins[:2]).sum()
    expected = expected + triplet_hardest_negative(similarity[2:, 2:], margins[2:]).sum()
    torch.testing.assert_close(term["soft_margin_triplet"], expected)
    # across parts the hardest negative of image 0 would be caption 3 and of caption 0 image 2
    assert not torch.isclose(term["soft_margin_triplet"], triplet_hardest_negative(similarity, margins).sum())


def test_without_co_rectify_only_the_clean_part_trains_with_the_full_margin():
    """Table 4's "co-divide without co-rectify": y = 1 on the clean part, the noisy part left out."""
    from types import SimpleNamespace

    from hfncl_plugins.ncr import co_divide_only_loss, loss, rectify

    similarity = torch.tensor(
        [[0.9, 0.8, 0.1, 0.7], [0.2, 0.6, 0.3, 0.1], [0.95, 0.1, 0.4, 0.2], [0.1, 0.3, 0.5, 0.3]]
    )
    # by hand, clean pairs 0 and 2 (alpha 0.2):
    # image 0: [0.2 - 0.9 + 0.1]_+ = 0, caption 0: [0.2 - 0.9 + 0.95]_+ = 0.25;
    # image 2: [0.2 - 0.4 + 0.95]_+ = 0.75, caption 2: [0.2 - 0.4 + 0.1]_+ = 0
    clean = torch.tensor([True, False, True, False])
    torch.testing.assert_close(co_divide_only_loss(similarity, clean, 0.2), torch.tensor(1.0))
    options = {"ncr.alpha": 0.2, "ncr.division_statistics": "pass", "ncr.co_rectify": False}
    trainer = SimpleNamespace(batch_part=None, options_of=lambda kind: kind.read(options))
    division = SimpleNamespace(clean=torch.tensor([False, True, False, False, True, False, True]))
    targets = rectify(trainer=trainer, batch={}, net=0, division=division)
    outputs = SimpleNamespace(similarity=similarity, index=torch.tensor([4, 0, 6, 5]))  # dataset pairs of the batch
    term = loss(trainer=trainer, batch={}, outputs=outputs, targets=targets, net=0)["soft_margin_triplet"]
    torch.testing.assert_close(term, torch.tensor(1.0))
    lonely = co_divide_only_loss(similarity.requires_grad_(), torch.tensor([True, False, False, False]), 0.2)
    assert lonely.item() == 0 and lonely.requires_grad, (
        "a batch with one clean pair trains nothing but still backpropagates"
    )


def test_a_batch_without_two_pairs_in_any_part_gives_a_zero_loss_that_still_backpropagates():
    from types import SimpleNamespace

    from hfncl_plugins.ncr import loss

    options = CO_RECTIFY_OPTIONS
    similarity = torch.tensor([[0.9, 0.1], [0.2, 0.8]], requires_grad=True)
    targets = {
        "clean": torch.tensor([True, False]),
        "clean_prob": torch.tensor([0.9, 0.1]),
        "peer_prediction": torch.zeros(2),
    }
    term = loss(
        trainer=SimpleNamespace(batch_part=None, options_of=lambda kind: kind.read(options)),
        batch={},
        outputs=SimpleNamespace(similarity=similarity),
        targets=targets,
        net=0,
    )
    assert term["soft_margin_triplet"].item() == 0 and term["soft_margin_triplet"].requires_grad


def test_the_noisy_part_joins_the_loss_from_the_start_epoch_on():
    """The authors' schedule (``ncr.noisy_part_start``): before it, only the clean part trains and no peer forward
    runs."""
    from types import SimpleNamespace

    from hfncl.equations.losses import triplet_hardest_negative
    from hfncl_plugins.ncr import loss, noisy_part_trains, rectify

    similarity = torch.tensor(
        [[0.9, 0.8, 0.1, 0.7], [0.2, 0.6, 0.3, 0.1], [0.95, 0.1, 0.4, 0.2], [0.1, 0.3, 0.5, 0.3]]
    )
    options = {**CO_RECTIFY_OPTIONS, "ncr.noisy_part_start": 0.5}

    def peer_forward(net, batch, grad):
        raise AssertionError("no peer forward before the noisy part trains")

    def trainer_at(epoch):
        return SimpleNamespace(
            batch_part=None,
            options_of=lambda kind: kind.read(options),
            epoch=epoch,
            config=SimpleNamespace(epochs=10, warmup_epochs=4),
            forward=peer_forward,
            gather=lambda tensor: tensor,
        )

    # 6 epochs after a warmup of 4: the noisy part trains from the middle of them, epoch 4 + 3
    assert [noisy_part_trains(trainer_at(epoch)) for epoch in (4, 6, 7, 9)] == [False, False, True, True]
    division = SimpleNamespace(
        clean=torch.tensor([True, False, True, True, False, False]),
        clean_prob=torch.tensor([0.9, 0.2, 0.6, 0.7, 0.1, 0.3]),
        extras={},
    )
    batch = {"index": torch.tensor([0, 3, 1, 4])}  # dataset pairs of the batch: clean, clean, noisy, noisy
    targets = rectify(trainer=trainer_at(4), batch=batch, net=0, division=division)
    assert set(targets) == {"clean", "clean_prob"}
    term = loss(
        trainer=trainer_at(4), batch=batch, outputs=SimpleNamespace(similarity=similarity), targets=targets, net=0
    )
    # the clean part as in Eq. 4: own predictions 1.0 and 0.5 (see the test above), w = 0.9 and 0.7
    margins = soft_margin(torch.tensor([0.9 + 0.1 * 1.0, 0.7 + 0.3 * 0.5]), 0.2, 10.0)
    torch.testing.assert_close(term["soft_margin_triplet"], triplet_hardest_negative(similarity[:2, :2], margins).sum())
    with torch.no_grad():
        called = []
        later = trainer_at(7)
        later.forward = lambda net, batch, grad: (
            called.append(net) or SimpleNamespace(similarity=similarity, index=batch["index"])
        )
        targets = rectify(trainer=later, batch=batch, net=0, division=division)
    assert called == [1] and "peer_prediction" in targets


def test_division_from_the_training_steps_uses_the_recorded_losses_and_runs_no_pass():
    """``ncr.division_statistics = "steps"``: each network's steps record L_w (Eq. 2, mean over negatives); co-divide
    fits its peer's."""
    from types import SimpleNamespace

    from hfncl.engine.ledger import Ledger
    from hfncl.equations.division import fit_loss_mixture
    from hfncl_plugins.ncr import divide, warmup_loss

    options = {
        "ncr.alpha": 0.2, "ncr.division_statistics": "steps", "ncr.threshold": 0.5, "ncr.gmm_max_iter": 10,
        "ncr.gmm_reg_covar": 5e-4, "ncr.noisy_part_start": 0.5, "ncr.noisy_batch": "split",
        "ncr.first_division": "steps",
    }
    passes = []
    pass_losses = {"loss0": torch.rand(6), "loss1": torch.rand(6)}
    trainer = SimpleNamespace(
        options_of=lambda kind: kind.read(options),
        ledger=Ledger(6),
        num_train=6,
        config=SimpleNamespace(seed=0, epochs=10, warmup_epochs=4, batch_size=3),  # the noisy part trains from epoch 7
        collect=lambda statistic, description, **loader: passes.append(description) or pass_losses,
    )
    generator = torch.Generator().manual_seed(0)
    for net in (0, 1):
        for index in (torch.tensor([4, 0, 2]), torch.tensor([1, 5, 3])):
            similarity = torch.rand(3, 3, generator=generator)
            warmup_loss(trainer=trainer, batch={}, outputs=SimpleNamespace(similarity=similarity, index=index), net=net)
    # pair 4 (first row of net 0's first batch): hinge terms against its 2 negatives, both directions, averaged
    recorded = trainer.ledger.get("ncr.step_lw0")
    first = torch.rand(3, 3, generator=torch.Generator().manual_seed(0))
    by_hand = sum(
        max(0.0, 0.2 - first[0, 0] + first[0, j]) + max(0.0, 0.2 - first[0, 0] + first[j, 0]) for j in (1, 2)
    ) / 2
    torch.testing.assert_close(recorded[4], torch.tensor(float(by_hand)))
    divisions = divide(trainer=trainer, epoch=3)
    assert passes == []
    for net, peer in ((0, 1), (1, 0)):
        peer_loss = trainer.ledger.get(f"ncr.step_lw{peer}")
        torch.testing.assert_close(divisions[net].extras["statistic"], peer_loss)
        expected, _ = fit_loss_mixture(peer_loss, max_iter=10, reg_covar=5e-4, seed=3)
        torch.testing.assert_close(divisions[net].clean_prob, expected)
    recorded_by_net0 = trainer.ledger.get("ncr.step_lw0").clone()
    trainer.ledger.get("ncr.step_lw1")[2] = float("nan")  # a pair network 1 has never trained on
    divisions = divide(trainer=trainer, epoch=3)
    assert passes == ["epoch 3 co-divide"]
    torch.testing.assert_close(divisions[0].extras["statistic"], pass_losses["loss1"])
    # the pass's loss fills the missing pair only; the next division needs no pass
    filled = trainer.ledger.get("ncr.step_lw1")
    assert filled[2] == pass_losses["loss1"][2] and not torch.isnan(filled).any()
    torch.testing.assert_close(trainer.ledger.get("ncr.step_lw0"), recorded_by_net0)
    divide(trainer=trainer, epoch=4)
    assert passes == ["epoch 3 co-divide"]
    # right after the epoch in which the noisy part first trained, the pass runs; before and after, not
    for epoch in (7, 8, 9):
        divide(trainer=trainer, epoch=epoch)
    assert passes == ["epoch 3 co-divide", "epoch 8 co-divide"]
    # ncr.gmm_clip_quantile scales the peer's losses between their quantiles before the GMM
    options["ncr.gmm_clip_quantile"] = 0.2
    peer_loss = trainer.ledger.get("ncr.step_lw1")
    expected, _ = fit_loss_mixture(peer_loss, max_iter=10, reg_covar=5e-4, seed=9, clip_quantile=0.2)
    torch.testing.assert_close(divide(trainer=trainer, epoch=9)[0].clean_prob, expected)
    assert not torch.equal(expected, fit_loss_mixture(peer_loss, max_iter=10, reg_covar=5e-4, seed=9)[0])


@pytest.mark.parametrize("first_division", ["pass", "steps"])
def test_with_the_separate_noisy_batch_co_divide_runs_a_pass_after_every_co_training_epoch(first_division):
    """The separate batch's pass over the clean set leaves most noisy pairs untrained, so their recorded L_w is stale:
    after a co-training epoch a pass runs, as eval_train. The first division after warmup comes from a pass, as
    eval_train makes it, by default (``ncr.first_division = "pass"``), or from the last warmup epoch's records."""
    from types import SimpleNamespace

    from hfncl.engine.ledger import Ledger
    from hfncl_plugins.ncr import divide

    pass_losses = {"loss0": torch.rand(6), "loss1": torch.rand(6)}
    first = ["epoch 4 co-divide"] if first_division == "pass" else []
    for setting, expected in (
        ("separate", first + ["epoch 5 co-divide", "epoch 6 co-divide"]),
        ("split", first + ["epoch 5 co-divide"]),
    ):
        options = {
            "ncr.division_statistics": "steps", "ncr.noisy_batch": setting, "ncr.noisy_part_start": 0.0,
            "ncr.first_division": first_division,
        }
        passes: list[str] = []
        trainer = SimpleNamespace(
            options_of=lambda kind, options=options: kind.read(options),
            ledger=Ledger(6),
            num_train=6,
            config=SimpleNamespace(seed=0, epochs=10, warmup_epochs=4, batch_size=3),
            collect=lambda statistic, description, passes=passes, **loader: passes.append(description) or pass_losses,
        )
        for net in (0, 1):
            trainer.ledger.record(torch.arange(6), f"ncr.step_lw{net}", torch.rand(6))
        for epoch in (4, 5, 6):  # 4: right after warmup; the noisy part joins in epoch 4, so 5 is a pass anyway
            divide(trainer=trainer, epoch=epoch)
        assert passes == expected, setting


def test_co_divide_s_pass_draws_shuffled_batches_of_the_training_batch_size(tiny_data_dir, tmp_path):
    """As the authors' ``eval_train`` draws its batches from the shuffled training loader: L_w compares a pair with
    its batch's negatives, and dataset order would make an image's other captions its negatives."""
    from conftest import noisy_trainer, tiny_config

    from hfncl_plugins.ncr import pass_losses

    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["ncr"], plot_divisions=False))
    forward, batches = trainer.forward, []

    def recording_forward(net, batch, **kwargs):
        if net == 0:
            batches.append(batch["index"].tolist())
        return forward(net, batch, **kwargs)

    trainer.forward = recording_forward
    first = pass_losses(trainer, epoch=2)
    order = [index for batch in batches for index in batch]
    assert [len(batch) for batch in batches[:-1]] == [trainer.config.batch_size] * (len(batches) - 1)
    assert sorted(order) == list(range(trainer.num_train)) and order != sorted(order)
    batches.clear()
    again = pass_losses(trainer, epoch=2)
    assert [index for batch in batches for index in batch] == order  # the run's seed and the epoch fix the order
    for losses, repeated in zip(first, again, strict=True):
        torch.testing.assert_close(losses, repeated)


def test_warmup_loss_has_the_authors_scale_each_pair_s_hinge_terms_averaged_over_the_batch_columns():
    """Eq. 2 summed over the batch, each direction's hinge terms of a pair averaged over the b columns (the diagonal's
    0 included).

    By hand for S above, alpha 0.2:
    image queries [0.2 - S_ii + S_ij]_+ : row 0: 0.3 + 0.1, row 1: 0.3 + 0.5, row 2: 0 + 0.1;
    caption queries [0.2 - S_ii + S_ji]_+ : column 0: 0 + 0, column 1: 0.6 + 0.3, column 2: 0.2 + 0.3.
    Sum 2.7, over b = 3 columns: 0.9.
    """
    from types import SimpleNamespace

    from hfncl_plugins.ncr import warmup_loss

    options = {"ncr.alpha": 0.2, "ncr.division_statistics": "pass"}
    trainer = SimpleNamespace(batch_part=None, options_of=lambda kind: kind.read(options))
    term = warmup_loss(trainer=trainer, batch={}, outputs=SimpleNamespace(similarity=S, index=torch.arange(3)), net=0)
    torch.testing.assert_close(term["warmup_lw"], torch.tensor(0.9))
    # a plain reference on a larger batch: the mean over columns of every hinge term, summed over pairs
    generator = torch.Generator().manual_seed(0)
    similarity = torch.rand(16, 16, generator=generator)
    reference = 0.0
    for i in range(16):
        for j in range(16):
            if j != i:
                reference += max(0.0, 0.2 - similarity[i, i] + similarity[i, j]) / 16
                reference += max(0.0, 0.2 - similarity[j, j] + similarity[i, j]) / 16
    term = warmup_loss(
        trainer=trainer, batch={}, outputs=SimpleNamespace(similarity=similarity, index=torch.arange(16)), net=0
    )
    torch.testing.assert_close(term["warmup_lw"], torch.tensor(float(reference)))


def test_the_batch_plan_is_the_peer_division_s_clean_set_with_its_noisy_set_beside_unless_split():
    from types import SimpleNamespace

    from hfncl_plugins.ncr import batch_plan

    divisions = [
        SimpleNamespace(clean=torch.tensor([True, False, True])),
        SimpleNamespace(clean=torch.tensor([False, True, True])),
    ]

    def trainer(noisy_batch, in_warmup=False, epoch=8, co_rectify=True):
        options = {"ncr.noisy_batch": noisy_batch, "ncr.noisy_part_start": 0.5, "ncr.co_rectify": co_rectify}
        return SimpleNamespace(
            options_of=lambda kind: kind.read(options), in_warmup=in_warmup, divisions=divisions, epoch=epoch,
            config=SimpleNamespace(epochs=10, warmup_epochs=4), num_train=3,
        )

    plan = batch_plan(trainer=trainer("separate"), networks=[1])
    assert list(plan.parts) == ["clean", "noisy"] and plan.keep_last
    assert plan.parts["clean"].tolist() == [False, True, True] and plan.parts["noisy"].tolist() == [True, False, False]
    # warmup and the split batch: one shuffle of every pair; the authors' loaders keep each last partial batch
    for whole in (
        batch_plan(trainer=trainer("split"), networks=[1]),
        batch_plan(trainer=trainer("separate", in_warmup=True), networks=[0]),
    ):
        assert list(whole.parts) == ["all"] and whole.parts["all"].tolist() == [True] * 3 and whole.keep_last
    # no noisy batch while it would take no step: before its part trains (epoch 4 + 3 here), or without co-rectify
    for idle in (trainer("separate", epoch=6), trainer("separate", co_rectify=False)):
        plan = batch_plan(trainer=idle, networks=[1])
        assert list(plan.parts) == ["clean"] and plan.parts["clean"].tolist() == [False, True, True]
    assert list(batch_plan(trainer=trainer("separate", epoch=7), networks=[1]).parts) == ["clean", "noisy"]


def test_ncr_trains_with_a_separate_noisy_batch_and_with_the_split_batch(tiny_data_dir, tmp_path):
    """Three epochs (one warmup): the noisy part joins in the last; ``separate`` logs its noisy batches' term apart."""
    from conftest import noisy_trainer, tiny_config

    runs = {}
    for setting in ("separate", "split"):
        config = tiny_config(tmp_path / setting, ["ncr"], plot_divisions=False, options={"ncr.noisy_batch": setting})
        runs[setting] = noisy_trainer(tiny_data_dir, config).train()["history"]
    separate, split = runs["separate"], runs["split"]
    assert (
        "train/soft_margin_triplet/net0/noisy" not in separate[1]
        and separate[2]["train/soft_margin_triplet/net0/noisy"] > 0
    )
    assert not any(key.endswith("/noisy") for record in split for key in record)
    for history in (separate, split):
        assert all(math.isfinite(record["val/rsum"]) for record in history)
        # at the authors' scale a pair's two mean hinge terms are about 2 x 0.2 near the start (b - 1 times that summed)
        assert history[0]["train/warmup_lw/net0"] < 2 * 32


@pytest.mark.parametrize("similarity", ["saf", "sgr"])
def test_co_rectify_predicts_with_the_peer_in_eval_mode_and_leaves_it_unchanged(micro_data_dir, tmp_path, similarity):
    """The peer's prediction (Eq. 5) is an eval-mode forward pass, as the authors' code makes it: no dropout, BatchNorm
    on its running statistics, the peer's parameters and buffers untouched, the same prediction however often asked;
    the peer goes back to training mode after it."""
    from types import SimpleNamespace

    from hfncl.engine.trainer import Trainer
    from hfncl.models.configuration import NCLConfig
    from hfncl.plugin_setup import run_plugins
    from hfncl.tasks.pair_data import prepare_data
    from hfncl.tasks.pairs import PAIRS, DataArguments
    from hfncl_plugins.ncr import rectify

    config = tiny_config(tmp_path, ["ncr"], epochs=2, warmup_epochs=0, lr_decay_epochs=[], batch_size=16)
    data = prepare_data(DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.4), config.output_dir)
    model_config = NCLConfig(
        image_dim=data.image_dim, image_regions=data.image_regions, vocab_size=len(data.vocab),
        embed_dim=8, word_dim=8, similarity=similarity, sim_dim=8, reasoning_steps=1,
    )
    trainer = Trainer(config, model_config, data.train, data.val, task=PAIRS, plugins=run_plugins(config))
    trainer.model.train()
    trainer.in_warmup, trainer.epoch = False, 1  # the noisy part trains from epoch 0 + int(2 * 0.5) = 1
    peer_network = trainer.model.networks[1]
    assert any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in peer_network.modules())
    before = {name: value.clone() for name, value in peer_network.state_dict().items()}
    batch = next(iter(trainer._loader(seed=0, drop_last=True, batch_size=16)))
    clean = torch.zeros(trainer.num_train, dtype=torch.bool)
    clean[::2] = True
    division = SimpleNamespace(clean=clean, clean_prob=clean.float(), extras={})
    predictions = [rectify(trainer=trainer, batch=batch, net=0, division=division)["peer_prediction"] for _ in range(3)]
    for prediction in predictions[1:]:
        torch.testing.assert_close(prediction, predictions[0], rtol=0, atol=0)
    after = peer_network.state_dict()
    for name, value in before.items():
        torch.testing.assert_close(after[name], value, rtol=0, atol=0, msg=f"co-rectify changed the peer's {name}")
    assert peer_network.training and all(module.training for module in peer_network.modules())


def test_own_prediction_in_eval_mode_is_the_authors_predict_and_is_what_the_loss_reads(micro_data_dir, tmp_path):
    """``ncr.own_prediction = "eval"``: the trained network's own prediction (Eq. 5, in Eq. 4's labels) is an eval-mode
    pass made in ``rectify``, as the authors' ``net.predict`` after ``net.val_start()``: equal to Eq. 5 on the
    network's eval-mode similarity, the same however often asked, the network's state untouched and its training
    mode back; ``loss`` reads it instead of the training pass's (dropout active), which gives other labels."""
    from types import SimpleNamespace

    from hfncl.engine.trainer import Trainer
    from hfncl.models.configuration import NCLConfig
    from hfncl.plugin_setup import run_plugins
    from hfncl.tasks.pair_data import prepare_data
    from hfncl.tasks.pairs import PAIRS, DataArguments
    from hfncl_plugins.ncr import NCROptions, _per_part, loss, rectify

    options = {"ncr.own_prediction": "eval"}
    config = tiny_config(
        tmp_path, ["ncr"], epochs=2, warmup_epochs=0, lr_decay_epochs=[], batch_size=16, options=options
    )
    data = prepare_data(DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.4), config.output_dir)
    model_config = NCLConfig(
        image_dim=data.image_dim, image_regions=data.image_regions, vocab_size=len(data.vocab),
        embed_dim=8, word_dim=8, similarity="sgr", sim_dim=8, reasoning_steps=1,
    )
    trainer = Trainer(config, model_config, data.train, data.val, task=PAIRS, plugins=run_plugins(config))
    trainer.model.train()
    trainer.in_warmup, trainer.epoch = False, 0  # the clean part alone: no peer prediction yet
    network = trainer.model.networks[0]
    before = {name: value.clone() for name, value in network.state_dict().items()}
    batch = next(iter(trainer._loader(seed=0, drop_last=True, batch_size=16)))
    clean = torch.zeros(trainer.num_train, dtype=torch.bool)
    clean[::2] = True
    division = SimpleNamespace(clean=clean, clean_prob=torch.where(clean, 0.7, 0.2), extras={})
    targets = [rectify(trainer=trainer, batch=batch, net=0, division=division) for _ in range(3)]
    assert "peer_prediction" not in targets[0]
    for other in targets[1:]:
        torch.testing.assert_close(other["own_prediction"], targets[0]["own_prediction"], rtol=0, atol=0)
    for name, value in before.items():
        torch.testing.assert_close(
            network.state_dict()[name], value, rtol=0, atol=0, msg=f"the prediction changed {name}"
        )
    assert network.training and all(module.training for module in network.modules())
    network.eval()
    with torch.no_grad():
        expected = _per_part(
            trainer.task.outputs(network, trainer.task.encode(network, batch), batch["index"]).similarity,
            targets[0]["clean"],
            NCROptions.read(options),
        )
    network.train()
    torch.testing.assert_close(targets[0]["own_prediction"], expected)

    outputs = trainer.forward(0, batch)
    read = loss(trainer=trainer, batch=batch, outputs=outputs, targets=targets[0], net=0)["soft_margin_triplet"]
    trained_pass = {key: value for key, value in targets[0].items() if key != "own_prediction"}
    default = loss(trainer=trainer, batch=batch, outputs=outputs, targets=trained_pass, net=0)["soft_margin_triplet"]
    assert not torch.equal(read, default)  # the training pass's own prediction, under dropout, gives other margins


def test_hinge_prediction_of_the_authors_code_by_hand_and_against_a_loop():
    """``ncr.prediction = "hinge"``: s_i = alpha - (mean_j [alpha + S_ij - S_ii]_+ + mean_j [alpha + S_ji - S_ii]_+) / 2
    over the b columns, clamped to [0, alpha], over the mean of the top b // 10 + 1.

    By hand on S (alpha 0.2, b 3): s = (0.2 - 0.4 / 3 / 2, 0.2 - (0.8 + 0.9) / 3 / 2, 0.2 - (0.1 + 0.5) / 3 / 2)
    = (0.1333, -0.0833, 0.1); Theta = (0.1333, 0, 0.1); tau = 0.1333 (top 1); P = (1, 0, 0.75).
    """
    from hfncl_plugins.ncr import hinge_prediction

    torch.testing.assert_close(hinge_prediction(S, alpha=0.2), torch.tensor([1.0, 0.0, 0.75]))

    generator = torch.Generator().manual_seed(0)
    similarity, alpha = torch.rand(23, 23, generator=generator), 0.2
    b = similarity.size(0)
    s = []
    for i in range(b):
        image = sum(max(alpha + similarity[i, j].item() - similarity[i, i].item(), 0.0) for j in range(b) if j != i) / b
        text = sum(max(alpha + similarity[j, i].item() - similarity[i, i].item(), 0.0) for j in range(b) if j != i) / b
        s.append(min(max(alpha - (image + text) / 2, 0.0), alpha))
    tau = sum(sorted(s)[-(b // 10 + 1):]) / (b // 10 + 1)
    expected = torch.tensor([min(value / tau, 1.0) for value in s])
    torch.testing.assert_close(hinge_prediction(similarity, alpha), expected)


def test_the_prediction_option_picks_the_reading_of_eq5():
    from hfncl_plugins.ncr import NCROptions, adaptive_prediction, hinge_prediction, predict

    paper, hinge = NCROptions.read({}).prediction, NCROptions.read({"ncr.prediction": "hinge"}).prediction
    torch.testing.assert_close(predict(S, paper, 0.2, 0.1), adaptive_prediction(S, 0.2, 0.1))
    torch.testing.assert_close(predict(S, hinge, 0.2, 0.1), hinge_prediction(S, 0.2))
    assert not torch.equal(predict(S, paper, 0.2, 0.1), predict(S, hinge, 0.2, 0.1))


def test_when_every_pair_looks_clean_the_hundredth_with_the_lowest_clean_probability_is_noisy(monkeypatch):
    """The authors' ``split_prob``: with no pair below the threshold, the threshold becomes the clean probability of
    rank N // 100, so that the noisy loader has pairs; a division with noisy pairs is left as it is."""
    from types import SimpleNamespace

    import hfncl_plugins.ncr as ncr

    clean_prob = torch.linspace(0.6, 0.99, 300)[torch.randperm(300, generator=torch.Generator().manual_seed(0))]
    monkeypatch.setattr(ncr, "fit_loss_mixture", lambda losses, **gmm: (clean_prob, torch.zeros(2, 3)))
    options = {"ncr.division_statistics": "pass"}
    trainer = SimpleNamespace(
        options_of=lambda kind: kind.read(options),
        config=SimpleNamespace(seed=0, epochs=10, warmup_epochs=4, batch_size=3),
        collect=lambda statistic, description, **loader: {"loss0": torch.rand(300), "loss1": torch.rand(300)},
    )
    for division in ncr.divide(trainer=trainer, epoch=5):
        noisy = (~division.clean).nonzero().squeeze(1)
        assert sorted(noisy.tolist()) == sorted(clean_prob.argsort()[:4].tolist()), (
            "300 // 100 + 1 pairs at or below rank 3"
        )
    mixed = clean_prob.clone()
    mixed[:10] = 0.2
    monkeypatch.setattr(ncr, "fit_loss_mixture", lambda losses, **gmm: (mixed, torch.zeros(2, 3)))
    assert [int((~d.clean).sum()) for d in ncr.divide(trainer=trainer, epoch=5)] == [10, 10]


def test_broadcast_labels_of_the_authors_code_by_hand():
    """``ncr.label_layout = "broadcast"``: the authors' clean batch holds w and y as (B, 1) columns and P as a (B,) row,
    so y^_ij = w_i + (1 - w_i) P_j; their noisy batch's (P^A + P^B) / 2 is a column, y^_ij = y^_i."""
    from hfncl_plugins.ncr import broadcast_labels

    w, own, peer = torch.tensor([0.9, 0.6, 0.3]), torch.tensor([1.0, 0.5, 0.2]), torch.tensor([0.0, 0.0, 0.6])
    clean = torch.tensor([True, True, False])
    expected = torch.tensor(
        [
            [0.9 + 0.1 * 1.0, 0.9 + 0.1 * 0.5, 0.9 + 0.1 * 0.2],
            [0.6 + 0.4 * 1.0, 0.6 + 0.4 * 0.5, 0.6 + 0.4 * 0.2],
            [0.4] * 3,
        ]
    )
    torch.testing.assert_close(broadcast_labels(w, clean, own, peer), expected)
    torch.testing.assert_close(
        broadcast_labels(w, clean, own, peer).diagonal()[:2], rectified_labels(w, clean, own, peer)[:2]
    )


def _authors_batch_loss(similarity: torch.Tensor, labels: torch.Tensor, alpha: float = 0.2) -> torch.Tensor:
    """The authors' ``ContrastiveLoss`` in ``train`` mode with hard negatives and the exponential soft margin, written
    from its description: ``labels`` broadcast against the (B, B) scores as their tensors do."""
    b = similarity.size(0)
    margin = alpha * (torch.pow(10.0, labels) - 1) / 9
    positive = similarity.diag().view(b, 1)
    cost_s = (margin + similarity - positive.expand(b, b)).clamp(min=0)
    cost_im = (margin + similarity - positive.t().expand(b, b)).clamp(min=0)
    eye = torch.eye(b, dtype=torch.bool)
    cost_s, cost_im = cost_s.masked_fill(eye, 0), cost_im.masked_fill(eye, 0)
    return cost_s.max(1)[0].sum() + cost_im.max(0)[0].sum()


def test_the_broadcast_layout_gives_the_authors_loss_on_their_clean_and_noisy_batches():
    from types import SimpleNamespace

    from hfncl_plugins.ncr import loss

    generator = torch.Generator().manual_seed(3)
    similarity = torch.rand(6, 6, generator=generator)
    w, own, peer = (
        torch.rand(6, generator=generator),
        torch.rand(6, generator=generator),
        torch.rand(6, generator=generator),
    )

    def ncr_loss(clean: torch.Tensor, layout: str, with_peer: bool = True) -> torch.Tensor:
        options = {"ncr.division_statistics": "pass", "ncr.label_layout": layout}
        trainer = SimpleNamespace(batch_part=None, options_of=lambda kind: kind.read(options))
        targets = {"clean": clean, "clean_prob": w, "own_prediction": own} | (
            {"peer_prediction": peer} if with_peer else {}
        )
        return loss(trainer=trainer, batch={}, outputs=SimpleNamespace(similarity=similarity), targets=targets, net=0)[
            "soft_margin_triplet"
        ]

    # the authors' clean batch: prob (B, 1) * labels (B, 1) + (1 - prob (B, 1)) * P (B,)
    all_clean = torch.ones(6, dtype=torch.bool)
    clean_labels = w.view(6, 1) * torch.ones(6, 1) + (1 - w.view(6, 1)) * own
    torch.testing.assert_close(
        ncr_loss(all_clean, "broadcast", with_peer=False), _authors_batch_loss(similarity, clean_labels)
    )
    # their noisy batch: ((P^A + P^B) / 2).view(-1, 1)
    all_noisy = torch.zeros(6, dtype=torch.bool)
    noisy_labels = ((own + peer) / 2).view(-1, 1)
    torch.testing.assert_close(ncr_loss(all_noisy, "broadcast"), _authors_batch_loss(similarity, noisy_labels))
    # one split batch: each part as the authors' batch of its kind
    split = torch.tensor([True, True, True, False, False, False])
    part, rest = slice(0, 3), slice(3, 6)
    expected = _authors_batch_loss(similarity[part, part], w[part].view(3, 1) + (1 - w[part].view(3, 1)) * own[part])
    expected = expected + _authors_batch_loss(similarity[rest, rest], ((own[rest] + peer[rest]) / 2).view(-1, 1))
    torch.testing.assert_close(ncr_loss(split, "broadcast"), expected)
    assert not torch.isclose(
        ncr_loss(all_clean, "broadcast", with_peer=False), ncr_loss(all_clean, "pair", with_peer=False)
    )


def test_under_per_pair_margins_active_hinges_ignore_the_labels_and_under_broadcast_ones_they_do_not():
    """Why the layout can move weights where the readings of Eq. 5 did not (docs/methods/ncr.md): with one margin
    per pair, an active hinge's gradient is that of S_ij - S_ii whatever the margin; with a margin per cell, the
    labels of the negatives choose which one is hardest."""
    from hfncl.equations.losses import triplet_hardest_negative

    similarity = torch.tensor([[0.5, 0.45, 0.44], [0.1, 0.6, 0.2], [0.1, 0.2, 0.7]])
    gradients = []
    for margins in (torch.full((3,), 0.2), torch.full((3,), 0.15), torch.tensor([[0.2, 0.05, 0.2]] * 3)):
        s = similarity.clone().requires_grad_(True)
        triplet_hardest_negative(s, margins)[0].backward()
        gradients.append(s.grad)
    torch.testing.assert_close(gradients[0], gradients[1])  # pair 0's hinges active under both: the same step
    assert gradients[0][0, 1] == 1 and gradients[2][0, 1] == 0 and gradients[2][0, 2] == 1  # caption 2 is now hardest
