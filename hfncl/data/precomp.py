"""Reader for the SCAN "precomp" format of image-text retrieval data.

A split ``{split}`` of a precomp directory is

``{split}_ims.npy``   float (N_images, R, D): R region features of D dims per image
                      (bottom-up-attention Faster R-CNN: R = 36, D = 2048).
``{split}_caps.txt``  one caption per line, k consecutive lines per image (k = 5 for
                      Flickr30K and MS-COCO), or
``{split}_caps.tsv``  tab-separated, caption in field 1 (CC152K, one caption per image;
                      read with ``csv.reader`` as NCR does).

The region features are streamed from a memory-mapped ``.npy`` into a memory-mapped
Arrow dataset (Hugging Face ``datasets``), chunk by chunk, and cached: a whole F30K
training split (29000 x 36 x 2048 floats) is never held in RAM.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import pickle
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
from datasets.exceptions import DatasetGenerationError

from hfncl.choices import FEATURE_DTYPES
from hfncl.config import default_cache_root
from hfncl.data.captions import MAX_CAPTION_CHARACTERS, CaptionStore, control_character, overlong
from hfncl.data.errors import DataFormatError
from hfncl.data.split_sizes import SplitSizes

_CACHE_FORMAT_VERSION = 2
"""Bumped when the conversion checks more: 2 refuses features whose squared norm overflows float32."""


@dataclass
class PrecompSplit(SplitSizes):
    """One split of a precomp directory.

    ``images`` is a memory-mapped Arrow dataset with one column ``regions``
    (``Array2D(shape=(R, D))``), one row per image. ``captions[c]`` describes image
    ``c // captions_per_image``.
    """

    data_dir: Path
    split: str
    images: datasets.Dataset = field(repr=False)
    captions: Sequence[str] = field(repr=False)
    captions_per_image: int

    def __post_init__(self) -> None:
        if self.images._indices is not None:
            raise ValueError(
                f"PrecompSplit {self.split!r}: the images dataset has an indices mapping (from select / shuffle / "
                "train_test_split); call .flatten_indices() on it first so that row i of its Arrow table is image i"
            )
        self._region_column = self.images.data.table.column("regions")

    @property
    def region_shape(self) -> tuple[int, int]:
        """(R, D): regions per image and feature dimension."""
        regions, dim = self.images.features["regions"].shape
        return regions, dim

    @property
    def image_shape(self) -> tuple[int, ...]:
        """Shape of one image's input to the image tower (the :class:`hfncl.data.pairs.PairSplit` contract): (R, D)."""
        return self.region_shape

    def image_inputs(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The image inputs of the images ``indices`` (:class:`hfncl.data.pairs.PairSplit`): their :meth:`regions`."""
        return self.regions(indices)

    def regions(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Region features of the images ``indices`` as a float32 array (len, R, D).

        One vectorised ``take`` from the memory-mapped Arrow table (repeated indices
        allowed): the rows' values are copied out once, with no per-row conversion
        (``datasets``' numpy formatter deserialises every Array2D row on its own, about
        ten times slower).
        """
        index = self.image_index(indices)
        if index.size == 0:
            return np.empty((0, *self.region_shape), dtype=np.float32)
        rows = self._region_column.take(pa.array(index)).combine_chunks().storage
        values = rows.flatten().flatten().to_numpy(zero_copy_only=False)
        return values.reshape(index.size, *self.region_shape).astype(np.float32)


def load_precomp_split(
    data_dir: str | Path,
    split: str,
    *,
    feature_dtype: str = "float32",
    expected_feature_dim: int | None = None,
    expected_regions: int | None = None,
    cache_dir: str | Path | None = None,
    check_finite: bool = True,
    chunk_size: int = 256,
) -> PrecompSplit:
    """Read split ``split`` of the precomp directory ``data_dir``.

    The region features are converted once into an Arrow dataset stored as
    ``feature_dtype`` under ``cache_dir`` (default ``$HFNCL_CACHE/precomp``, ``~/.cache/hfncl/precomp``), in a
    folder keyed by the absolute path, size and modification time of the ``.npy`` and
    by the storage options; later calls reuse it. The conversion reads ``chunk_size``
    images at a time from the memory-mapped file and, with ``check_finite``, rejects
    NaN and infinite features (and values that overflow float16 storage).

    Raises :class:`DataFormatError` naming the file and what was expected when a file
    is missing or malformed, the feature shape differs from ``expected_regions`` x
    ``expected_feature_dim``, or the caption count is not a positive multiple of the
    image count. If both caption files exist, ``{split}_caps.txt`` is read.
    """
    if feature_dtype not in FEATURE_DTYPES:
        raise ValueError(f"feature_dtype must be one of {FEATURE_DTYPES}, got {feature_dtype!r}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataFormatError(f"precomp data directory {str(data_dir)!r} does not exist or is not a directory")
    ims_path = data_dir / f"{split}_ims.npy"
    if not ims_path.is_file():
        found = sorted(p.name[: -len("_ims.npy")] for p in data_dir.glob("*_ims.npy"))
        raise DataFormatError(
            f"{ims_path}: image features file not found (expected {split}_ims.npy; splits present: {found or 'none'})"
        )
    caps_path = caption_file(data_dir, split)
    if caps_path is None:
        raise DataFormatError(
            f"no captions for split {split!r} in {data_dir}: tried {split}_caps.txt and {split}_caps.tsv"
        )
    captions = read_captions(caps_path)

    shape = _feature_shape(ims_path)
    _check_shape(ims_path, shape, expected_regions, expected_feature_dim)
    num_images = shape[0]
    if len(captions) < num_images or len(captions) % num_images:
        raise DataFormatError(
            f"{caps_path} has {len(captions)} captions but {ims_path} has {num_images} images: the caption count "
            f"must be a positive multiple of the image count (k consecutive captions per image)"
        )
    images = _regions_dataset(ims_path, shape, feature_dtype, cache_dir, check_finite, chunk_size)
    return PrecompSplit(data_dir, split, images, captions, len(captions) // num_images)


def caption_file(data_dir: str | Path, split: str) -> Path | None:
    """The captions file of split ``split`` that :func:`load_precomp_split` reads: ``{split}_caps.txt``, else
    ``{split}_caps.tsv``; ``None`` when neither exists."""
    candidates = (Path(data_dir) / f"{split}_caps.txt", Path(data_dir) / f"{split}_caps.tsv")
    return next((path for path in candidates if path.is_file()), None)


def read_captions(path: str | Path) -> CaptionStore:
    """Captions of a ``.txt`` (one per line) or ``.tsv`` (field 1 of each row) file, stripped.

    Empty lines at the end of the file are ignored; an empty or whitespace-only caption
    elsewhere, a caption with a control character other than a tab (NUL, escape, ...;
    :func:`~hfncl.data.captions.control_character`), a ``.tsv`` row with fewer than two fields
    or bytes that are not UTF-8 raise :class:`DataFormatError` naming ``file:line``. The captions are kept in one
    UTF-8 buffer (:class:`~hfncl.data.captions.CaptionStore`), not as a string object each.
    """
    path = Path(path)
    data = path.read_bytes()
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataFormatError(f"{path}:{line}: not UTF-8 text ({err.reason})") from None
    text = text.rstrip("\r\n")
    if path.suffix == ".tsv":
        reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t")
        rows = ((reader.line_num, row) for row in reader)
        try:
            captions = CaptionStore(_tsv_caption(path, line, row) for line, row in rows)
        except csv.Error as err:  # a field past csv's limit: a caption far past MAX_CAPTION_CHARACTERS
            raise DataFormatError(
                f"{path}:{reader.line_num}: not a row of tab-separated fields ({err}; a caption may have at most "
                f"{MAX_CAPTION_CHARACTERS} characters)"
            ) from None
    else:
        lines = io.StringIO(text, newline=None) if text else io.StringIO()
        captions = CaptionStore(_caption(path, line, raw) for line, raw in enumerate(lines, start=1))
    if not captions:
        raise DataFormatError(f"{path}: no captions")
    return captions


def iter_feature_chunks(path: str | Path, chunk_size: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, features[start:start + chunk_size])`` over a memory-mapped ``.npy``.

    Only the chunk being consumed is paged in; the file is never read whole.
    """
    features = np.load(path, mmap_mode="r", allow_pickle=False)
    for start in range(0, features.shape[0], chunk_size):
        yield start, np.asarray(features[start : start + chunk_size])


def _caption(path: Path, line: int, raw: str) -> str:
    caption = raw.strip()
    length = overlong(caption)
    if length is not None:
        raise DataFormatError(f"{path}:{line}: the caption has {length}: is the file captions, one per line?")
    if not caption:
        raise DataFormatError(f"{path}:{line}: empty caption (expected one non-empty caption per line)")
    where = control_character(caption)
    if where is not None:
        raise DataFormatError(f"{path}:{line}: the caption has a control character ({where}): is the file text?")
    return caption


def _tsv_caption(path: Path, line: int, row: list[str]) -> str:
    if len(row) < 2:
        raise DataFormatError(
            f"{path}:{line}: expected at least 2 tab-separated fields (image id, caption), found {len(row)}"
        )
    return _caption(path, line, row[1])


def _feature_shape(path: Path) -> tuple[int, ...]:
    """Shape of a ``.npy`` file of floats, read from its header only."""
    try:
        features = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError, pickle.UnpicklingError) as err:
        raise DataFormatError(f"{path}: not a readable .npy array of numbers ({err})") from None
    if not isinstance(features, np.ndarray):
        raise DataFormatError(f"{path}: expected a single .npy array, found {type(features).__name__}")
    if features.dtype.kind != "f":
        raise DataFormatError(f"{path}: expected floating-point features, found dtype {features.dtype}")
    return features.shape


def _check_shape(path: Path, shape: tuple[int, ...], expected_regions: int | None, expected_dim: int | None) -> None:
    expected = f"(N_images, {expected_regions or 'R'}, {expected_dim or 'D'})"
    wrong = (
        len(shape) != 3
        or shape[0] == 0
        or 0 in shape[1:]
        or expected_regions not in (None, shape[1])
        or expected_dim not in (None, shape[2])
    )
    if wrong:
        raise DataFormatError(f"{path}: region features have shape {shape}, expected {expected}")


def _regions_dataset(
    path: Path,
    shape: tuple[int, ...],
    feature_dtype: str,
    cache_dir: str | Path | None,
    check_finite: bool,
    chunk_size: int,
) -> datasets.Dataset:
    """The cached Arrow dataset of ``path``'s regions, built on first use."""
    stat = path.stat()
    identity = {
        "path": str(path.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "dtype": feature_dtype,
        "check_finite": check_finite,
        "version": _CACHE_FORMAT_VERSION,
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]
    root = Path(cache_dir) if cache_dir is not None else default_cache_root() / "precomp"
    features = datasets.Features({"regions": datasets.Array2D(shape=tuple(shape[1:]), dtype=feature_dtype)})
    return cached_arrow_dataset(
        _region_rows,
        features,
        root / key,
        key,
        {"path": str(path), "dtype": feature_dtype, "check_finite": check_finite, "chunk_size": chunk_size},
        chunk_size,
    )


def cached_arrow_dataset(
    generator: Callable[..., Iterator[dict[str, Any]]],
    features: datasets.Features,
    cache_dir: Path,
    fingerprint: str,
    gen_kwargs: dict[str, Any],
    writer_batch_size: int,
    split: str = "train",
) -> datasets.Dataset:
    """``datasets.Dataset.from_generator`` into ``cache_dir``, re-raising a :class:`DataFormatError` it hit.

    ``datasets`` wraps exceptions raised by the generator in a ``DatasetGenerationError``;
    a data error (which names the file and row) is unwrapped so the user sees it first. A
    cached Arrow file that cannot be read back (truncated by a full disk or a killed run) is
    removed with ``cache_dir`` and rebuilt, with a warning naming it.
    """
    arguments = (generator, features, cache_dir, fingerprint, gen_kwargs, writer_batch_size, split)
    cached = sorted(str(path) for path in cache_dir.rglob("*.arrow"))
    try:
        return _from_generator(*arguments)
    except (OSError, pa.ArrowException) as error:
        if not cached:  # nothing was read back: the error is the conversion's own
            raise
        warnings.warn(
            f"rebuilding the damaged dataset cache {', '.join(cached)} ({type(error).__name__}: {error})", stacklevel=2
        )
        shutil.rmtree(cache_dir, ignore_errors=True)
        return _from_generator(*arguments)


def _from_generator(
    generator: Callable[..., Iterator[dict[str, Any]]],
    features: datasets.Features,
    cache_dir: Path,
    fingerprint: str,
    gen_kwargs: dict[str, Any],
    writer_batch_size: int,
    split: str,
) -> datasets.Dataset:
    """``datasets.Dataset.from_generator`` into ``cache_dir``, a :class:`DataFormatError` of the generator unwrapped."""
    try:
        return datasets.Dataset.from_generator(
            generator,
            features=features,
            cache_dir=str(cache_dir),
            fingerprint=fingerprint,
            gen_kwargs=gen_kwargs,
            writer_batch_size=writer_batch_size,
            split=split,
        )
    except DatasetGenerationError as err:
        cause = err.__cause__
        while cause is not None and not isinstance(cause, DataFormatError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            raise
        raise cause from None


def _region_rows(path: str, dtype: str, check_finite: bool, chunk_size: int) -> Iterator[dict[str, np.ndarray]]:
    """Rows ``{"regions": (R, D)}`` of ``path`` in storage dtype, validated chunk by chunk."""
    for start, chunk in iter_feature_chunks(path, chunk_size):
        with np.errstate(over="ignore"):  # overflow is reported below, naming the image
            stored = chunk.astype(dtype, copy=False)
        if check_finite:
            _check_finite(path, start, chunk, "a NaN or infinite feature")
            _check_magnitude(path, start, chunk)
            if stored.dtype != chunk.dtype:
                limit = float(np.finfo(stored.dtype).max)
                _check_finite(path, start, stored, f"a feature beyond +-{limit:g}, which overflows {dtype} storage")
        for row in stored:
            yield {"regions": row}


FLOAT32_MAX = float(np.finfo(np.float32).max)


def squared_norms(chunk: np.ndarray) -> np.ndarray:
    """Each row's sum of squares over all its features, in float64 (a row's features may be several axes)."""
    flat = np.asarray(chunk, dtype=np.float64).reshape(len(chunk), -1)
    return np.einsum("ij,ij->i", flat, flat)


def overflowing_rows(chunk: np.ndarray) -> np.ndarray:
    """Whether each row's squared norm (:func:`squared_norms`) exceeds float32's largest number: a dot product of
    two such rows, or a row's own norm, overflows in float32 arithmetic, and training on it diverges to NaN. By
    Cauchy-Schwarz, rows within the bound keep every product of two of them finite."""
    return squared_norms(chunk) > FLOAT32_MAX


def _check_magnitude(path: str, start: int, chunk: np.ndarray) -> None:
    """Refuse an image whose features' squared norm overflows float32 (:func:`overflowing_rows`), naming it."""
    overflowing = overflowing_rows(chunk)
    if overflowing.any():
        first = int(np.flatnonzero(overflowing)[0])
        norm = float(squared_norms(chunk[first : first + 1])[0])
        raise DataFormatError(
            f"{path}: image {start + first} has features of squared norm {norm:.3g}, beyond float32's "
            f"{FLOAT32_MAX:.3g}: products of them overflow float32 arithmetic (rescale the features)"
        )


def _check_finite(path: str, start: int, chunk: np.ndarray, problem: str) -> None:
    finite = np.isfinite(chunk).reshape(len(chunk), -1).all(axis=1)
    if not finite.all():
        first = start + int(np.flatnonzero(~finite)[0])
        raise DataFormatError(f"{path}: image {first} has {problem} (all region features must be finite)")
