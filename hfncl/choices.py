"""The values a run's data fields take, importable without torch, transformers or datasets: the command line
checks its arguments against them and the data readers read by them.

Format names come from :mod:`hfncl.registry` (the ``hfncl.data_formats`` entry-point group) beside the
built-in ones.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint

from hfncl.registry import DATA_FORMATS, registered_entry_points

NOISE_KINDS = ("caption", "image")
"""Correspondence noise of image-caption pairs: re-paired captions, or permuted images (:mod:`hfncl.data.noise`)."""
LABEL_NOISE_KINDS = ("symmetric", "asymmetric")
"""Label noise of category-labelled samples (:mod:`hfncl.data.label_noise`)."""
FEATURE_DTYPES = ("float32", "float16")
"""Arrow storage of precomputed features (:mod:`hfncl.data.precomp`)."""

FORMAT_GROUP = DATA_FORMATS
AUTO = "auto"
BUILT_IN_FORMAT_NAMES = ("precomp", "imagefolder")
"""The data formats of :data:`hfncl.data.formats.BUILT_IN_FORMATS`, in its order."""


def installed_formats() -> dict[str, EntryPoint]:
    """The entry points of the ``hfncl.data_formats`` group, by name (built-in names cannot be replaced)."""
    registered = registered_entry_points(FORMAT_GROUP, "Data format")
    return {name: point for name, point in registered.items() if name not in BUILT_IN_FORMAT_NAMES}


def format_names() -> tuple[str, ...]:
    """Every value ``DataArguments.data_format`` may take: ``auto``, the built-in formats, the installed ones."""
    return (AUTO, *BUILT_IN_FORMAT_NAMES, *sorted(installed_formats()))


def check_format_name(name: str) -> None:
    """Refuse a format that is neither built in nor installed, in one line naming the field and the formats."""
    if name != AUTO and name not in BUILT_IN_FORMAT_NAMES and name not in installed_formats():
        raise ValueError(
            f"DataArguments.data_format must be one of {format_names()}, got {name!r} (a format of another package "
            f"is installed with it, registered in the {FORMAT_GROUP!r} entry-point group)"
        )
