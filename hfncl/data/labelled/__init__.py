"""Readers of category-labelled cross-modal feature files (Wikipedia, Pascal-Sentence, XMediaNet, ...).

Each sample has one precomputed feature vector per modality (image, text) and one
category label per modality; the two modalities of sample j are a pair. The feature
files come in layouts (:mod:`hfncl.data.labelled.layouts`: entry points of the
``hfncl.label_layouts`` group, a package may add its own), all read into memory-mapped
Arrow datasets (Hugging Face ``datasets``) with explicit features. hfncl's own
(:mod:`hfncl.data.labelled.built_in_layouts`):

``imgs_deep``  one HDF5 (``.h5``, ``.hdf5``, ``.h5py``), MATLAB ``.mat`` or ``.npz`` file with keys
               ``{split}_imgs_deep``, ``{split}_texts`` (or ``{split}_text``,
               ``{split}_texts_doc``), ``{split}_imgs_labels`` and ``{split}_texts_labels``
               for split ``train``, ``valid`` (optional) and ``test`` (MRL's files).
``tr_te``      one ``.mat``, HDF5 or ``.npz`` file with keys ``tr_img``, ``tr_txt``, ``tr_img_lab``,
               ``tr_txt_lab``, the same with ``val_`` (optional) and ``te_``.
``per_file``   a directory with one array per file, ``{split}_{img,txt,img_lab,txt_lab}``
               as ``.mat`` (the variable is named like the file, DSCMR's layout) or
               ``.npy``, split ``train``, ``valid`` or ``val`` (optional) and ``test``.

Without a layout named, the one installed layout that recognises the path reads it.
:func:`load_labelled_arrays` reads three or four ``.npy`` files of any name (layout
``arrays``): image features, text features, labels (and text labels) of one unsplit
set, e.g. ``shared/data/pascal_sentence``.

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
  split: MRL's rule (Wikipedia 231 of 462, XMediaNet 4000 of 8000); ``valid_size=0``:
  no validation split (a file's own included), the whole test split tests and a run keeps
  no best checkpoint (the last epoch's model is tested): a protocol without model selection
  (all 462 Wikipedia test samples);
* one unsplit set (``arrays``): per class, in file order, the first
  ``round(n_c * f_train)`` samples train, the next ``round(n_c * f_valid)`` validate
  and the rest test, ``split_fractions=(f_train, f_valid, f_test)`` defaulting to
  (0.8, 0.1, 0.1): Pascal-Sentence's 40 / 5 / 5 per class (800 / 100 / 100) of DSCMR.
  Classes are taken from the image labels.

Every malformed input raises :class:`DataFormatError` naming the file, the key and
what was expected (missing key, mismatched counts, labels out of range, ...).
"""

from __future__ import annotations

from pathlib import Path

from hfncl.data.labelled.cache import _split_dataset
from hfncl.data.labelled.dataset import MODALITIES, SPLITS, LabelledDataset, LabelledSplit
from hfncl.data.labelled.files import ArrayRef, file_arrays
from hfncl.data.labelled.labels import _resolve
from hfncl.data.labelled.layouts import LabelLayout, SplitArrays, detect_layout, get_layout, read_splits
from hfncl.data.labelled.validation_split import _derive_splits
from hfncl.data.precomp import FEATURE_DTYPES, DataFormatError

__all__ = [
    "MODALITIES",
    "SPLITS",
    "ArrayRef",
    "LabelLayout",
    "LabelledDataset",
    "LabelledSplit",
    "SplitArrays",
    "detect_layout",
    "file_arrays",
    "get_layout",
    "load_labelled_arrays",
    "load_labelled_dataset",
]


def _build(
    layout: str,
    source: str,
    raw: dict[str, SplitArrays],
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
        if item is not None
    }
    return LabelledDataset(splits["train"], splits.get("valid"), splits["test"], num_classes, layout, source, rule)


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
    """Read a labelled feature file or directory in an installed layout (``imgs_deep``, ``tr_te``, ``per_file``, or
    one a package registers).

    ``layout`` is the one installed layout that recognises the path when not given. ``num_classes`` defaults to the
    one-hot width or the largest label + 1 over all splits; ``label_base`` is the first
    class's index in the file. Without a validation split in the file, the first
    ``valid_size`` test samples validate (default half the test split); ``valid_size=0``
    reads no validation split at all. The features
    are converted once into Arrow datasets stored as ``feature_dtype`` under
    ``cache_dir`` (default ``$HFNCL_CACHE/labelled``), keyed by the files' paths, sizes
    and modification times and the options, and memory-mapped from there.
    """
    path = Path(path)
    name, raw = read_splits(path, layout)
    return _build(
        name,
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
        refs[part] = ArrayRef(str(path), None, "npy")
    source = ", ".join(str(Path(v)) for v in (image_features, text_features, labels))
    return _build(
        "arrays",
        source,
        {"train": SplitArrays(**refs)},
        num_classes=num_classes,
        label_base=label_base,
        valid_size=None,
        split_fractions=split_fractions,
        feature_dtype=feature_dtype,
        cache_dir=cache_dir,
        check_finite=check_finite,
        chunk_size=chunk_size,
    )
