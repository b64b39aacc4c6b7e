"""Refit: every pair scored by a model trained only on the pairs the audit's first verdict keeps.

In-sample, the audited model has seen its wrong pairs and partly learnt them, so their rank p-values are skewed
towards 0 and Storey's count above lambda misses some (:mod:`hfncl.audit.calibration`); cross-fitting
(:mod:`hfncl.audit.cross_fitting`) holds every pair out, but each fold's model learns from fewer pairs and matches
fewer right ones. A refit keeps all the data it can trust: the pairs the first verdict flags are left out, a fresh
model (the audited method, or another named one, e.g. a plain triplet model) is trained on the others, one image per
kept pair as in a cleaned split (:func:`~hfncl.audit.report.write_clean_split`), and scores every pair of the split.
The flagged pairs, most of the wrong ones, are then held out: their p-values are uniform, and the estimate is read at
the held-out lambda. The wrong pairs the first verdict missed are in-sample and lower it; the right pairs it flagged
count as wrong where the refit model cannot match them, which raises it. Pruning what a first model finds wrong and
training again on the rest is how confident learning ends (C. G. Northcutt, L. Jiang, I. L. Chuang, "Confident
learning: estimating uncertainty in dataset labels", JAIR 70, 2021).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from hfncl.audit.data import AuditData, AuditError
from hfncl.audit.table import Rescored, fold_p_values
from hfncl.audit.training import TrainedMethod
from hfncl.data.pairs import PairSplit


@dataclass
class PairSubset:
    """The pairs ``pairs`` (caption positions of ``base``) of a split, one image per pair, as a
    :class:`~hfncl.data.pairs.PairSplit`: image and caption ``i`` here are pair ``pairs[i]``'s."""

    base: PairSplit
    pairs: np.ndarray
    split: str = field(init=False)
    captions_per_image: int = field(init=False, default=1)
    captions: Sequence[str] = field(init=False)

    def __post_init__(self) -> None:
        self.split = self.base.split
        self.captions = [self.base.captions[c] for c in self.pairs.tolist()]

    @property
    def num_images(self) -> int:
        return len(self.pairs)

    @property
    def num_captions(self) -> int:
        return len(self.pairs)

    @property
    def image_shape(self) -> tuple[int, ...]:
        return self.base.image_shape

    def image_inputs(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        images = self.pairs[np.asarray(indices, dtype=np.int64)] // self.base.captions_per_image
        return self.base.image_inputs(images)


def kept_pairs(data: AuditData, flagged: np.ndarray) -> AuditData:
    """``data`` with only the pairs not ``flagged`` (:class:`PairSubset`).

    Raises:
        AuditError: every pair is flagged, so nothing is left to refit on.
    """
    kept = np.flatnonzero(~np.asarray(flagged, dtype=bool))
    if kept.size == 0:
        raise AuditError(f"every pair of split {data.split.split!r} is flagged: no pair is left to refit on")
    return replace(data, split=PairSubset(data.split, kept))


def refit_p_values(
    trained: TrainedMethod, flagged: np.ndarray, train: Callable[[AuditData], TrainedMethod]
) -> Rescored:
    """The p-values of every pair of ``trained``'s split under a model ``train`` fits on the pairs not ``flagged``
    (:func:`kept_pairs`), ranked among all the split's images and captions; the flagged pairs are the held-out
    ones."""
    refitted = train(kept_pairs(trained.data, flagged))
    held_out = np.asarray(flagged, dtype=bool).copy()
    return Rescored(fold_p_values(refitted, trained.data.split), held_out, refit=True)
