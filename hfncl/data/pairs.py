"""PyTorch datasets over a split of images and captions (a :class:`PairSplit`).

Training iterates over (possibly wrongly) paired captions and images with
:class:`NoisyPairDataset` and :func:`collate_pairs`; evaluation encodes the unique
images (:class:`ImageDataset`) and all captions (:class:`CaptionDataset`) separately.
All three implement ``__getitems__``, which ``torch.utils.data.DataLoader`` calls with
a whole batch of indices, so a batch's image inputs are read in one batched access
(region features: one Arrow read; raw images: decoded and processed together).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from hfncl.data.noise import caption_pairing, clean_mask
from hfncl.data.vocab import CaptionTokenizer


class PairSplit(Protocol):
    """What the datasets here read of a split: its images' inputs and its captions.

    ``captions[c]`` describes image ``c // captions_per_image``. An image's *input* is
    what the model's image tower reads, an array of ``image_shape``:
    :class:`~hfncl.data.precomp.PrecompSplit` gives region features (R, D),
    :class:`~hfncl.data.pixels.PixelSplit` pixel values (C, H, W) made by the tower's
    image processor. The datasets and the batches never look inside that shape.
    """

    split: str
    captions: Sequence[str]
    captions_per_image: int

    @property
    def num_images(self) -> int: ...

    @property
    def num_captions(self) -> int: ...

    @property
    def image_shape(self) -> tuple[int, ...]:
        """Shape of one image's input: (R, D) regions or (C, H, W) pixels."""
        ...

    def image_inputs(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The inputs of the images ``indices`` (repeated indices allowed): float32 (len, *image_shape)."""
        ...


class EncodedCaptions:
    """Token ids of many captions in one flat array with offsets (cheap to pickle).

    The ids are stored as uint16 when the vocabulary has fewer than 65536 words (SCAN's
    Flickr30K and MS-COCO vocabularies have about 8.5K and 11K), else int32; captions are
    encoded one at a time into the flat array, never as a list of lists.
    """

    def __init__(self, captions: Sequence[str], vocab: CaptionTokenizer) -> None:
        tokens = array("H" if len(vocab) <= np.iinfo(np.uint16).max + 1 else "i")
        ends = array("q", [0])
        for caption in captions:
            tokens.extend(vocab.encode(caption))
            ends.append(len(tokens))
        self.offsets = np.frombuffer(ends, dtype=np.int64)
        self.tokens = np.frombuffer(tokens, dtype=np.uint16 if tokens.typecode == "H" else np.int32)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> torch.Tensor:
        """Token ids of caption ``i`` as a long tensor."""
        return torch.from_numpy(self.tokens[self.offsets[i] : self.offsets[i + 1]].astype(np.int64))


def _positions(indices: Sequence[int], size: int, what: str) -> list[int]:
    """``indices`` as a list of ints, each checked to lie in ``0..size - 1``."""
    positions = [int(i) for i in indices]
    for i in positions:
        if not 0 <= i < size:
            raise IndexError(f"{what} index {i} is outside 0..{size - 1}")
    return positions


class NoisyPairDataset(torch.utils.data.Dataset):
    """The training pairs of a split: item ``i`` is caption ``i`` with the image it is paired with.

    ``caption_to_image`` is a caption- or image-level noise index (see
    :func:`hfncl.data.noise.caption_pairing`); ``None`` pairs every caption with its
    own image. Items are ``{"image": float32 image input (R, D) or (C, H, W), "caption": (L,) long,
    "index": i, "image_index": the split image the pair shows}``.
    """

    def __init__(self, split: PairSplit, vocab: CaptionTokenizer, caption_to_image: np.ndarray | None = None) -> None:
        self.split = split
        k = split.captions_per_image
        if caption_to_image is None:
            caption_to_image = np.arange(split.num_captions, dtype=np.int64) // k
        self.caption_to_image = caption_pairing(caption_to_image, split.num_images, k, source="caption_to_image")
        self.captions = EncodedCaptions(split.captions, vocab)

    @property
    def captions_per_image(self) -> int:
        return self.split.captions_per_image

    @property
    def num_images(self) -> int:
        return self.split.num_images

    @property
    def clean_mask(self) -> np.ndarray:
        """Ground truth: which pairs are correct. For diagnostics only; never give it to a method."""
        return clean_mask(self.caption_to_image, self.captions_per_image)

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The pairs ``indices``; an image shown by several of them (its k captions) is read once."""
        positions = _positions(indices, len(self), "pair")
        image_index = self.caption_to_image[positions]
        distinct, slot = np.unique(image_index, return_inverse=True)
        images = torch.from_numpy(self.split.image_inputs(distinct))
        return [
            {"image": images[s], "caption": self.captions[i], "index": i, "image_index": int(image)}
            for s, i, image in zip(slot.tolist(), positions, image_index.tolist(), strict=True)
        ]


class ImageDataset(torch.utils.data.Dataset):
    """The unique images of a split, in order: item ``i`` is ``{"image": float32 image input, "index": i}``."""

    def __init__(self, split: PairSplit) -> None:
        self.split = split

    @property
    def captions_per_image(self) -> int:
        return self.split.captions_per_image

    def __len__(self) -> int:
        return self.split.num_images

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        positions = _positions(indices, len(self), "image")
        images = torch.from_numpy(self.split.image_inputs(positions))
        return [{"image": image, "index": i} for image, i in zip(images, positions, strict=True)]


class CaptionDataset(torch.utils.data.Dataset):
    """All captions of a split, in order: item ``c`` is ``{"caption": (L,) long, "index": c}``.

    Caption ``c`` describes image ``c // captions_per_image``.
    """

    def __init__(self, split: PairSplit, vocab: CaptionTokenizer) -> None:
        self.captions_per_image = split.captions_per_image
        self.captions = EncodedCaptions(split.captions, vocab)

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        positions = _positions(indices, len(self), "caption")
        return [{"caption": self.captions[i], "index": i} for i in positions]


def _pad_captions(captions: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([len(c) for c in captions], dtype=torch.long)
    padded = torch.zeros(len(captions), int(lengths.max()), dtype=torch.long)
    for row, caption in zip(padded, captions, strict=True):
        row[: len(caption)] = caption
    return padded, lengths


def _index(items: Sequence[dict[str, Any]]) -> torch.Tensor:
    return torch.tensor([item["index"] for item in items], dtype=torch.long)


def collate_pairs(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Batch of :class:`NoisyPairDataset` items, as documented in :mod:`hfncl.types`.

    ``images`` float32 (B, R, D) region features or (B, C, H, W) pixel values, ``captions``
    (B, L) long padded with 0 (``<pad>``), ``lengths`` (B,) long, ``index`` (B,) long,
    ``image_index`` (B,) long; items keep their order.
    """
    captions, lengths = _pad_captions([item["caption"] for item in items])
    images = torch.stack([item["image"] for item in items]).float()
    image_index = torch.tensor([item["image_index"] for item in items], dtype=torch.long)
    return {
        "images": images,
        "captions": captions,
        "lengths": lengths,
        "index": _index(items),
        "image_index": image_index,
    }


def collate_images(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Batch of :class:`ImageDataset` items: ``images`` float32 (B, *image_shape) and ``index`` (B,)."""
    return {"images": torch.stack([item["image"] for item in items]).float(), "index": _index(items)}


def collate_captions(items: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Batch of :class:`CaptionDataset` items: ``captions`` (B, L) padded with 0, ``lengths``, ``index``."""
    captions, lengths = _pad_captions([item["caption"] for item in items])
    return {"captions": captions, "lengths": lengths, "index": _index(items)}
