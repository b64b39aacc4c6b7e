"""``npz_pairs``: each split one ``{split}.npz`` with ``regions`` (N, R, D) float features and ``captions`` (N, k)
strings, k captions per image."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class NPZSplit:
    """One split held in memory (a :class:`hfncl.data.pairs.PairSplit`)."""

    split: str
    regions: np.ndarray = field(repr=False)
    captions: Sequence[str] = field(repr=False)
    captions_per_image: int

    @property
    def num_images(self) -> int:
        return len(self.regions)

    @property
    def num_captions(self) -> int:
        return len(self.captions)

    @property
    def image_shape(self) -> tuple[int, ...]:
        return tuple(self.regions.shape[1:])

    def image_inputs(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        return self.regions[np.asarray(indices)].astype(np.float32)


@dataclass(frozen=True)
class NPZPairs:
    """The format object hfncl calls (a :class:`hfncl.data.formats.DataFormat`)."""

    reads_pixels: bool = False

    def detect(self, data_dir: Path, split: str) -> bool:
        return (data_dir / f"{split}.npz").is_file()

    def load_split(
        self, data_dir: Path, split: str, *, feature_dtype: str, image_processor: Any, like: Any
    ) -> NPZSplit:
        path = data_dir / f"{split}.npz"
        if not path.is_file():
            raise ValueError(f"{path} does not exist: npz_pairs keeps each split in {{split}}.npz")
        with np.load(path, allow_pickle=False) as arrays:
            regions, captions = arrays["regions"], arrays["captions"]
        if like is not None and tuple(regions.shape[1:]) != tuple(like.image_shape):
            raise ValueError(
                f"{path}: regions of shape {regions.shape[1:]}, the training split's are {like.image_shape}"
            )
        return NPZSplit(split, regions, [str(c) for c in captions.reshape(-1)], captions.shape[1])


NPZ_PAIRS = NPZPairs()
