"""A minimal third-party hfncl method: symmetric InfoNCE with the diagonal as positives.

Installed through ``[project.entry-points.hfncl] toy_infonce = "hfncl_toy_plugin"`` and
activated with ``TrainConfig(plugins=["toy_infonce"])``. It declares one option,
``toy_temperature``, and contributes the same loss term during and after warmup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from hfncl.hookspecs import hookimpl

if TYPE_CHECKING:
    from hfncl.trainer_view import TrainerView
    from hfncl.types import Batch, PairOutputs


def symmetric_infonce(similarity: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean of the image-to-text and text-to-image cross-entropies over ``similarity / temperature``."""
    logits = similarity / temperature
    positives = torch.arange(logits.size(0), device=logits.device)
    return (F.cross_entropy(logits, positives) + F.cross_entropy(logits.t(), positives)) / 2


@hookimpl
def option_defaults() -> dict[str, Any]:
    """The softmax temperature of the InfoNCE logits."""
    return {"toy_temperature": 0.1}


@hookimpl
def loss(
    trainer: "TrainerView", batch: "Batch", outputs: "PairOutputs", targets: dict[str, Any] | None, net: int
) -> dict[str, torch.Tensor]:
    """Symmetric InfoNCE on every pair of the batch (the division is ignored)."""
    return {"toy_infonce": symmetric_infonce(outputs.similarity, trainer.option("toy_temperature"))}


@hookimpl
def warmup_loss(trainer: "TrainerView", batch: "Batch", outputs: "PairOutputs", net: int) -> dict[str, torch.Tensor]:
    """The same term as :func:`loss` during warmup."""
    return {"toy_infonce": symmetric_infonce(outputs.similarity, trainer.option("toy_temperature"))}
