"""L2RM: Learning to Rematch Mismatched Pairs (Han et al., CVPR 2024).

One network. Warmup trains every pair with InfoNCE plus the reverse cross-entropy against the identity
(RCE, temperature tau). Before each later epoch, a two-component Beta mixture on the min-max normalised
per-pair mean hinge loss divides the pairs: clean where the clean component's posterior exceeds 0.5.
A pass over the clean set trains each clean batch with the VSE++ max-violation triplet loss; beside
each clean batch, a batch of the noisy set is *rematched*: the partial optimal transport plan pi between
its images and its captions (cost C = 1 - S, transported mass s = rho, the untransported mass sent to a
dummy row and column, the pairs' own, mismatched, diagonal masked out) becomes the soft target of a
symmetric KL between pi and softmax(S / tau) over rows and over columns.

The paper's text was not at hand: formulas are cited from the authors' code (hhc1997/L2RM, ``models.py``:
``RCE``, ``sym_KL_Divergence``, ``partial_ot``; ``main_L2RM.py``: ``BMM_pred``, ``train``). Reading choices
(the fixed cost, the clean and noisy batches as two steps, the solver) and measurements: ``docs/methods/l2rm.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hfncl.equations.beta_mixture import bmm_clean_probability
from hfncl.equations.division import threshold_division
from hfncl.equations.losses import triplet_hardest_negative, triplet_sum_negatives
from hfncl.equations.toolkit import bibtex_citation, division_plan, training_batches
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option
from hfncl.types import BatchPlan, Division

MASKED_COST = 1e4
"""The cost of a masked cell in units of the regularisation: exp(-MASKED_COST) is zero in float64."""


@dataclass(frozen=True)
class L2RMOptions(MethodOptions, namespace="l2rm"):
    """The authors' ``opt.py`` and scripts: tau 0.05 (RCE and the KL's softmax), Sinkhorn's reg (0.07 for CC152K and
    MS-COCO, 0.01 for Flickr30K), the transported mass rho 0.1, the hinge margin 0.2, the division's Beta mixture
    (10 EM steps, losses clipped into [1e-3, 1 - 1e-3], clean above 0.5), and whether the noisy pairs' own diagonal is
    masked out of the transport (the authors' code masks it except on CC152K, whose noise ratio it sets to 0);
    ``rematch_weight`` scales the rematching loss (1 as the authors train; 0: the noisy pairs left out, an ablation)."""

    tau: float = option(0.05, exclusive_minimum=0)
    reg: float = option(0.07, exclusive_minimum=0)
    rho: float = option(0.1, exclusive_minimum=0, exclusive_maximum=1)
    margin: float = option(0.2, minimum=0)
    bmm_max_iter: int = option(10, minimum=1)
    bmm_eps: float = option(1e-3, exclusive_minimum=0, exclusive_maximum=0.5)
    threshold: float = option(0.5, minimum=0, maximum=1)
    mask_diagonal: bool = True
    rematch_weight: float = option(1.0, minimum=0)
    sinkhorn_iterations: int = option(1000, minimum=1)
    sinkhorn_tolerance: float = option(1e-6, exclusive_minimum=0)


@hookimpl
def options() -> type[L2RMOptions]:
    return L2RMOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    return {"epochs": 10, "warmup_epochs": 2}


@hookimpl
def division_fields(config) -> dict[str, list[str]]:
    return {"division": ["statistic"]}


def rce_loss(similarity: torch.Tensor, tau: float, eps: float = 1e-7) -> torch.Tensor:
    """Warmup's robust loss (``RCE``): half the sum, over both directions, of InfoNCE and the reverse cross-entropy.

    With p = softmax(S / tau) over a row (image query) or a column (caption query):
    CE = -mean_i log p_ii and RCE = -mean_i sum_j p_ij log(delta_ij + eps);
    loss = (CE_i2t + CE_t2i + RCE_i2t + RCE_t2i) / 2.
    """
    identity = torch.eye(similarity.size(0), device=similarity.device, dtype=similarity.dtype)
    log_target = torch.log(identity + eps)
    total = similarity.new_zeros(())
    for logits in (similarity / tau, similarity.t() / tau):
        log_p = logits.log_softmax(dim=1)
        total = total - log_p.diagonal().mean() - (log_p.exp() * log_target).sum(dim=1).mean()
    return total / 2


def mean_hinge(similarity: torch.Tensor, margin: float) -> torch.Tensor:
    """The division's per-pair statistic (the authors' ``eval_loss``): each pair's hinge costs over the batch, both
    directions, averaged over the b columns (the zeroed positive included)."""
    return triplet_sum_negatives(similarity, margin) / similarity.size(0)


def transport_cost(similarity: torch.Tensor) -> torch.Tensor:
    """The cost C = max(1 - S, 0): the learned cost network's initial value (weight -I, bias 1, ReLU), clipped at 1e-10
    as the authors clip it."""
    return (1 - similarity).clamp(min=1e-10)


def partial_transport_plan(
    cost: torch.Tensor,
    rho: float,
    reg: float,
    mask: torch.Tensor | None = None,
    iterations: int = 1000,
    tolerance: float = 1e-6,
) -> torch.Tensor:
    """The entropic partial OT plan between uniform marginals p = 1/n, q = 1/m that moves total mass ``rho``.

    The augmented problem of the authors' ``partial_ot`` (Chapel et al.'s dummy points): a dummy column and row at
    cost xi = 100 max C (the dummy-dummy cell 2 xi + max C), holding mass 1 - rho each, so that exactly rho of the
    real mass is transported between real points; ``mask`` (n, m), False where no mass may go, sets those cells'
    cost to ``MASKED_COST * reg``. Solved with POT's log-domain Sinkhorn (``ot.sinkhorn(..., method="sinkhorn_log")``)
    in float64 NumPy (on a batch's small matrix, faster than POT's torch backend), until the marginals' error is below
    ``tolerance``; returns the (n, m) block between real points, without gradient, on ``cost``'s device.
    """
    import ot

    n, m = cost.shape
    base = cost.detach().cpu().double()
    largest = base.max()
    xi = 100 * largest
    if mask is not None:
        base = torch.where(mask.cpu(), base, torch.full_like(base, MASKED_COST * reg))
    augmented = torch.full((n + 1, m + 1), float(xi), dtype=torch.float64, device=base.device)
    augmented[:n, :m] = base
    augmented[n, m] = 2 * xi + largest
    p, q = (_with_dummy(k, rho).numpy() for k in (n, m))
    plan = ot.sinkhorn(p, q, augmented.numpy(), reg, method="sinkhorn_log", numItermax=iterations, stopThr=tolerance)
    return torch.from_numpy(plan[:n, :m]).to(cost.device, cost.dtype)


def _with_dummy(k: int, rho: float) -> torch.Tensor:
    """The uniform marginal 1/k of k real points and the dummy point's 1 - rho, in float64."""
    marginal = torch.full((k + 1,), 1 / k, dtype=torch.float64)
    marginal[k] = 1 - rho
    return marginal


def symmetric_kl(similarity: torch.Tensor, plan: torch.Tensor, tau: float, eps: float = 1e-10) -> torch.Tensor:
    """The rematching loss (``sym_KL_Divergence``): with P = softmax(S / tau) and Q = the plan clipped at eps, each
    normalised over rows (i2t) and over columns (t2i), (KL(Q||P) + KL(P||Q)) / 2 summed over both directions, each
    KL averaged over its queries."""
    total = similarity.new_zeros(())
    target = plan.clamp(min=eps)
    for logits, soft in ((similarity / tau, target), (similarity.t() / tau, target.t())):
        log_p = logits.log_softmax(dim=1)
        log_q = (soft / soft.sum(dim=1, keepdim=True)).log()
        forward, reverse = (log_q.exp() * (log_q - log_p)).sum(dim=1), (log_p.exp() * (log_p - log_q)).sum(dim=1)
        total = total + forward.mean() + reverse.mean()
    return total / 2


def rematching_loss(similarity: torch.Tensor, settings: L2RMOptions) -> torch.Tensor:
    """The noisy batch's loss: the partial OT plan of its (detached) cost as the target of :func:`symmetric_kl`."""
    n, m = similarity.shape
    mask = ~torch.eye(n, m, dtype=torch.bool, device=similarity.device) if settings.mask_diagonal else None
    cost, solver = transport_cost(similarity.detach()), (settings.sinkhorn_iterations, settings.sinkhorn_tolerance)
    plan = partial_transport_plan(cost, settings.rho, settings.reg, mask, *solver)
    return symmetric_kl(similarity, plan, settings.tau)


@hookimpl
def warmup_loss(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    return {"rce": rce_loss(outputs.similarity, trainer.options_of(L2RMOptions).tau)}


@hookimpl
def divide(trainer, epoch) -> Division:
    """A two-component Beta mixture on the per-pair mean hinge (min-max scaled, clipped into [eps, 1 - eps]) of an
    eval-mode pass in shuffled training batches (``BMM_pred``): clean above ``l2rm.threshold``."""
    settings = trainer.options_of(L2RMOptions)

    def statistic(batch) -> dict[str, torch.Tensor]:
        return {"hinge": mean_hinge(trainer.forward(0, batch, grad=False).similarity, settings.margin)}

    batches = training_batches(trainer, epoch)
    losses = trainer.collect(statistic, description=f"epoch {epoch} division", **batches)["hinge"]
    clean_prob, _ = bmm_clean_probability(losses, max_iter=settings.bmm_max_iter, eps=settings.bmm_eps)
    return threshold_division(clean_prob, settings.threshold, statistic=losses)


@hookimpl
def batch_plan(trainer, networks) -> BatchPlan | None:
    """After warmup: a pass over the clean set with a batch of the noisy set beside each clean batch (none with
    ``l2rm.rematch_weight`` 0)."""
    if trainer.in_warmup:
        return None
    rematch = trainer.options_of(L2RMOptions).rematch_weight > 0
    return division_plan(trainer.divisions[networks[0]], noisy=rematch, keep_last=True)


@hookimpl
def loss(trainer, batch, outputs, targets, net) -> dict[str, torch.Tensor]:
    """A clean batch: the max-violation triplet loss; a noisy batch: the rematching loss."""
    settings = trainer.options_of(L2RMOptions)
    if trainer.batch_part == "noisy":
        return {"rematch_skl": settings.rematch_weight * rematching_loss(outputs.similarity, settings)}
    return {"triplet_hardest": triplet_hardest_negative(outputs.similarity, settings.margin).sum()}


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "l2rm.bib")
