"""A chosen set of a split's pairs written as a new split, in the format the split was read from.

``pairs`` are caption positions of the split (pair c: caption c shown with image c // k), written in the order
given. Every format here holds the same number k of captions for each image, which dropping some of an image's
pairs would break, so the new split holds one image per kept pair (k = 1): an image is repeated for each of its
kept captions.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import numpy as np

from hfncl.data.pixels import METADATA_FILE, PixelSplit
from hfncl.data.precomp import PrecompSplit, caption_file
from hfncl.data.precomp_ids import tsv_rows

FEATURE_CHUNK = 1024
"""Images whose region features are copied at a time."""


def write_precomp_pairs(split: PrecompSplit, pairs: np.ndarray, output_dir: Path, name: str) -> list[Path]:
    """Write split ``name`` of ``pairs`` into ``output_dir`` as precomp files: ``{name}_ims.npy``, the region
    features of each pair's image, and the captions in the file type the split was read from: ``{name}_caps.txt``,
    one caption per line, or ``{name}_caps.tsv``, each pair's row as it was (every field, CC152K's image id first;
    a ``{name}_caps.txt`` left there, which the reader would prefer, is removed). The ``.npy`` is written in chunks
    under a temporary name and appears last, when complete. Returns the features' and the captions' paths.
    """
    pairs = np.asarray(pairs, dtype=np.int64)
    output_dir.mkdir(parents=True, exist_ok=True)
    source = caption_file(split.data_dir, split.split)
    if source is not None and source.suffix == ".tsv":
        captions = output_dir / f"{name}_caps.tsv"
        rows = tsv_rows(source, split.num_captions)
        with captions.open("w", encoding="utf-8", newline="") as file:
            csv.writer(file, delimiter="\t", lineterminator="\n").writerows(rows[c] for c in pairs.tolist())
        (output_dir / f"{name}_caps.txt").unlink(missing_ok=True)
    else:
        captions = output_dir / f"{name}_caps.txt"
        captions.write_text("".join(split.captions[c] + "\n" for c in pairs.tolist()), encoding="utf-8")
    return [_write_regions(split, pairs // split.captions_per_image, output_dir, name), captions]


def _write_regions(split: PrecompSplit, images: np.ndarray, output_dir: Path, name: str) -> Path:
    """``{name}_ims.npy``: the region features of ``images``, in order, written :data:`FEATURE_CHUNK` at a time."""
    target, partial = output_dir / f"{name}_ims.npy", output_dir / f"{name}.partial.npy"
    features = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(len(images), *split.region_shape))
    for start in range(0, len(images), FEATURE_CHUNK):
        features[start : start + FEATURE_CHUNK] = split.regions(images[start : start + FEATURE_CHUNK])
    features.flush()
    del features
    partial.replace(target)
    return target


def write_imagefolder_pairs(split: PixelSplit, pairs: np.ndarray, output_dir: Path, name: str) -> list[Path]:
    """Write ``pairs`` as the imagefolder ``output_dir/name`` with the one split folder ``{split.split}/``: a
    ``metadata.jsonl`` row per pair (its image's ``file_name`` and its caption in ``captions``) beside the kept
    images. ``datasets`` reads only files inside the split folder (no absolute ``file_name``, none outside it), so
    each kept image is a symbolic link there to the original file, under its path relative to the folder of all
    kept images (a copy where the file system has no links). Returns the ``metadata.jsonl`` path.
    """
    pairs = np.asarray(pairs, dtype=np.int64)
    images = pairs // split.captions_per_image
    files = split.image_files()
    kept = sorted({files[i] for i in images.tolist()})
    base = os.path.commonpath([os.path.dirname(path) for path in kept])
    folder = output_dir / name / split.split
    for path in kept:
        _link(Path(path), folder / os.path.relpath(path, base))
    metadata = folder / METADATA_FILE
    rows = (
        {"file_name": Path(os.path.relpath(files[image], base)).as_posix(), "captions": [split.captions[pair]]}
        for pair, image in zip(pairs.tolist(), images.tolist(), strict=True)
    )
    metadata.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return [metadata]


def _link(source: Path, link: Path) -> None:
    """``link`` made a symbolic link to ``source`` (replacing what was there), or a copy without link support."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    try:
        link.symlink_to(source.resolve())
    except OSError:
        shutil.copy2(source, link)
