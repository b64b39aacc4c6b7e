"""Raw images and captions as a split of pixel values, for a model whose image tower reads pixels.

The source is an ``imagefolder`` directory, the layout ``hfncl extract`` reads
(:mod:`hfncl.data.extract`): one folder per split, ``train/``, ``dev/`` or ``validation/``,
``test/``, each holding its images and a ``metadata.jsonl`` whose rows name a
``file_name`` and its captions (a string or a list, the same number k per image).
``datasets`` loads it with its ``imagefolder`` builder into a memory-mapped Arrow table
that holds the image *paths*; an image is decoded and run through the image processor
only when a batch asks for it, so a split is never held in RAM.

:class:`PixelSplit` keeps the split contract of :class:`hfncl.data.pairs.PairSplit`: its
image inputs are pixel values (C, H, W) made by the image tower's image processor
(``AutoImageProcessor`` of the tower's source), so the pair datasets, the trainer and
evaluation read it exactly as they read the region features of a precomp split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from hfncl.data.extract import SPLIT_NAMES, load_raw_dataset, split_captions
from hfncl.data.image_processor import image_processor_from_pretrained
from hfncl.data.precomp import DataFormatError, default_cache_root
from hfncl.data.split_sizes import SplitSizes

METADATA_FILE = "metadata.jsonl"


def pixel_values(processor: Any, images: Sequence[Any]) -> np.ndarray:
    """Pixel values (len, C, H, W) float32 of PIL images, made by ``processor`` after conversion to RGB."""
    processed = processor(images=[image.convert("RGB") for image in images], return_tensors="np")
    pixels = np.asarray(processed["pixel_values"], dtype=np.float32)
    if pixels.ndim != 4 or len(pixels) != len(images):
        raise ValueError(
            f"the image processor {type(processor).__name__} gave pixel values of shape {pixels.shape} for "
            f"{len(images)} images, expected ({len(images)}, C, H, W)"
        )
    return pixels


def is_imagefolder(data_dir: str | Path, split: str = "train") -> bool:
    """Whether ``data_dir`` holds split ``split`` as an imagefolder (``{split}/metadata.jsonl``)."""
    return (Path(data_dir) / split / METADATA_FILE).is_file()


@dataclass
class PixelSplit(SplitSizes):
    """One split of an imagefolder: images decoded and processed per batch, and their captions.

    ``images`` is the split's memory-mapped Arrow dataset with the one column
    ``image_column`` (image paths, decoded on access); ``captions[c]`` describes image
    ``c // captions_per_image``; ``processor`` turns images into the image tower's pixel values.
    """

    data_dir: Path
    split: str
    images: datasets.Dataset = field(repr=False)
    captions: Sequence[str] = field(repr=False)
    captions_per_image: int
    processor: Any = field(repr=False)
    image_column: str = "image"

    @cached_property
    def image_shape(self) -> tuple[int, ...]:
        """(C, H, W) of the processor's pixel values, read from the first image once."""
        return self.image_inputs([0]).shape[1:]

    def image_inputs(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Pixel values (len, C, H, W) float32 of the images ``indices`` (repeated indices allowed).

        Only these images are read from disk, decoded and run through the processor.
        """
        index = self.image_index(indices)
        if index.size == 0:
            return np.empty((0, *self.image_shape), dtype=np.float32)
        return pixel_values(self.processor, self.decoded_images(index))

    def decoded_images(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        """The images ``indices`` as ``datasets`` decodes them (PIL images), before the image processor."""
        return list(self.images[self.image_index(indices).tolist()][self.image_column])

    def image_files(self) -> list[str]:
        """Each image's file, in image order (:func:`image_files`)."""
        return image_files(self.images, self.image_column)


def image_files(images: datasets.Dataset, column: str) -> list[str]:
    """The file of each image of column ``column``: the absolute path ``datasets`` made of the ``file_name`` of its
    ``metadata.jsonl`` row."""
    return [cell["path"] for cell in images.cast_column(column, datasets.Image(decode=False))[column]]


def _check_image_files(images: datasets.Dataset, column: str, data_dir: Path, split: str) -> None:
    """Refuse a split whose ``metadata.jsonl`` names an image file that does not exist, or a file that is no image
    (PIL identifies none from its header: only the header is read), before training (``datasets`` would find out
    only when a batch reads it)."""
    from PIL import Image, UnidentifiedImageError

    for row, path in enumerate(image_files(images, column)):
        where = f"split {split!r} of imagefolder {data_dir}, {METADATA_FILE} row {row}"
        if not Path(path).is_file():
            raise DataFormatError(
                f"{where}: no image file {path} (file_name must name an image inside the split's folder)"
            )
        try:
            with Image.open(path):
                pass
        except (UnidentifiedImageError, OSError) as error:
            raise DataFormatError(f"{where}: {path} is not an image PIL can read ({error})") from None


def load_pixel_splits(
    data_dir: str | Path,
    splits: Sequence[str],
    image_processor: Any,
    *,
    image_column: str = "image",
    caption_column: str = "captions",
    cache_dir: str | Path | None = None,
) -> dict[str, PixelSplit]:
    """The splits ``splits`` of the imagefolder ``data_dir``, by name.

    The folders are read with :func:`hfncl.data.extract.load_raw_dataset` and their
    captions checked with :func:`hfncl.data.extract.split_captions`, as ``hfncl extract``
    does; a ``validation/`` folder is split ``dev`` (and a ``dev/`` folder may be asked
    for as ``validation``).

    Args:
        data_dir: the imagefolder directory.
        splits: split names, e.g. ``["train", "dev", "test"]``.
        image_processor: an image processor, or the Hub id / directory to load one from
            (``AutoImageProcessor``; the image tower's source).
        image_column: the column holding the images.
        caption_column: the column holding a caption or a list of k captions per image.
        cache_dir: where ``datasets`` keeps the Arrow tables of image paths and captions
            (default ``$HFNCL_CACHE/imagefolder``).

    Raises:
        DataFormatError: a directory without a requested split, a missing column, an empty
            caption or unequal caption counts, naming the directory, split and row.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataFormatError(f"imagefolder {str(data_dir)!r} does not exist or is not a directory")
    if isinstance(image_processor, (str, Path)):
        image_processor = image_processor_from_pretrained(image_processor)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_root() / "imagefolder"
    raw = load_raw_dataset(data_dir, cache)
    loaded = {}
    for split in splits:
        name = next((key for key in raw if split in (key, SPLIT_NAMES.get(key, key))), None)
        if name is None:
            raise DataFormatError(
                f"imagefolder {data_dir} has no split {split!r}: its folders give the splits {sorted(raw)} "
                f"(a dev/ or validation/ folder is split 'dev'), each with its images and a {METADATA_FILE}"
            )
        dataset = raw[name]
        if image_column not in dataset.column_names:
            raise DataFormatError(
                f"split {split!r} of {data_dir} has no image column {image_column!r} (columns: {dataset.column_names})"
            )
        captions, per_image = split_captions(dataset, caption_column, split)
        images = dataset.select_columns([image_column])
        _check_image_files(images, image_column, data_dir, split)
        loaded[split] = PixelSplit(data_dir, split, images, captions, per_image, image_processor, image_column)
    return loaded
