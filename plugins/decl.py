"""DECL: Deep Evidential Cross-modal Learning (Qin et al., ACM MM 2022).

One network. Every pair's K-way matching within its batch is an evidential classification in
both directions: evidence e_ij = exp(s_ij / tau) from the batch's scores, the Dirichlet
alpha = e + 1 of image query i over the captions (row i) and of caption query i over the
images (column i), beliefs b = e / S and uncertainty u = K / S (Sec. 3.2, CEL). Before each
epoch after warmup, a pair's alignment label l_i is 1 when its own item holds the largest
share of the bidirectional evidence e_ij + e_ji (the official ``get_correspondence``). Training
minimises the evidential loss L_e = L_m + lambda2 L_kl of both directions (Supp. Eq. 1, 3-6)
towards the target y_i = l_i one-hot (a noisy pair's target is all zeros: negative learning)
plus lambda1 times the robust dynamic hinge loss L_h (Sec. 3.3, RDH) of the clean pairs, whose
number of hardest negatives falls by eta per step to mu (Supp. Algorithm 1, lines 5-6).

The main paper's text was not at hand: equations are cited from the supplementary material
(Supp. Eq., Algorithm 1, Table 1), the rest from the authors' code (QinYang79/DECL).
Reading choices and measurements: ``docs/methods/decl.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hfncl.equations import evidential
from hfncl.equations.losses import triplet_top_k_negatives
from hfncl.equations.toolkit import (
    batch_index,
    batch_view,
    bibtex_citation,
    forget_records,
    recorded_or_pass,
    training_batches,
)
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option
from hfncl.types import Division, NoiseProtocol

IMAGE_NOISE = NoiseProtocol(
    kind="image",
    source="DECL (Qin et al., ACM MM 2022): a share of the images permuted, all captions of an image together",
)
"""DECL's noise protocol, ``decl-image`` (registered in group ``hfncl.noise_protocols``); RCL, L2RM, GSC and CRCL
reuse its index files."""

SCORES = ("tanh", "similarity")
STEP_STATISTICS = "decl.step_statistics"
"""Ledger column of each pair's (alignment label, evidence share, mean uncertainty) recorded by the training steps
of the epoch before a division (``decl.division_statistics = "steps"``)."""


@dataclass(frozen=True)
class DECLOptions(MethodOptions, namespace="decl"):
    """tau of the evidence, lambda1 (RDH) and lambda2 (KL), eta and mu of RDH's hardness, the hinge margin
    (Supp. Table 1) and the score s the evidence and the hinge read.

    ``score``: ``"tanh"`` s = tanh(z) of the head's raw score z (the authors' code, ``forward_sim``);
    ``"similarity"`` s = S, the similarity the head ranks with (a sigmoid for SGR / SAF, a cosine).

    ``division_statistics``: ``"pass"`` the alignment labels from a gradient-free pass over the training set before
    each epoch after warmup (the authors' code); ``"steps"`` from the (label, share, uncertainty) the previous
    epoch's training steps computed for their own batches with the same functions (:func:`batch_statistics`),
    dropout on (:func:`divide` says when a pass still runs).
    """

    tau: float = option(0.1, exclusive_minimum=0)
    lambda1: float = option(0.8, minimum=0)
    lambda2: float = option(0.1, minimum=0)
    eta: float = option(0.025, minimum=0)
    mu: int = option(5, minimum=1)
    margin: float = option(0.2, minimum=0)
    score: str = option("tanh", choices=SCORES)
    division_statistics: str = option("pass", choices=("pass", "steps"))


@hookimpl
def options() -> type[DECLOptions]:
    return DECLOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    """10 epochs, 4 of warmup, at the paper's MS-COCO rate 5e-4 (at 2e-4 the warmup leaves a network whose
    alignment labels call few pairs clean, and DECL collapses); eta = 1 per step, so that RDH's hardness reaches
    mu at the end of the warmup, as eta = 0.025 does on Flickr30K (measurements: ``docs/methods/decl.md``)."""
    return {"epochs": 10, "warmup_epochs": 4, "learning_rate": 5e-4, "options": {"decl.eta": 1.0}}


@hookimpl
def division_fields(config) -> dict[str, list[str]]:
    return {"division": ["statistic", "uncertainty"], "targets": ["clean"], "needs_targets": ["clean"]}


def matching_scores(scores: torch.Tensor, similarity: torch.Tensor, reading: str) -> torch.Tensor:
    """The (B, B) score s of every image with every caption under ``reading`` (``DECLOptions.score``) from the
    (W, B, B) raw scores (views averaged) or the (B, B) similarity."""
    return torch.tanh(scores).mean(dim=0) if reading == "tanh" else similarity


def evidence(score: torch.Tensor, tau: float) -> torch.Tensor:
    """e_ij = exp(s_ij / tau), elementwise, in float64 (Sec. 3.2's evidence extractor)."""
    return evidential.scaled_evidence(score, tau, "exp")


def uncertainties(evidence_matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """u = K / S of every image query (rows, i2t) and every caption query (columns, t2i) of a (K, K) evidence."""
    return evidential.opinion(evidence_matrix)[1], evidential.opinion(evidence_matrix.t())[1]


def alignment_labels(evidence_matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each pair's label l_i (own item has the largest bidirectional evidence e_ij + e_ji in row i) and its share
    of that row's bidirectional evidence (the official ``get_correspondence``'s ``pred`` and ``norm_e``)."""
    both = evidential.bidirectional_evidence(evidence_matrix)
    own = torch.arange(both.size(0), device=both.device)
    share = both.diagonal() / both.sum(dim=1)
    return both.argmax(dim=1) == own, share


def batch_statistics(evidence_matrix: torch.Tensor) -> torch.Tensor:
    """(K, 3) per pair of a batch from its (K, K) evidence: the alignment label l_i (1 / 0), its evidence share
    (:func:`alignment_labels`) and the mean uncertainty (u_i2t + u_t2i) / 2 (:func:`uncertainties`): what the
    division reads, computed alike by the pass and by the training steps."""
    labels, share = alignment_labels(evidence_matrix)
    u_i2t, u_t2i = uncertainties(evidence_matrix)
    return torch.stack([labels.to(share.dtype), share, (u_i2t + u_t2i) / 2], dim=1)


def records_statistics(trainer) -> bool:
    """Whether this step records its batch's :func:`batch_statistics` (``"steps"``): in the epochs a division
    follows, every epoch after warmup and the last warmup epoch."""
    if trainer.options_of(DECLOptions).division_statistics != "steps":
        return False
    return not trainer.in_warmup or trainer.epoch == trainer.config.warmup_epochs - 1


def evidential_loss(evidence_matrix: torch.Tensor, labels: torch.Tensor, lambda2: float) -> torch.Tensor:
    """Per pair, L_e of the image query plus L_e of the caption query, each L_m + lambda2 L_kl (Supp. Eq. 1, 3-6).

    The target of pair i is y_i = l_i e_i (its own item where it is clean, all zeros where it is noisy);
    L_kl is KL[Dir(alpha~) || Dir(1)] with alpha~ = y + (1 - y) alpha, the target's evidence removed.
    """
    target = torch.diag_embed(labels.to(evidence_matrix.dtype))
    total = evidence_matrix.new_zeros(labels.shape)
    for directed in (evidence_matrix, evidence_matrix.t()):
        alpha = directed + 1
        total = total + evidential.least_squares_risk(alpha, target) + lambda2 * evidential.kl_to_uniform(alpha, target)
    return total


def num_hardest(batch_size: int, step: int, eta: float, mu: int, negatives: int) -> int:
    """RDH's hardness: max(int(K - eta * step), mu) hardest negatives at the step-th step (from 1), at most the
    batch's ``negatives`` (Supp. Algorithm 1, line 6; the authors' ``neg``)."""
    return min(max(math.floor(batch_size - eta * step), mu), negatives)


def robust_dynamic_hinge(score: torch.Tensor, margin: float, hardest: int) -> torch.Tensor:
    """Per pair, L_h: the hinge [margin - s_ii + s_ij]_+ averaged over the ``hardest`` largest negatives of the
    image query plus that of the caption query (Sec. 3.3, the authors' ``RDH_loss``)."""
    margins = torch.full_like(score.diagonal(), margin)
    return triplet_top_k_negatives(score, margins, hardest)


def _terms(trainer, outputs, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """L_e averaged over the batch's pairs and lambda1 times L_h summed over its clean pairs (Algorithm 1, line 14).

    With ``decl.division_statistics = "steps"`` it records the batch's :func:`batch_statistics` for the next
    division (:func:`records_statistics`)."""
    settings = trainer.options_of(DECLOptions)
    score = matching_scores(outputs.view_scores, outputs.similarity, settings.score)
    size = score.size(0)
    hardest = num_hardest(trainer.config.batch_size, trainer.global_step + 1, settings.eta, settings.mu, size - 1)
    hinge = robust_dynamic_hinge(score, settings.margin, hardest)
    values = evidence(score, settings.tau)
    if records_statistics(trainer):
        trainer.ledger.record(outputs.index, STEP_STATISTICS, batch_statistics(values.detach()))
    return {
        "evidential": evidential_loss(values, labels, settings.lambda2).mean().float(),
        "robust_dynamic_hinge": settings.lambda1 * (hinge * labels).sum(),
    }


@hookimpl
def warmup_loss(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    """Warmup: every pair is taken as clean (Algorithm 1, line 1)."""
    return _terms(trainer, outputs, torch.ones(outputs.similarity.size(0), device=outputs.similarity.device))


def division_of(labels: torch.Tensor, share: torch.Tensor, uncertainty: torch.Tensor) -> Division:
    """The division of the training set: clean where l_i = 1, the evidence share as the score of being clean,
    and the pair's mean uncertainty (u_i2t + u_t2i) / 2 as its statistic."""
    extras = {"statistic": uncertainty.float(), "uncertainty": uncertainty.float()}
    return Division(share.float(), labels.bool(), extras, "mean uncertainty u = K / S of the pair's two queries")


@hookimpl
def divide(trainer, epoch) -> Division:
    """Algorithm 1, line 3: every pair's alignment label, by default (``"pass"``) from a gradient-free pass over the
    training set (:func:`pass_statistics`).

    With ``decl.division_statistics = "steps"``, from the statistics the previous epoch's steps recorded. DECL
    trains every pair every epoch but drops each shuffle's last partial batch (no ``batch_plan``), so fewer than
    a batch of pairs have no record of that epoch. Records are forgotten once a division has read them, so no
    record is ever older than the epoch before: the pairs without one (fewer than a batch) are scored as one
    batch of their own in eval mode (:func:`score_unrecorded`), as the pass scores its own last partial batch;
    more gaps than that (no records, as with warmup_epochs = 0) make the full pass (toolkit ``recorded_or_pass``).
    """
    settings = trainer.options_of(DECLOptions)
    recorded = settings.division_statistics == "steps"
    if recorded:
        score_unrecorded(trainer)
    (stats,) = recorded_or_pass(trainer, [STEP_STATISTICS], lambda: [pass_statistics(trainer, epoch)], recorded)
    if recorded:
        forget_records(trainer, [STEP_STATISTICS])
    return division_of(stats[:, 0] > 0.5, stats[:, 1], stats[:, 2])


def pass_statistics(trainer, epoch: int) -> torch.Tensor:
    """The (N, 3) :func:`batch_statistics` of every pair in a gradient-free pass over the training set in batches
    drawn as training draws them (the evidence is among a batch's K candidates)."""

    def pair_statistics(batch) -> dict[str, torch.Tensor]:
        return {"statistics": batch_statistics(eval_evidence(trainer, batch)[1])}

    description = f"epoch {epoch} alignment labels"
    return trainer.collect(pair_statistics, description=description, **training_batches(trainer, epoch))["statistics"]


def eval_evidence(trainer, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The dataset index and the (K, K) evidence of a batch from a gradient-free, eval-mode forward pass."""
    settings = trainer.options_of(DECLOptions)
    outputs = trainer.forward(0, batch, grad=False)
    score = matching_scores(outputs.view_scores, outputs.similarity, settings.score)
    return outputs.index, evidence(score, settings.tau)


def score_unrecorded(trainer) -> None:
    """Record the :func:`batch_statistics` of the pairs without a record, as one eval-mode batch, when they are
    fewer than a training batch (the last partial batch the steps dropped)."""
    if STEP_STATISTICS not in trainer.ledger:
        return
    missing = torch.isnan(trainer.ledger.get(STEP_STATISTICS)).any(dim=1).nonzero().squeeze(1)
    if 0 < missing.numel() < trainer.config.batch_size:
        index, values = eval_evidence(trainer, trainer.samples(missing))
        trainer.ledger.record(index, STEP_STATISTICS, batch_statistics(values))


@hookimpl
def rectify(trainer, batch, net, division) -> dict[str, torch.Tensor]:
    """The batch's alignment labels l_i from the epoch's division (global batch order)."""
    return batch_view(division, batch_index(trainer, batch), ["clean"], batch["images"].device)


@hookimpl
def loss(trainer, batch, outputs, targets, net) -> dict[str, torch.Tensor]:
    """L_e of every pair towards y_i = l_i e_i plus lambda1 L_h of the clean pairs (positive and negative learning)."""
    return _terms(trainer, outputs, targets["clean"].to(outputs.similarity.dtype))


@hookimpl
def query_uncertainty(model, image_embeds, text_embeds, direction) -> torch.Tensor:
    """Each query's u = M / S over the whole gallery of M candidates, networks averaged."""
    settings = DECLOptions.read(model.config.plugin_options)
    values = []
    for net, network in enumerate(model.networks):
        scores = network.view_scores(image_embeds[net], text_embeds[net])
        values_net = evidence(matching_scores(scores, network.squash(scores).mean(dim=0), settings.score), settings.tau)
        values.append(evidential.opinion(values_net.t() if direction == "t2i" else values_net)[1])
    return torch.stack(values).mean(dim=0).float()


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "decl.bib")
