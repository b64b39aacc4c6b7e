"""CRCL: Cross-modal Robust Complementary Learning (Qin et al., NeurIPS 2023), Sec. 3.

With RCL's matching probabilities p^{i2t}, p^{t2i} of a batch (``hfncl_plugins.rcl.matching_probabilities``),
the Active Complementary Loss (ACL) of pair i with soft correspondence y_i in [0, 1] is

    L_d(i) = y_i [-log p^{i2t}_ii - log p^{t2i}_ii]                                  (active: y-weighted InfoNCE)
    L_c(i) = sum_{j != i} phi(p^{i2t}_ij) / (sum_j phi(p^{i2t}_ij))^{q_i} + the same for p^{t2i}
                                                                                     (complementary, normalised)
    L_acl  = mean_i L_d(i) + lambda mean_i L_c(i),

phi = tan and q_i = 1 - y_i: a pair believed clean keeps RCL's plain complementary term (q = 0), a
pair believed mismatched gets the normalised one (q -> 1), which the paper proves robust to noise.
Self-refining Correspondence Correction (SCC) estimates y_i by momentum over the epochs: after warmup
(y = 1), each time pair i is trained, y_i <- alpha y_i + (1 - alpha) p_i with p_i =
(p^{i2t}_ii + p^{t2i}_ii) / 2 of the current network (the last warmup epoch sets y_i = p_i), and y_i
below a floor (0.1) is set to 0. The paper's several self-refining stages (the model re-initialised,
y kept) are not run: one run is one stage. Reading choices and measurements: ``docs/methods/crcl.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hfncl.equations.division import threshold_division
from hfncl.equations.toolkit import bibtex_citation, ledger_column
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option
from hfncl.types import Division
from hfncl_plugins.rcl import PENALTIES, matching_probabilities

CORRESPONDENCE = "crcl.y"
"""The ledger column of every pair's soft correspondence y_i (NaN, read as 1, before a pair's first estimate)."""


@dataclass(frozen=True)
class CRCLOptions(MethodOptions, namespace="crcl"):
    """tau, lambda and phi of ACL, q (``None``: 1 - y_i per pair), SCC's momentum alpha (``momentum`` false: y = p),
    its confidence floor, and the clean threshold of the division the run reports."""

    tau: float = option(0.05, exclusive_minimum=0)
    complementary_weight: float = option(5.0, minimum=0, help="lambda of L_c")
    penalty: str = option("tan", choices=("tan", "log", "mae", "exp"), help="phi of L_c")
    q: float | None = option(None, minimum=0, maximum=1, help="null: q_i = 1 - y_i (the official code)")
    alpha: float = option(0.8, minimum=0, maximum=1, help="SCC's momentum")
    momentum: bool = True
    confidence_floor: float = option(0.1, minimum=0, maximum=1, help="y below it is set to 0")
    threshold: float = option(0.5, minimum=0, maximum=1, help="y at which the reported division calls a pair clean")


@hookimpl
def options() -> type[CRCLOptions]:
    return CRCLOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    """The demo's 10 epochs, the first 5 warmup: after the official 2 (``--warm_epoch 2``) the demo's network is too
    weak for its p_i to seed y, which falls under the floor for every pair (docs/methods/crcl.md, "Measured"). tau
    0.1: the demo's cosine spans twice the range of SGRAF's sigmoid, as for RCL (docs/methods/crcl.md, "On the
    leaderboard")."""
    return {"epochs": 10, "warmup_epochs": 5, "options": {"crcl.tau": 0.1}}


@hookimpl
def division_fields(config) -> dict[str, list[str]]:
    return {"division": ["statistic"]}


def positive_probability(similarity: torch.Tensor, tau: float) -> torch.Tensor:
    """p_i = (p^{i2t}_ii + p^{t2i}_ii) / 2, detached: the current network's estimate of pair i's correspondence."""
    p_i2t, p_t2i = matching_probabilities(similarity.detach(), tau)
    return (p_i2t.diagonal() + p_t2i.diagonal()) / 2


def refined_correspondence(
    previous: torch.Tensor, current: torch.Tensor, alpha: float = 0.8, floor: float = 0.1
) -> torch.Tensor:
    """SCC: y = alpha * y_previous + (1 - alpha) * p, then y < floor set to 0 (a NaN previous, never estimated: 1)."""
    previous = torch.where(torch.isnan(previous), torch.ones_like(previous), previous)
    refined = alpha * previous + (1 - alpha) * current
    return torch.where(refined < floor, torch.zeros_like(refined), refined)


def active_loss(similarity: torch.Tensor, labels: torch.Tensor, tau: float = 0.05) -> torch.Tensor:
    """L_d per pair: y_i (-log p^{i2t}_ii - log p^{t2i}_ii), from log-softmaxes of the logits."""
    logits = similarity / tau
    own = logits.log_softmax(dim=1).diagonal() + logits.t().log_softmax(dim=1).diagonal()
    return -labels * own


def normalised_complementary_loss(
    similarity: torch.Tensor, exponents: torch.Tensor, tau: float = 0.05, penalty: str = "tan"
) -> torch.Tensor:
    """L_c per pair: sum_{j != i} phi(p_ij) / (sum_j phi(p_ij))^{q_i}, for p^{i2t} plus for p^{t2i}.

    ``exponents`` are q_i, one per pair (q = 0: RCL's complementary term with phi; q = 1: its share of the row).
    """
    phi = PENALTIES[penalty]
    off_diagonal = ~torch.eye(similarity.size(0), dtype=torch.bool, device=similarity.device)
    total = similarity.new_zeros(similarity.size(0))
    for probabilities in matching_probabilities(similarity, tau):
        penalties = phi(probabilities, 0.0)
        negatives = (penalties * off_diagonal).sum(dim=1)
        total = total + negatives / penalties.sum(dim=1) ** exponents
    return total


def acl_terms(similarity: torch.Tensor, labels: torch.Tensor, settings: CRCLOptions) -> dict[str, torch.Tensor]:
    """ACL's two terms, each averaged over the batch: L_d and lambda L_c with q_i = ``crcl.q`` or 1 - y_i."""
    labels = labels.detach().to(similarity.dtype)
    exponents = 1 - labels if settings.q is None else torch.full_like(labels, settings.q)
    complementary = normalised_complementary_loss(similarity, exponents, settings.tau, settings.penalty)
    return {
        "active": active_loss(similarity, labels, settings.tau).mean(),
        "complementary": settings.complementary_weight * complementary.mean(),
    }


def _previous(trainer, index: torch.Tensor) -> torch.Tensor:
    if CORRESPONDENCE not in trainer.ledger:
        return torch.full(index.shape, float("nan"))
    return trainer.ledger.get(CORRESPONDENCE)[index.cpu()]


@hookimpl
def warmup_loss(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    """ACL with y = 1 for every pair; the last warmup epoch records each pair's p_i as its first y_i."""
    settings = trainer.options_of(CRCLOptions)
    similarity = outputs.similarity
    if trainer.epoch == trainer.config.warmup_epochs - 1:
        trainer.ledger.record(outputs.index, CORRESPONDENCE, positive_probability(similarity, settings.tau).cpu())
    return acl_terms(similarity, torch.ones(similarity.size(0), device=similarity.device), settings)


@hookimpl
def loss(trainer, batch, outputs, targets, net) -> dict[str, torch.Tensor]:
    """SCC's update of the batch's y (recorded for the next epoch), then ACL with it."""
    settings = trainer.options_of(CRCLOptions)
    similarity = outputs.similarity
    current = positive_probability(similarity, settings.tau).cpu()
    labels = current.clone()
    if settings.momentum:
        previous = _previous(trainer, outputs.index)
        labels = refined_correspondence(previous, current, settings.alpha, settings.confidence_floor)
    trainer.ledger.record(outputs.index, CORRESPONDENCE, labels)
    return acl_terms(similarity, labels.to(similarity.device), settings)


@hookimpl
def divide(trainer, epoch) -> Division | None:
    """The division the run reports: y_i as each pair's clean probability (clean at ``crcl.threshold``); training
    reads y from the ledger, not from this division."""
    if CORRESPONDENCE not in trainer.ledger:
        return None
    labels = ledger_column(trainer.ledger, CORRESPONDENCE, trainer.num_train)
    labels = torch.where(torch.isnan(labels), torch.ones_like(labels), labels)
    division = threshold_division(labels, trainer.options_of(CRCLOptions).threshold, statistic=labels)
    return Division(division.clean_prob, division.clean, division.extras, "the soft correspondence y (SCC)")


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "crcl.bib")
