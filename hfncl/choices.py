"""The values a run's data fields take, importable without torch, transformers or datasets: the command line
checks its arguments against them and the data readers read by them.

Format names come from :mod:`hfncl.registry` (the ``hfncl.data_formats`` entry-point group), label-layout
names from the ``hfncl.label_layouts`` group, hfncl's own included in both.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from importlib.metadata import EntryPoint

from hfncl.registry import DATA_FORMATS, LABEL_LAYOUTS, registered_entry_points

NOISE_KINDS = ("caption", "image")
"""Correspondence noise of image-caption pairs: re-paired captions, or permuted images (:mod:`hfncl.data.noise`)."""
LABEL_NOISE_KINDS = ("symmetric", "asymmetric")
"""Label noise of category-labelled samples (:mod:`hfncl.data.label_noise`)."""
FEATURE_DTYPES = ("float32", "float16")
"""Arrow storage of precomputed features (:mod:`hfncl.data.precomp`)."""

AUTO = "auto"
"""``DataArguments.data_format`` that reads the one installed format whose ``detect`` recognises the data."""


def installed_formats() -> dict[str, EntryPoint]:
    """The entry points of the ``hfncl.data_formats`` group, by name (hfncl's ``precomp`` and ``imagefolder`` among
    them)."""
    return registered_entry_points(DATA_FORMATS, "Data format")


def format_names() -> tuple[str, ...]:
    """Every value ``DataArguments.data_format`` may take: ``auto``, then the installed formats."""
    return (AUTO, *sorted(installed_formats()))


def check_format_name(name: str) -> None:
    """Refuse a format no installed package registers, in one line naming the field and the formats."""
    if name != AUTO and name not in installed_formats():
        raise ValueError(
            f"DataArguments.data_format must be one of {format_names()}, got {name!r} (a format of another package "
            f"is installed with it, registered in the {DATA_FORMATS!r} entry-point group)"
        )


def installed_layouts() -> dict[str, EntryPoint]:
    """The entry points of the ``hfncl.label_layouts`` group, by name (hfncl's ``imgs_deep``, ``tr_te`` and
    ``per_file`` among them)."""
    return registered_entry_points(LABEL_LAYOUTS, "Label layout")


def layout_names() -> tuple[str, ...]:
    """Every value ``LabelDataArguments.layout`` may take (``--layout`` choices): the installed layouts."""
    return tuple(sorted(installed_layouts()))


class InstalledNames(Collection[str]):
    """The names of a group's installed extensions, read from the registry whenever they are asked for: the
    ``choices`` of a flag that offers what is installed when the parser runs, not when hfncl was imported."""

    def __init__(self, names: Callable[[], tuple[str, ...]]) -> None:
        self._names = names

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


LAYOUT_CHOICES = InstalledNames(layout_names)
"""``--layout``'s choices: the installed layouts."""


def check_layout_name(name: str) -> None:
    """Refuse a layout no installed package registers, in one line naming the field and the installed ones."""
    if name not in installed_layouts():
        raise ValueError(
            f"LabelDataArguments.layout must be one of {layout_names()}, got {name!r} (a layout of another package "
            f"is installed with it, registered in the {LABEL_LAYOUTS!r} entry-point group)"
        )
