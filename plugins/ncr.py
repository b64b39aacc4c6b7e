"""NCR: Noisy Correspondence Rectifier (Huang et al., NeurIPS 2021).

Two networks A and B trained in turn (co-teaching). After warmup with L_w (Eq. 2),
every epoch each network's clean probabilities come from a two-component GMM on the
per-sample L_w of its *peer* (co-divide, Eq. 1-3, Algorithm 1 lines 3-4); each batch's
labels are rectified with the adaptive prediction P (co-rectify, Eq. 4-5) and recast as
soft margins of a hardest-negative triplet loss (Eq. 6-7).

Reading choices where the paper leaves room (Eq. 5's mean, a noisy batch beside each clean
batch as the authors' loop draws it or the clean and noisy parts of one batch, when the noisy
part joins, co-divide's losses from the steps) and measurements: ``docs/methods/ncr.md``. Eq. 4 and
Eq. 5 come as printed (the defaults) and as the authors' code has them (``ncr.prediction = "hinge"``,
``ncr.label_layout = "broadcast"``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from hfncl.equations.division import fit_loss_mixture, threshold_division
from hfncl.equations.losses import soft_margin, triplet_hardest_negative_in_parts, triplet_sum_negatives
from hfncl.equations.toolkit import (
    batch_index,
    batch_parts,
    batch_view,
    bibtex_citation,
    division_plan,
    epoch_at_share,
    networks_in_turn,
    peer,
    recorded_or_pass,
    training_batches,
)
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option
from hfncl.types import BatchPlan, Division, NoiseProtocol

CAPTION_NOISE = NoiseProtocol(
    kind="caption",
    source="NCR (Huang et al., NeurIPS 2021): a share of the captions re-paired with each other's images",
)
"""NCR's noise protocol, ``ncr-caption`` (registered in group ``hfncl.noise_protocols``)."""

NETWORKS = 2
DIVISION_STATISTICS, NOISY_BATCHES, PREDICTIONS = ("pass", "steps"), ("separate", "split"), ("paper", "hinge")
OWN_PREDICTIONS, LABEL_LAYOUTS = ("train", "eval"), ("pair", "broadcast")
STEP_LOSS = "ncr.step_lw{}"


@dataclass(frozen=True)
class NCROptions(MethodOptions, namespace="ncr"):
    """alpha and m of Eq. 7, tau's top fraction (Eq. 5), the GMM of Eq. 3 and the switches of docs/methods/ncr.md."""

    alpha: float = option(0.2, minimum=0)
    curve: float = option(10.0, exclusive_minimum=1)
    threshold: float = option(0.5, minimum=0, maximum=1)
    top_fraction: float = option(0.1, exclusive_minimum=0, maximum=1)
    gmm_max_iter: int = option(10, minimum=1)
    gmm_reg_covar: float = option(5e-4, exclusive_minimum=0)
    gmm_clip_quantile: float = option(0.0, minimum=0, exclusive_maximum=0.5)
    co_rectify: bool = True
    noisy_part_start: float = option(0.5, minimum=0, maximum=1)
    division_statistics: str = option("steps", choices=DIVISION_STATISTICS)
    first_division: str = option("pass", choices=DIVISION_STATISTICS)
    noisy_batch: str = option("separate", choices=NOISY_BATCHES)
    prediction: str = option("paper", choices=PREDICTIONS)
    own_prediction: str = option("train", choices=OWN_PREDICTIONS)
    label_layout: str = option("pair", choices=LABEL_LAYOUTS)


@hookimpl
def division_fields(config) -> dict[str, list[str]]:
    """Co-rectify hands the batch's division and the peer's (and, with ``ncr.own_prediction = "eval"``, the trained
    network's own) prediction to ``loss``; without it, the division alone."""
    co_rectify = NCROptions.read(config.options).co_rectify
    targets = ["clean", "clean_prob", "peer_prediction", "own_prediction"] if co_rectify else ["dataset_clean"]
    return {"division": ["statistic", "mixture"], "targets": targets, "needs_targets": targets[:2]}


@hookimpl
def options() -> type[NCROptions]:
    return NCROptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    """The split batch: at the demo's and the accuracy benchmarks' 10 epochs it trains better than the authors' loop
    on every seed and ratio measured (docs/methods/ncr.md); the recipes keep the authors' separate noisy batch."""
    return {"epochs": 10, "warmup_epochs": 4, "options": {"ncr.noisy_batch": "split"}}


@hookimpl
def num_networks(config) -> int:
    return NETWORKS


training_passes = networks_in_turn()


def per_sample_lw(hinge_sums: torch.Tensor) -> torch.Tensor:
    """Each pair's L_w (Eq. 2) averaged over its b - 1 negatives, from its sums over them: co-divide's statistic."""
    return hinge_sums.detach() / max(hinge_sums.numel() - 1, 1)


def record_step_loss(trainer, outputs, net: int, hinge_sums: torch.Tensor | None = None) -> None:
    """With ``ncr.division_statistics = "steps"``: store the batch's per-sample L_w of network ``net``.

    ``hinge_sums`` are the per-pair sums of Eq. 2 when the caller has them (warmup's loss);
    otherwise they are computed from the batch's similarity.
    """
    if trainer.options_of(NCROptions).division_statistics == "steps":
        sums = (
            triplet_sum_negatives(outputs.similarity.detach(), trainer.options_of(NCROptions).alpha)
            if hinge_sums is None
            else hinge_sums
        )
        trainer.ledger.record(outputs.index, STEP_LOSS.format(net), per_sample_lw(sums))


@hookimpl
def warmup_loss(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    """L_w (Eq. 2) of the batch at the authors' scale: each pair's hinge terms averaged over the b columns, summed."""
    hinge_sums = triplet_sum_negatives(outputs.similarity, trainer.options_of(NCROptions).alpha)
    record_step_loss(trainer, outputs, net, hinge_sums)
    return {"warmup_lw": hinge_sums.sum() / hinge_sums.numel()}


@hookimpl
def batch_plan(trainer, networks) -> BatchPlan:
    """``ncr.noisy_batch = "separate"``: a pass over the clean set, a batch of the noisy set beside each clean batch.

    The noisy batches come only once their part trains (``ncr.noisy_part_start``, with co-rectify): before, a
    noisy batch would take no step, and co-divide after a co-training epoch runs a pass all the same
    (:func:`records_are_current`), so its forward pass would be wasted. In warmup and with ``"split"``, one
    shuffle of every pair. Every shuffle's last partial batch trains too, as the authors' loaders keep it.
    """
    settings = trainer.options_of(NCROptions)
    if settings.noisy_batch != "separate" or trainer.in_warmup:
        return BatchPlan({"all": torch.ones(trainer.num_train, dtype=torch.bool)}, keep_last=True)
    return division_plan(
        trainer.divisions[networks[0]], settings.co_rectify and noisy_part_trains(trainer), keep_last=True
    )


@hookimpl
def divide(trainer, epoch) -> list[Division]:
    """Co-divide: network k's division is the GMM fitted on its peer's per-sample L_w.

    Its extras carry that L_w (``statistic``) and the fitted GMM (``mixture``), which the
    division plot draws over the losses (Fig. 3b). When every pair looks clean, the 1/100 of
    the pairs with the lowest clean probability are made noisy, as the authors' ``split_prob`` does.
    """
    settings = trainer.options_of(NCROptions)
    names, recorded = [STEP_LOSS.format(net) for net in range(NETWORKS)], settings.division_statistics == "steps"
    current = recorded and records_are_current(trainer, epoch)
    losses = recorded_or_pass(trainer, names, lambda: pass_losses(trainer, epoch), recorded, current)
    divisions = []
    for net in range(NETWORKS):
        peer_loss = losses[peer(net, NETWORKS)]
        clean_prob, mixture = fit_loss_mixture(
            peer_loss,
            seed=trainer.config.seed + epoch,
            max_iter=settings.gmm_max_iter,
            reg_covar=settings.gmm_reg_covar,
            clip_quantile=settings.gmm_clip_quantile,
        )
        division = threshold_division(clean_prob, settings.threshold, 0.01, statistic=peer_loss, mixture=mixture)
        divisions.append(replace(division, statistic_name="the peer network's per-pair loss L_w (Eq. 2)"))
    return divisions


def pass_losses(trainer, epoch: int) -> list[torch.Tensor]:
    """Algorithm 1's statistics: every network's per-sample L_w in a gradient-free pass over the training set.

    In shuffled batches of the training batch size, as the authors' ``eval_train`` draws them from the
    training loader: L_w compares a pair with the negatives of its batch, and batches in dataset order
    would put each image's other captions beside it as negatives.
    """
    alpha = trainer.options_of(NCROptions).alpha

    def per_sample_loss(batch) -> dict[str, torch.Tensor]:
        similarities = [trainer.forward(net, batch, grad=False).similarity for net in range(NETWORKS)]
        return {
            f"loss{net}": per_sample_lw(triplet_sum_negatives(similarity, alpha))
            for net, similarity in enumerate(similarities)
        }

    losses = trainer.collect(
        per_sample_loss, description=f"epoch {epoch} co-divide", **training_batches(trainer, epoch)
    )
    return [losses[f"loss{net}"] for net in range(NETWORKS)]


def records_are_current(trainer, epoch: int) -> bool:
    """Whether the per-sample L_w recorded during the previous epoch's steps (``"steps"``) can divide this epoch.

    Not for the first division after warmup with ``ncr.first_division = "pass"``: the authors' ``eval_train``
    makes it with an eval-mode pass of the warmed-up networks. Not right after the epoch in which the noisy
    part first trained: the networks change fast within it, and the losses recorded along it mix two
    regimes; nor after a co-training epoch with the separate noisy batch, whose pass over the clean set draws
    only as many noisy batches as clean ones, leaving the other noisy pairs' records epochs old (the authors'
    loop divides after a pass, ``eval_train``, every epoch).
    """
    settings, warmup = trainer.options_of(NCROptions), trainer.config.warmup_epochs
    first = epoch == warmup and settings.first_division == "pass"
    return not (
        first or epoch == noisy_part_start_epoch(trainer) + 1 or settings.noisy_batch == "separate" and epoch > warmup
    )


def noisy_part_start_epoch(trainer) -> int:
    """The first epoch whose L_soft includes the noisy part: ``ncr.noisy_part_start`` of the epochs after warmup."""
    return epoch_at_share(trainer, trainer.options_of(NCROptions).noisy_part_start)


def noisy_part_trains(trainer) -> bool:
    """Whether this epoch's L_soft includes the noisy part."""
    return trainer.epoch >= noisy_part_start_epoch(trainer)


def adaptive_prediction(similarity: torch.Tensor, alpha: float, top_fraction: float = 0.1) -> torch.Tensor:
    """P(I_i, T_i) of Eq. 5 as printed, for every pair of the batch, in [0, 1].

    s_i = S_ii - (mean_{j!=i} S_ij + mean_{j!=i} S_ji) / 2; P = min(Theta(s) / tau, 1)
    with Theta clamping to [0, alpha] and tau the mean of Theta(s) over the top
    ``top_fraction`` of pairs by s.
    """
    b, positive = similarity.size(0), similarity.diagonal()
    negatives_of_image = (similarity.sum(dim=1) - positive) / (b - 1)
    negatives_of_text = (similarity.sum(dim=0) - positive) / (b - 1)
    margin = positive - (negatives_of_image + negatives_of_text) / 2
    clamped = margin.clamp(min=0.0, max=alpha)
    tau = clamped[margin.topk(max(1, int(round(top_fraction * b)))).indices].mean()
    return (clamped / tau).clamp(max=1.0) if tau > 0 else torch.zeros_like(clamped)


def hinge_prediction(similarity: torch.Tensor, alpha: float) -> torch.Tensor:
    """P of the authors' code (``ContrastiveLoss`` in ``predict`` mode), the other reading of Eq. 5, in [0, 1].

    s_i = alpha - (c_i + c'_i) / 2 with c_i, c'_i the means over the b columns (the zero diagonal included) of
    Eq. 2's clamped hinge terms [alpha + S_ij - S_ii]_+ of image i and [alpha + S_ji - S_ii]_+ of caption i;
    Theta clamps s to [0, alpha], tau is the mean of Theta(s) over the top b // 10 + 1 pairs and
    P = min(Theta(s) / tau, 1).
    A pair whose negatives all stay alpha below it gets s = alpha, however far below they are.
    """
    b = similarity.size(0)
    clamped = (alpha - triplet_sum_negatives(similarity, alpha) / (2 * b)).clamp(min=0.0, max=alpha)
    tau = clamped.topk(min(b, b // 10 + 1)).values.mean()
    return (clamped / tau).clamp(max=1.0) if tau > 0 else torch.zeros_like(clamped)


def predict(similarity: torch.Tensor, reading: str, alpha: float, top_fraction: float) -> torch.Tensor:
    """Eq. 5's P as ``ncr.prediction`` reads it: ``"paper"`` the printed formula, ``"hinge"`` the authors' code."""
    if reading == "hinge":
        return hinge_prediction(similarity, alpha)
    return adaptive_prediction(similarity, alpha, top_fraction)


def rectified_labels(
    clean_prob: torch.Tensor, clean: torch.Tensor, own_prediction: torch.Tensor, peer_prediction: torch.Tensor
) -> torch.Tensor:
    """Eq. 4 as printed: y^ = w y + (1 - w) P^k on the clean set (y = 1), (P^A + P^B) / 2 on the noisy set."""
    clean_label = clean_prob + (1 - clean_prob) * own_prediction
    noisy_label = (own_prediction + peer_prediction) / 2
    return torch.where(clean, clean_label, noisy_label)


def broadcast_labels(
    clean_prob: torch.Tensor, clean: torch.Tensor, own_prediction: torch.Tensor, peer_prediction: torch.Tensor
) -> torch.Tensor:
    """Eq. 4's labels as the authors' code builds them: a (B, B) matrix, cell (image i, caption j).

    Its clean batch holds w and y as (B, 1) columns and P as a (B,) row, so w * y + (1 - w) * P broadcasts to
    y^_ij = w_i + (1 - w_i) P_j; its noisy batch's label (P^A + P^B) / 2 is a (B, 1) column, y^_ij = y^_i. The
    loss then takes cell (i, j)'s margin for image i against caption j and for caption j against image i
    (:func:`hfncl.equations.losses.triplet_hardest_negative` with a margin matrix), so the margins vary along a pair's
    negatives and choose its hardest one, where Eq. 6's per-pair margin only opens or closes its hinge.
    """
    clean_label = clean_prob[:, None] + (1 - clean_prob[:, None]) * own_prediction[None, :]
    noisy_label = ((own_prediction + peer_prediction) / 2)[:, None].expand_as(clean_label)
    return torch.where(clean[:, None], clean_label, noisy_label)


LABELS = {"pair": rectified_labels, "broadcast": broadcast_labels}
"""Eq. 4 by ``ncr.label_layout``: one label per pair as printed, or the authors' code's (B, B) matrix."""


def _per_part(similarity: torch.Tensor, clean: torch.Tensor, settings: NCROptions) -> torch.Tensor:
    """Eq. 5's prediction for every pair, computed within the clean part and within the noisy part."""
    prediction = torch.zeros(clean.shape, device=similarity.device)
    for part in batch_parts(clean):
        prediction[part] = predict(
            similarity[part][:, part], settings.prediction, settings.alpha, settings.top_fraction
        )
    return prediction


@hookimpl
def rectify(trainer, batch, net, division) -> dict[str, torch.Tensor]:
    """Co-rectify, first half: the division of the batch and the peer network's prediction (Eq. 5).

    The peer's prediction is an eval-mode pass, as the authors make it; it is needed only for the noisy part, so
    before that part trains (``ncr.noisy_part_start``) only the division of the batch is returned. The trained
    network's own prediction comes, by default (``ncr.own_prediction = "train"``), from its training forward pass
    in ``loss`` (detached; dropout active, BatchNorm on the batch), without a second pass; with ``"eval"`` it is an
    eval-mode pass here, as the authors' ``net.predict`` after ``net.val_start()``.
    """
    settings = trainer.options_of(NCROptions)
    if not settings.co_rectify:
        return {"dataset_clean": division.clean}
    targets = batch_view(division, batch_index(trainer, batch), ("clean", "clean_prob"), batch["index"].device)
    predicted = {"own_prediction": net} if settings.own_prediction == "eval" else {}
    if noisy_part_trains(trainer) and trainer.batch_part != "clean":
        predicted["peer_prediction"] = peer(net, NETWORKS)
    for name, predictor in predicted.items():
        similarity = trainer.forward(predictor, batch, grad=False).similarity
        targets[name] = _per_part(similarity, targets["clean"], settings)
    return targets


def co_divide_only_loss(similarity: torch.Tensor, clean: torch.Tensor, alpha: float) -> torch.Tensor:
    """Table 4's ablation without co-rectify: L_soft (Eq. 6) with margin alpha (y = 1) on the clean part only (zero,
    in the graph, when it has fewer than two pairs)."""
    return triplet_hardest_negative_in_parts(
        similarity, batch_parts(clean, with_noisy=False), torch.full(clean.shape, alpha).to(similarity)
    )


@hookimpl
def loss(trainer, batch, outputs, targets, net) -> dict[str, torch.Tensor] | None:
    """Co-rectified labels (Eq. 4; per pair, or broadcast as the authors' code has them) as soft margins (Eq. 7) of
    L_soft (Eq. 6), hardest negatives within each part."""
    settings = trainer.options_of(NCROptions)
    record_step_loss(trainer, outputs, net)
    if not settings.co_rectify:
        clean = targets["dataset_clean"][outputs.index.cpu()].to(outputs.similarity.device)
        return {"soft_margin_triplet": co_divide_only_loss(outputs.similarity, clean, settings.alpha)}
    clean = targets["clean"]
    peer_prediction = targets.get("peer_prediction", torch.zeros_like(targets["clean_prob"]))
    own_prediction = targets.get("own_prediction")
    if own_prediction is None:
        own_prediction = _per_part(outputs.similarity.detach(), clean, settings)
    labels = LABELS[settings.label_layout](targets["clean_prob"], clean, own_prediction, peer_prediction)
    margins = soft_margin(labels, settings.alpha, settings.curve)
    return {
        "soft_margin_triplet": triplet_hardest_negative_in_parts(
            outputs.similarity, batch_parts(clean, "peer_prediction" in targets), margins
        )
    }


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "ncr.bib")
