"""Start a run from a saved model's weights (``TrainConfig.init_weights``) instead of a fresh initialisation."""

from __future__ import annotations

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
