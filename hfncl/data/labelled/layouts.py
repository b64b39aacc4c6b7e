"""The label-layout contract: how the splits of a labelled feature file (or directory) are stored, and the
layouts by name, every one an entry point of the ``hfncl.label_layouts`` group (``LabelDataArguments.layout``
names one; hfncl's own ``imgs_deep``, ``tr_te`` and ``per_file`` are registered in ``pyproject.toml`` exactly
as a third-party layout is).

A layout is an object implementing :class:`LabelLayout`: it recognises a path from its keys or files
(``detect``) and says where each split's four arrays are (``splits``), as references (:class:`ArrayRef`) into
``.npy``, ``.npz``, ``.mat`` or HDF5 files (:func:`hfncl.data.labelled.files.file_arrays` lists a file's).
hfncl reads them: labels to class indices, counts and dimensions checked, the Arrow cache, the validation
split where the files have none. A package adds one without any change to hfncl::

    [project.entry-points."hfncl.label_layouts"]
    npz_views = "my_package.layouts:NPZ_VIEWS"     # an object implementing LabelLayout

and a run reads it with ``--layout npz_views``, or without ``--layout`` when its ``detect`` is the only one
that answers. The names (:func:`hfncl.choices.installed_layouts`, :func:`hfncl.choices.check_layout_name`)
live in :mod:`hfncl.choices`, which checks ``--layout`` without importing the readers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from hfncl import choices
from hfncl.choices import check_layout_name
from hfncl.data.labelled.dataset import SPLITS
from hfncl.data.labelled.files import ArrayRef, file_arrays
from hfncl.data.precomp import DataFormatError


@dataclass
class SplitArrays:
    """Where one split's arrays are: image features (N, D_I), text features (N, D_T), and image and text labels,
    (N,), (N, 1) or one-hot (N, K), row j of each the same sample (``text_labels`` may be ``image_labels``
    where the files have none: the pairs share their category)."""

    image: ArrayRef
    text: ArrayRef
    image_labels: ArrayRef
    text_labels: ArrayRef


class LabelLayout(Protocol):
    """One way of storing the splits of category-labelled features."""

    @property
    def description(self) -> str:
        """What a path in this layout holds, in one line (the error that finds no layout lists each one's)."""

    def detect(self, path: Path) -> bool:
        """Whether the file or directory ``path`` is in this layout (``False``, never an error, for any other
        path: a run without ``--layout`` takes the one installed layout that answers)."""

    def splits(self, path: Path) -> dict[str, SplitArrays]:
        """The arrays of splits ``train``, ``test`` and, where the files have one, ``valid``.

        Raises:
            DataFormatError: naming the file and the key or file missing.
        """


def get_layout(name: str) -> LabelLayout:
    """The layout registered as ``name``.

    Raises:
        ValueError: no such layout (one line listing the installed ones), or its entry point fails to import.
    """
    check_layout_name(name)
    point = choices.installed_layouts()[name]
    try:
        return cast(LabelLayout, point.load())
    except Exception as error:
        raise ValueError(
            f"label layout {name!r} is installed but failed to import ({point.value}): {type(error).__name__}: {error}"
        ) from error


def detect_layout(path: Path) -> str:
    """The name of the one installed layout whose ``detect`` recognises ``path``.

    Raises:
        DataFormatError: none does (listing what each expects, and a file's keys), or several do.
    """
    names = sorted(choices.installed_layouts())
    found = [name for name in names if get_layout(name).detect(path)]
    if len(found) > 1:
        raise DataFormatError(f"{path}: the layouts {found} all recognise it: name one (--layout)")
    if not found:
        expected = "; ".join(f"{name}: {get_layout(name).description}" for name in names)
        try:
            present = f"; keys present: {sorted(file_arrays(path))}" if path.is_file() else ""
        except DataFormatError:
            present = ""
        raise DataFormatError(f"{path}: cannot tell the layout, expected one of ({expected}){present}")
    return found[0]


def read_splits(path: Path, layout: str | None) -> tuple[str, dict[str, SplitArrays]]:
    """The layout of ``path`` (``layout``, or the one that recognises it) and its splits' arrays.

    Raises:
        DataFormatError: ``path`` does not exist, no one layout recognises it, or its layout finds no train and
            test split.
        ValueError: ``layout`` is not installed.
    """
    if layout is not None:
        check_layout_name(layout)
    if not path.exists():
        raise DataFormatError(f"{path}: labelled feature file or directory not found")
    name = detect_layout(path) if layout is None else layout
    splits = get_layout(name).splits(path)
    if "train" not in splits or "test" not in splits or not set(splits) <= set(SPLITS):
        raise DataFormatError(
            f"{path}: layout {name} found the splits {sorted(splits)}, expected train, test and optionally valid"
        )
    return name, splits
