"""Where a run's optimisation starts and how it proceeds: the initial weights (``TrainConfig.init_weights``) instead of
a fresh initialisation, the optimiser's parameter groups and the learning-rate schedule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hfncl.config import one_line
from hfncl.models.loading import HfnclPreTrainedModel


def load_initial_weights(model: HfnclPreTrainedModel, source: str) -> None:
    """Copy the weights and buffers of the saved model at ``source`` (loaded with ``from_pretrained``, safetensors
    only) into ``model``, which must hold the same tensors with the same shapes. Loading draws no random number, so
    a seed shuffles and drops out alike with and without initial weights.

    Raises:
        ValueError: ``source`` holds no saved model of ``model``'s class, or its tensors differ by name or shape
            (one line naming ``TrainConfig.init_weights`` and the first differences).
    """
    try:
        saved = type(model).from_pretrained(source, use_safetensors=True)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(
            f"TrainConfig.init_weights {source!r}: no saved {type(model).__name__} there ({one_line(error)})"
        ) from None
    mine, theirs = model.state_dict(), saved.state_dict()
    problems = [f"missing {name}" for name in sorted(mine.keys() - theirs.keys())]
    problems += [f"unexpected {name}" for name in sorted(theirs.keys() - mine.keys())]
    problems += [
        f"{name} is {tuple(theirs[name].shape)}, the run's {tuple(mine[name].shape)}"
        for name in sorted(mine.keys() & theirs.keys())
        if theirs[name].shape != mine[name].shape
    ]
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise ValueError(f"TrainConfig.init_weights {source!r}: its tensors are not the run's model's: {shown}")
    model.load_state_dict(theirs)


def parameter_groups(
    model: nn.Module, pretrained_text: list[nn.Parameter], *, text_lr_scale: float, frozen_epochs: int
) -> list[dict[str, Any]]:
    """The optimiser's parameter groups: one for the whole model, or, with a text-tower lr scale or freeze, the
    pretrained text encoder's weights (``pretrained_text``) in a group of their own whose ``lr_scale`` multiplies
    the rate.

    Raises:
        ValueError: a text-tower lr scale or freeze asked for where the model has no pretrained text encoder.
    """
    if text_lr_scale == 1.0 and frozen_epochs == 0:
        return [{"params": list(model.parameters()), "lr_scale": 1.0}]
    if not pretrained_text:
        raise ValueError(
            f"TrainConfig.text_tower_lr_scale ({text_lr_scale}) and freeze_text_tower_epochs ({frozen_epochs}) act on "
            "a pretrained text tower, and this model has none (give --text_tower a BERT-family or CLIP text encoder)"
        )
    text = {id(parameter) for parameter in pretrained_text}
    rest = [parameter for parameter in model.parameters() if id(parameter) not in text]
    return [{"params": rest, "lr_scale": 1.0}, {"params": pretrained_text, "lr_scale": text_lr_scale}]


@dataclass(frozen=True)
class LearningRateSchedule:
    """The base rate, multiplied by ``decay_factor`` at each of ``decay_epochs`` reached."""

    rate: float
    decay_epochs: tuple[int, ...]
    decay_factor: float


def set_learning_rate(
    optimizer: torch.optim.Optimizer, schedule: LearningRateSchedule, epoch: int, plateau_decay_epoch: int = -1
) -> None:
    """Every group's rate in ``epoch``: the schedule's rate, decayed at each decay epoch reached (and at
    ``plateau_decay_epoch``, the epoch from which a plateau decays it; -1: none), times the group's ``lr_scale``."""
    decays = sum(epoch >= e for e in schedule.decay_epochs) + int(0 <= plateau_decay_epoch <= epoch)
    for group in optimizer.param_groups:
        group["lr"] = schedule.rate * schedule.decay_factor**decays * group.get("lr_scale", 1.0)
