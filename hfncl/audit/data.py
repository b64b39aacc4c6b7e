"""The split an audit reads, in any data format the project reads (:mod:`hfncl.data.formats`), and what its format
tells of it besides the pairs (:class:`~hfncl.data.formats.AuditedFormat`): each image's name, the raw images for
the page's thumbnails, a cleaned split written in the same format."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hfncl.data import DataFormatError
from hfncl.data.formats import DataFormat, get_format
from hfncl.data.image_processor import image_processor_from_pretrained
from hfncl.data.pairs import PairSplit
from hfncl.engine.progress import library_progress_bars
from hfncl.tasks.pair_data import data_format


class AuditError(ValueError):
    """Input an audit refuses before training, said in one line."""


@dataclass(frozen=True)
class AuditData:
    """Split ``split`` as its data format ``format_name`` read it, with the image processor of a pixel tower
    (``None`` for region features)."""

    split: PairSplit
    format_name: str
    data_format: DataFormat
    image_processor: Any | None

    def image_ids(self) -> list[str]:
        """Each image's name in the data (``image_ids`` of the format: an imagefolder's file, CC152K's image id, a
        precomp row), in image order; the image's number in the split for a format without ``image_ids``."""
        names = getattr(self.data_format, "image_ids", None)
        if names is None:
            return [str(image) for image in range(self.split.num_images)]
        return [str(name) for name in names(self.split)]

    def image_reader(self) -> Callable[[Sequence[int] | np.ndarray], list[Any]] | None:
        """A function from image numbers to PIL images (the format's ``images``), or ``None`` when the format gives
        none (precomputed features)."""
        images = getattr(self.data_format, "images", None)
        return None if images is None else lambda indices: images(self.split, indices)

    def write_pairs(self, pairs: np.ndarray, output_dir: Path, name: str) -> list[Path]:
        """Write ``pairs`` (caption positions, in order) as split ``name`` of the format into ``output_dir``; return
        its files (:meth:`hfncl.data.formats.AuditedFormat.write_pairs`)."""
        return self.data_format.write_pairs(self.split, pairs, output_dir, name)  # type: ignore[attr-defined]


def read_audit_data(
    data_dir: str | Path,
    split: str,
    requested_format: str,
    image_tower: str | None,
    *,
    write_clean: str | None = None,
    image_processor: Any = None,
) -> AuditData:
    """Split ``split`` of ``data_dir`` in ``requested_format`` (``"auto"``: the format that recognises it,
    :func:`hfncl.tasks.pair_data.data_format`), read for a model whose pixel image tower comes from ``image_tower``
    (``None``: a region tower) with ``image_processor`` (default: that tower's). Raw images are read without
    ``datasets``' progress bar (only their metadata is read), so that an error in it is the only line printed.

    Raises (before anything is read, but for the split itself):
        DataFormatError: no such directory; raw images for a region tower or features for a pixel tower; a missing,
            empty or malformed split (the format's reader names the file).
        AuditError: ``write_clean`` given for a format that cannot write a split (no ``write_pairs``).
        ValueError: a format that is neither built in nor installed.
    """
    directory = Path(data_dir)
    if not directory.is_dir():
        raise DataFormatError(f"data directory {str(directory)!r} does not exist or is not a directory")
    name = data_format(requested_format, directory, split, image_tower)
    chosen = get_format(name)
    if write_clean is not None and not callable(getattr(chosen, "write_pairs", None)):
        raise AuditError(
            f"data format {name!r} cannot write a cleaned split (its DataFormat has no write_pairs): leave out "
            f"--write-clean {write_clean}, or keep the pairs whose `flagged` is false in audit.parquet"
        )
    processor = image_processor
    if chosen.reads_pixels and processor is None and image_tower is not None:
        processor = image_processor_from_pretrained(image_tower)
    with library_progress_bars(not chosen.reads_pixels):  # raw images: only their metadata is read, no bar needed
        loaded = chosen.load_split(directory, split, feature_dtype="float32", image_processor=processor, like=None)
    if loaded.num_captions == 0:
        raise DataFormatError(f"split {split!r} of {directory} ({name}) holds no pairs")
    return AuditData(loaded, name, chosen, processor)
