"""Image features from raw images and captions, written as a SCAN precomp directory.

The source is an ``imagefolder`` directory (one folder per split, ``train/``, ``dev/``
or ``validation/``, ``test/``, each with its images and a ``metadata.jsonl`` whose rows
name a ``file_name`` and its captions) or a Hub dataset id (where the network exists).
Every split is run through ``datasets.map`` with batched extraction by a Hugging Face
image model and its image processor, and written as ``{split}_ims.npy`` (N, R, D) and
``{split}_caps.txt`` (k captions per image), the files :func:`hfncl.data.load_precomp_split`
reads, so the result trains like any precomp data (``--data-dir OUTPUT_DIR``).

Features:

``pooled``   one vector per image, R = 1: the model's image embedding
             (``get_image_features`` of a dual encoder such as CLIP, i.e. the joint
             CLIP space; else the ``pooler_output``, or the mean of the last hidden states).
``patches``  the last hidden states of the vision encoder, R = number of tokens
             (class token included): patch features for attention-based heads.
``regions``  R detected object regions per image (the papers' bottom-up-attention format):
             an object detector's top-R boxes after non-maximum suppression, each the mean
             of its backbone's last feature map sampled bilinearly over the box (RoIAlign
             pooling), optionally followed by the box geometry; images with fewer boxes are
             zero-padded to R and ``{split}_num_regions.npy`` records the real count.

Extraction is cached and resumable: each split is cut into ``num_shards`` contiguous
shards whose mapped Arrow files go to ``cache_dir`` under a name keyed by the dataset's
fingerprint, the model and the options; ``datasets`` writes a shard's file only when the
shard is complete and reuses it on the next run, so a killed extraction resumes at the
first unfinished shard.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import datasets
import numpy as np
import torch
from datasets.exceptions import DatasetGenerationError

from hfncl.data.captions import control_character, overlong
from hfncl.data.extractors import MODEL_FEATURES, ImageFeatureExtractor, RegionFeatureExtractor
from hfncl.data.precomp import DataFormatError, default_cache_root

FEATURES = (*MODEL_FEATURES, "regions")
SPLIT_NAMES = {"validation": "dev"}
"""``datasets`` split name -> precomp split name (the recipes validate on ``dev``)."""


def load_raw_dataset(source: str | Path, cache_dir: str | Path | None = None) -> datasets.DatasetDict:
    """An ``imagefolder`` directory or a Hub dataset id as a ``DatasetDict`` of splits.

    Raises:
        DataFormatError: ``datasets`` failed to build the dataset (a ``DatasetGenerationError``: a ``file_name``
            outside the split's folder, a malformed ``metadata.jsonl``), said by its first cause in one line.
    """
    cache = None if cache_dir is None else str(cache_dir)
    try:
        if Path(source).is_dir():
            return datasets.load_dataset("imagefolder", data_dir=str(source), cache_dir=cache)
        return datasets.load_dataset(str(source), cache_dir=cache)
    except DatasetGenerationError as error:
        cause = error.__cause__ or error.__context__ or error
        message = " ".join(str(cause).split()) or type(cause).__name__
        raise DataFormatError(f"{source}: the dataset cannot be read: {type(cause).__name__}: {message}") from error


def split_captions(dataset: datasets.Dataset, column: str, split: str) -> tuple[list[str], int]:
    """The captions of every image in order (k per image) and k; a caption cell is a string or a list.

    Raises:
        DataFormatError: a missing column, an empty caption, a caption with a control character other
            than a tab, or images with different caption counts.
    """
    if column not in dataset.column_names:
        raise DataFormatError(
            f"split {split!r} has no caption column {column!r} (columns: {dataset.column_names}); "
            "name it in metadata.jsonl or pass caption_column"
        )
    captions: list[str] = []
    per_image = None
    for row, cell in enumerate(dataset.select_columns([column])[column]):
        cell = [cell] if isinstance(cell, str) else cell
        if not isinstance(cell, list) or not cell or not all(isinstance(c, str) and c.strip() for c in cell):
            raise DataFormatError(
                f"split {split!r} row {row}: {column!r} must be a non-empty caption or list of them, got {cell!r}"
            )
        if per_image is None:
            per_image = len(cell)
        elif len(cell) != per_image:
            raise DataFormatError(
                f"split {split!r} row {row} has {len(cell)} captions, earlier rows {per_image}: "
                "every image needs the same number"
            )
        for caption in cell:
            where = control_character(caption)
            if where is not None:
                raise DataFormatError(f"split {split!r} row {row}: a caption has a control character ({where})")
            length = overlong(caption)
            if length is not None:
                raise DataFormatError(f"split {split!r} row {row}: a caption has {length}")
        captions.extend(" ".join(c.split()) for c in cell)
    if per_image is None:
        raise DataFormatError(f"split {split!r} has no rows")
    return captions, per_image


def _arrow_features(columns: dict[str, np.ndarray]) -> datasets.Features:
    """Arrow types of a batch's columns: (B, R, D) float32 as ``Array2D``, (B,) as a scalar."""
    return datasets.Features(
        {
            name: datasets.Array2D(value.shape[1:], "float32") if value.ndim == 3 else datasets.Value(str(value.dtype))
            for name, value in columns.items()
        }
    )


def _extract_split(
    dataset: datasets.Dataset,
    extractor: ImageFeatureExtractor | RegionFeatureExtractor,
    image_column: str,
    cache_dir: Path,
    batch_size: int,
    num_shards: int,
    split: str,
    processes: tuple[int, int] = (0, 1),
) -> list[datasets.Dataset]:
    """The mapped shards of one split with the extractor's columns (``regions`` (R, D), ...), cached when complete;
    with ``processes`` ``(index, count)``, only the shards ``index``, ``index + count``, ... (each process of
    ``accelerate launch`` maps its own; the main process then reads them all from the cache)."""
    if image_column not in dataset.column_names:
        raise DataFormatError(f"split {split!r} has no image column {image_column!r} (columns: {dataset.column_names})")
    images = dataset.select_columns([image_column])
    identity = {"data": dataset._fingerprint, "extractor": extractor.identity(), "shards": num_shards}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    cache_dir.mkdir(parents=True, exist_ok=True)
    features = _arrow_features(extractor.columns([images[0][image_column]]))
    shards = []
    for index in range(processes[0], min(num_shards, images.num_rows), processes[1]):
        shard = images.shard(num_shards, index, contiguous=True)
        shards.append(
            shard.map(
                lambda batch: {name: list(value) for name, value in extractor.columns(batch[image_column]).items()},
                batched=True,
                batch_size=batch_size,
                remove_columns=[image_column],
                features=features,
                cache_file_name=str(cache_dir / f"{split}-{key}-{index:05d}-of-{num_shards:05d}.arrow"),
                new_fingerprint=f"{key}-{index}",
                desc=f"{split} features, shard {index + 1}/{num_shards}",
            )
        )
    return shards


def _write_regions(shards: list[datasets.Dataset], path: Path, chunk_size: int = 256) -> tuple[int, ...]:
    """Stream the shards' ``regions`` into ``path`` (a float32 ``.npy``), chunk by chunk; returns its shape."""
    first = np.asarray(shards[0].with_format("numpy")[0]["regions"], dtype=np.float32)
    shape = (sum(s.num_rows for s in shards), *first.shape)
    partial = path.with_suffix(".partial.npy")
    out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=shape)
    row = 0
    for shard in shards:
        numpy = shard.with_format("numpy")
        for start in range(0, shard.num_rows, chunk_size):
            chunk = np.asarray(numpy[start : start + chunk_size]["regions"], dtype=np.float32)
            out[row : row + len(chunk)] = chunk
            row += len(chunk)
    out.flush()
    del out
    os.replace(partial, path)
    return shape


def extract_features(
    source: str | Path,
    output_dir: str | Path,
    model_name: str,
    *,
    feature: str = "pooled",
    image_column: str = "image",
    caption_column: str = "captions",
    batch_size: int = 32,
    num_shards: int = 8,
    device: str | torch.device = "cpu",
    cache_dir: str | Path | None = None,
    revision: str | None = None,
    num_regions: int = 36,
    box_geometry: bool = False,
    score_threshold: float = 0.0,
    processes: tuple[int, int] = (0, 1),
) -> dict[str, tuple[int, ...]]:
    """Extract the image features of every split of ``source`` into the precomp directory ``output_dir``.

    Args:
        source: an ``imagefolder`` directory with ``metadata.jsonl`` per split, or a Hub dataset id.
        output_dir: where ``{split}_ims.npy`` and ``{split}_caps.txt`` are written (a
            ``validation`` split is written as ``dev``).
        model_name: Hub id or directory of the image model and its image processor, or, for
            ``"regions"``, of the object detector (see :class:`RegionFeatureExtractor`).
        feature: ``"pooled"`` (R = 1), ``"patches"`` or ``"regions"``.
        image_column: the column holding the images.
        caption_column: the column holding a caption or a list of k captions per image.
        batch_size: images per model call.
        num_shards: shards per split; each is cached on completion (the unit of resumption).
        device: where the model runs.
        cache_dir: where ``datasets`` keeps the loaded dataset and the mapped shards
            (default ``$HFNCL_CACHE/extract``).
        revision: the branch, tag or commit of a Hub model (resolved to a commit, which
            keys the cache); ignored for a local directory.
        num_regions, box_geometry, score_threshold: for ``"regions"``, as in
            :class:`RegionFeatureExtractor`; each split's region counts go to ``{split}_num_regions.npy``.
        processes: ``(index, count)`` of this process among ``count`` that share the work: with ``count > 1`` it
            maps (and caches) only its own shards and writes nothing; a call with the default ``(0, 1)`` after
            every process finished reads them all from the cache and writes the directory.

    Returns:
        The shape (N, R, D) of each split's features, by precomp split name (nothing where ``count > 1``).

    Raises:
        DataFormatError: a missing column, an empty caption or unequal caption counts, naming the split and row.
    """
    if batch_size < 1 or num_shards < 1:
        raise ValueError(f"batch_size and num_shards must be >= 1, got {batch_size} and {num_shards}")
    if feature not in FEATURES:
        raise ValueError(f"feature must be one of {FEATURES}, got {feature!r}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_root() / "extract"
    extractor: RegionFeatureExtractor | ImageFeatureExtractor  # first: a model that cannot load stops at once
    if feature == "regions":
        extractor = RegionFeatureExtractor(
            model_name, num_regions, box_geometry, score_threshold, device=device, revision=revision
        )
    else:
        extractor = ImageFeatureExtractor(model_name, feature, device, revision=revision)
    raw = load_raw_dataset(source, cache / "datasets")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    shapes = {}
    for name, dataset in raw.items():
        split = SPLIT_NAMES.get(name, name)
        captions, _ = split_captions(dataset, caption_column, split)
        shards = _extract_split(
            dataset, extractor, image_column, cache / "features", batch_size, num_shards, split, processes
        )
        if processes[1] > 1:
            continue
        shapes[split] = _write_regions(shards, output_dir / f"{split}_ims.npy")
        if "num_regions" in shards[0].column_names:
            counts = [shard.with_format("numpy")["num_regions"] for shard in shards]
            np.save(output_dir / f"{split}_num_regions.npy", np.concatenate(counts).astype(np.int64))
        (output_dir / f"{split}_caps.txt").write_text("\n".join(captions) + "\n", encoding="utf-8")
    return shapes
