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
