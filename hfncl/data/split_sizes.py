"""What every split of images and captions derives the same way from its fields."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import datasets
import numpy as np


class SplitSizes:
    """``name``, ``num_images`` and ``num_captions`` of a split whose fields are ``data_dir``,
    ``split``, ``images`` (a dataset with one row per image) and ``captions``, and the
    check of the image indices its ``image_inputs`` is asked for."""

    data_dir: Path
    split: str
    images: datasets.Dataset
    captions: Sequence[str]

    @property
    def name(self) -> str:
        """The directory name, e.g. ``f30k_precomp``."""
        return self.data_dir.name

    @property
    def num_images(self) -> int:
        return self.images.num_rows

    @property
    def num_captions(self) -> int:
        return len(self.captions)

    def image_index(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """``indices`` as a flat int64 array, each checked to be an image of this split (repeats allowed)."""
        index = np.asarray(indices, dtype=np.int64).reshape(-1)
        outside = (index < 0) | (index >= self.num_images)
        if outside.any():
            raise IndexError(
                f"image index {index[outside][0]} is outside 0..{self.num_images - 1} of split {self.split!r}"
            )
        return index
