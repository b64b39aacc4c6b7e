"""Cross-fitting: every pair's p-values from a model that never trained on it.

A model memorises part of the wrong pairs it trains on, so in-sample their rank p-values are not uniform but
skewed towards 0, and Storey's count above lambda (:mod:`hfncl.audit.calibration`) misses them; how much depends
on the data and the schedule, so no fixed lambda serves every split (``docs/audit.md``).
Held out, a wrong pair's caption and image are drawn apart for the model, and its p-value is uniform, as the
estimator assumes. The images are dealt into ``folds`` folds; each fold's pairs are scored by the method trained on
the other folds' pairs, their p-values ranked among that fold's images and captions. Out-of-sample scores are what
confident learning reads for the same reason (C. G. Northcutt, L. Jiang, I. L. Chuang, "Confident learning:
estimating uncertainty in dataset labels", JAIR 70, 2021, Sec. 2: cross-validated predicted probabilities).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from hfncl.audit.calibration import PairPValues
from hfncl.audit.data import AuditData, AuditError
from hfncl.audit.training import TrainedMethod
from hfncl.data.pairs import PairSplit


@dataclass
class ImageSubset:
    """The images ``images`` (sorted numbers of ``base``) of a split with all their captions, as a
    :class:`~hfncl.data.pairs.PairSplit`: image ``i`` here is ``base``'s image ``images[i]``."""

    base: PairSplit
    images: np.ndarray
    split: str = field(init=False)
    captions_per_image: int = field(init=False)
    captions: Sequence[str] = field(init=False)

    def __post_init__(self) -> None:
        self.split, self.captions_per_image = self.base.split, self.base.captions_per_image
        self.captions = [self.base.captions[c] for c in self.pairs.tolist()]

    @property
    def pairs(self) -> np.ndarray:
        """The base split's caption positions of this subset's pairs, in the subset's caption order."""
        k = self.captions_per_image
        return (self.images[:, None] * k + np.arange(k)).reshape(-1)

    @property
    def num_images(self) -> int:
        return len(self.images)

    @property
    def num_captions(self) -> int:
        return len(self.images) * self.captions_per_image

    @property
    def image_shape(self) -> tuple[int, ...]:
        return self.base.image_shape

    def image_inputs(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        return self.base.image_inputs(self.images[np.asarray(indices, dtype=np.int64)])


def image_folds(num_images: int, folds: int, seed: int) -> list[np.ndarray]:
    """The images ``0 .. num_images - 1`` dealt at random (``seed``) into ``folds`` folds of near-equal size, each
    sorted.

    Raises:
        AuditError: fewer than 2 folds, or fewer than 2 images per fold.
    """
    if folds < 2:
        raise AuditError(f"cross-fitting needs at least 2 folds, got {folds}")
    if num_images < 2 * folds:
        raise AuditError(f"{num_images} images cannot be dealt into {folds} folds of at least 2 images")
    order = np.random.default_rng(seed).permutation(num_images)
    return [np.sort(part) for part in np.array_split(order, folds)]


Scorer = Callable[[TrainedMethod, PairSplit], PairPValues]
"""The p-values of a split's pairs under a trained method's model (:func:`hfncl.audit.table.split_p_values` of
its :meth:`~hfncl.audit.training.TrainedMethod.retriever`)."""


def held_out_p_values(
    data: AuditData, parts: list[np.ndarray], train: Callable[[AuditData, int], TrainedMethod], score: Scorer
) -> tuple[PairPValues, list[TrainedMethod]]:
    """Every pair's p-values from the method trained without its image's fold (``parts``, :func:`image_folds`):
    ``train`` on the other folds' pairs (and the fold's number), ``score`` on the fold's, its ranks among the fold's
    images and captions.
    Returns the p-values in the split's pair order and the trained methods, fold by fold."""
    split = data.split
    image_p, caption_p = np.empty(split.num_captions), np.empty(split.num_captions)
    t2i, i2t = np.empty(split.num_captions), np.empty(split.num_captions)
    trained_methods = []
    for number, held_out in enumerate(parts):
        training_images = np.sort(np.concatenate([part for other, part in enumerate(parts) if other != number]))
        trained = train(replace(data, split=ImageSubset(split, training_images)), number)
        fold = ImageSubset(split, held_out)
        values = score(trained, fold)
        positions = fold.pairs
        image_p[positions], caption_p[positions] = values.image, values.caption
        t2i[positions], i2t[positions] = values.similarity_t2i, values.similarity_i2t
        trained_methods.append(trained)
    return PairPValues(image_p, caption_p, t2i, i2t), trained_methods
