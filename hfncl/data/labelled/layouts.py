"""The single-file (``imgs_deep``, ``tr_te``) and directory (``per_file``) layouts of labelled
feature files: recognising a file's layout from its keys and finding each split's arrays."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hfncl.data.labelled.files import _ArrayRef, _container_keys
from hfncl.data.precomp import DataFormatError

LABELLED_LAYOUTS = ("imgs_deep", "tr_te", "per_file", "arrays")


@dataclass
class _RawSplit:
    image: _ArrayRef
    text: _ArrayRef
    image_labels: _ArrayRef
    text_labels: _ArrayRef


def _first_key(path: Path, keys: set[str], candidates: tuple[str, ...], what: str) -> str:
    found = next((key for key in candidates if key in keys), None)
    if found is None:
        raise DataFormatError(
            f"{path}: missing key {' / '.join(repr(c) for c in candidates)} ({what}); keys present: {sorted(keys)}"
        )
    return found


def _single_file_splits(path: Path, layout: str | None) -> tuple[str, dict[str, _RawSplit]]:
    container, transpose, keys = _container_keys(path)
    if layout is None:
        layout = "imgs_deep" if "train_imgs_deep" in keys else "tr_te" if "tr_img" in keys else None
        if layout is None:
            raise DataFormatError(
                f"{path}: cannot tell the layout: expected key 'train_imgs_deep' (layout imgs_deep) or 'tr_img' "
                f"(layout tr_te); keys present: {sorted(keys)}"
            )
    if layout == "imgs_deep":
        prefixes = {"train": "train", "valid": "valid", "test": "test"}
        names = {
            "image": ("{p}_imgs_deep",),
            "text": ("{p}_texts", "{p}_text", "{p}_texts_doc"),
            "image_labels": ("{p}_imgs_labels",),
            "text_labels": ("{p}_texts_labels", "{p}_imgs_labels"),
        }
    elif layout == "tr_te":
        prefixes = {"train": "tr", "valid": "val", "test": "te"}
        names = {
            "image": ("{p}_img",),
            "text": ("{p}_txt",),
            "image_labels": ("{p}_img_lab",),
            "text_labels": ("{p}_txt_lab", "{p}_img_lab"),
        }
    else:
        raise ValueError(f"layout of a single file must be 'imgs_deep' or 'tr_te', got {layout!r}")
    splits = {}
    for split, prefix in prefixes.items():
        image_key = names["image"][0].format(p=prefix)
        if split == "valid" and image_key not in keys:
            continue
        refs = {
            part: _ArrayRef(
                str(path),
                _first_key(path, keys, tuple(n.format(p=prefix) for n in candidates), f"{split} {part}"),
                container,
                transpose,
            )
            for part, candidates in names.items()
        }
        splits[split] = _RawSplit(**refs)
    return layout, splits


def _per_file_splits(directory: Path) -> dict[str, _RawSplit]:
    def ref(split: str, name: str) -> _ArrayRef | None:
        stem = f"{split}_{name}"
        if (directory / f"{stem}.npy").is_file():
            return _ArrayRef(str(directory / f"{stem}.npy"), None, "npy")
        path = directory / f"{stem}.mat"
        if not path.is_file():
            return None
        container, transpose, keys = _container_keys(path)
        if stem not in keys:
            raise DataFormatError(
                f"{path}: missing key {stem!r} (the variable is named like the file); keys present: {sorted(keys)}"
            )
        return _ArrayRef(str(path), stem, container, transpose)

    splits = {}
    for split, prefixes in (("train", ("train",)), ("valid", ("valid", "val")), ("test", ("test",))):
        prefix = next((p for p in prefixes if ref(p, "img") is not None), None)
        if prefix is None:
            if split == "valid":
                continue
            raise DataFormatError(f"{directory}: missing {split}_img.mat or {split}_img.npy (layout per_file)")
        parts = {}
        for part, name in (("image", "img"), ("text", "txt"), ("image_labels", "img_lab")):
            found = ref(prefix, name)
            if found is None:
                raise DataFormatError(
                    f"{directory}: missing {prefix}_{name}.mat or {prefix}_{name}.npy (layout per_file)"
                )
            parts[part] = found
        parts["text_labels"] = ref(prefix, "txt_lab") or parts["image_labels"]
        splits[split] = _RawSplit(**parts)
    return splits
