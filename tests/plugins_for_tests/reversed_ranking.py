"""A test plugin that asks for three image views and ranks t2i by the negated similarity.

The negation makes the t2i metrics measurably differ from the default scoring, so a test
can tell whether evaluation consulted ``inference_similarity`` per direction.
"""

from __future__ import annotations

from typing import Any

import torch

from hfncl.equations.losses import triplet_sum_negatives
from hfncl.hookspecs import hookimpl


@hookimpl
def model_defaults() -> dict[str, Any]:
    return {"image_views": 3, "text_pooling": "max"}


@hookimpl
def warmup_loss(outputs) -> dict[str, torch.Tensor]:
    return {"triplet_sum": triplet_sum_negatives(outputs.similarity, 0.2).mean()}


@hookimpl
def loss(outputs) -> dict[str, torch.Tensor]:
    return {"triplet_sum": triplet_sum_negatives(outputs.similarity, 0.2).mean()}


@hookimpl
def inference_similarity(model, image_embeds, text_embeds, direction) -> torch.Tensor | None:
    if direction == "i2t":
        return None
    return -model.similarity(image_embeds, text_embeds)
