"""The Arrow datasets of the splits, converted once and cached under a key of the files'
identity (path, key, size, modification time), the selected rows, the labels and the options."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import datasets
import numpy as np

from hfncl.data.labelled.files import ArrayRef, _opened
from hfncl.data.labelled.labels import _ResolvedSplit
from hfncl.data.precomp import DataFormatError, cached_arrow_dataset, default_cache_root, overflowing_rows

_CACHE_FORMAT_VERSION = 2
"""Bumped when the conversion checks more: 2 refuses features whose squared norm overflows float32."""


def _identity(ref: ArrayRef) -> dict[str, object]:
    stat = Path(ref.path).stat()
    return {"path": str(Path(ref.path).resolve()), "key": ref.key, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _digest(array: np.ndarray | None) -> str | None:
    return None if array is None else hashlib.sha256(np.ascontiguousarray(array, dtype=np.int64).tobytes()).hexdigest()


def _split_dataset(
    split: str,
    item: _ResolvedSplit,
    num_classes: int,
    feature_dtype: str,
    cache_dir: str | Path | None,
    check_finite: bool,
    chunk_size: int,
) -> datasets.Dataset:
    identity = {
        "image": _identity(item.raw.image),
        "text": _identity(item.raw.text),
        "rows": _digest(item.rows),
        "labels": [_digest(item.image_labels), _digest(item.text_labels)],
        "num_classes": num_classes,
        "dtype": feature_dtype,
        "check_finite": check_finite,
        "version": _CACHE_FORMAT_VERSION,
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]
    root = Path(cache_dir) if cache_dir is not None else default_cache_root() / "labelled"
    class_label = datasets.ClassLabel(num_classes=num_classes)
    features = datasets.Features(
        {
            "image": datasets.List(datasets.Value(feature_dtype), length=item.image_dim),
            "text": datasets.List(datasets.Value(feature_dtype), length=item.text_dim),
            "image_label": class_label,
            "text_label": class_label,
        }
    )
    return cached_arrow_dataset(
        _sample_rows,
        features,
        root / key,
        key,
        {
            "image": item.raw.image,
            "text": item.raw.text,
            # Arrays, not lists: datasets splits list-valued generator arguments into shards.
            "rows": item.rows,
            "image_labels": item.image_labels,
            "text_labels": item.text_labels,
            "dtype": feature_dtype,
            "check_finite": check_finite,
            "chunk_size": chunk_size,
        },
        chunk_size,
        split,
    )


def _sample_rows(
    image: ArrayRef,
    text: ArrayRef,
    rows: np.ndarray | None,
    image_labels: np.ndarray,
    text_labels: np.ndarray,
    dtype: str,
    check_finite: bool,
    chunk_size: int,
) -> Iterator[dict[str, object]]:
    """Rows of the split, ``chunk_size`` file rows at a time, checked and cast to ``dtype``."""
    wanted = np.arange(len(image_labels)) if rows is None else rows
    with _opened(image) as image_rows, _opened(text) as text_rows:
        for start in range(0, len(wanted), chunk_size):
            chunk = wanted[start : start + chunk_size]
            low, high = int(chunk[0]), int(chunk[-1]) + 1
            blocks = {}
            for name, ref, source in (("image", image, image_rows), ("text", text, text_rows)):
                block = source.read(low, high)[chunk - low]
                if block.dtype.kind not in "iuf":
                    raise DataFormatError(f"{ref.where}: features of dtype {block.dtype}, expected numbers")
                with np.errstate(over="ignore"):  # overflow is reported below, naming the row
                    stored = block.astype(dtype)
                if check_finite:
                    bad = ~np.isfinite(stored).all(axis=1)
                    if bad.any():
                        row = int(chunk[np.flatnonzero(bad)[0]])
                        raise DataFormatError(
                            f"{ref.where}: row {row} has a NaN, infinite or {dtype}-overflowing feature "
                            "(features must be finite)"
                        )
                    overflowing = overflowing_rows(block)
                    if overflowing.any():
                        row = int(chunk[np.flatnonzero(overflowing)[0]])
                        raise DataFormatError(
                            f"{ref.where}: row {row} has features whose squared norm overflows float32 arithmetic "
                            "(rescale the features)"
                        )
                blocks[name] = stored
            for offset in range(len(chunk)):
                yield {
                    "image": blocks["image"][offset],
                    "text": blocks["text"][offset],
                    "image_label": int(image_labels[start + offset]),
                    "text_label": int(text_labels[start + offset]),
                }
