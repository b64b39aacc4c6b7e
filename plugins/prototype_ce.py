"""Cross-entropy prototype baseline for cross-modal retrieval with noisy category labels.

The reference point of the label-noise paper's comparison (Sec. 3.3): the same model as
DMCM (an MLP per modality, shared L2-normalised class prototypes,
:class:`hfncl.models.CategoryModel`), trained with plain cross-entropy of the prototype
probabilities of Eq. 2 against the (noisy) labels of every modality, summed over the
modalities: no robust loss, no division, no mixing, no contrastive term. The
temperature ``prototype_ce.tau`` defaults to DMCM's tau1 = 1 so that the two differ only
in what they train with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from hfncl.equations.toolkit import same_terms_in_warmup
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option
from hfncl.types import CategoryOutputs

MODALITIES = ("image", "text")


@hookimpl
def data_kind() -> str:
    return "labels"


@dataclass(frozen=True)
class PrototypeCEOptions(MethodOptions, namespace="prototype_ce"):
    """``prototype_ce.tau``: the temperature of the prototype logits."""

    tau: float = option(1.0, exclusive_minimum=0)


@hookimpl
def options() -> type[PrototypeCEOptions]:
    return PrototypeCEOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    return {"epochs": 30, "learning_rate": 1e-4}


def prototype_cross_entropy(outputs: CategoryOutputs, labels: dict[str, torch.Tensor], tau: float) -> torch.Tensor:
    """sum over modalities of the mean over samples of -log softmax(c^T z / tau)[y]."""
    if tau <= 0:
        raise ValueError(f"prototype_ce.tau must be > 0, got {tau}")
    return sum(F.cross_entropy(outputs.logits(m) / tau, labels[m]) for m in MODALITIES)


def _loss(trainer, batch, outputs: CategoryOutputs, net: int) -> dict[str, torch.Tensor]:
    labels = {m: trainer.gather(batch[f"{m}_label"]) for m in MODALITIES}
    return {"cross_entropy": prototype_cross_entropy(outputs, labels, trainer.options_of(PrototypeCEOptions).tau)}


loss, warmup_loss = same_terms_in_warmup(_loss)
