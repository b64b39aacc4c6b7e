"""Flickr30K, MS-COCO and Conceptual Captions from a Hugging Face dataset, written as an imagefolder.

A source is a Hub dataset id or a local copy of one (its parquet files, ``data/{split}-*.parquet``, as
``hf download ID --repo-type dataset --local-dir DIR`` leaves them), in the layouts these datasets have on the Hub:

* one row per image, the captions a list (``AnyModal/flickr30k``: ``image``, ``alt_text`` [5 captions], ``split``,
  ``filename``), or a single caption (Conceptual Captions);
* one row per caption, rows of one image sharing an id (COCO Karpathy: ``image``, ``sentences`` {``raw``, ...},
  ``cocoid``, ``split``);
* a ``split`` column of Karpathy's names (``train``, ``restval``, ``val``, ``test``), or the dataset's own splits
  (``train``, ``validation``, ``test``) where there is none.

The Karpathy split is kept: ``restval`` joins ``train``, ``val``/``validation`` is ``dev``, and MS-COCO's 5000
test images are the precomp's ``testall`` (what the COCO recipes test on, in 5 folds of 1000), the imagefolder's
``test/`` (``datasets`` reads only ``train``, ``dev``/``validation`` and ``test`` folders as splits). Each image
keeps its first k captions (:attr:`DatasetLayout.captions_per_image`). The imagefolder (:mod:`hfncl.data.pixels`, what
``hfncl extract`` and ``hfncl train --image-tower`` read) has a folder per split, the images numbered in the source's
order (``0000000.jpg``, the bytes as the source holds them) and a ``metadata.jsonl`` of
``{"file_name", "captions", "source_id"}``. Images are written one at a time, each atomically, and a file already
there is kept: a killed preparation resumes where it stopped.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from huggingface_hub import is_offline_mode

from hfncl.data.precomp import DataFormatError
from hfncl.integrity import atomic_write_text

CAPTION_COLUMNS = ("captions", "alt_text", "sentences", "caption", "sentences_raw", "text")
"""Where a caption or list of captions is, in the order looked for."""
ID_COLUMNS = ("cocoid", "img_id", "imgid", "image_id", "filename", "id")
"""What names an image in the source (and groups the rows of one image where there is a row per caption)."""
SPLIT_NAMES = {"train": "train", "restval": "train", "val": "dev", "validation": "dev", "dev": "dev", "test": "test"}
"""A source's split names (Karpathy's and ``datasets``') -> the recipes' split names."""


@dataclass(frozen=True)
class DatasetLayout:
    """What one dataset is prepared as: its name, how many captions each image keeps and the precomp name of its
    test split (the imagefolder's is ``test``)."""

    name: str
    captions_per_image: int
    test_split: str = "test"


LAYOUTS = {
    "flickr30k": DatasetLayout("flickr30k", 5),
    "coco": DatasetLayout("coco", 5, test_split="testall"),
    "cc": DatasetLayout("cc", 1),
}


def load_source(source: str, cache_dir: str | Path | None = None) -> datasets.DatasetDict:
    """A local directory (its parquet files, or any layout ``datasets.load_dataset`` reads) or a Hub dataset id.

    Raises:
        OSError: one line: the directory holds no dataset, or the Hub id cannot be loaded (offline: ``HF_HUB_OFFLINE``
            is set and it is not in the cache), saying how to get a local copy to pass instead.
    """
    from huggingface_hub.utils import logging as hub_logging

    cache = None if cache_dir is None else str(cache_dir)
    local = Path(source).is_dir()
    verbosity = hub_logging.get_verbosity()
    hub_logging.set_verbosity_error()  # a failed request's retries are logged as warnings: the error line says it
    try:
        loaded = datasets.load_dataset(str(source), cache_dir=cache)
    except Exception as error:  # datasets raises many kinds (FileNotFoundError, ConnectionError, DatasetNotFoundError)
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        if local:
            raise OSError(f"--from {source}: no dataset could be read from this directory ({reason})") from None
        offline = " (HF_HUB_OFFLINE is set and it is not in the datasets cache)" if is_offline_mode() else ""
        raise OSError(
            f"--from {source}: not a local directory, and the Hub dataset cannot be loaded{offline} ({reason}); "
            f"where there is a network, `hf download {source} --repo-type dataset --local-dir DIR` and pass --from DIR"
        ) from None
    finally:
        hub_logging.set_verbosity(verbosity)
    if not isinstance(loaded, datasets.DatasetDict):
        raise OSError(f"--from {source}: expected a dataset with splits, got {type(loaded).__name__}")
    return loaded


def _first(columns: Sequence[str], wanted: Sequence[str]) -> str | None:
    return next((name for name in wanted if name in columns), None)


def caption_list(cell: Any) -> list[str]:
    """A caption cell as a list of captions: a string, a list of strings, a ``{"raw": ...}`` sentence (COCO
    Karpathy) or a list of them."""
    if isinstance(cell, str):
        return [cell]
    if isinstance(cell, dict) and isinstance(cell.get("raw"), str):
        return [cell["raw"]]
    if isinstance(cell, list):
        return [caption for item in cell for caption in caption_list(item)]
    return []


@dataclass(frozen=True)
class SourceImage:
    """One image of a split: the row holding its image, its captions and its name in the source."""

    row: int
    captions: list[str]
    source_id: str


def combined_source(raw: datasets.DatasetDict, source: str) -> datasets.Dataset:
    """Every row of the source in one dataset with a ``split`` column: the source's own (Karpathy's names), or the
    name of the dataset split holding the row.

    Raises:
        DataFormatError: a split name none of :data:`SPLIT_NAMES` knows.
    """
    if all("split" in dataset.column_names for dataset in raw.values()):
        return datasets.concatenate_datasets(list(raw.values()))
    named = []
    for name, dataset in raw.items():
        if name not in SPLIT_NAMES:
            raise DataFormatError(
                f"--from {source}: split {name!r} is none of {sorted(SPLIT_NAMES)} and there is no 'split' column"
            )
        named.append(dataset.add_column("split", [name] * dataset.num_rows))
    return datasets.concatenate_datasets(named)


def split_images(dataset: datasets.Dataset, layout: DatasetLayout, source: str) -> dict[str, list[SourceImage]]:
    """The images of each recipe split, each with its first k captions, in the source's order.

    Raises:
        DataFormatError: no caption column, or an image with fewer than k captions, naming the row.
    """
    columns = dataset.column_names
    caption_column = _first(columns, CAPTION_COLUMNS)
    if caption_column is None or "image" not in columns:
        raise DataFormatError(
            f"--from {source}: expected an 'image' column and a caption column (one of {', '.join(CAPTION_COLUMNS)}), "
            f"found {columns}"
        )
    id_column = _first(columns, ID_COLUMNS)
    read = [caption_column, "split", *([id_column] if id_column else [])]
    images: dict[str, list[SourceImage]] = {}
    last_id: str | None = None
    for row, record in enumerate(dataset.select_columns(read)):
        name = SPLIT_NAMES.get(str(record["split"]))
        if name is None:
            raise DataFormatError(
                f"--from {source}: row {row} has split {record['split']!r}, none of {sorted(SPLIT_NAMES)}"
            )
        captions = [" ".join(caption.split()) for caption in caption_list(record[caption_column])]
        source_id = str(record[id_column]) if id_column else str(row)
        split = images.setdefault(name, [])
        if id_column and split and source_id == last_id:  # a row per caption: the same image's next caption
            split[-1].captions.extend(captions)
        else:
            split.append(SourceImage(row, captions, source_id))
        last_id = source_id
    k = layout.captions_per_image
    for name, split in images.items():
        for image in split:
            image.captions[:] = [caption for caption in image.captions if caption]
            if len(image.captions) < k:
                raise DataFormatError(
                    f"--from {source}: image {image.source_id!r} (row {image.row}, split {name}) has "
                    f"{len(image.captions)} non-empty captions in {caption_column!r}, {layout.name} keeps {k} per image"
                )
            del image.captions[k:]
    return images


def _image_bytes(cell: Any) -> tuple[bytes, str]:
    """An undecoded image cell's bytes and the file suffix of its format."""
    data = cell.get("bytes") if isinstance(cell, dict) else None
    if data is None and isinstance(cell, dict) and cell.get("path"):
        data = Path(cell["path"]).read_bytes()
    if data is None:
        raise DataFormatError("an image cell holds neither bytes nor a readable path")
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        kind = (image.format or "png").lower()
    return data, {"jpeg": ".jpg"}.get(kind, f".{kind}")


def _write_file(path: Path, data: bytes) -> None:
    """``data`` into ``path`` through a temporary file: an image that exists is complete."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def write_imagefolder_split(
    dataset: datasets.Dataset, images: list[SourceImage], folder: Path, owned: range | None = None
) -> Iterator[int]:
    """Write the images of one split into ``folder`` (those at positions ``owned``, default all), yielding each
    position once its file is there (kept from an earlier run or written now); the metadata is
    :func:`write_metadata`'s."""
    folder.mkdir(parents=True, exist_ok=True)
    cells = dataset.cast_column("image", datasets.Image(decode=False)).select_columns(["image"])
    existing = {path.stem: path for path in folder.iterdir() if not path.name.startswith(".")}
    for position in owned if owned is not None else range(len(images)):
        if f"{position:07d}" not in existing:
            data, suffix = _image_bytes(cells[images[position].row]["image"])
            _write_file(folder / f"{position:07d}{suffix}", data)
        yield position


def write_metadata(images: list[SourceImage], folder: Path) -> Path:
    """``folder/metadata.jsonl``: each image's file (written by :func:`write_imagefolder_split`), captions and
    source id, in order.

    Raises:
        DataFormatError: an image's file is missing (a preparation that did not finish).
    """
    files = {path.stem: path.name for path in folder.iterdir() if not path.name.startswith(".")}
    rows = []
    for position, image in enumerate(images):
        name = files.get(f"{position:07d}")
        if name is None:
            raise DataFormatError(f"{folder}: image {position:07d} is missing; run the preparation again to resume")
        rows.append(json.dumps({"file_name": name, "captions": image.captions, "source_id": image.source_id}))
    path = folder / "metadata.jsonl"
    atomic_write_text(path, "\n".join(rows) + "\n")
    return path


FEATURES = {"regions": "regions", "clip": "patches", "clip-pooled": "pooled"}
"""``--features`` -> the feature of :func:`hfncl.data.extract.extract_features`: detector regions, CLIP's patch
tokens (R = 1 + patches, for the heads that attend over regions), or CLIP's pooled image embedding (R = 1)."""
DEFAULT_MODELS = {"regions": "PekingU/rtdetr_r50vd", "clip": "openai/clip-vit-base-patch32"}
"""The model ``--features`` uses unless ``--model`` names one (``clip-pooled`` as ``clip``)."""


@dataclass(frozen=True)
class Processes:
    """This process among those ``accelerate launch`` started (one without it): its index, their count, and a
    barrier every process reaches before the main one goes on."""

    index: int = 0
    count: int = 1
    device: str = "cpu"

    @classmethod
    def current(cls, device: str | None) -> Processes:
        """The processes of this launch; ``device`` ``None`` is the launch's device for this process."""
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1 and device is not None:
            return cls(device=device)
        from accelerate import PartialState
        from accelerate.utils import parse_flag_from_env

        state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # as Accelerator reads it
        return cls(state.process_index, state.num_processes, device or str(state.device))

    def wait(self) -> None:
        if self.count > 1:
            from accelerate import PartialState

            PartialState().wait_for_everyone()


def prepare_dataset(
    name: str,
    source: str,
    output_dir: str | Path,
    *,
    features: str | None = None,
    model: str | None = None,
    precomp_dir: str | Path | None = None,
    batch_size: int = 32,
    num_shards: int = 8,
    device: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Write dataset ``name`` (:data:`LAYOUTS`) of ``source`` as an imagefolder in ``output_dir``; with ``features``
    (:data:`FEATURES`) also extract them into the precomp directory ``precomp_dir`` (default ``OUTPUT_DIR_precomp``).

    Under ``accelerate launch`` every process writes its share of the images and extracts its share of the shards
    (each on its own device), and the main process writes the metadata and the precomp files.

    Returns:
        ``{"imagefolder": path, "images": {split: count}, "main": whether this is the main process}``, with
        ``"precomp"`` and ``"shapes"`` ({split: (N, R, D)}) when features were extracted (on the main process).

    Raises:
        OSError: the source cannot be loaded (one line; the Hub offline names ``HF_HUB_OFFLINE``).
        DataFormatError: the source lacks a column, or an image has too few captions.
        ValueError: an unknown dataset or feature.
    """
    if name not in LAYOUTS:
        raise ValueError(f"dataset must be one of {sorted(LAYOUTS)}, got {name!r}")
    if features is not None and features not in FEATURES:
        raise ValueError(f"--features must be one of {sorted(FEATURES)}, got {features!r}")
    if batch_size < 1 or num_shards < 1:
        raise ValueError(f"--batch-size and --num-shards must be >= 1, got {batch_size} and {num_shards}")
    bars = progress and sys.stderr.isatty()  # a log gets no bars, the libraries' neither
    before = datasets.is_progress_bar_enabled()
    if not bars:
        datasets.disable_progress_bars()
    try:
        return _prepare(name, source, Path(output_dir), features, model, precomp_dir, batch_size, num_shards, device,
                        cache_dir, bars)
    finally:
        if before and not bars:
            datasets.enable_progress_bars()


def _prepare(
    name: str,
    source: str,
    output_dir: Path,
    features: str | None,
    model: str | None,
    precomp_dir: str | Path | None,
    batch_size: int,
    num_shards: int,
    device: str | None,
    cache_dir: str | Path | None,
    bars: bool,
) -> dict[str, Any]:
    """:func:`prepare_dataset` with its arguments checked and the libraries' bars set."""
    from tqdm.auto import tqdm

    processes = Processes.current(device)
    raw = load_source(source, cache_dir)
    layout = LAYOUTS[name]
    dataset = combined_source(raw, source)
    splits = split_images(dataset, layout, source)
    for split, images in splits.items():
        owned = range(processes.index, len(images), processes.count)
        written = write_imagefolder_split(dataset, images, output_dir / split, owned)
        bar = tqdm(written, total=len(owned), desc=f"{split} images", disable=not bars)
        for _ in bar:
            pass
    processes.wait()
    result: dict[str, Any] = {
        "imagefolder": output_dir,
        "images": {split: len(each) for split, each in splits.items()},
        "main": processes.index == 0,
    }
    if processes.index == 0:
        for split, images in splits.items():
            write_metadata(images, output_dir / split)
    processes.wait()
    if features is None:
        return result
    from hfncl.data.extract import extract_features

    target = Path(precomp_dir) if precomp_dir is not None else output_dir.with_name(output_dir.name + "_precomp")
    options: dict[str, Any] = dict(
        feature=FEATURES[features], batch_size=batch_size, num_shards=num_shards, device=processes.device,
        cache_dir=cache_dir,
    )
    chosen = model or DEFAULT_MODELS["regions" if features == "regions" else "clip"]
    if processes.count > 1:
        extract_features(output_dir, target, chosen, **options, processes=(processes.index, processes.count))
        processes.wait()
    if processes.index == 0:
        shapes = extract_features(output_dir, target, chosen, **options)
        if layout.test_split != "test":  # an imagefolder's split folders are datasets' names: test/ -> testall_*
            for path in sorted(target.glob("test_*")):
                os.replace(path, path.with_name(layout.test_split + path.name[len("test"):]))
            shapes[layout.test_split] = shapes.pop("test")
        result |= {"precomp": target, "shapes": shapes}
    processes.wait()
    return result
