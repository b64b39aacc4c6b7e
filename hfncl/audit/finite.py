"""No verdict from a broken model: a non-finite training loss, clean probability, similarity or p-value stops the
audit in one line naming it, instead of a table that calls every pair clean (a NaN similarity ranks no image above
the pair's own, so every p-value comes out small and nothing is flagged)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from hfncl.audit.data import AuditError
from hfncl.engine.callbacks import CallbackTrainer, TrainerCallback

if TYPE_CHECKING:
    from hfncl.audit.calibration import PairPValues
    from hfncl.types import Division


class DivergedError(AuditError):
    """The trained model gives a non-finite number where the audit reads a verdict; the message names it."""


ADVICE = "the model diverged (a lower learning rate, or features of a smaller scale), and no verdict is written"


class FiniteTraining(TrainerCallback):
    """Stop training at the first epoch whose loss terms (``train/...`` of the epoch's record) or whose division's
    clean probabilities are not finite."""

    def on_division(
        self, trainer: CallbackTrainer, epoch: int, divisions: list[Division | None], true_clean: np.ndarray
    ) -> None:
        for net, division in enumerate(divisions):
            if division is None:
                continue
            probs = division.clean_prob.detach().float().cpu().numpy()
            if not np.isfinite(probs).all():
                raise DivergedError(
                    f"epoch {epoch + 1}: network {net}'s division gives a non-finite clean probability to pair "
                    f"{int(np.flatnonzero(~np.isfinite(probs))[0])}: {ADVICE}"
                )

    def on_epoch_end(self, trainer: CallbackTrainer, record: dict[str, Any], seconds: float) -> None:
        for name, value in record.items():
            if name.startswith("train/") and isinstance(value, float | int) and not math.isfinite(value):
                raise DivergedError(f"epoch {record.get('epoch')}: the training loss {name} is {value}: {ADVICE}")


def check_finite_p_values(p_values: PairPValues, what: str) -> None:
    """Refuse ``what``'s (e.g. "the trained model's") similarities or p-values when one is not finite, naming the
    first such pair.

    Raises:
        DivergedError: a NaN or infinite similarity or p-value.
    """
    for name in ("similarity_t2i", "similarity_i2t", "image", "caption"):
        values = np.asarray(getattr(p_values, name), dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            kind = name.replace("_", " ") if name.startswith("similarity") else f"p_{name}"
            raise DivergedError(
                f"{what} {kind} of pair {int(np.flatnonzero(bad)[0])} is {values[bad][0]} "
                f"({int(bad.sum())} of {len(values)} pairs): {ADVICE}"
            )
