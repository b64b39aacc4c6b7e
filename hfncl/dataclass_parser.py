"""An ``argparse`` parser of dataclass fields, built as ``transformers.HfArgumentParser`` builds it, without importing
transformers: ``hfncl train --help`` and its argument errors wait for no framework.

A field ``name`` is the flag ``--name`` (and ``--na-me`` for a name with underscores), plus the
flags of its metadata's ``aliases``, with its metadata's ``help``:

* ``bool``: ``--name`` alone is true, or ``--name true|false`` (yes/no, t/f, y/n, 1/0); a field
  whose default is true also gets ``--no_name``. ``bool | None`` takes a value.
* ``list[X]`` (or ``list[X] | None``): one or more ``X``.
* any other ``X`` (or ``X | None``): one value, converted by calling ``X``.

A field with no default is a required flag. Other unions, ``Literal`` and ``Enum`` fields are not
supported (no argument dataclass of hfncl has one).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any


def string_to_bool(value: str | bool) -> bool:
    """A boolean flag's value, as ``HfArgumentParser`` reads it.

    Raises:
        argparse.ArgumentTypeError: not one of yes/no, true/false, t/f, y/n, 1/0 (any case).
    """
    if isinstance(value, bool):
        return value
    if value.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if value.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {value} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive)."
    )


def _kind(spec: dataclasses.Field[Any], annotation: Any) -> tuple[Any, bool]:
    """The type a field's flag converts its value to (``X`` of ``X | None``), and whether the field is a boolean
    (``bool`` or ``bool | None``).

    Raises:
        TypeError: a union other than ``X | None``.
    """
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [member for member in typing.get_args(annotation) if member is not type(None)]
        if len(members) != 1 or len(typing.get_args(annotation)) != 2:
            raise TypeError(f"field {spec.name!r}: only X | None unions can be parsed, got {annotation}")
        return members[0], members[0] is bool
    return annotation, annotation is bool


def add_field_argument(parser: argparse.ArgumentParser, spec: dataclasses.Field[Any], annotation: Any) -> None:
    """Add the flag of dataclass field ``spec`` (resolved annotation ``annotation``) to ``parser``, as
    ``HfArgumentParser`` adds it (see the module docstring)."""
    flags = [f"--{spec.name}"] + ([f"--{spec.name.replace('_', '-')}"] if "_" in spec.name else [])
    kwargs = dict(spec.metadata)
    aliases = kwargs.pop("aliases", [])
    flags += [aliases] if isinstance(aliases, str) else list(aliases)
    kind, boolean = _kind(spec, annotation)
    factory = spec.default_factory
    default = factory() if callable(factory) else spec.default  # MISSING: a required flag
    complement = dict(kwargs)
    if boolean:
        kwargs["type"] = string_to_bool
        if annotation is bool or (default is not dataclasses.MISSING and default is not None):
            kwargs.update(default=False if default is dataclasses.MISSING else default, nargs="?", const=True)
    else:
        if typing.get_origin(kind) is list:
            kwargs.update(type=typing.get_args(kind)[0], nargs="+")
        else:
            kwargs["type"] = kind
        if default is dataclasses.MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = default
    parser.add_argument(*flags, **kwargs)
    if boolean and spec.default is True:  # after the field's own flag: both store to the same destination
        complement.update(action="store_false", dest=spec.name, default=False)
        parser.add_argument(f"--no_{spec.name}", f"--no-{spec.name.replace('_', '-')}", **complement)


class DataclassArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` with a flag per field of each of ``dataclass_types``, which
    :meth:`parse_args_into_dataclasses` returns as instances of them (``HfArgumentParser``'s interface)."""

    def __init__(self, dataclass_types: Sequence[type[Any]], **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(**kwargs)
        self.dataclass_types = list(dataclass_types)
        for dataclass_type in self.dataclass_types:
            hints = typing.get_type_hints(dataclass_type)
            for spec in dataclasses.fields(dataclass_type):
                if spec.init:
                    add_field_argument(self, spec, hints[spec.name])

    def parse_args_into_dataclasses(self, args: Sequence[str] | None = None) -> tuple[Any, ...]:
        """One instance of each dataclass type from ``args`` (default ``sys.argv[1:]``), in their order, then a
        namespace of the parser's other arguments if it holds any.

        Raises:
            ValueError: ``args`` hold arguments no flag takes (after the dataclasses are built, so that their own
                checks come first).
        """
        namespace, remaining = self.parse_known_args(args=None if args is None else list(args))
        values = vars(namespace)
        outputs: list[Any] = []
        for dataclass_type in self.dataclass_types:
            names = {spec.name for spec in dataclasses.fields(dataclass_type) if spec.init}
            outputs.append(dataclass_type(**{name: values.pop(name) for name in names if name in values}))
        if values:
            outputs.append(namespace)
        if remaining:
            raise ValueError(f"Some specified arguments are not used by the argument parser: {remaining}")
        return tuple(outputs)
