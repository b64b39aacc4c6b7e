"""The data-format contract, and the formats by name, every one an entry point of the ``hfncl.data_formats`` group
(``DataArguments.data_format`` names one; hfncl's own ``precomp`` and ``imagefolder`` are registered in
``pyproject.toml`` exactly as a third-party format is).

A format reads one split of a data directory as a :class:`hfncl.data.pairs.PairSplit` (its
captions and each image's input: region features, or pixel values for a vision tower). hfncl's
``precomp`` reads SCAN's precomputed features (``{split}_ims.npy`` with
``{split}_caps.txt``, or CC152K's ``{split}_caps.tsv``), ``imagefolder`` raw images with a
``metadata.jsonl`` per split. A package adds one without any change to hfncl::

    [project.entry-points."hfncl.data_formats"]
    jsonl = "my_package.formats:JSONL"     # an object implementing DataFormat

and a run reads it with ``--data_format jsonl`` (or ``auto``, when its ``detect`` is the only one that answers).
The format names (:func:`hfncl.choices.installed_formats`, :func:`hfncl.choices.check_format_name`) live in
:mod:`hfncl.choices`, which checks ``--data_format`` without importing the readers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from hfncl import choices
from hfncl.choices import check_format_name
from hfncl.data.pair_subsets import write_imagefolder_pairs, write_precomp_pairs
from hfncl.data.pairs import PairSplit
from hfncl.data.pixels import METADATA_FILE, PixelSplit, is_imagefolder, load_pixel_splits
from hfncl.data.precomp import DataFormatError, PrecompSplit, load_precomp_split
from hfncl.data.precomp_ids import precomp_image_ids


class DataFormat(Protocol):
    """One way of storing the splits of image-caption pairs."""

    @property
    def reads_pixels(self) -> bool:
        """Whether its splits hold raw images (read by a vision tower) rather than precomputed features."""

    def detect(self, data_dir: Path, split: str) -> bool:
        """Whether ``data_dir`` holds ``split`` in this format (``data_format="auto"`` picks the first that does)."""

    def load_split(
        self, data_dir: Path, split: str, *, feature_dtype: str, image_processor: Any, like: PairSplit | None
    ) -> PairSplit:
        """Split ``split`` of ``data_dir``; ``like`` is the training split when a validation or test split is read
        (its images must have the same input shape); ``image_processor`` the vision tower's, for pixels."""


class SplitFiles(DataFormat, Protocol):
    """A format that can tell which split a file of its data directory belongs to (optional, as ``split_of``):
    a run's fingerprint then covers the files of its own splits and the shared ones (a vocabulary), not those
    of the other splits a directory holds, which other runs may write while it trains."""

    def split_of(self, data_dir: Path, path: Path) -> str | None:
        """The split whose file ``path`` (under ``data_dir``) is, or ``None`` for a file every split shares."""


class AuditedFormat(DataFormat, Protocol):
    """What ``hfncl audit`` also reads of a format, where it has it (a format may define any of these methods):

    ``image_ids``    the name a person finds each image by (without it: the image's number in the split);
    ``images``       for raw images, the decoded images, of which the audit page shows thumbnails;
    ``write_pairs``  a cleaned split written in this format (without it, ``--write-clean`` is refused).
    """

    def image_ids(self, split: PairSplit) -> Sequence[str]:
        """Each image's name in the data (a file, an id), in image order."""

    def images(self, split: PairSplit, indices: Sequence[int] | np.ndarray) -> list[Any]:
        """The images ``indices`` as PIL images (before the image processor)."""

    def write_pairs(self, split: PairSplit, pairs: np.ndarray, output_dir: Path, name: str) -> list[Path]:
        """Write the pairs ``pairs`` (caption positions of ``split``, in that order) into ``output_dir`` as split
        ``name`` of this format, one image per pair; return the files that hold it."""


PRECOMP_SPLIT_FILE = re.compile(r"(?P<split>.+)(?:_ims\.npy|_caps\.txt|_caps\.tsv|_num_regions\.npy|\.partial\.npy)")


@dataclass(frozen=True)
class PrecompFormat:
    """SCAN's precomputed region features (:func:`hfncl.data.precomp.load_precomp_split`); the default."""

    reads_pixels: bool = False

    def detect(self, data_dir: Path, split: str) -> bool:
        return (data_dir / f"{split}_ims.npy").is_file()

    def split_of(self, data_dir: Path, path: Path) -> str | None:
        """``SPLIT`` of ``{SPLIT}_ims.npy``, its captions and region counts, or of a split being written; else None."""
        match = PRECOMP_SPLIT_FILE.fullmatch(path.name) if path.parent == data_dir else None
        return match["split"] if match else None

    def load_split(
        self, data_dir: Path, split: str, *, feature_dtype: str, image_processor: Any, like: PairSplit | None
    ) -> PairSplit:
        regions, dim = like.image_shape if like is not None else (None, None)
        return load_precomp_split(
            data_dir, split, feature_dtype=feature_dtype, expected_feature_dim=dim, expected_regions=regions
        )

    def image_ids(self, split: PairSplit) -> Sequence[str]:
        return precomp_image_ids(cast(PrecompSplit, split))

    def write_pairs(self, split: PairSplit, pairs: np.ndarray, output_dir: Path, name: str) -> list[Path]:
        return write_precomp_pairs(cast(PrecompSplit, split), pairs, output_dir, name)


@dataclass(frozen=True)
class ImagefolderFormat:
    """Raw images, a folder per split with a ``metadata.jsonl`` (:func:`hfncl.data.pixels.load_pixel_splits`)."""

    reads_pixels: bool = True

    def detect(self, data_dir: Path, split: str) -> bool:
        return is_imagefolder(data_dir, split) or (split == "dev" and is_imagefolder(data_dir, "validation"))

    def split_of(self, data_dir: Path, path: Path) -> str | None:
        """The folder under ``data_dir`` that holds ``path``, when it is a split (has a metadata file), with
        ``validation`` read as ``dev`` where there is no ``dev`` folder (as :meth:`detect` does); else ``None``."""
        relative = path.relative_to(data_dir).parts
        if len(relative) < 2 or not is_imagefolder(data_dir, relative[0]):
            return None
        return "dev" if relative[0] == "validation" and not is_imagefolder(data_dir, "dev") else relative[0]

    def load_split(
        self, data_dir: Path, split: str, *, feature_dtype: str, image_processor: Any, like: PairSplit | None
    ) -> PairSplit:
        if not self.detect(data_dir, split):
            raise DataFormatError(
                f"{data_dir / split / METADATA_FILE} does not exist: an imagefolder holds one folder per split "
                f"with its images and a {METADATA_FILE} of rows " '{"file_name": ..., "captions": [...]}'
            )
        return load_pixel_splits(data_dir, [split], image_processor)[split]

    def image_ids(self, split: PairSplit) -> Sequence[str]:
        return cast(PixelSplit, split).image_files()

    def images(self, split: PairSplit, indices: Sequence[int] | np.ndarray) -> list[Any]:
        return cast(PixelSplit, split).decoded_images(indices)

    def write_pairs(self, split: PairSplit, pairs: np.ndarray, output_dir: Path, name: str) -> list[Path]:
        return write_imagefolder_pairs(cast(PixelSplit, split), pairs, output_dir, name)


PRECOMP = PrecompFormat()
"""The ``precomp`` entry point; also what ``auto`` reads where no format recognises the data (its reader names the
file that is missing)."""
IMAGEFOLDER = ImagefolderFormat()
"""The ``imagefolder`` entry point."""


def get_format(name: str) -> DataFormat:
    """The format registered as ``name``.

    Raises:
        ValueError: no such format, or its entry point fails to import.
    """
    check_format_name(name)
    point = choices.installed_formats()[name]
    try:
        return cast(DataFormat, point.load())
    except Exception as error:
        raise ValueError(
            f"data format {name!r} is installed but failed to import ({point.value}): {type(error).__name__}: {error}"
        ) from error


def unread_split_files(name: str, data_dir: Path, splits: Sequence[str]) -> Callable[[Path], bool] | None:
    """Whether a file under ``data_dir`` belongs to a split other than ``splits`` in format ``name`` (``auto``:
    the one :func:`detect_format` finds for the first split); ``None`` (every file read) for a format without
    ``split_of``."""
    chosen = get_format(detect_format(data_dir, splits[0]) if name == choices.AUTO else name)
    split_of = getattr(chosen, "split_of", None)
    return None if split_of is None else lambda path: split_of(data_dir, path) not in (None, *splits)


def detect_format(data_dir: Path, split: str) -> str:
    """The name of the one installed format whose ``detect`` recognises ``split`` of ``data_dir``; ``precomp`` when
    none does (its reader names what is missing).

    Raises:
        DataFormatError: several formats recognise it.
    """
    found = [name for name in sorted(choices.installed_formats()) if get_format(name).detect(data_dir, split)]
    if len(found) > 1:
        raise DataFormatError(
            f"{data_dir}: the data formats {found} all recognise split {split!r}: name one (--data-format)"
        )
    return found[0] if found else "precomp"
