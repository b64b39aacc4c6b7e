"""UGNCL: Uncertainty-Guided Noisy Correspondence Learning (Zha et al., SIGIR 2024).

One network (or an ensemble of them, UGNCL*) with W image views (``NCLConfig.image_views``,
W = 2). Every pair's K-way matching within its batch is an evidential classification: per
view, evidence from the batch similarities (Eq. 3-4), a subjective opinion (Eq. 5-6), the
views fused by Dempster's rule (TMC's reduced form) into a joint opinion and Dirichlet (Eq. 7).
The division (Eq. 8-11) splits the training set by uncertainty into a determined set
(clean if the pair's own item has the largest belief, else noisy) and a hard set with
the soft label b_ii, split by epsilon into hard-clean and hard-noisy. Training
minimises the evidential loss (Eq. 12-15) plus xi2 times the trusted robust loss
(Eq. 16-17), Eq. 18.

Reading choices where the paper leaves room (the scale of u in Eq. 8, Eq. 17 as printed, lambda
per step, the reductions, xi1 on cosine heads, UGNCL*, warmup): ``docs/methods/ugncl.md``;
measurements: ``docs/ugncl.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hfncl.evidential import fused_opinion, joint_alpha, kl_to_uniform, least_squares_risk, softplus_evidence
from hfncl.hookspecs import hookimpl
from hfncl.losses import soft_margin, triplet_hardest_negative, triplet_top_k_negatives
from hfncl.options import MethodOptions, option
from hfncl.toolkit import batch_index, batch_view, bibtex_citation, epoch_seed
from hfncl.types import Division

CLEAN, NOISY, HARD_CLEAN, HARD_NOISY = 0, 1, 2, 3
SET_NAMES = {CLEAN: "clean", NOISY: "noisy", HARD_CLEAN: "hard_clean", HARD_NOISY: "hard_noisy"}
RECTIFIED = ["soft_label", "uncertainty", "sets"]


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
    """tau (Eq. 3), p and epsilon (Eq. 8-11), xi1 and xi2 (Eq. 14, 18), gamma and m (Eq. 2), Delta (Eq. 17),
    delta and theta of lambda (Sec. 3.3), and the ensemble size of UGNCL* (Sec. 4.3)."""

    tau: float = option(0.1, exclusive_minimum=0)
    uncertainty_threshold: float = option(0.5, minimum=0, maximum=1)
    epsilon: float = option(0.5, minimum=0, maximum=1)
    xi1: float = option(0.1, minimum=0)
    xi2: float = option(0.8, minimum=0)
    margin: float = option(0.2, minimum=0)
    curve: float = option(10.0, exclusive_minimum=1)
    delta_margin: float = 10.0
    lambda_decay: float = option(0.25, minimum=0)
    lambda_min: int = option(5, minimum=1)
    ensemble: int = option(1, minimum=1)


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


def bidirectional_evidence(view_evidence: torch.Tensor) -> torch.Tensor:
    """Eq. 4: row i is pair i's evidence e_i^{i2t} + e_i^{t2i} = E[i, :] + E[:, i], for (..., K, K)."""
    return view_evidence + view_evidence.transpose(-1, -2)


def pair_opinions(view_similarity: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Joint belief (K, K) and uncertainty (K,) of every pair of a batch from its (W, K, K) similarities."""
    return fused_opinion(bidirectional_evidence(softplus_evidence(view_similarity.double(), tau)))


def uncertainty_division(
    uncertainty: torch.Tensor, own_belief: torch.Tensor, own_is_argmax: torch.Tensor, threshold: float, epsilon: float
) -> Division:
    """Eq. 8-11 on the training set.

    ``uncertainty`` is the joint u = K / L (Eq. 7); ``own_belief`` b_ii; ``own_is_argmax``
    whether the pair's own item has the largest belief. Determined (u < p): clean (y~ = 1) if argmax,
    else noisy (y~ = 0). Hard (u >= p): y~ = b_ii, hard-clean if y~ > epsilon. The division's
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
    extras["statistic"] = extras["uncertainty"]
    extras.update({f"set/{name}": sets == code for code, name in SET_NAMES.items()})
    return Division(soft_label.float(), (sets == CLEAN) | (sets == HARD_CLEAN), extras)


@hookimpl
def divide(trainer, epoch) -> list[Division]:
    """UGD over the training set, one division per network, in training-size batches (seeded order)."""
    settings, size = trainer.options_of(UGNCLOptions), trainer.config.batch_size

    def pair_statistics(batch) -> dict[str, torch.Tensor]:
        columns: dict[str, list[torch.Tensor]] = {}
        for net in range(trainer.num_networks):
            view_similarity = trainer.forward(net, batch, grad=False).view_similarity
            for start in range(0, view_similarity.size(-1), size):
                block = view_similarity[:, start : start + size, start : start + size]
                belief, uncertainty = pair_opinions(block, settings.tau)
                own = torch.arange(belief.size(0), device=belief.device)
                columns.setdefault(f"u{net}", []).append(uncertainty)
                columns.setdefault(f"own_belief{net}", []).append(belief[own, own])
                columns.setdefault(f"own_is_argmax{net}", []).append((belief.argmax(dim=1) == own).double())
        return {name: torch.cat(values) for name, values in columns.items()}

    description, seed = f"epoch {epoch} uncertainty-guided division", epoch_seed(trainer.config.seed, epoch)
    stats = trainer.collect(pair_statistics, description=description, batch_size=size, seed=seed)
    return [
        uncertainty_division(
            stats[f"u{net}"], stats[f"own_belief{net}"], stats[f"own_is_argmax{net}"].bool(),
            settings.uncertainty_threshold, settings.epsilon,
        )
        for net in range(trainer.num_networks)
    ]


def evidential_loss(view_similarity: torch.Tensor, labels: torch.Tensor, tau: float, xi1: float) -> torch.Tensor:
    """Eq. 14-15 per pair: L_e^{i2t} + L_e^{t2i}, each L_ls + xi1 L_kl on the views' fused Dirichlet.

    Image query i classifies over the batch's captions (row i of every view, fused), caption
    query i over its images (column i); the target puts the pair's label y~_i on item i.
    """
    view_evidence = softplus_evidence(view_similarity.double(), tau)
    target = torch.diag_embed(labels.double())
    total = view_similarity.new_zeros(labels.shape, dtype=torch.float64)
    for directed in (view_evidence, view_evidence.transpose(-1, -2)):
        alpha = joint_alpha(*fused_opinion(directed))
        total = total + least_squares_risk(alpha, target) + xi1 * kl_to_uniform(alpha, target)
    return total


def trusted_margin(
    soft_margins: torch.Tensor, uncertainty: torch.Tensor, hard_clean: torch.Tensor, delta: float
) -> torch.Tensor:
    """Eq. 17 (reading in docs/methods/ugncl.md): scale gamma^ by a sigmoid of Delta * logit(u).

    Hard-clean pairs: 1 / (1 + ((1 - u) / u)^-Delta), large for low u; hard-noisy pairs:
    1 / (1 + (u / (1 - u))^-Delta), large for high u.
    """
    u = uncertainty.clamp(1e-6, 1 - 1e-6)
    logit = torch.log(u) - torch.log1p(-u)
    factor = torch.where(hard_clean, torch.sigmoid(-delta * logit), torch.sigmoid(delta * logit))
    return factor * soft_margins


def num_hardest(batch_size: int, step: int, decay: float, minimum: int) -> int:
    """lambda = max(ceil(K - delta * step), theta), at most the K - 1 negatives of a batch."""
    return min(max(math.ceil(batch_size - decay * step), minimum), batch_size - 1)


def _objective(trainer, outputs, labels: torch.Tensor, robust: torch.Tensor) -> dict[str, torch.Tensor]:
    """Eq. 18's two named terms: L_e averaged over the batch's pairs and xi2 times the summed per-pair L_t."""
    settings = trainer.options_of(UGNCLOptions)
    return {
        "evidential": evidential_loss(outputs.view_similarity, labels, settings.tau, settings.xi1).mean().float(),
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
    return _objective(trainer, outputs, labels, robust)


@hookimpl
def rectify(trainer, batch, net, division) -> dict[str, torch.Tensor]:
    """The batch's soft labels, uncertainties and sets from the epoch's division (global batch order)."""
    return batch_view(division, batch_index(trainer, batch), RECTIFIED, batch["images"].device)


@hookimpl
def loss(trainer, batch, outputs, targets, net) -> dict[str, torch.Tensor]:
    """Eq. 18: L_e + xi2 L_t; determined-clean pairs take Eq. 1, determined-noisy pairs no triplet term."""
    labels, sets, similarity = targets["soft_label"], targets["sets"], outputs.similarity
    settings = trainer.options_of(UGNCLOptions)
    soft_margins = soft_margin(labels, settings.margin, settings.curve)
    margins = trusted_margin(soft_margins, targets["uncertainty"], sets == HARD_CLEAN, settings.delta_margin)
    robust = torch.where(
        (sets == HARD_CLEAN) | (sets == HARD_NOISY),
        triplet_top_k_negatives(similarity, margins, _hardest_count(trainer, labels.numel())),
        triplet_hardest_negative(similarity, settings.margin) * (sets == CLEAN),
    )
    return _objective(trainer, outputs, labels, robust)


@hookimpl
def query_uncertainty(model, image_embeds, text_embeds, direction) -> torch.Tensor:
    """Each query's joint uncertainty u over the whole gallery (views fused, networks averaged)."""
    tau = UGNCLOptions.read(model.config.plugin_options).tau
    values = []
    for net, network in enumerate(model.networks):
        view_similarity = network.view_similarity(image_embeds[net], text_embeds[net])
        if direction == "t2i":
            view_similarity = view_similarity.transpose(-1, -2)
        values.append(fused_opinion(softplus_evidence(view_similarity.double(), tau))[1])
    return torch.stack(values).mean(dim=0).float()


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "ugncl.bib")
