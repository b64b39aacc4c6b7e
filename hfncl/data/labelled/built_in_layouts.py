"""hfncl's own label layouts (:class:`hfncl.data.labelled.layouts.LabelLayout` objects, registered in the
``hfncl.label_layouts`` entry-point group of ``pyproject.toml``): the single-file ``imgs_deep`` (MRL's files)
and ``tr_te``, and the directory ``per_file`` (DSCMR's)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hfncl.data.labelled.files import ArrayRef, _container_keys, file_arrays
from hfncl.data.labelled.layouts import SplitArrays
from hfncl.data.precomp import DataFormatError

PARTS = ("image", "text", "image_labels", "text_labels")


def _first_key(path: Path, arrays: dict[str, ArrayRef], candidates: tuple[str, ...], what: str) -> ArrayRef:
    found = next((key for key in candidates if key in arrays), None)
    if found is None:
        raise DataFormatError(
            f"{path}: missing key {' / '.join(repr(c) for c in candidates)} ({what}); keys present: {sorted(arrays)}"
        )
    return arrays[found]


@dataclass(frozen=True)
class KeyedFileLayout:
    """One ``.mat``, HDF5 or ``.npz`` file whose keys name each split's arrays: ``names`` gives, per part (in
    :data:`PARTS` order), the key patterns tried in turn, with ``{p}`` the split's prefix in ``prefixes``."""

    description: str
    prefixes: tuple[tuple[str, str], ...]
    names: tuple[tuple[str, ...], ...]

    def detect(self, path: Path) -> bool:
        """Whether ``path`` is a file with the train split's image features (the first pattern of the image part)."""
        try:
            return path.is_file() and self._key(0, self.prefixes[0][1]) in _container_keys(path)[2]
        except DataFormatError:
            return False

    def _key(self, part: int, prefix: str, candidate: int = 0) -> str:
        return self.names[part][candidate].format(p=prefix)

    def splits(self, path: Path) -> dict[str, SplitArrays]:
        arrays = file_arrays(path)
        splits = {}
        for split, prefix in self.prefixes:
            if split == "valid" and self._key(0, prefix) not in arrays:
                continue
            refs = [
                _first_key(path, arrays, tuple(n.format(p=prefix) for n in candidates), f"{split} {part}")
                for part, candidates in zip(PARTS, self.names, strict=True)
            ]
            splits[split] = SplitArrays(*refs)
        return splits


IMGS_DEEP = KeyedFileLayout(
    "one .mat/HDF5/.npz file with keys {train,valid,test}_imgs_deep, _texts, _imgs_labels, _texts_labels",
    (("train", "train"), ("valid", "valid"), ("test", "test")),
    (
        ("{p}_imgs_deep",),
        ("{p}_texts", "{p}_text", "{p}_texts_doc"),
        ("{p}_imgs_labels",),
        ("{p}_texts_labels", "{p}_imgs_labels"),
    ),
)
"""MRL's files: ``{split}_imgs_deep``, ``{split}_texts`` (or ``_text``, ``_texts_doc``), ``{split}_imgs_labels`` and
``{split}_texts_labels`` for split ``train``, ``valid`` (optional) and ``test``."""

TR_TE = KeyedFileLayout(
    "one .mat/HDF5/.npz file with keys {tr,val,te}_img, _txt, _img_lab, _txt_lab",
    (("train", "tr"), ("valid", "val"), ("test", "te")),
    (("{p}_img",), ("{p}_txt",), ("{p}_img_lab",), ("{p}_txt_lab", "{p}_img_lab")),
)
"""``tr_img``, ``tr_txt``, ``tr_img_lab``, ``tr_txt_lab``, the same with ``val_`` (optional) and ``te_``."""


@dataclass(frozen=True)
class PerFileLayout:
    """A directory with one array per file, ``{split}_{img,txt,img_lab,txt_lab}`` as ``.npy`` or ``.mat`` (the
    variable named like the file, DSCMR's layout), split ``train``, ``valid`` or ``val`` (optional) and ``test``."""

    description: str = "a directory of {train,valid,test}_{img,txt,img_lab,txt_lab}.npy or .mat files"

    def detect(self, path: Path) -> bool:
        return any((path / f"train_img{suffix}").is_file() for suffix in (".npy", ".mat"))

    def splits(self, path: Path) -> dict[str, SplitArrays]:
        if not path.is_dir():
            raise DataFormatError(f"{path}: layout per_file reads a directory, this is a file")
        splits = {}
        for split, prefixes in (("train", ("train",)), ("valid", ("valid", "val")), ("test", ("test",))):
            prefix = next((p for p in prefixes if _file_array(path, p, "img") is not None), None)
            if prefix is None:
                if split == "valid":
                    continue
                raise DataFormatError(f"{path}: missing {split}_img.mat or {split}_img.npy (layout per_file)")
            parts = {}
            for part, name in (("image", "img"), ("text", "txt"), ("image_labels", "img_lab")):
                found = _file_array(path, prefix, name)
                if found is None:
                    raise DataFormatError(
                        f"{path}: missing {prefix}_{name}.mat or {prefix}_{name}.npy (layout per_file)"
                    )
                parts[part] = found
            parts["text_labels"] = _file_array(path, prefix, "txt_lab") or parts["image_labels"]
            splits[split] = SplitArrays(**parts)
        return splits


def _file_array(directory: Path, split: str, name: str) -> ArrayRef | None:
    """``{split}_{name}.npy`` or the variable of that name in ``{split}_{name}.mat``; ``None`` where neither is."""
    stem = f"{split}_{name}"
    if (directory / f"{stem}.npy").is_file():
        return ArrayRef(str(directory / f"{stem}.npy"), None, "npy")
    path = directory / f"{stem}.mat"
    if not path.is_file():
        return None
    arrays = file_arrays(path)
    if stem not in arrays:
        raise DataFormatError(
            f"{path}: missing key {stem!r} (the variable is named like the file); keys present: {sorted(arrays)}"
        )
    return arrays[stem]


PER_FILE = PerFileLayout()
