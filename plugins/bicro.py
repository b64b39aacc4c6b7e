"""BiCro: Bidirectional Cross-modal similarity consistency (Yang et al., CVPR 2023).

Two networks trained in turn, as NCR trains them. A robust warmup trains each network on the small-loss share of
every batch. After it, every epoch each network's division comes from a two-component mixture on the per-pair loss
L_w of its *peer* (co-divide, as NCR Eq. 1-3). In each batch the peer, in eval mode, picks the clean anchor pairs
(the clean part's pairs of smallest peer loss) and gives every other pair a soft correspondence label from the
bidirectional consistency of its similarities with the anchors (Sec. 3.3): the image's nearest anchor image, then
the caption's similarity to that anchor's caption, and the same from the caption's side. A clean image-caption pair
sits as close to an anchor in one modality as in the other; a mismatched one does not. The labels set the margins
of the soft-margin triplet loss on hardest negatives (NCR Eq. 6-7), within the batch's clean and noisy parts.

The paper's text was not at hand when this was written, so docstrings name sections, not equation numbers.
Reading choices (the authors' code, xu5zhao/BiCro, against the paper) and measurements: ``docs/methods/bicro.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from hfncl.equations.beta_mixture import bmm_clean_probability
from hfncl.equations.division import fit_loss_mixture, threshold_division
from hfncl.equations.losses import soft_margin, triplet_hardest_negative_in_parts, triplet_sum_negatives
from hfncl.equations.toolkit import (
    batch_index,
    batch_parts,
    batch_view,
    bibtex_citation,
    epoch_at_share,
    forget_records,
    networks_in_turn,
    peer,
    recorded_or_pass,
    training_batches,
)
from hfncl.hookspecs import hookimpl
from hfncl.models.heads import global_embeddings
from hfncl.options import MethodOptions, option
from hfncl.types import BatchPlan, Division

NETWORKS = 2
MIXTURES, ANCHOR_SCORES, AFFINITIES = ("gmm", "bmm"), ("loss", "clean_prob"), ("cosine", "euclidean")
CLEAN_LABELS, LABEL_LAYOUTS = ("consistency", "one"), ("pair", "broadcast")
DIVISION_STATISTICS = ("pass", "steps")
STEP_LOSS = "bicro.step_lw{}"


@dataclass(frozen=True)
class BiCroOptions(MethodOptions, namespace="bicro"):
    """The margin alpha and curve m of the soft margin, the mixture and threshold of the division, the warmup's
    small-loss share, the anchors' share of the clean part and the readings of docs/methods/bicro.md.

    ``division_statistics``: ``"pass"`` co-divide's per-pair L_w from a gradient-free eval-mode pass of both
    networks over the training set before each epoch (the authors' ``eval_train``); ``"steps"`` the L_w each
    network's training steps of the previous epoch computed for their own batches (:func:`record_step_loss`), a
    pass only when some pair has no record from that epoch (:func:`divide`).
    """

    alpha: float = option(0.2, minimum=0)
    curve: float = option(10.0, exclusive_minimum=1)
    threshold: float = option(0.5, minimum=0, maximum=1)
    mixture: str = option("gmm", choices=MIXTURES)
    warmup_share: float = option(0.3, exclusive_minimum=0, maximum=1)
    anchor_fraction: float = option(0.1, minimum=0, maximum=1)
    anchor_score: str = option("loss", choices=ANCHOR_SCORES)
    affinity: str = option("cosine", choices=AFFINITIES)
    clean_labels: str = option("consistency", choices=CLEAN_LABELS)
    label_threshold: float = option(0.5, minimum=0, exclusive_maximum=1)
    noisy_part_start: float = option(0.5, minimum=0, maximum=1)
    label_layout: str = option("broadcast", choices=LABEL_LAYOUTS)
    division_statistics: str = option("pass", choices=DIVISION_STATISTICS)


@hookimpl
def options() -> type[BiCroOptions]:
    return BiCroOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    """NCR's demo schedule (10 epochs, 4 of them warmup) with a warmup on every pair: in the quick demo's 2 warmup
    epochs the code's warmup on 30% of each batch left co-divide near chance (docs/methods/bicro.md); the recipes
    keep it, with the authors' 10 warmup epochs."""
    return {"epochs": 10, "warmup_epochs": 4, "options": {"bicro.warmup_share": 1.0}}


@hookimpl
def num_networks(config) -> int:
    return NETWORKS


training_passes = networks_in_turn()


@hookimpl
def division_fields(config) -> dict[str, list[str]]:
    """The division of the batch and its soft correspondence labels go from ``rectify`` to ``loss``."""
    return {"division": ["statistic"], "targets": ["clean", "labels"], "needs_targets": ["clean", "labels"]}


def small_loss_share(per_pair: torch.Tensor, share: float) -> torch.Tensor:
    """The robust warmup's loss: the sum of the ``int(share * b)`` smallest per-pair losses of the batch (zero, in the
    graph, when that is none), as the authors' ``warmup_sele``."""
    count = int(share * per_pair.numel())
    return per_pair.topk(count, largest=False).values.sum() if count else per_pair.sum() * 0


def per_pair_lw(similarity: torch.Tensor, alpha: float) -> torch.Tensor:
    """Each pair's L_w (NCR Eq. 2) in its batch: its hinge terms against the batch's captions and images averaged
    over the b columns (the authors' scale), from the (b, b) similarity: co-divide's statistic and the warmup's."""
    return triplet_sum_negatives(similarity, alpha) / similarity.size(0)


def record_step_loss(trainer, outputs, net: int, per_pair: torch.Tensor | None = None) -> None:
    """With ``bicro.division_statistics = "steps"``: store the per-pair L_w of every pair of the step's batch, as
    network ``net``'s training forward pass gives it (``per_pair`` when the caller has it), for the next division."""
    settings = trainer.options_of(BiCroOptions)
    if settings.division_statistics == "steps":
        values = per_pair_lw(outputs.similarity.detach(), settings.alpha) if per_pair is None else per_pair.detach()
        trainer.ledger.record(outputs.index, STEP_LOSS.format(net), values)


@hookimpl
def warmup_loss(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    """Robust warmup: L_w (NCR Eq. 2, each pair's hinge terms averaged over the b columns) of the ``bicro.warmup_share``
    pairs of smallest L_w in the batch; share 1 is NCR's warmup on every pair. With ``"steps"`` every pair's L_w is
    recorded, before the small-loss selection."""
    settings = trainer.options_of(BiCroOptions)
    per_pair = per_pair_lw(outputs.similarity, settings.alpha)
    record_step_loss(trainer, outputs, net, per_pair)
    return {"warmup_small_loss": small_loss_share(per_pair, settings.warmup_share)}


@hookimpl
def batch_plan(trainer, networks) -> BatchPlan | None:
    """With ``"steps"``: one shuffle of every pair with its last partial batch trained too, so that every pair's L_w
    is recorded in every epoch (the default pass drops it, which would leave up to b - 1 pairs unrecorded); with
    ``"pass"``, the trainer's default (one shuffle, last partial batch dropped)."""
    if trainer.options_of(BiCroOptions).division_statistics != "steps":
        return None
    return BatchPlan({"all": torch.ones(trainer.num_train, dtype=torch.bool)}, keep_last=True)


def pass_losses(trainer, epoch: int) -> list[torch.Tensor]:
    """Every network's per-pair L_w in an eval-mode pass over the training set, in shuffled training-size batches
    (the authors' ``eval_train``)."""
    alpha = trainer.options_of(BiCroOptions).alpha

    def per_pair_loss(batch) -> dict[str, torch.Tensor]:
        similarities = [trainer.forward(net, batch, grad=False).similarity for net in range(NETWORKS)]
        return {f"loss{net}": per_pair_lw(s, alpha) for net, s in enumerate(similarities)}

    losses = trainer.collect(per_pair_loss, description=f"epoch {epoch} co-divide", **training_batches(trainer, epoch))
    return [losses[f"loss{net}"] for net in range(NETWORKS)]


def clean_probability(losses: torch.Tensor, mixture: str, seed: int) -> torch.Tensor:
    """The posterior of the small-loss component of a two-component GMM or BMM on the min-max scaled losses."""
    if mixture == "bmm":
        return bmm_clean_probability(losses, max_iter=10)[0]
    return fit_loss_mixture(losses, seed=seed)[0]


@hookimpl
def divide(trainer, epoch) -> list[Division]:
    """Co-divide: network k's division is the mixture fitted on its peer's per-pair L_w. When every pair looks clean,
    the 1/100 of lowest clean probability is made noisy, as the authors' ``split_prob``.

    With ``bicro.division_statistics = "steps"`` the L_w are those the previous epoch's training steps recorded
    (toolkit ``recorded_or_pass``). Each network trains in a pass of its own over one shuffle of every pair, warmup
    and co-training alike (the noisy part's pairs go through the forward pass even in the epochs whose loss leaves
    them out), and :func:`batch_plan` keeps the last partial batch: every pair is recorded by both networks every
    epoch. The records are then forgotten once read (set to NaN), so a record can only serve the division right
    after the epoch that made it: a pair no step of that epoch trained (a last batch of a single pair, which the
    trainer drops) is a gap, and a gap makes the whole pass run, as with ``"pass"``, never a stale L_w.
    """
    settings = trainer.options_of(BiCroOptions)
    names, recorded = [STEP_LOSS.format(net) for net in range(NETWORKS)], settings.division_statistics == "steps"
    losses = recorded_or_pass(trainer, names, lambda: pass_losses(trainer, epoch), recorded)
    if recorded:
        forget_records(trainer, names)
    divisions = []
    for net in range(NETWORKS):
        peer_loss = losses[peer(net, NETWORKS)]
        clean_prob = clean_probability(peer_loss, settings.mixture, trainer.config.seed + epoch)
        division = threshold_division(clean_prob, settings.threshold, 0.01, statistic=peer_loss)
        divisions.append(replace(division, statistic_name="the peer network's per-pair loss L_w"))
    return divisions


def select_anchors(score: torch.Tensor, clean: torch.Tensor, fraction: float) -> torch.Tensor:
    """Positions of the anchors: the ``int(fraction * c) + 1`` clean pairs of highest ``score`` (c clean pairs; ties to
    the lower position), as the authors' ``predict_clean`` takes ``c // 10 + 1``; none without clean pairs."""
    positions = clean.nonzero().squeeze(1)
    count = min(int(fraction * positions.numel()) + 1, positions.numel())
    order = torch.sort(score[positions], descending=True, stable=True).indices
    return positions[order[:count]]


def anchor_affinity(items: torch.Tensor, anchors: torch.Tensor, affinity: str) -> torch.Tensor:
    """(B, K) affinity of every item with every anchor of one modality, on unit-norm embeddings: cosine similarity,
    or Euclidean distance floored at 1e-2 (the authors' ``EuclideanDistances``). Unit norms keep an image distance
    and a caption distance comparable where the two towers' embeddings differ in scale."""
    items, anchors = torch.nn.functional.normalize(items, dim=1), torch.nn.functional.normalize(anchors, dim=1)
    if affinity == "euclidean":
        return torch.cdist(items, anchors).clamp_min(1e-2)
    return items @ anchors.t()


def consistency_ratio(own: torch.Tensor, other: torch.Tensor, nearest_is_largest: bool) -> torch.Tensor:
    """One direction of the consistency (Sec. 3.3): the nearest anchor by ``own`` (B, K), then min(q, 1 / q) with
    q = own / other at that anchor, in [0, 1] when both affinities are positive (the authors' ``SIM_SELE``)."""
    nearest = own.argmax(dim=1, keepdim=True) if nearest_is_largest else own.argmin(dim=1, keepdim=True)
    ratio = own.gather(1, nearest).squeeze(1) / other.gather(1, nearest).squeeze(1)
    return torch.nan_to_num(torch.where(ratio < 1, ratio, 1 / ratio), nan=0.0)


def bidirectional_consistency(
    images: torch.Tensor, texts: torch.Tensor, anchors: torch.Tensor, affinity: str
) -> torch.Tensor:
    """Each pair's soft correspondence from the anchors (Sec. 3.3): the mean of the image-to-text and text-to-image
    consistency ratios, clamped to [0, 1]. ``images``, ``texts``: (B, d) global embeddings; ``anchors``: positions."""
    image_side = anchor_affinity(images, images[anchors], affinity)
    text_side = anchor_affinity(texts, texts[anchors], affinity)
    largest = affinity == "cosine"
    image_to_text = consistency_ratio(image_side, text_side, largest)
    text_to_image = consistency_ratio(text_side, image_side, largest)
    return ((image_to_text + text_to_image) / 2).clamp(0, 1)


def soft_labels(
    consistency: torch.Tensor, clean: torch.Tensor, anchors: torch.Tensor, settings: BiCroOptions
) -> torch.Tensor:
    """Soft correspondence labels of a batch: 1 for the anchors; for the other clean pairs (1 + c) / 2 (the authors'
    code) or 1; for the noisy pairs the consistency c; every label at or below ``bicro.label_threshold`` set to 0
    (the authors' ``noise_soft`` with ``noise_tem``)."""
    clean_label = (1 + consistency) / 2 if settings.clean_labels == "consistency" else torch.ones_like(consistency)
    labels = torch.where(clean, clean_label, consistency)
    labels[anchors] = 1.0
    return labels * (labels > settings.label_threshold)


def noisy_part_trains(trainer) -> bool:
    """Whether this epoch's loss includes the noisy part (from ``bicro.noisy_part_start`` of the co-training on)."""
    return trainer.epoch >= epoch_at_share(trainer, trainer.options_of(BiCroOptions).noisy_part_start)


@hookimpl
def rectify(trainer, batch, net, division) -> dict[str, torch.Tensor]:
    """The division of the batch and its soft labels, from the peer network in eval mode (the authors' ``predict``):
    anchors from the clean part by ``bicro.anchor_score`` (the peer's smallest L_w, or the highest clean
    probability), the consistency from its global embeddings."""
    settings = trainer.options_of(BiCroOptions)
    targets = batch_view(division, batch_index(trainer, batch), ("clean", "clean_prob"), batch["index"].device)
    outputs = trainer.forward(peer(net, NETWORKS), batch, grad=False)
    clean = targets["clean"].to(outputs.similarity.device)
    if settings.anchor_score == "loss":
        score = torch.zeros(clean.shape, device=clean.device)
        if clean.sum() > 1:
            part = clean.nonzero().squeeze(1)
            score[part] = -triplet_sum_negatives(outputs.similarity[part][:, part], settings.alpha)
    else:
        score = targets["clean_prob"].to(clean.device)
    anchors = select_anchors(score, clean, settings.anchor_fraction)
    if anchors.numel() == 0:
        return {"clean": clean, "labels": torch.zeros(clean.shape, device=clean.device)}
    images, texts = global_embeddings(outputs.image_embeds).float(), global_embeddings(outputs.text_embeds).float()
    consistency = bidirectional_consistency(images, texts, anchors, settings.affinity)
    return {"clean": clean, "labels": soft_labels(consistency, clean, anchors, settings)}


@hookimpl
def loss(trainer, batch, outputs, targets, net) -> dict[str, torch.Tensor]:
    """The soft-margin triplet loss (NCR Eq. 6-7) with hardest negatives within the clean part and, once it trains,
    the noisy part: margin (m^y - 1) / (m - 1) alpha per pair, or (``"broadcast"``, the authors' code) caption j's
    margin in both hinges of cell (i, j)."""
    settings = trainer.options_of(BiCroOptions)
    record_step_loss(trainer, outputs, net)
    margins = soft_margin(targets["labels"], settings.alpha, settings.curve)
    if settings.label_layout == "broadcast":
        margins = margins[None, :].expand(margins.numel(), -1)
    parts = batch_parts(targets["clean"], with_noisy=noisy_part_trains(trainer))
    return {"soft_margin_triplet": triplet_hardest_negative_in_parts(outputs.similarity, parts, margins)}


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "bicro.bib")
