"""Training and evaluation views of category-labelled data with noisy labels, for the trainer.

:class:`NoisyLabelledDataset` pairs a :class:`hfncl.data.LabelledSplit` (features of
both modalities) with a :class:`hfncl.data.LabelNoise` (the noisy training labels, and
the clean ones kept for diagnostics only); :func:`collate_labelled` batches its items
as documented in :mod:`hfncl.types`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hfncl.data.label_noise import LabelNoise
from hfncl.data.labelled import MODALITIES, LabelledSplit


class NoisyLabelledDataset(torch.utils.data.Dataset):
    """Sample ``i`` of a split with its noisy label per modality.

    Items are ``{"image": (D_image,) float32, "text": (D_text,) float32,
    "image_label": int, "text_label": int, "index": i}``. The whole split's features are
    read into memory once (these datasets are small: precomputed vectors, thousands of
    samples); ``noise`` must cover every modality with one label per sample.
    """

    def __init__(self, split: LabelledSplit, noise: LabelNoise) -> None:
        missing = [m for m in MODALITIES if m not in noise.noisy]
        if missing:
            raise ValueError(f"label noise has no labels for modality {missing}; it covers {noise.modalities}")
        for modality in MODALITIES:
            if len(noise.noisy[modality]) != split.num_samples:
                raise ValueError(
                    f"label noise has {len(noise.noisy[modality])} {modality} labels for the "
                    f"{split.num_samples} samples of split {split.split!r}"
                )
            if not np.array_equal(noise.clean[modality], split.labels(modality)):
                raise ValueError(
                    f"the clean {modality} labels of the label noise are not those of split {split.split!r} "
                    "(noise made for another dataset or split?)"
                )
        self.split = split
        self.noise = noise
        self.num_classes = split.num_classes
        self._features = {m: torch.from_numpy(split.features(m)) for m in MODALITIES}
        self._labels = {m: torch.as_tensor(noise.noisy[m], dtype=torch.long) for m in MODALITIES}

    def __len__(self) -> int:
        return self.split.num_samples

    def __getitem__(self, i: int) -> dict[str, Any]:
        item: dict[str, Any] = {m: self._features[m][i] for m in MODALITIES}
        item.update({f"{m}_label": self._labels[m][i] for m in MODALITIES})
        item["index"] = int(i)
        return item

    def feature_dim(self, modality: str) -> int:
        return self.split.feature_dim(modality)

    @property
    def clean_masks(self) -> dict[str, np.ndarray]:
        """Ground truth per modality: whose training label is right. Diagnostics only; never give it to a method."""
        return {m: ~self.noise.noisy_mask(m) for m in MODALITIES}


def collate_labelled(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Batch of :class:`NoisyLabelledDataset` items (or of a clean split's items), keeping their order."""
    batch = {m: torch.stack([item[m] for item in items]).float() for m in MODALITIES}
    for m in MODALITIES:
        batch[f"{m}_label"] = torch.stack([torch.as_tensor(item[f"{m}_label"]) for item in items]).long()
    batch["index"] = torch.tensor([item["index"] for item in items], dtype=torch.long)
    return batch
