"""UGNCL: Uncertainty-Guided Noisy Correspondence Learning (Zha et al., SIGIR 2024).

One network (or an ensemble of them, UGNCL*) with W image views (``NCLConfig.image_views``,
W = 2). Every pair's K-way matching within its batch is an evidential classification: per
view, evidence from the batch's scores (Eq. 3-4; by default the head's raw score, less Eq. 3's
floor of 1, ``ugncl.evidence``), a subjective opinion (Eq. 5-6), the
views fused by Dempster's rule (TMC's reduced form) into a joint opinion and Dirichlet (Eq. 7).
The division (Eq. 8-11) splits the training set by uncertainty into a determined set
(clean if the pair's own item has the largest belief, else noisy) and a hard set with
the soft label b_ii, split by epsilon into hard-clean and hard-noisy. Training
minimises the evidential loss (Eq. 12-15) plus xi2 times the trusted robust loss
(Eq. 16-17), Eq. 18.

Reading choices where the paper leaves room (the evidence of Eq. 3, Eq. 17 as printed, lambda
per step, the reductions, xi1 on cosine heads, UGNCL*, warmup): ``docs/methods/ugncl.md``;
measurements: ``docs/ugncl.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hfncl.equations import evidential
from hfncl.equations.losses import soft_margin, triplet_hardest_negative, triplet_top_k_negatives
from hfncl.equations.toolkit import batch_index, batch_view, bibtex_citation, recorded_or_pass, training_batches
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option
from hfncl.types import Division

CLEAN, NOISY, HARD_CLEAN, HARD_NOISY = 0, 1, 2, 3
SET_NAMES = {CLEAN: "clean", NOISY: "noisy", HARD_CLEAN: "hard_clean", HARD_NOISY: "hard_noisy"}
RECTIFIED = ["soft_label", "uncertainty", "sets"]
EVIDENCE_READINGS, SOFT_LABELS = ("excess", "raw", "printed"), ("share", "belief")
STEP_STATISTICS = "ugncl.step_statistics{}"
"""Ledger column of network k's per-pair (u, soft label, own item is the argmax) recorded by its training steps."""


@hookimpl
def division_fields(config) -> dict[str, list[str]]:
    return {
        "division": [*RECTIFIED, "statistic", *(f"set/{name}" for name in SET_NAMES.values())],
        "targets": RECTIFIED,
        "needs_division": RECTIFIED,
        "needs_targets": RECTIFIED,
    }


@dataclass(frozen=True)
class UGNCLOptions(MethodOptions, namespace="ugncl"):
    """tau and the evidence reading (Eq. 3), p and epsilon (Eq. 8-11), xi1 and xi2 (Eq. 14, 18), gamma and m
    (Eq. 2), Delta (Eq. 17), delta (per step) and theta of lambda (Sec. 3.3), the ensemble size (Sec. 4.3).

    ``evidence``: ``"excess"`` exp(softplus(z) / tau) - 1 of the head's raw score z; ``"raw"`` Eq. 3 on z
    (the authors' code); ``"printed"`` Eq. 3 on the head's similarity S (a sigmoid for SGR / SAF).
    ``soft_label`` of a hard pair: ``"share"`` b_ii / (1 - u), its share of the joint belief (the authors'
    normalised evidence); ``"belief"`` b_ii as printed (never above 1 - u <= 1 - p: no hard-clean pair).
    ``division_statistics``: ``"pass"`` the division's opinions from a gradient-free pass over the training set
    before each epoch; ``"steps"`` those the previous epoch's training steps formed for their batches (a pass
    only for pairs no step has seen yet).
    """

    tau: float = option(0.1, exclusive_minimum=0)
    evidence: str = option("excess", choices=EVIDENCE_READINGS)
    soft_label: str = option("share", choices=SOFT_LABELS)
    uncertainty_threshold: float = option(0.5, minimum=0, maximum=1)
    epsilon: float = option(0.5, minimum=0, maximum=1)
    xi1: float = option(0.001, minimum=0)
    xi2: float = option(0.8, minimum=0)
    margin: float = option(0.2, minimum=0)
    curve: float = option(10.0, exclusive_minimum=1)
    delta_margin: float = 10.0
    lambda_decay: float = option(0.025, minimum=0)
    lambda_min: int = option(5, minimum=1)
    ensemble: int = option(1, minimum=1)
    division_statistics: str = option("pass", choices=("pass", "steps"))


@hookimpl
def options() -> type[UGNCLOptions]:
    return UGNCLOptions


@hookimpl
def model_defaults() -> dict[str, Any]:
    return {"image_views": 2}


@hookimpl
def demo_settings() -> dict[str, Any]:
    """The demo's UGNCL*: two networks, 3 warmup epochs of 10, xi1 = 0 (the KL collapses cosine heads)."""
    return {"epochs": 10, "warmup_epochs": 3, "options": {"ugncl.xi1": 0.0, "ugncl.ensemble": 2}}


@hookimpl
def num_networks(config) -> int:
    """UGNCL* (Sec. 4.3): ``ugncl.ensemble`` networks trained side by side, each on its own
    division and never on the other's; inference averages their similarities."""
    return UGNCLOptions.read(config.options).ensemble


def view_evidence(scores: torch.Tensor, similarity: torch.Tensor, tau: float, reading: str) -> torch.Tensor:
    """Eq. 3 under ``reading`` (``UGNCLOptions.evidence``) from the (W, ..., K) raw scores or, ``"printed"``,
    the similarities, in float64."""
    score = similarity if reading == "printed" else scores
    return evidential.softplus_evidence(score.double(), tau, excess=reading == "excess")


def pair_opinions(evidence: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 4-7: joint belief (K, K) and uncertainty (K,) of every pair of a batch from its (W, K, K) evidence."""
    return evidential.fused_opinion(evidential.bidirectional_evidence(evidence))


def own_label(belief: torch.Tensor, uncertainty: torch.Tensor, reading: str) -> torch.Tensor:
    """Eq. 11's y~ of every pair of a batch from its joint (K, K) belief and (K,) u: b_ii, or with ``"share"``
    b_ii / (1 - u), the pair's share of the belief mass (e_ii / sum_k e_ik for one view)."""
    return belief.diagonal() / (1 - uncertainty) if reading == "share" else belief.diagonal()


def batch_statistics(evidence: torch.Tensor, soft_label: str) -> torch.Tensor:
    """(K, 3) per pair of a batch from its (W, K, K) evidence: the joint u, the soft label (:func:`own_label`) and
    whether the pair's own item has the largest belief (1 / 0), what :func:`uncertainty_division` reads."""
    belief, uncertainty = pair_opinions(evidence)
    is_argmax = (belief.argmax(dim=1) == torch.arange(belief.size(0), device=belief.device)).to(uncertainty.dtype)
    return torch.stack([uncertainty, own_label(belief, uncertainty, soft_label), is_argmax], dim=1)


def uncertainty_division(
    uncertainty: torch.Tensor, own_belief: torch.Tensor, own_is_argmax: torch.Tensor, threshold: float, epsilon: float
) -> Division:
    """Eq. 8-11 on the training set.

    ``uncertainty`` is the joint u = K / L (Eq. 7); ``own_belief`` the pair's soft label (``UGNCLOptions.soft_label``:
    b_ii or b_ii / (1 - u)); ``own_is_argmax`` whether the pair's own item has the largest belief. Determined
    (u < p): clean (y~ = 1) if argmax, else noisy (y~ = 0). Hard (u >= p): y~ = ``own_belief``, hard-clean if
    y~ > epsilon. The division's
    ``clean_prob`` is y~, ``clean`` = determined-clean or hard-clean; its extras carry the
    soft label, the uncertainty, the set code per pair and one ``set/NAME`` mask per set.
    """
    determined = uncertainty < threshold
    soft_label = torch.where(determined, own_is_argmax.double(), own_belief.double())
    sets = torch.where(
        determined,
        torch.where(own_is_argmax, CLEAN, NOISY),
        torch.where(soft_label > epsilon, HARD_CLEAN, HARD_NOISY),
    )
    extras = {"soft_label": soft_label.float(), "uncertainty": uncertainty.float(), "sets": sets}
    extras.update({"statistic": extras["uncertainty"]} | {f"set/{n}": sets == code for code, n in SET_NAMES.items()})
    clean, statistic_name = (sets == CLEAN) | (sets == HARD_CLEAN), "uncertainty u of the pair's opinion (Eq. 7)"
    return Division(soft_label.float(), clean, extras, statistic_name)


@hookimpl
def divide(trainer, epoch) -> list[Division]:
    """UGD over the training set, one division per network (``ugncl.division_statistics``)."""
    settings = trainer.options_of(UGNCLOptions)
    names = [STEP_STATISTICS.format(net) for net in range(trainer.num_networks)]
    stats = recorded_or_pass(
        trainer, names, lambda: pass_statistics(trainer, epoch), settings.division_statistics == "steps"
    )
    return [
        uncertainty_division(
            values[:, 0].double(),
            values[:, 1].double(),
            values[:, 2] > 0.5,
            settings.uncertainty_threshold,
            settings.epsilon,
        )
        for values in stats
    ]


def pass_statistics(trainer, epoch: int) -> list[torch.Tensor]:
    """Every network's (N, 3) :func:`batch_statistics` in a gradient-free pass over the training set, in global
    batches of the training batch size in the epoch's seeded order (evidence among a batch's K candidates, as in
    training)."""
    settings = trainer.options_of(UGNCLOptions)

    def pair_statistics(batch) -> dict[str, torch.Tensor]:
        outputs = [trainer.forward(net, batch, grad=False) for net in range(trainer.num_networks)]
        evidence = [
            view_evidence(out.view_scores, out.view_similarity, settings.tau, settings.evidence) for out in outputs
        ]
        return {f"net{net}": batch_statistics(values, settings.soft_label) for net, values in enumerate(evidence)}

    stats = trainer.collect(
        pair_statistics, description=f"epoch {epoch} uncertainty-guided division", **training_batches(trainer, epoch)
    )
    return [stats[f"net{net}"] for net in range(trainer.num_networks)]


def evidential_loss(evidence: torch.Tensor, labels: torch.Tensor, xi1: float) -> torch.Tensor:
    """Eq. 14-15 per pair: L_e^{i2t} + L_e^{t2i}, each L_ls + xi1 L_kl on the views' fused Dirichlet.

    ``evidence`` (W, K, K) is Eq. 3's per view. Image query i classifies over the batch's captions
    (row i of every view, fused), caption query i over its images (column i); the target puts the
    pair's label y~_i on item i.
    """
    target = torch.diag_embed(labels.double())
    total = evidence.new_zeros(labels.shape)
    for directed in (evidence, evidence.transpose(-1, -2)):
        alpha = evidential.joint_alpha(*evidential.fused_opinion(directed))
        total = total + evidential.least_squares_risk(alpha, target) + xi1 * evidential.kl_to_uniform(alpha, target)
    return total


def num_hardest(batch_size: int, step: int, decay: float, minimum: int) -> int:
    """Sec. 3.3: lambda = max(floor(K - delta * step), theta) (rounded down, as the text and the authors' code
    do), at most the K - 1 negatives of a batch."""
    return min(max(math.floor(batch_size - decay * step), minimum), batch_size - 1)


def _objective(trainer, outputs, labels: torch.Tensor, robust: torch.Tensor, net: int) -> dict[str, torch.Tensor]:
    """Eq. 18's two named terms: L_e averaged over the batch's pairs and xi2 times the summed per-pair L_t.

    With ``ugncl.division_statistics = "steps"`` it records the batch's opinions (:func:`batch_statistics`) for
    the next division."""
    settings = trainer.options_of(UGNCLOptions)
    evidence = view_evidence(outputs.view_scores, outputs.view_similarity, settings.tau, settings.evidence)
    if settings.division_statistics == "steps":
        trainer.ledger.record(
            outputs.index, STEP_STATISTICS.format(net), batch_statistics(evidence.detach(), settings.soft_label)
        )
    return {
        "evidential": evidential_loss(evidence, labels, settings.xi1).mean().float(),
        "trusted_robust": settings.xi2 * robust.sum(),
    }


def _hardest_count(trainer, size: int) -> int:
    settings = trainer.options_of(UGNCLOptions)
    return num_hardest(size, trainer.global_step, settings.lambda_decay, settings.lambda_min)


@hookimpl
def warmup_loss(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    labels = torch.ones(outputs.similarity.size(0), device=outputs.similarity.device)
    margins = labels * trainer.options_of(UGNCLOptions).margin
    robust = triplet_top_k_negatives(outputs.similarity, margins, _hardest_count(trainer, labels.numel()))
    return _objective(trainer, outputs, labels, robust, net)


@hookimpl
def rectify(trainer, batch, net, division) -> dict[str, torch.Tensor]:
    """The batch's soft labels, uncertainties and sets from the epoch's division (global batch order)."""
    return batch_view(division, batch_index(trainer, batch), RECTIFIED, batch["images"].device)


@hookimpl
def loss(trainer, batch, outputs, targets, net) -> dict[str, torch.Tensor]:
    """Eq. 18: L_e + xi2 L_t; determined-clean pairs take Eq. 1, determined-noisy pairs no triplet term, hard
    pairs Eq. 16 with Eq. 17's trusted margins (:func:`hfncl.equations.evidential.uncertainty_scaled_margin`)."""
    labels, sets, similarity = targets["soft_label"], targets["sets"], outputs.similarity
    settings = trainer.options_of(UGNCLOptions)
    soft_margins = soft_margin(labels, settings.margin, settings.curve)
    hard_clean, delta = sets == HARD_CLEAN, settings.delta_margin
    margins = evidential.uncertainty_scaled_margin(soft_margins, targets["uncertainty"], hard_clean, delta)
    robust = torch.where(
        (sets == HARD_CLEAN) | (sets == HARD_NOISY),
        triplet_top_k_negatives(similarity, margins, _hardest_count(trainer, labels.numel())),
        triplet_hardest_negative(similarity, settings.margin) * (sets == CLEAN),
    )
    return _objective(trainer, outputs, labels, robust, net)


@hookimpl
def query_uncertainty(model, image_embeds, text_embeds, direction) -> torch.Tensor:
    """Each query's joint uncertainty u over the whole gallery (views fused, networks averaged)."""
    settings = UGNCLOptions.read(model.config.plugin_options)
    values = []
    for net, network in enumerate(model.networks):
        scores = network.view_scores(image_embeds[net], text_embeds[net])
        evidence = view_evidence(scores, network.squash(scores), settings.tau, settings.evidence)
        values.append(evidential.fused_opinion(evidence.transpose(-1, -2) if direction == "t2i" else evidence)[1])
    return torch.stack(values).mean(dim=0).float()


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "ugncl.bib")
