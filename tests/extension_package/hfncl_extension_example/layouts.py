"""``npz_views``: category-labelled features in one ``.npz`` archive with keys ``{split}_view1`` (image features),
``{split}_view2`` (text features) and ``{split}_y`` (the labels both views share), split ``train``, ``val``
(optional) and ``test``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hfncl.data import DataFormatError
from hfncl.data.labelled import SplitArrays, file_arrays

SPLIT_PREFIXES = (("train", "train"), ("valid", "val"), ("test", "test"))


@dataclass(frozen=True)
class NPZViews:
    """The layout object hfncl calls (a :class:`hfncl.data.labelled.LabelLayout`)."""

    description: str = "one .npz archive with keys {train,val,test}_view1, _view2, _y"

    def detect(self, path: Path) -> bool:
        try:
            return path.suffix == ".npz" and path.is_file() and "train_view1" in file_arrays(path)
        except DataFormatError:
            return False

    def splits(self, path: Path) -> dict[str, SplitArrays]:
        arrays = file_arrays(path)
        splits = {}
        for split, prefix in SPLIT_PREFIXES:
            keys = [f"{prefix}_{name}" for name in ("view1", "view2", "y")]
            missing = [key for key in keys if key not in arrays]
            if split == "valid" and len(missing) == len(keys):
                continue
            if missing:
                raise DataFormatError(f"{path}: missing key {missing[0]!r} (layout npz_views); keys: {sorted(arrays)}")
            image, text, labels = (arrays[key] for key in keys)
            splits[split] = SplitArrays(image, text, labels, labels)
        return splits


NPZ_VIEWS = NPZViews()
