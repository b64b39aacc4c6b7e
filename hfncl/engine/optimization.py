"""The optimiser's parameter groups and learning-rate schedule of a training run."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hfncl.config import TrainConfig


def parameter_groups(
    model: nn.Module, pretrained_text: list[nn.Parameter], config: TrainConfig
) -> list[dict[str, Any]]:
    """The optimiser's parameter groups: one for the whole model, or, with a text-tower lr scale or freeze, the
    pretrained text encoder's weights (``pretrained_text``) in a group of their own whose ``lr_scale`` multiplies
    the rate.

    Raises:
        ValueError: a text-tower lr scale or freeze asked for where the model has no pretrained text encoder.
    """
    scale, frozen = config.text_tower_lr_scale, config.freeze_text_tower_epochs
    if scale == 1.0 and frozen == 0:
        return [{"params": list(model.parameters()), "lr_scale": 1.0}]
    if not pretrained_text:
        raise ValueError(
            f"TrainConfig.text_tower_lr_scale ({scale}) and freeze_text_tower_epochs ({frozen}) act on a "
            "pretrained text tower, and this model has none (give --text_tower a BERT-family or CLIP text encoder)"
        )
    text = {id(parameter) for parameter in pretrained_text}
    rest = [parameter for parameter in model.parameters() if id(parameter) not in text]
    return [{"params": rest, "lr_scale": 1.0}, {"params": pretrained_text, "lr_scale": scale}]


def set_learning_rate(optimizer: torch.optim.Optimizer, config: TrainConfig, epoch: int) -> None:
    """Every group's rate: the base rate, decayed at each of ``lr_decay_epochs`` reached, times its ``lr_scale``."""
    decays = sum(epoch >= e for e in config.lr_decay_epochs)
    for group in optimizer.param_groups:
        group["lr"] = config.learning_rate * config.lr_decay_factor**decays * group.get("lr_scale", 1.0)
