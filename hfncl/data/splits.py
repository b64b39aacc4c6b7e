"""What every split of images and captions derives the same way from its fields."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import datasets


class SplitSizes:
    """``name``, ``num_images`` and ``num_captions`` of a split whose fields are ``data_dir``,
    ``images`` (a dataset with one row per image) and ``captions``."""

    data_dir: Path
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
