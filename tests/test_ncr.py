"""NCR's equations (plugins/ncr.py) against values computed by hand."""

import math

import torch

from hfncl.losses import soft_margin
from hfncl_plugins.ncr import adaptive_prediction, rectified_labels

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

    from hfncl.losses import triplet_hardest_negative
    from hfncl_plugins.ncr import loss

    similarity = torch.tensor(
        [[0.9, 0.8, 0.1, 0.7], [0.2, 0.6, 0.3, 0.1], [0.95, 0.1, 0.4, 0.2], [0.1, 0.3, 0.5, 0.3]]
    )
    clean = torch.tensor([True, True, False, False])
    w = torch.tensor([0.9, 0.7, 0.2, 0.1])
    peer = torch.tensor([0.8, 0.4, 0.6, 0.0])
    options = {"ncr.alpha": 0.2, "ncr.division_statistics": "pass", "ncr.curve": 10.0, "ncr.top_fraction": 0.1, "ncr.co_rectify": True}
    trainer = SimpleNamespace(options_of=lambda kind: kind.read(options))
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
    # by hand, clean pairs 0 and 2 (alpha 0.2): image 0: [0.2 - 0.9 + 0.1]_+ = 0, caption 0: [0.2 - 0.9 + 0.95]_+ = 0.25;
    # image 2: [0.2 - 0.4 + 0.95]_+ = 0.75, caption 2: [0.2 - 0.4 + 0.1]_+ = 0
    clean = torch.tensor([True, False, True, False])
    torch.testing.assert_close(co_divide_only_loss(similarity, clean, 0.2), torch.tensor(1.0))
    options = {"ncr.alpha": 0.2, "ncr.division_statistics": "pass", "ncr.co_rectify": False}
    trainer = SimpleNamespace(options_of=lambda kind: kind.read(options))
    division = SimpleNamespace(clean=torch.tensor([False, True, False, False, True, False, True]))
    targets = rectify(trainer=trainer, batch={}, net=0, division=division)
    outputs = SimpleNamespace(similarity=similarity, index=torch.tensor([4, 0, 6, 5]))  # dataset pairs of the batch
    term = loss(trainer=trainer, batch={}, outputs=outputs, targets=targets, net=0)["soft_margin_triplet"]
    torch.testing.assert_close(term, torch.tensor(1.0))
    lonely = co_divide_only_loss(similarity.requires_grad_(), torch.tensor([True, False, False, False]), 0.2)
    assert lonely.item() == 0 and lonely.requires_grad, "a batch with one clean pair trains nothing but still backpropagates"


def test_a_batch_without_two_pairs_in_any_part_gives_a_zero_loss_that_still_backpropagates():
    from types import SimpleNamespace

    from hfncl_plugins.ncr import loss

    options = {"ncr.alpha": 0.2, "ncr.division_statistics": "pass", "ncr.curve": 10.0, "ncr.top_fraction": 0.1, "ncr.co_rectify": True}
    similarity = torch.tensor([[0.9, 0.1], [0.2, 0.8]], requires_grad=True)
    targets = {"clean": torch.tensor([True, False]), "clean_prob": torch.tensor([0.9, 0.1]), "peer_prediction": torch.zeros(2)}
    term = loss(trainer=SimpleNamespace(options_of=lambda kind: kind.read(options)), batch={}, outputs=SimpleNamespace(similarity=similarity), targets=targets, net=0)
    assert term["soft_margin_triplet"].item() == 0 and term["soft_margin_triplet"].requires_grad


def test_the_noisy_part_joins_the_loss_from_the_start_epoch_on():
    """The authors' schedule (``ncr.noisy_part_start``): before it, only the clean part trains and no peer forward runs."""
    from types import SimpleNamespace

    from hfncl.losses import triplet_hardest_negative
    from hfncl_plugins.ncr import loss, noisy_part_trains, rectify

    similarity = torch.tensor(
        [[0.9, 0.8, 0.1, 0.7], [0.2, 0.6, 0.3, 0.1], [0.95, 0.1, 0.4, 0.2], [0.1, 0.3, 0.5, 0.3]]
    )
    options = {"ncr.alpha": 0.2, "ncr.division_statistics": "pass", "ncr.curve": 10.0, "ncr.top_fraction": 0.1, "ncr.co_rectify": True, "ncr.noisy_part_start": 0.5}

    def peer_forward(net, batch, grad):
        raise AssertionError("no peer forward before the noisy part trains")

    def trainer_at(epoch):
        return SimpleNamespace(
            options_of=lambda kind: kind.read(options), epoch=epoch, config=SimpleNamespace(epochs=10, warmup_epochs=4), forward=peer_forward,
            gather=lambda tensor: tensor,
        )

    # 6 epochs after a warmup of 4: the noisy part trains from the middle of them, epoch 4 + 3
    assert [noisy_part_trains(trainer_at(epoch)) for epoch in (4, 6, 7, 9)] == [False, False, True, True]
    division = SimpleNamespace(
        clean=torch.tensor([True, False, True, True, False, False]), clean_prob=torch.tensor([0.9, 0.2, 0.6, 0.7, 0.1, 0.3]), extras={}
    )
    batch = {"index": torch.tensor([0, 3, 1, 4])}  # dataset pairs of the batch: clean, clean, noisy, noisy
    targets = rectify(trainer=trainer_at(4), batch=batch, net=0, division=division)
    assert set(targets) == {"clean", "clean_prob"}
    term = loss(trainer=trainer_at(4), batch=batch, outputs=SimpleNamespace(similarity=similarity), targets=targets, net=0)
    # the clean part as in Eq. 4: own predictions 1.0 and 0.5 (see the test above), w = 0.9 and 0.7
    margins = soft_margin(torch.tensor([0.9 + 0.1 * 1.0, 0.7 + 0.3 * 0.5]), 0.2, 10.0)
    torch.testing.assert_close(term["soft_margin_triplet"], triplet_hardest_negative(similarity[:2, :2], margins).sum())
    with torch.no_grad():
        called = []
        later = trainer_at(7)
        later.forward = lambda net, batch, grad: called.append(net) or SimpleNamespace(similarity=similarity, index=batch["index"])
        targets = rectify(trainer=later, batch=batch, net=0, division=division)
    assert called == [1] and "peer_prediction" in targets


def test_division_from_the_training_steps_uses_the_recorded_losses_and_runs_no_pass():
    """``ncr.division_statistics = "steps"``: each network's steps record L_w (Eq. 2, mean over negatives); co-divide fits its peer's."""
    from types import SimpleNamespace

    from hfncl.division import fit_loss_mixture
    from hfncl.engine.ledger import Ledger
    from hfncl_plugins.ncr import divide, warmup_loss

    options = {
        "ncr.alpha": 0.2, "ncr.division_statistics": "steps", "ncr.threshold": 0.5, "ncr.gmm_max_iter": 10,
        "ncr.gmm_reg_covar": 5e-4, "ncr.noisy_part_start": 0.5,
    }
    passes = []
    pass_losses = {"loss0": torch.rand(6), "loss1": torch.rand(6)}
    trainer = SimpleNamespace(
        options_of=lambda kind: kind.read(options),
        ledger=Ledger(6),
        num_train=6,
        config=SimpleNamespace(seed=0, epochs=10, warmup_epochs=4),  # the noisy part trains from epoch 7
        collect=lambda statistic, description: passes.append(description) or pass_losses,
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
