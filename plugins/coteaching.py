"""Co-teaching (Han et al., NeurIPS 2018) on image-text pairs: the small-loss baseline of noisy correspondence.

Two networks f and g see the same batch D. Each ranks the batch's pairs by its own per-pair loss
and keeps the R(T) share with the smallest losses, D_f and D_g (Algorithm 1, steps 4-5); f then
learns from D_g and g from D_f (steps 6-7), so that each network's mistakes are filtered by the
other. The kept share falls from all pairs to 1 - tau over the first T_k epochs,
R(T) = 1 - tau min(T / T_k, 1) (step 8), T counted in epochs from 0.

The per-pair loss is NCR's L_w, the hinge triplet summed over all negatives of the batch (``"sum"``,
the default: it ranks the noise where hardest negatives collapse), or VSE++'s hinge on the hardest
negatives (``"hardest"``); a kept pair is an anchor, every pair of the batch stays a negative.
Han et al. set tau to the known noise rate: by default tau is the rate the run injected
(``trainer.noise_rate``), or ``coteaching.forget_rate`` when set.
Where the rate is unknown (the data's own pairs), or with ``coteaching.estimate_forget_rate``, tau is
estimated each epoch as the noisy share of a two-component GMM on each network's per-pair losses of
the previous epoch, recorded by its steps. The division the run reports is that GMM's either way.
Measurements: ``docs/methods/coteaching.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hfncl.equations.division import fit_loss_mixture, threshold_division
from hfncl.equations.losses import triplet_hardest_negative, triplet_sum_negatives
from hfncl.equations.toolkit import bibtex_citation, epoch_seed, ledger_column, peer
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option
from hfncl.types import Division

NETWORKS = 2
LOSSES = {"hardest": triplet_hardest_negative, "sum": triplet_sum_negatives}
STEP_LOSS = "coteaching.loss{}"


@dataclass(frozen=True)
class CoTeachingOptions(MethodOptions, namespace="coteaching"):
    """tau (``forget_rate``; ``None``: the run's noise rate if known, else estimated; ``estimate_forget_rate``:
    estimated even when the rate is known), T_k (``gradual_epochs``), the margin and per-pair loss."""

    forget_rate: float | None = option(None, minimum=0, exclusive_maximum=1)
    estimate_forget_rate: bool = option(False)
    gradual_epochs: int = option(10, minimum=1)
    margin: float = option(0.2, minimum=0)
    loss: str = option("sum", choices=tuple(LOSSES))


@hookimpl
def options() -> type[CoTeachingOptions]:
    return CoTeachingOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    """The demo's 10 epochs with T_k = 5, so that the kept share reaches 1 - tau halfway."""
    return {"epochs": 10, "options": {"coteaching.gradual_epochs": 5}}


@hookimpl
def model_defaults() -> dict[str, Any]:
    """Fresh heads on pretrained towers (``pretrained_heads``): f and g must start apart (Algorithm 1 initialises two
    networks), and towers copying one CLIP with its projection would start, and stay, identical."""
    return {"pretrained_heads": False}


@hookimpl
def num_networks(config) -> int:
    return NETWORKS


@hookimpl
def training_passes(config, num_networks) -> list[list[int]]:
    """Both networks in one pass: Algorithm 1 updates f and g on the same batch."""
    return [list(range(num_networks))]


@hookimpl
def division_fields(config) -> dict[str, list[str]]:
    return {"targets": ["keep"], "needs_targets": ["keep"]}


def kept_share(forget_rate: float, epoch: int, gradual_epochs: int) -> float:
    """R(T) = 1 - tau min(T / T_k, 1) (Algorithm 1, step 8)."""
    return 1.0 - forget_rate * min(epoch / gradual_epochs, 1.0)


def small_loss_mask(per_pair: torch.Tensor, share: float) -> torch.Tensor:
    """The ceil(share * b) pairs with the smallest losses, at least one (ties to the lower index), as a boolean mask."""
    count = min(per_pair.numel(), max(1, math.ceil(round(share * per_pair.numel(), 6))))
    order = torch.sort(per_pair, stable=True).indices
    mask = torch.zeros_like(per_pair, dtype=torch.bool)
    mask[order[:count]] = True
    return mask


def pair_losses(trainer, similarity: torch.Tensor) -> torch.Tensor:
    settings = trainer.options_of(CoTeachingOptions)
    return LOSSES[settings.loss](similarity, settings.margin)


@hookimpl
def divide(trainer, epoch) -> list[Division] | None:
    """Each network's GMM on the per-pair losses its steps recorded in the previous epoch (``None`` before any)."""
    if STEP_LOSS.format(0) not in trainer.ledger:
        return None
    divisions = []
    for net in range(NETWORKS):
        losses = ledger_column(trainer.ledger, STEP_LOSS.format(net), trainer.num_train)
        recorded = ~torch.isnan(losses)  # the pairs of a dropped last batch have no loss yet
        losses = torch.where(recorded, losses, losses[recorded].median())
        clean_prob, mixture = fit_loss_mixture(losses, seed=epoch_seed(trainer.config.seed, epoch))
        divisions.append(threshold_division(clean_prob, statistic=losses, mixture=mixture))
    return divisions


def forget_rate(trainer, net: int) -> float:
    """tau: ``coteaching.forget_rate``, else the run's known noise rate (unless ``coteaching.estimate_forget_rate``),
    else the noisy share the GMM of network ``net`` estimates (0 before any)."""
    settings = trainer.options_of(CoTeachingOptions)
    if settings.forget_rate is not None:
        return float(settings.forget_rate)
    if trainer.noise_rate is not None and not settings.estimate_forget_rate:
        return float(trainer.noise_rate)
    division = trainer.divisions[net]
    return 0.0 if division is None else float(1.0 - division.clean_prob.mean())


@hookimpl
def rectify(trainer, batch, net, division) -> dict[str, torch.Tensor]:
    """The pairs network ``net`` learns from: the small-loss share R(T) of its peer (Algorithm 1, steps 4-7)."""
    selector = peer(net, NETWORKS)
    with torch.no_grad():
        peer_losses = pair_losses(trainer, trainer.forward(selector, batch, grad=False).similarity)
    share = kept_share(
        forget_rate(trainer, selector), trainer.epoch, trainer.options_of(CoTeachingOptions).gradual_epochs
    )
    return {"keep": small_loss_mask(peer_losses, share)}


def recorded_pair_losses(trainer, outputs, net: int) -> torch.Tensor:
    """Network ``net``'s per-pair losses of the batch, recorded under the pairs' indices for the next GMM."""
    per_pair = pair_losses(trainer, outputs.similarity)
    trainer.ledger.record(outputs.index, STEP_LOSS.format(net), per_pair.detach())
    return per_pair


@hookimpl
def warmup_loss(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    """Every pair, as R(0) = 1 keeps them all (for a run given warmup epochs)."""
    return {"small_loss_triplet": recorded_pair_losses(trainer, outputs, net).sum()}


@hookimpl
def loss(trainer, batch, outputs, targets, net) -> dict[str, torch.Tensor]:
    """The per-pair loss summed over the pairs the peer kept."""
    per_pair = recorded_pair_losses(trainer, outputs, net)
    return {"small_loss_triplet": (per_pair * targets["keep"].to(per_pair.dtype)).sum()}


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "coteaching.bib")
