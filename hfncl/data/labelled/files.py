"""Where the arrays of a labelled feature file live and how they are opened: ``.npy`` files
(memory-mapped), ``.npz`` archives (numpy, one array read at a time), MATLAB ``.mat`` files (scipy; v7.3
files are HDF5, read with h5py and transposed back to row-major) and HDF5 files, their keys and their
shapes. :func:`file_arrays` is what a label layout (:mod:`hfncl.data.labelled.layouts`) reads a file's
arrays with."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import h5py
import numpy as np
import scipy.io
import scipy.sparse

from hfncl.data.precomp import DataFormatError

_HDF5_SUFFIXES = (".h5", ".hdf5", ".h5py", ".hdf")


@dataclass(frozen=True)
class ArrayRef:
    """Where one array lives: a ``.npy`` file, or a key of a ``.npz`` / ``.mat`` / HDF5 file (opened only when
    the split is converted, so a layout names arrays without reading them)."""

    path: str
    key: str | None
    container: str  # "npy", "npz", "mat" or "hdf5"
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
def _opened(ref: ArrayRef) -> Iterator[_Rows]:
    if ref.container == "npy":
        yield _Rows(_load_npy(Path(ref.path)), False)
    elif ref.container == "npz":
        with np.load(ref.path, allow_pickle=False) as archive:
            yield _Rows(archive[ref.key], False)
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


def _shape_of(ref: ArrayRef) -> tuple[int, ...]:
    if ref.container == "mat":  # from the header, without loading the variable
        return next(shape for name, shape, _ in scipy.io.whosmat(ref.path) if name == ref.key)
    with _opened(ref) as rows:
        return rows.shape


def _container_keys(path: Path) -> tuple[str, bool, set[str]]:
    """(container, transpose, keys) of a single ``.npz``, ``.mat`` or HDF5 file.

    MATLAB v7.3 ``.mat`` files are HDF5 files (read with h5py, stored column-major, so
    transposed); older ``.mat`` files are read with scipy.
    """
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as archive:
                return "npz", False, set(archive.files)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
            raise DataFormatError(f"{path}: not a readable .npz archive ({err})") from None
    is_hdf5 = path.is_file() and h5py.is_hdf5(path)
    if path.suffix == ".mat" and not is_hdf5:
        try:
            return "mat", False, {name for name, _, _ in scipy.io.whosmat(str(path))}
        except (ValueError, OSError, TypeError, NotImplementedError) as err:
            raise DataFormatError(f"{path}: not a readable MATLAB .mat file ({err})") from None
    if path.suffix not in (".mat", *_HDF5_SUFFIXES) and not is_hdf5:
        raise DataFormatError(
            f"{path}: expected a .npz, .mat or HDF5 ({', '.join(_HDF5_SUFFIXES)}) feature file"
        )
    try:
        with h5py.File(path, "r") as handle:
            keys = {name for name, item in handle.items() if isinstance(item, h5py.Dataset)}
    except OSError as err:
        raise DataFormatError(f"{path}: not a readable HDF5 file ({err})") from None
    return "hdf5", path.suffix == ".mat", keys


def file_arrays(path: Path) -> dict[str, ArrayRef]:
    """The arrays of one ``.npz``, ``.mat`` or HDF5 file by key, none of them read.

    Raises:
        DataFormatError: the file is none of these, or cannot be read.
    """
    container, transpose, keys = _container_keys(path)
    return {key: ArrayRef(str(path), key, container, transpose) for key in sorted(keys)}


def _feature_shape(ref: ArrayRef, count: int, labels_where: str) -> int:
    shape = _shape_of(ref)
    if len(shape) != 2 or shape[1] == 0:
        raise DataFormatError(f"{ref.where}: features of shape {shape}, expected (N, D) with one row per sample")
    if shape[0] != count:
        raise DataFormatError(f"{ref.where}: {shape[0]} feature rows but {labels_where} has {count} labels")
    return shape[1]
