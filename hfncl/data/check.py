"""Whether a precomp directory is what a recipe expects: its splits' sizes, shapes and dtypes.

Every split found (``{split}_ims.npy``) is read without loading its features (the ``.npy`` header, memory-mapped):
features float (N, R, D) with the same R and D in every split, ``{split}_caps.txt`` (or ``.tsv``) holding k
non-empty captions per image, the same k in every split, ``{split}_num_regions.npy`` (when there) N integers in
0..R. Against an :data:`EXPECTED` dataset the splits must have its image counts and captions per image (the papers'
Karpathy splits; SCAN's MS-COCO test split is ``testall``, 5000 images, scored as 5 folds of 1000).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hfncl.data.precomp import DataFormatError, caption_file, read_captions


@dataclass(frozen=True)
class Expected:
    """A paper dataset's splits: images per split and captions per image, and the recipes written for it."""

    title: str
    images: dict[str, int]
    captions_per_image: int
    recipes: str


EXPECTED = {
    "f30k": Expected("Flickr30K", {"train": 29000, "dev": 1014, "test": 1000}, 5, "recipes/*_f30k.py"),
    "coco": Expected("MS-COCO", {"train": 113287, "dev": 5000, "testall": 5000}, 5, "recipes/*_coco.py"),
    "cc152k": Expected("CC152K", {"train": 150000, "dev": 1000, "test": 1000}, 1, "recipes/*_cc152k.py"),
}


@dataclass
class SplitReport:
    """One split as found: images, captions per image, regions and feature size, dtype."""

    split: str
    images: int
    captions_per_image: int
    regions: int
    dim: int
    dtype: str


@dataclass
class CheckReport:
    """A checked directory: its splits and, for ``--expect``, the dataset it matched."""

    data_dir: Path
    splits: list[SplitReport] = field(default_factory=list)
    expected: Expected | None = None

    def lines(self) -> list[str]:
        """What ``hfncl data check`` prints."""
        shown = [
            f"{s.split}: {s.images} images x {s.captions_per_image} captions, features {s.regions} x {s.dim} {s.dtype}"
            for s in self.splits
        ]
        if self.expected is not None:
            shown.append(
                f"{self.data_dir}: {self.expected.title} as the papers use it; it fits {self.expected.recipes} "
                f"(--data-dir {self.data_dir})"
            )
        else:
            papers = ", ".join(expected.title for expected in EXPECTED.values())
            shown.append(f"{self.data_dir}: a well-formed precomp directory, of none of the papers' sizes ({papers})")
        return shown


def split_images(data_dir: str | Path, split: str) -> int | None:
    """The number of images of ``split`` of a precomp directory (read from the ``.npy`` header) or an imagefolder
    (the rows of its ``metadata.jsonl``); ``None`` for a split in neither layout."""
    features = Path(data_dir) / f"{split}_ims.npy"
    metadata = Path(data_dir) / split / "metadata.jsonl"
    try:
        if features.is_file():
            return int(np.load(features, mmap_mode="r", allow_pickle=False).shape[0])
        if metadata.is_file():
            with metadata.open(encoding="utf-8") as rows:
                return sum(1 for row in rows if row.strip())
    except (OSError, ValueError, IndexError):  # the reader names the problem when the run reads it
        return None
    return None


def paper_size_warning(data_dir: str | Path, split: str, paper: str) -> str | None:
    """One line when the ``split`` of ``data_dir`` has under a tenth of the training images of the paper's dataset
    ``paper`` (a key of :data:`EXPECTED`): a paper's schedule is tuned to its data, and on a few hundred images it
    learns nothing. ``None`` otherwise, or when the split cannot be counted."""
    expected = EXPECTED[paper]
    images, paper_images = split_images(data_dir, split), expected.images["train"]
    if images is None or images * 10 >= paper_images:
        return None
    return (
        f"warning: {data_dir} has {images} {split} images, under a tenth of {expected.title}'s {paper_images}: "
        "this recipe's schedule (the paper's) will not learn here"
    )


def _split_names(data_dir: Path) -> list[str]:
    return sorted(path.name[: -len("_ims.npy")] for path in data_dir.glob("*_ims.npy"))


def check_split(data_dir: Path, split: str) -> SplitReport:
    """The sizes of one split, checked to fit together.

    Raises:
        DataFormatError: one line naming the file and what was expected.
    """
    path = data_dir / f"{split}_ims.npy"
    try:
        features = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as error:
        raise DataFormatError(f"{path}: not a readable .npy array ({' '.join(str(error).split())[:160]})") from None
    if features.ndim != 3 or not np.issubdtype(features.dtype, np.floating):
        raise DataFormatError(
            f"{path}: features have shape {features.shape} and dtype {features.dtype}, "
            "expected float (images, regions, dim)"
        )
    images, regions, dim = features.shape
    captions_path = caption_file(data_dir, split)
    if captions_path is None:
        raise DataFormatError(f"{data_dir / f'{split}_caps.txt'}: missing (split {split!r} has {path.name})")
    captions = len(read_captions(captions_path))
    if images == 0 or captions % images:
        raise DataFormatError(
            f"{captions_path}: {captions} captions for the {images} images of {path.name}, expected k per image"
        )
    counts_path = data_dir / f"{split}_num_regions.npy"
    if counts_path.is_file():
        counts = np.load(counts_path, allow_pickle=False)
        if counts.shape != (images,) or not np.issubdtype(counts.dtype, np.integer):
            raise DataFormatError(
                f"{counts_path}: shape {counts.shape} dtype {counts.dtype}, expected ({images},) integers"
            )
        if counts.size and (counts.min() < 0 or counts.max() > regions):
            raise DataFormatError(f"{counts_path}: region counts outside 0..{regions}")
    return SplitReport(split, images, captions // images, regions, dim, str(features.dtype))


def check_precomp(data_dir: str | Path, expect: str | None = None) -> CheckReport:
    """Check every split of ``data_dir`` and, with ``expect`` (a key of :data:`EXPECTED`), its sizes.

    Raises:
        DataFormatError: one line naming the file, the field and what was expected.
        ValueError: an unknown ``expect``.
    """
    if expect is not None and expect not in EXPECTED:
        raise ValueError(f"--expect must be one of {', '.join(EXPECTED)}, got {expect!r}")
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataFormatError(f"{data_dir}: not a directory")
    names = _split_names(data_dir)
    if not names:
        raise DataFormatError(f"{data_dir}: no {{split}}_ims.npy (a precomp directory holds train_ims.npy, ...)")
    report = CheckReport(data_dir, [check_split(data_dir, name) for name in names])
    first = report.splits[0]
    for split in report.splits[1:]:
        if (split.regions, split.dim) != (first.regions, first.dim):
            raise DataFormatError(
                f"{data_dir / f'{split.split}_ims.npy'}: features {split.regions} x {split.dim}, "
                f"but {first.split}_ims.npy has {first.regions} x {first.dim}: every split needs the same"
            )
    if expect is None:  # a paper's data checked without --expect is still named
        report.expected = next((e for e in EXPECTED.values() if _mismatch(report, e) is None), None)
        return report
    problem = _mismatch(report, EXPECTED[expect])
    if problem is not None:
        raise DataFormatError(problem)
    report.expected = EXPECTED[expect]
    return report


def _mismatch(report: CheckReport, expected: Expected) -> str | None:
    """The first way the report's splits differ from ``expected``'s, as an error line; ``None`` when they match."""
    data_dir = report.data_dir
    found = {split.split: split for split in report.splits}
    for name, count in expected.images.items():
        if name not in found:
            return f"{data_dir / f'{name}_ims.npy'}: missing ({expected.title} has a {name} split)"
        split = found[name]
        if split.images != count:
            return f"{data_dir / f'{name}_ims.npy'}: {split.images} images, {expected.title}'s {name} split has {count}"
        if split.captions_per_image != expected.captions_per_image:
            return (
                f"{caption_file(data_dir, name)}: {split.captions_per_image} captions per image, "
                f"{expected.title} has {expected.captions_per_image}"
            )
    return None
