"""BiCro (plugins/bicro.py): anchors, the bidirectional consistency, the soft labels and the loss, by hand and against
plain loops; a tiny run in which the soft labels of the truly mismatched pairs fall below the matched pairs'."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from hfncl_plugins.bicro import (
    BiCroOptions,
    bidirectional_consistency,
    clean_probability,
    loss,
    select_anchors,
    small_loss_share,
    soft_labels,
    warmup_loss,
)


def fake_trainer(options: dict | None = None, epoch: int = 3, epochs: int = 4, warmup: int = 1) -> SimpleNamespace:
    config = SimpleNamespace(epochs=epochs, warmup_epochs=warmup)
    return SimpleNamespace(config=config, epoch=epoch, options_of=lambda kind: kind.read(options or {}))


def test_the_robust_warmup_sums_the_smallest_share_of_the_batch_s_losses():
    per_pair = torch.tensor([3.0, 1.0, 2.0, 5.0], requires_grad=True)
    assert small_loss_share(per_pair, 0.5).item() == 3.0  # int(0.5 * 4) = 2 pairs: 1 + 2
    assert small_loss_share(per_pair, 0.7).item() == 3.0  # int(2.8) = 2
    assert small_loss_share(per_pair, 1.0).item() == 11.0
    none = small_loss_share(per_pair, 0.2)  # int(0.8) = 0 pairs: zero, still in the graph
    none.backward()
    assert none.item() == 0.0 and per_pair.grad is not None


def test_warmup_loss_is_the_authors_mean_hinge_of_the_smallest_share_against_a_loop():
    """``warmup_sele``: per pair, its hinge terms against every caption and every image averaged over the b columns
    (the zero diagonal included), the int(0.3 b) smallest summed."""
    generator = torch.Generator().manual_seed(0)
    similarity = torch.rand(10, 10, generator=generator)
    b, alpha = 10, 0.2
    per_pair = []
    for i in range(b):
        to_text = sum(max(0.0, alpha + similarity[i, j].item() - similarity[i, i].item()) for j in range(b) if j != i)
        to_image = sum(max(0.0, alpha + similarity[j, i].item() - similarity[i, i].item()) for j in range(b) if j != i)
        per_pair.append((to_text + to_image) / b)
    expected = sum(sorted(per_pair)[:3])
    terms = warmup_loss(trainer=fake_trainer(), batch={}, outputs=SimpleNamespace(similarity=similarity), net=0)
    assert math.isclose(terms["warmup_small_loss"].item(), expected, rel_tol=1e-5)


def test_anchors_are_the_top_tenth_plus_one_of_the_clean_part_by_score():
    score = torch.tensor([0.5, 0.9, 0.1, 0.9, 0.3])
    clean = torch.tensor([True, True, False, True, True])
    # 4 clean pairs, int(0.5 * 4) + 1 = 3 anchors: scores 0.9 (positions 1 and 3, the lower first), then 0.5
    assert select_anchors(score, clean, 0.5).tolist() == [1, 3, 0]
    assert select_anchors(score, clean, 0.1).tolist() == [1]  # int(0.4) + 1 = 1, the authors' b // 10 + 1
    assert select_anchors(score, clean, 1.0).tolist() == [1, 3, 0, 4]  # never more than the clean part
    assert select_anchors(score, torch.zeros(5, dtype=torch.bool), 0.1).numel() == 0


def test_bidirectional_consistency_with_cosines_by_hand():
    """Anchors' images (1, 0), (0, 1) and captions (1, 0), (0, 1). The pair (image (0.6, 0.8), caption (1, 0)):
    its image's nearest anchor is the second (cosine 0.8), whose caption its caption meets at cosine 0: q = 0.8 / 0 and
    min(q, 1 / q) = 0; its caption's nearest anchor is the first (cosine 1), whose image its image meets at 0.6:
    min(1 / 0.6, 0.6) = 0.6. The consistency is (0 + 0.6) / 2 = 0.3; an anchor's own is 1."""
    images = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    texts = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    consistency = bidirectional_consistency(images, texts, torch.tensor([0, 1]), "cosine")
    torch.testing.assert_close(consistency, torch.tensor([1.0, 1.0, 0.3]))


def test_bidirectional_consistency_with_distances_by_hand():
    """Euclidean reading, on unit vectors, the nearest anchor the closest. Image (0.6, 0.8) lies sqrt(0.8) from anchor
    image (1, 0) and sqrt(0.4) from (0, 1), the nearest; that anchor's caption (0, 1) lies sqrt(2) from the pair's
    caption (1, 0): q = sqrt(0.4 / 2). The caption's nearest anchor caption is (1, 0) at distance 0, floored at 1e-2;
    that anchor's image lies sqrt(0.8) away: q = 0.01 / sqrt(0.8). The consistency is the mean of the two; embeddings
    are scaled to unit norm first, so scaling one modality changes nothing."""
    images = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    texts = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    expected = (math.sqrt(0.2) + 0.01 / math.sqrt(0.8)) / 2
    for scale in (1.0, 7.0):
        consistency = bidirectional_consistency(images, scale * texts, torch.tensor([0, 1]), "euclidean")
        torch.testing.assert_close(consistency[2], torch.tensor(expected))


@pytest.mark.parametrize("affinity", ["cosine", "euclidean"])
def test_bidirectional_consistency_against_a_loop(affinity):
    generator = torch.Generator().manual_seed(1)
    images, texts = torch.randn(12, 5, generator=generator), torch.randn(12, 5, generator=generator)
    anchors = torch.tensor([2, 7, 9, 4])

    def affinity_of(x: torch.Tensor, y: torch.Tensor) -> float:
        if affinity == "cosine":
            return float(x @ y / (x.norm() * y.norm()))
        return max(float((x / x.norm() - y / y.norm()).norm()), 1e-2)

    def one_side(own: torch.Tensor, other: torch.Tensor, i: int) -> float:
        values = [affinity_of(own[i], own[a]) for a in anchors.tolist()]
        best = values.index(max(values) if affinity == "cosine" else min(values))
        q = values[best] / affinity_of(other[i], other[anchors[best]])
        return q if q < 1 else 1 / q

    expected = [min(1.0, max(0.0, (one_side(images, texts, i) + one_side(texts, images, i)) / 2)) for i in range(12)]
    torch.testing.assert_close(bidirectional_consistency(images, texts, anchors, affinity), torch.tensor(expected))


@pytest.mark.parametrize("affinity", ["cosine", "euclidean"])
def test_mismatched_pairs_are_less_consistent_than_matched_ones_on_clustered_embeddings(affinity):
    """Fig. 1's premise: images and captions of 8 concepts around a centre each; 40% of the captions are of another
    concept than their image. Anchors from the matched pairs; the consistency of the mismatched pairs falls well below
    that of the matched ones (means 0.05 against 0.62 with cosines, 0.44 against 0.81 with distances)."""
    generator = torch.Generator().manual_seed(0)
    concepts, n, dim = 8, 200, 16
    image_centres = torch.randn(concepts, dim, generator=generator)
    text_centres = torch.randn(concepts, dim, generator=generator)
    concept = torch.randint(concepts, (n,), generator=generator)
    noisy = torch.rand(n, generator=generator) < 0.4
    other = (concept + torch.randint(1, concepts, (n,), generator=generator)) % concepts
    caption_concept = torch.where(noisy, other, concept)
    images = image_centres[concept] + 0.3 * torch.randn(n, dim, generator=generator)
    texts = text_centres[caption_concept] + 0.3 * torch.randn(n, dim, generator=generator)
    anchors = select_anchors(torch.rand(n, generator=generator), ~noisy, 0.1)
    consistency = bidirectional_consistency(images, texts, anchors, affinity)
    assert consistency[noisy].mean() < consistency[~noisy].mean() - 0.3


def test_soft_labels_by_hand():
    """Anchor 1; another clean pair (1 + c) / 2 (the authors' 0.5 + (i2t + t2i) / 4); a noisy pair c; labels at or
    below 0.5 become 0 (their ``noise_soft``). ``clean_labels = "one"`` and no threshold: 1 for the clean part, c for
    the noisy."""
    consistency = torch.tensor([0.2, 0.8, 0.6, 0.4])
    clean = torch.tensor([True, True, False, False])
    anchors = torch.tensor([0])
    code = soft_labels(consistency, clean, anchors, BiCroOptions.read({}))
    torch.testing.assert_close(code, torch.tensor([1.0, 0.9, 0.6, 0.0]))
    plain_options = BiCroOptions.read({"bicro.clean_labels": "one", "bicro.label_threshold": 0})
    plain = soft_labels(consistency, clean, anchors, plain_options)
    torch.testing.assert_close(plain, torch.tensor([1.0, 1.0, 0.6, 0.4]))


def _authors_loss(similarity: torch.Tensor, labels: torch.Tensor, alpha: float = 0.2) -> float:
    """The authors' ``ContrastiveLoss`` (hard negatives, exponential soft margin) with a (B,) label row, as loops:
    cost_s[i, j] = m_j + S_ij - S_ii and cost_im[i, j] = m_j + S_ij - S_jj, the row maxima of the first and the
    column maxima of the second (diagonals zeroed), summed."""
    b = similarity.size(0)
    margin = [alpha * (10 ** labels[j].item() - 1) / 9 for j in range(b)]
    s = similarity.tolist()
    total = 0.0
    for i in range(b):
        total += max(max(0.0, margin[j] + s[i][j] - s[i][i]) for j in range(b) if j != i)
    for j in range(b):
        total += max(max(0.0, margin[j] + s[i][j] - s[j][j]) for i in range(b) if i != j)
    return total


def _pair_loss(similarity: torch.Tensor, labels: torch.Tensor, alpha: float = 0.2) -> float:
    """The per-pair reading as loops: pair i's margin in both of its hinges, hardest negatives."""
    b = similarity.size(0)
    total = 0.0
    for i in range(b):
        m = alpha * (10 ** labels[i].item() - 1) / 9
        total += max(max(0.0, m + similarity[i, j].item() - similarity[i, i].item()) for j in range(b) if j != i)
        total += max(max(0.0, m + similarity[j, i].item() - similarity[i, i].item()) for j in range(b) if j != i)
    return total


@pytest.mark.parametrize("layout", ["broadcast", "pair"])
def test_the_loss_against_loops_within_the_clean_and_noisy_parts(layout):
    generator = torch.Generator().manual_seed(4)
    similarity, labels = torch.rand(7, 7, generator=generator), torch.rand(7, generator=generator)
    clean = torch.tensor([True, False, True, True, False, True, False])
    reference = _authors_loss if layout == "broadcast" else _pair_loss
    c, n = clean.nonzero().squeeze(1), (~clean).nonzero().squeeze(1)
    clean_only = reference(similarity[c][:, c], labels[c])
    both = clean_only + reference(similarity[n][:, n], labels[n])
    outputs, targets = SimpleNamespace(similarity=similarity), {"clean": clean, "labels": labels}
    options = {"bicro.label_layout": layout, "bicro.noisy_part_start": 0.5}
    # 1 warmup + 4 co-training epochs: the noisy part joins at epoch 1 + int(4 * 0.5) = 3
    for epoch, expected in ((2, clean_only), (3, both)):
        trainer = fake_trainer(options, epoch=epoch, epochs=5)
        value = loss(trainer=trainer, batch={}, outputs=outputs, targets=targets, net=0)["soft_margin_triplet"]
        assert math.isclose(value.item(), expected, rel_tol=1e-5), (layout, epoch)


def test_both_mixtures_give_the_small_losses_the_higher_clean_probability():
    generator = torch.Generator().manual_seed(5)
    small, large = 0.1 + 0.05 * torch.rand(80, generator=generator), 0.7 + 0.1 * torch.rand(20, generator=generator)
    losses = torch.cat([small, large])
    for mixture in ("gmm", "bmm"):
        prob = clean_probability(losses, mixture, seed=0)
        assert prob[:80].min() > 0.5 > prob[80:].max(), mixture


@pytest.mark.slow
def test_bicro_trains_two_networks_and_labels_every_pair_of_a_batch(tiny_data_dir, tmp_path):
    """On the tiny benchmark at 40% noise, 1 warmup and 2 co-training epochs: finite validation rSum, each network's
    division made from its peer's losses, the soft-margin term logged for both networks once the noisy part trains,
    and for a batch of 160 training pairs soft labels in [0, 1], 1 on the anchors of its clean part and on no pair
    of its noisy part."""
    from conftest import noisy_trainer, tiny_config

    from hfncl_plugins.bicro import rectify

    config = tiny_config(tmp_path, ["bicro"], lr_decay_epochs=[], plot_divisions=False)
    trainer = noisy_trainer(tiny_data_dir, config)
    history = trainer.train()["history"]
    assert all(math.isfinite(record["val/rsum"]) for record in history)
    assert all(f"train/soft_margin_triplet/net{net}" in history[-1] for net in (0, 1))
    divisions = trainer.divisions
    assert not torch.equal(divisions[0].extras["statistic"], divisions[1].extras["statistic"])
    batch = next(iter(trainer._loader(seed=0, drop_last=True, batch_size=160)))
    targets = rectify(trainer=trainer, batch=batch, net=0, division=divisions[0])
    labels, clean = targets["labels"].cpu(), targets["clean"].cpu()
    assert labels.min() >= 0 and labels.max() <= 1
    assert (labels[clean] == 1).sum() >= int(0.1 * clean.sum()) + 1 and not (labels[~clean] == 1).any()


def _hinge_mean_loop(similarity: torch.Tensor, i: int, alpha: float = 0.2) -> float:
    """Pair i's L_w by a plain loop: its hinge terms against the batch's other captions and images, over b columns."""
    b = similarity.size(0)
    to_text = sum(max(0.0, alpha + similarity[i, j].item() - similarity[i, i].item()) for j in range(b) if j != i)
    to_image = sum(max(0.0, alpha + similarity[j, i].item() - similarity[i, i].item()) for j in range(b) if j != i)
    return (to_text + to_image) / b


def _steps_trainer(options: dict, similarities: dict, num_train: int = 8) -> SimpleNamespace:
    """A trainer whose networks give ``similarities[(net, batch)]`` for a batch's dataset positions, and whose
    ``collect`` runs the statistic over those batches (counted in ``passes``)."""
    from hfncl.engine.ledger import Ledger

    passes: list[str] = []

    def collect(statistic, description, **loader):
        passes.append(description)
        values: dict[str, torch.Tensor] = {}
        for batch in {key[1] for key in similarities}:
            for name, column in statistic({"index": torch.tensor(batch)}).items():
                values.setdefault(name, torch.full((num_train,), float("nan")))[list(batch)] = column
        return values

    def forward(net, batch, grad=True):
        key = (net, tuple(batch["index"].tolist()))
        return SimpleNamespace(similarity=similarities[key], index=batch["index"])

    config = SimpleNamespace(seed=0, epochs=6, warmup_epochs=2, batch_size=4)
    return SimpleNamespace(
        options_of=lambda kind: kind.read(options), ledger=Ledger(num_train), num_train=num_train, config=config,
        epoch=2, in_warmup=False, collect=collect, forward=forward, passes=passes,
    )


@pytest.mark.parametrize("hook", ["warmup_loss", "loss"])
def test_the_steps_record_the_pass_s_per_pair_loss_of_the_same_batch_and_network(hook):
    """``bicro.division_statistics = "steps"``: the L_w a training step records for every pair of its batch (the
    warmup's before its small-loss selection) is the pass's L_w of the same batch and network, and a plain loop's."""
    import hfncl_plugins.bicro as bicro

    generator = torch.Generator().manual_seed(3)
    batches = [(5, 0, 7, 2), (1, 6, 3, 4)]
    similarities = {(net, batch): torch.rand(4, 4, generator=generator) for net in (0, 1) for batch in batches}
    options = {"bicro.division_statistics": "steps", "bicro.warmup_share": 0.5}
    trainer = _steps_trainer(options, similarities)
    for (net, batch), similarity in similarities.items():
        outputs = SimpleNamespace(similarity=similarity.clone().requires_grad_(), index=torch.tensor(batch))
        if hook == "warmup_loss":
            warmup_loss(trainer=trainer, batch={}, outputs=outputs, net=net)
        else:
            targets = {"labels": torch.ones(4), "clean": torch.tensor([True, True, False, False])}
            loss(trainer=trainer, batch={}, outputs=outputs, targets=targets, net=net)
    passed = bicro.pass_losses(trainer, epoch=2)
    for net in (0, 1):
        recorded = trainer.ledger.get(bicro.STEP_LOSS.format(net))
        torch.testing.assert_close(recorded, passed[net])
        for batch in batches:
            by_hand = [_hinge_mean_loop(similarities[(net, batch)], row) for row in range(4)]
            torch.testing.assert_close(recorded[list(batch)], torch.tensor(by_hand))
    with pytest.raises(AssertionError):  # the statistic a step would give at the other scale (b - 1 columns)
        torch.testing.assert_close(passed[0], trainer.ledger.get(bicro.STEP_LOSS.format(0)) * 4 / 3)


def test_the_division_from_the_steps_runs_no_pass_and_a_gap_or_a_used_record_brings_the_pass_back():
    """Co-divide reads the peer's recorded L_w and makes no pass; it then forgets the records, so the next division
    without new steps runs the pass (no stale record), as does one where a pair was not recorded. With ``"pass"`` the
    steps record nothing and every division runs the pass."""
    import hfncl_plugins.bicro as bicro

    generator = torch.Generator().manual_seed(4)
    batches = [(5, 0, 7, 2), (1, 6, 3, 4)]
    similarities = {(net, batch): torch.rand(4, 4, generator=generator) for net in (0, 1) for batch in batches}
    trainer = _steps_trainer({"bicro.division_statistics": "steps"}, similarities)
    recorded = [torch.rand(8, generator=generator) for _ in (0, 1)]
    for net in (0, 1):
        trainer.ledger.record(torch.arange(8), bicro.STEP_LOSS.format(net), recorded[net])
    divisions = bicro.divide(trainer=trainer, epoch=2)
    assert trainer.passes == []
    for net in (0, 1):
        torch.testing.assert_close(divisions[net].extras["statistic"], recorded[1 - net])
        assert torch.isnan(trainer.ledger.get(bicro.STEP_LOSS.format(net))).all()
    divisions = bicro.divide(trainer=trainer, epoch=3)
    assert trainer.passes == ["epoch 3 co-divide"]
    passed = bicro.pass_losses(trainer, epoch=3)
    torch.testing.assert_close(divisions[0].extras["statistic"], passed[1])
    for net in (0, 1):
        trainer.ledger.record(torch.arange(7), bicro.STEP_LOSS.format(net), recorded[net][:7])  # pair 7 untrained
    bicro.divide(trainer=trainer, epoch=4)
    assert trainer.passes == ["epoch 3 co-divide"] * 2 + ["epoch 4 co-divide"]  # the second: the reference above

    plain = _steps_trainer({}, similarities)
    outputs = SimpleNamespace(similarity=similarities[(0, batches[0])], index=torch.tensor(batches[0]))
    warmup_loss(trainer=plain, batch={}, outputs=outputs, net=0)
    assert bicro.STEP_LOSS.format(0) not in plain.ledger
    assert bicro.batch_plan(trainer=plain, networks=[0]) is None
    assert bicro.batch_plan(trainer=trainer, networks=[0]).keep_last
    bicro.divide(trainer=plain, epoch=2)
    bicro.divide(trainer=plain, epoch=3)
    assert plain.passes == ["epoch 2 co-divide", "epoch 3 co-divide"]


def test_with_steps_a_run_divides_on_the_previous_epoch_s_records_without_a_pass(tiny_data_dir, tmp_path):
    """On the tiny benchmark (800 pairs in batches of 30: a last partial batch of 20), 1 warmup and 2 co-training
    epochs with ``"steps"``: after each epoch both networks have a finite L_w recorded for every pair, each division
    is fitted on its peer's records of the epoch before, and no pass runs."""
    from conftest import noisy_trainer, tiny_config

    import hfncl_plugins.bicro as bicro
    from hfncl.engine.callbacks import TrainerCallback

    snapshots, checked = [], []

    class Check(TrainerCallback):
        def on_epoch_end(self, trainer, record, seconds):
            snapshots.append([trainer.ledger.get(bicro.STEP_LOSS.format(net)).clone() for net in (0, 1)])

        def on_division(self, trainer, epoch, divisions, true_clean):
            for net in (0, 1):
                torch.testing.assert_close(divisions[net].extras["statistic"], snapshots[-1][1 - net])
            checked.append(epoch)

    options = {"bicro.division_statistics": "steps"}
    config = tiny_config(tmp_path, ["bicro"], lr_decay_epochs=[], plot_divisions=False, batch_size=30, options=options)
    trainer = noisy_trainer(tiny_data_dir, config, callbacks=[Check()])
    collect, passes = trainer.collect, []
    trainer.collect = lambda *args, **kwargs: passes.append(trainer.epoch) or collect(*args, **kwargs)
    trainer.train()
    assert checked == [1, 2] and passes == [] and len(snapshots) == 3
    for columns in snapshots:
        assert all(column.shape == (800,) and torch.isfinite(column).all() for column in columns)
