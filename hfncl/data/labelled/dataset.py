"""The labelled splits and datasets handed to training: per-modality features and labels in
memory-mapped Arrow datasets."""

from __future__ import annotations

from dataclasses import dataclass, field

import datasets
import numpy as np

MODALITIES = ("image", "text")
SPLITS = ("train", "valid", "test")


@dataclass
class LabelledSplit:
    """One split: per-modality features and labels, in a memory-mapped Arrow dataset.

    ``data`` has the columns ``image`` and ``text`` (fixed-length float vectors,
    ``List(Value(dtype), length=D)``) and ``image_label`` and ``text_label``
    (``ClassLabel(num_classes)``); row j is sample j of both modalities.
    """

    split: str
    data: datasets.Dataset = field(repr=False)
    num_classes: int
    source: str

    def __post_init__(self) -> None:
        self._numpy = self.data.with_format("numpy")

    @property
    def num_samples(self) -> int:
        return self.data.num_rows

    def feature_dim(self, modality: str) -> int:
        return self.data.features[_check_modality(modality)].length

    def features(self, modality: str, indices: np.ndarray | list[int] | None = None) -> np.ndarray:
        """float32 (len, D) features of ``modality`` for ``indices`` (default: all samples)."""
        column = _check_modality(modality)
        if indices is None:
            return np.asarray(self._numpy[column], dtype=np.float32)
        index = np.asarray(indices, dtype=np.int64).reshape(-1)
        if index.size and (index.min() < 0 or index.max() >= self.num_samples):
            raise IndexError(f"sample index outside 0..{self.num_samples - 1} of split {self.split!r}")
        return np.asarray(self._numpy[index.tolist()][column], dtype=np.float32).reshape(len(index), -1)

    def labels(self, modality: str) -> np.ndarray:
        """int64 (N,) class indices of ``modality``."""
        return np.asarray(self._numpy[f"{_check_modality(modality)}_label"], dtype=np.int64)

    @property
    def image_features(self) -> np.ndarray:
        return self.features("image")

    @property
    def text_features(self) -> np.ndarray:
        return self.features("text")

    @property
    def image_labels(self) -> np.ndarray:
        return self.labels("image")

    @property
    def text_labels(self) -> np.ndarray:
        return self.labels("text")


@dataclass(frozen=True)
class LabelledDataset:
    """The train, validation and test splits of a labelled dataset and how they were read.

    ``valid_rule`` says where the validation split came from: ``"file"``,
    ``"head of test"`` or ``"per-class file order"``, or ``"none"`` where there is none
    (``valid`` is ``None``; see :mod:`hfncl.data.labelled`).
    """

    train: LabelledSplit
    valid: LabelledSplit | None
    test: LabelledSplit
    num_classes: int
    layout: str
    source: str
    valid_rule: str

    def __getitem__(self, split: str) -> LabelledSplit:
        if split not in SPLITS:
            raise KeyError(f"split must be one of {SPLITS}, got {split!r}")
        if getattr(self, split) is None:
            raise KeyError(f"this dataset has no {split!r} split (valid_rule {self.valid_rule!r})")
        return getattr(self, split)


def _check_modality(modality: str) -> str:
    if modality not in MODALITIES:
        raise ValueError(f"modality must be one of {MODALITIES}, got {modality!r}")
    return modality
