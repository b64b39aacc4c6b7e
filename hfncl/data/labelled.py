"""Readers of category-labelled cross-modal feature files (Wikipedia, Pascal-Sentence, XMediaNet, ...).

Each sample has one precomputed feature vector per modality (image, text) and one
category label per modality; the two modalities of sample j are a pair. The feature
files real users have come in these layouts, all read into memory-mapped Arrow
datasets (Hugging Face ``datasets``) with explicit features:

``imgs_deep``  one HDF5 (``.h5``, ``.hdf5``, ``.h5py``) or MATLAB ``.mat`` file with keys
               ``{split}_imgs_deep``, ``{split}_texts`` (or ``{split}_text``,
               ``{split}_texts_doc``), ``{split}_imgs_labels`` and ``{split}_texts_labels``
               for split ``train``, ``valid`` (optional) and ``test`` (MRL's files).
``tr_te``      one ``.mat`` or HDF5 file with keys ``tr_img``, ``tr_txt``, ``tr_img_lab``,
               ``tr_txt_lab``, the same with ``val_`` (optional) and ``te_``.
``per_file``   a directory with one array per file, ``{split}_{img,txt,img_lab,txt_lab}``
               as ``.mat`` (the variable is named like the file, DSCMR's layout) or
               ``.npy``, split ``train``, ``valid`` or ``val`` (optional) and ``test``.
``arrays``     (:func:`load_labelled_arrays`) three or four ``.npy`` files of any name:
               image features, text features, labels (and text labels) of one
               unsplit set, e.g. ``shared/data/pascal_sentence``.

MATLAB v7.3 ``.mat`` files are HDF5 files and are read with h5py, transposed back to
row-major; sparse ``.mat`` matrices (bag-of-words features) are densified a chunk at a
time. Text labels default to the image labels where a file has none (the pairs share
their category).

**Labels** are index vectors (N,) or (N, 1), integer or integral floats (MATLAB
stores doubles), or one-hot rows (N, K); each is converted explicitly. Index labels
must be ``label_base .. label_base + K - 1``: files that count classes from 1 (the
Wikipedia files) need ``label_base=1``; the offset is never guessed. A one-hot row
with no or several ones is rejected (multi-label data is not supported).

**Validation split**, where the files have none (documented rule, as in the
literature):

* a file with train and test splits: the first ``valid_size`` test samples (default
  half the test split, rounded down) become the validation split and the rest the test
  split: MRL's rule (Wikipedia 231 of 462, XMediaNet 4000 of 8000);
* one unsplit set (``arrays``): per class, in file order, the first
  ``round(n_c * f_train)`` samples train, the next ``round(n_c * f_valid)`` validate
  and the rest test, ``split_fractions=(f_train, f_valid, f_test)`` defaulting to
  (0.8, 0.1, 0.1): Pascal-Sentence's 40 / 5 / 5 per class (800 / 100 / 100) of DSCMR.
  Classes are taken from the image labels.

Every malformed input raises :class:`DataFormatError` naming the file, the key and
what was expected (missing key, mismatched counts, labels out of range, ...).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import datasets
import h5py
import numpy as np
import scipy.io
import scipy.sparse

from hfncl.data.precomp import FEATURE_DTYPES, DataFormatError, cached_arrow_dataset, default_cache_root

MODALITIES = ("image", "text")
SPLITS = ("train", "valid", "test")
LABELLED_LAYOUTS = ("imgs_deep", "tr_te", "per_file", "arrays")
_HDF5_SUFFIXES = (".h5", ".hdf5", ".h5py", ".hdf")
_CACHE_FORMAT_VERSION = 1


@dataclass(frozen=True)
class _ArrayRef:
    """Where one array lives: a ``.npy`` file, or a key of a ``.mat`` / HDF5 file."""

    path: str
    key: str | None
    container: str  # "npy", "mat" or "hdf5"
    transpose: bool = False  # MATLAB v7.3 (HDF5) arrays are stored column-major

    @property
    def where(self) -> str:
        return self.path if self.key is None else f"{self.path}[{self.key!r}]"


class _Rows:
    """Row access to an opened array (memory-mapped ``.npy``, h5py dataset or in-memory array)."""

    def __init__(self, array: np.ndarray | h5py.Dataset | scipy.sparse.spmatrix, transpose: bool) -> None:
        self._array = array
        self._transpose = transpose
        shape = tuple(array.shape)
        self.shape = shape[::-1] if transpose else shape

    def read(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        stop = self.shape[0] if stop is None else stop
        if scipy.sparse.issparse(self._array):  # .mat files store bag-of-words features sparse
            return cast(Any, self._array)[start:stop].toarray()
        if self._transpose:
            return np.asarray(self._array[..., start:stop]).T
        return np.asarray(self._array[start:stop])


@contextmanager
def _opened(ref: _ArrayRef) -> Iterator[_Rows]:
    if ref.container == "npy":
        yield _Rows(_load_npy(Path(ref.path)), False)
    elif ref.container == "mat":
        yield _Rows(scipy.io.loadmat(ref.path, variable_names=[ref.key])[ref.key], False)
    else:
        with h5py.File(ref.path, "r") as handle:
            yield _Rows(handle[ref.key], ref.transpose)


def _load_npy(path: Path) -> np.ndarray:
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise DataFormatError(f"{path}: not a readable .npy array ({err})") from None
    if not isinstance(array, np.ndarray):
        raise DataFormatError(f"{path}: expected a single .npy array, found {type(array).__name__}")
    return array


def _shape_of(ref: _ArrayRef) -> tuple[int, ...]:
    if ref.container == "mat":  # from the header, without loading the variable
        return next(shape for name, shape, _ in scipy.io.whosmat(ref.path) if name == ref.key)
    with _opened(ref) as rows:
        return rows.shape


@dataclass
class _RawSplit:
    image: _ArrayRef
    text: _ArrayRef
    image_labels: _ArrayRef
    text_labels: _ArrayRef


@dataclass
class LabelledSplit:
    """One split: per-modality features and labels, in a memory-mapped Arrow dataset.

    ``data`` has the columns ``image`` and ``text`` (fixed-length float vectors,
    ``List(Value(dtype), length=D)``) and ``image_label`` and ``text_label``
    (``ClassLabel(num_classes)``); row j is sample j of both modalities.
    """

    split: str
    data: datasets.Dataset = field(repr=False)
    num_classes: int
    source: str

    def __post_init__(self) -> None:
        self._numpy = self.data.with_format("numpy")

    @property
    def num_samples(self) -> int:
        return self.data.num_rows

    def feature_dim(self, modality: str) -> int:
        return self.data.features[_check_modality(modality)].length

    def features(self, modality: str, indices: np.ndarray | list[int] | None = None) -> np.ndarray:
        """float32 (len, D) features of ``modality`` for ``indices`` (default: all samples)."""
        column = _check_modality(modality)
        if indices is None:
            return np.asarray(self._numpy[column], dtype=np.float32)
        index = np.asarray(indices, dtype=np.int64).reshape(-1)
        if index.size and (index.min() < 0 or index.max() >= self.num_samples):
            raise IndexError(f"sample index outside 0..{self.num_samples - 1} of split {self.split!r}")
        return np.asarray(self._numpy[index.tolist()][column], dtype=np.float32).reshape(len(index), -1)

    def labels(self, modality: str) -> np.ndarray:
        """int64 (N,) class indices of ``modality``."""
        return np.asarray(self._numpy[f"{_check_modality(modality)}_label"], dtype=np.int64)

    @property
    def image_features(self) -> np.ndarray:
        return self.features("image")

    @property
    def text_features(self) -> np.ndarray:
        return self.features("text")

    @property
    def image_labels(self) -> np.ndarray:
        return self.labels("image")

    @property
    def text_labels(self) -> np.ndarray:
        return self.labels("text")


@dataclass(frozen=True)
class LabelledDataset:
    """The train, validation and test splits of a labelled dataset and how they were read.

    ``valid_rule`` says where the validation split came from: ``"file"``,
    ``"head of test"`` or ``"per-class file order"`` (see the module docstring).
    """

    train: LabelledSplit
    valid: LabelledSplit
    test: LabelledSplit
    num_classes: int
    layout: str
    source: str
    valid_rule: str

    def __getitem__(self, split: str) -> LabelledSplit:
        if split not in SPLITS:
            raise KeyError(f"split must be one of {SPLITS}, got {split!r}")
        return getattr(self, split)


def _check_modality(modality: str) -> str:
    if modality not in MODALITIES:
        raise ValueError(f"modality must be one of {MODALITIES}, got {modality!r}")
    return modality


# ---------------------------------------------------------------- locating the arrays


def _container_keys(path: Path) -> tuple[str, bool, set[str]]:
    """(container, transpose, keys) of a single ``.mat`` or HDF5 file.

    MATLAB v7.3 ``.mat`` files are HDF5 files (read with h5py, stored column-major, so
    transposed); older ``.mat`` files are read with scipy.
    """
    is_hdf5 = path.is_file() and h5py.is_hdf5(path)
    if path.suffix == ".mat" and not is_hdf5:
        try:
            return "mat", False, {name for name, _, _ in scipy.io.whosmat(str(path))}
        except (ValueError, OSError, TypeError, NotImplementedError) as err:
            raise DataFormatError(f"{path}: not a readable MATLAB .mat file ({err})") from None
    if path.suffix not in (".mat", *_HDF5_SUFFIXES) and not is_hdf5:
        raise DataFormatError(f"{path}: expected a .mat or HDF5 ({', '.join(_HDF5_SUFFIXES)}) feature file")
    try:
        with h5py.File(path, "r") as handle:
            keys = {name for name, item in handle.items() if isinstance(item, h5py.Dataset)}
    except OSError as err:
        raise DataFormatError(f"{path}: not a readable HDF5 file ({err})") from None
    return "hdf5", path.suffix == ".mat", keys


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


# ---------------------------------------------------------------- labels and features


def _index_labels(ref: _ArrayRef, label_base: int) -> tuple[np.ndarray, int | None]:
    """Class indices (N,) of a label array, and the one-hot width K if it was one-hot."""
    with _opened(ref) as rows:
        values = rows.read()
    if values.dtype.kind not in "iufb":
        raise DataFormatError(f"{ref.where}: labels of dtype {values.dtype}, expected numbers")
    if values.ndim == 2 and values.shape[1] > 1:
        if not np.isin(values, (0, 1)).all():
            raise DataFormatError(f"{ref.where}: one-hot labels of shape {values.shape} must hold only 0 and 1")
        positives = values.sum(axis=1)
        if (positives != 1).any():
            row = int(np.flatnonzero(positives != 1)[0])
            raise DataFormatError(
                f"{ref.where}: one-hot row {row} has {int(positives[row])} ones, expected exactly 1 "
                "(multi-label rows are not supported)"
            )
        return values.argmax(axis=1).astype(np.int64), values.shape[1]
    if values.ndim not in (1, 2):
        raise DataFormatError(f"{ref.where}: labels of shape {values.shape}, expected (N,), (N, 1) or one-hot (N, K)")
    values = values.reshape(-1)
    if values.dtype.kind == "f" and not (np.isfinite(values) & (values == np.round(values))).all():
        row = int(np.flatnonzero(~(np.isfinite(values) & (values == np.round(values))))[0])
        raise DataFormatError(f"{ref.where}: label {values[row]} at row {row} is not a whole number")
    labels = values.astype(np.int64) - label_base
    if labels.size and labels.min() < 0:
        row = int(np.argmin(labels))
        raise DataFormatError(
            f"{ref.where}: label {labels[row] + label_base} at row {row} is below label_base={label_base} "
            "(labels count classes from label_base)"
        )
    return labels, None


def _feature_shape(ref: _ArrayRef, count: int, labels_where: str) -> int:
    shape = _shape_of(ref)
    if len(shape) != 2 or shape[1] == 0:
        raise DataFormatError(f"{ref.where}: features of shape {shape}, expected (N, D) with one row per sample")
    if shape[0] != count:
        raise DataFormatError(f"{ref.where}: {shape[0]} feature rows but {labels_where} has {count} labels")
    return shape[1]


@dataclass
class _ResolvedSplit:
    raw: _RawSplit
    image_labels: np.ndarray
    text_labels: np.ndarray
    image_dim: int
    text_dim: int
    rows: np.ndarray | None = None  # a subset of the file's rows (derived splits)

    def subset(self, positions: np.ndarray) -> _ResolvedSplit:
        """The samples at ``positions`` (sorted) of this split."""
        base = np.arange(len(self.image_labels)) if self.rows is None else self.rows
        return _ResolvedSplit(
            self.raw,
            self.image_labels[positions],
            self.text_labels[positions],
            self.image_dim,
            self.text_dim,
            base[positions],
        )


def _resolve(
    raw: dict[str, _RawSplit], label_base: int, num_classes: int | None
) -> tuple[dict[str, _ResolvedSplit], int]:
    resolved, widths = {}, {}
    for split, parts in raw.items():
        image_labels, image_width = _index_labels(parts.image_labels, label_base)
        text_labels, text_width = _index_labels(parts.text_labels, label_base)
        widths.update({parts.image_labels.where: image_width, parts.text_labels.where: text_width})
        if len(image_labels) != len(text_labels):
            raise DataFormatError(
                f"{parts.image_labels.where} has {len(image_labels)} labels but {parts.text_labels.where} has "
                f"{len(text_labels)}: the modalities of a split must be paired sample by sample"
            )
        image_dim = _feature_shape(parts.image, len(image_labels), parts.image_labels.where)
        text_dim = _feature_shape(parts.text, len(text_labels), parts.text_labels.where)
        resolved[split] = _ResolvedSplit(parts, image_labels, text_labels, image_dim, text_dim)
    first = resolved["train"]
    for item in resolved.values():
        if (item.image_dim, item.text_dim) != (first.image_dim, first.text_dim):
            raise DataFormatError(
                f"{item.raw.image.where} / {item.raw.text.where}: feature dimensions ({item.image_dim}, "
                f"{item.text_dim}) differ from the train split's ({first.image_dim}, {first.text_dim})"
            )
    one_hot = {where: width for where, width in widths.items() if width is not None}
    if num_classes is None:
        if one_hot:
            num_classes = max(one_hot.values())
        else:
            num_classes = 1 + max(
                int(a.max()) for r in resolved.values() for a in (r.image_labels, r.text_labels) if a.size
            )
    for where, width in one_hot.items():
        if width != num_classes:
            raise DataFormatError(f"{where}: one-hot labels with {width} columns, expected {num_classes} classes")
    for item in resolved.values():
        for ref, labels in ((item.raw.image_labels, item.image_labels), (item.raw.text_labels, item.text_labels)):
            if labels.size and labels.max() >= num_classes:
                row = int(np.argmax(labels))
                raise DataFormatError(
                    f"{ref.where}: label {labels[row] + label_base} at row {row} is out of range: expected "
                    f"{label_base}..{label_base + num_classes - 1} for {num_classes} classes (label_base={label_base})"
                )
    return resolved, num_classes


def _stratified_rows(labels: np.ndarray, fractions: tuple[float, float, float]) -> dict[str, np.ndarray]:
    if len(fractions) != 3 or min(fractions) < 0 or not np.isclose(sum(fractions), 1.0) or fractions[0] == 0:
        raise ValueError(f"split_fractions must be three non-negative fractions summing to 1, got {fractions}")
    rows: dict[str, list[np.ndarray]] = {split: [] for split in SPLITS}
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        n_train = round(len(members) * fractions[0])
        n_valid = round(len(members) * fractions[1])
        rows["train"].append(members[:n_train])
        rows["valid"].append(members[n_train : n_train + n_valid])
        rows["test"].append(members[n_train + n_valid :])
    return {split: np.sort(np.concatenate(parts)) for split, parts in rows.items()}


def _derive_splits(
    resolved: dict[str, _ResolvedSplit], valid_size: int | None, fractions: tuple[float, float, float]
) -> tuple[dict[str, _ResolvedSplit], str]:
    if "valid" in resolved:
        return resolved, "file"
    if "test" in resolved:
        test = resolved["test"]
        size = len(test.image_labels)
        valid_size = size // 2 if valid_size is None else valid_size
        if not 0 < valid_size < size:
            raise ValueError(
                f"valid_size must be in 1..{size - 1} (the test split has {size} samples), got {valid_size}"
            )
        return {
            "train": resolved["train"],
            "valid": test.subset(np.arange(valid_size)),
            "test": test.subset(np.arange(valid_size, size)),
        }, "head of test"
    whole = resolved["train"]
    rows = _stratified_rows(whole.image_labels, fractions)
    empty = [split for split, r in rows.items() if r.size == 0]
    if empty:
        raise ValueError(f"split_fractions {fractions} leave the {' and '.join(empty)} split empty")
    return {split: whole.subset(r) for split, r in rows.items()}, "per-class file order"


# ---------------------------------------------------------------- Arrow conversion


def _identity(ref: _ArrayRef) -> dict[str, object]:
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
    image: _ArrayRef,
    text: _ArrayRef,
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
                blocks[name] = stored
            for offset in range(len(chunk)):
                yield {
                    "image": blocks["image"][offset],
                    "text": blocks["text"][offset],
                    "image_label": int(image_labels[start + offset]),
                    "text_label": int(text_labels[start + offset]),
                }


def _build(
    layout: str,
    source: str,
    raw: dict[str, _RawSplit],
    *,
    num_classes: int | None,
    label_base: int,
    valid_size: int | None,
    split_fractions: tuple[float, float, float],
    feature_dtype: str,
    cache_dir: str | Path | None,
    check_finite: bool,
    chunk_size: int,
) -> LabelledDataset:
    if feature_dtype not in FEATURE_DTYPES:
        raise ValueError(f"feature_dtype must be one of {FEATURE_DTYPES}, got {feature_dtype!r}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if num_classes is not None and num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    resolved, num_classes = _resolve(raw, label_base, num_classes)
    final, rule = _derive_splits(resolved, valid_size, split_fractions)
    splits = {
        split: LabelledSplit(
            split,
            _split_dataset(split, item, num_classes, feature_dtype, cache_dir, check_finite, chunk_size),
            num_classes,
            source,
        )
        for split, item in final.items()
    }
    return LabelledDataset(splits["train"], splits["valid"], splits["test"], num_classes, layout, source, rule)


def load_labelled_dataset(
    path: str | Path,
    *,
    layout: str | None = None,
    num_classes: int | None = None,
    label_base: int = 0,
    valid_size: int | None = None,
    feature_dtype: str = "float32",
    cache_dir: str | Path | None = None,
    check_finite: bool = True,
    chunk_size: int = 1024,
) -> LabelledDataset:
    """Read a labelled feature file (``imgs_deep`` or ``tr_te`` layout) or directory (``per_file``).

    ``layout`` is found from the keys when not given. ``num_classes`` defaults to the
    one-hot width or the largest label + 1 over all splits; ``label_base`` is the first
    class's index in the file. Without a validation split in the file, the first
    ``valid_size`` test samples validate (default half the test split). The features
    are converted once into Arrow datasets stored as ``feature_dtype`` under
    ``cache_dir`` (default ``$HFNCL_CACHE/labelled``), keyed by the files' paths, sizes
    and modification times and the options, and memory-mapped from there.
    """
    path = Path(path)
    if path.is_dir():
        if layout not in (None, "per_file"):
            raise ValueError(f"{path} is a directory: its layout is 'per_file', got {layout!r}")
        layout, raw = "per_file", _per_file_splits(path)
    elif path.is_file():
        layout, raw = _single_file_splits(path, layout)
    else:
        raise DataFormatError(f"{path}: labelled feature file or directory not found")
    if "train" not in raw or "test" not in raw:
        raise DataFormatError(f"{path}: expected a train and a test split (layout {layout})")
    return _build(
        layout,
        str(path),
        raw,
        num_classes=num_classes,
        label_base=label_base,
        valid_size=valid_size,
        split_fractions=(0.8, 0.1, 0.1),
        feature_dtype=feature_dtype,
        cache_dir=cache_dir,
        check_finite=check_finite,
        chunk_size=chunk_size,
    )


def load_labelled_arrays(
    image_features: str | Path,
    text_features: str | Path,
    labels: str | Path,
    *,
    text_labels: str | Path | None = None,
    num_classes: int | None = None,
    label_base: int = 0,
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    feature_dtype: str = "float32",
    cache_dir: str | Path | None = None,
    check_finite: bool = True,
    chunk_size: int = 1024,
) -> LabelledDataset:
    """Read one unsplit set from ``.npy`` files and split it per class in file order.

    ``labels`` holds the image labels, and the text labels too unless ``text_labels``
    is given. The split rule and the other options are those of the module docstring
    and :func:`load_labelled_dataset`.
    """
    refs = {}
    for part, value in (
        ("image", image_features),
        ("text", text_features),
        ("image_labels", labels),
        ("text_labels", text_labels if text_labels is not None else labels),
    ):
        path = Path(value)
        if not path.is_file():
            raise DataFormatError(f"{path}: {part.replace('_', ' ')} file not found")
        if path.suffix != ".npy":
            raise DataFormatError(f"{path}: expected a .npy file for the {part.replace('_', ' ')}")
        refs[part] = _ArrayRef(str(path), None, "npy")
    source = ", ".join(str(Path(v)) for v in (image_features, text_features, labels))
    return _build(
        "arrays",
        source,
        {"train": _RawSplit(**refs)},
        num_classes=num_classes,
        label_base=label_base,
        valid_size=None,
        split_fractions=split_fractions,
        feature_dtype=feature_dtype,
        cache_dir=cache_dir,
        check_finite=check_finite,
        chunk_size=chunk_size,
    )
