"""Typed, namespaced plugin options: one frozen dataclass per plugin, checked by the core.

A plugin declares its options once::

    @dataclass(frozen=True)
    class NCROptions(MethodOptions, namespace="ncr"):
        alpha: float = option(0.2, minimum=0)
        division_statistics: str = option("steps", choices=("pass", "steps"))

and returns the class from its ``options`` hook. Users set them by full name
(``TrainConfig.options = {"ncr.alpha": 0.3}``, ``--options``, configs); the core checks
every value against its field's type, range and choices before training starts
(:func:`hfncl.plugins.resolve_options`) and hooks read the checked object with
``trainer.options_of(NCROptions)``, or at inference with
``NCROptions.read(model.config.plugin_options)``.
"""

from __future__ import annotations

import math
import operator
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, Field, field, fields
from typing import Any, ClassVar, TypeVar

OptionsT = TypeVar("OptionsT", bound="MethodOptions")
BOUNDS = {
    "minimum": (">=", operator.ge),
    "exclusive_minimum": (">", operator.gt),
    "maximum": ("<=", operator.le),
    "exclusive_maximum": ("<", operator.lt),
}


class OptionError(ValueError):
    """An option value that its declaration refuses; the message names the option, the value and what was expected."""


def option(default: Any, *, choices: tuple[Any, ...] | None = None, help: str = "", **bounds: float) -> Any:
    """A dataclass field for an option: its ``default`` and, to check, ``choices`` or bounds; ``help``, one line
    that ``hfncl plugins`` prints after the option's type and range.

    ``bounds`` are any of ``minimum``, ``exclusive_minimum``, ``maximum``, ``exclusive_maximum``.
    """
    unknown = set(bounds) - set(BOUNDS)
    if unknown:
        raise TypeError(f"option() takes bounds {sorted(BOUNDS)}, got {sorted(unknown)}")
    return field(default=default, metadata={"choices": choices, "help": help, **bounds})


def option_help(options: type[MethodOptions]) -> dict[str, str]:
    """What each option of ``options`` takes, by full name, read from its declaration: the type, the choices or
    bounds, and its ``help`` (``float >= 0, < 1 or null; the share of ...``)."""
    hints = typing.get_type_hints(options)
    described = {}
    for declared in fields(options):  # type: ignore[arg-type]
        expected = hints[declared.name]
        members = typing.get_args(expected) if typing.get_origin(expected) in (typing.Union, types.UnionType) else ()
        kinds = [member for member in members if member is not type(None)] or [expected]
        text = getattr(kinds[0], "__name__", str(kinds[0]))
        choices = declared.metadata.get("choices")
        if choices is not None:
            text = "one of " + ", ".join(str(choice) for choice in choices)
        limits = {bound: declared.metadata.get(bound) for bound in BOUNDS}
        bounds = [f"{BOUNDS[bound][0]} {limit}" for bound, limit in limits.items() if limit is not None]
        text += (" " + ", ".join(bounds) if bounds else "") + (" or null" if len(kinds) < len(members) else "")
        note = declared.metadata.get("help")
        described[options.full_name(declared.name)] = f"{text}; {note}" if note else text
    return described


class MethodOptions:
    """Base of a plugin's options dataclass; ``namespace`` prefixes every field's user-facing name."""

    namespace: ClassVar[str] = ""

    def __init_subclass__(cls, namespace: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if namespace:
            cls.namespace = namespace

    @classmethod
    def full_name(cls, name: str) -> str:
        """The name users set a field by: ``namespace.field``."""
        return f"{cls.namespace}.{name}"

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every option's default, by full name."""
        return {cls.full_name(f.name): f.default for f in fields(cls)}  # type: ignore[arg-type]

    def by_full_name(self) -> dict[str, Any]:
        """This object's values by full name."""
        return {self.full_name(f.name): getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def read(cls: type[OptionsT], values: Mapping[str, Any]) -> OptionsT:
        """The options in ``values`` (by full name; missing ones take their defaults), each checked.

        Raises:
            OptionError: naming the first option whose value does not fit its declaration.
        """
        hints = typing.get_type_hints(cls)
        checked = {}
        for declared in fields(cls):  # type: ignore[arg-type]
            name = cls.full_name(declared.name)
            value = values.get(name, declared.default)
            checked[declared.name] = check_value(name, value, hints[declared.name], declared)
        return cls(**checked)


def check_value(name: str, value: Any, expected: Any, declared: Field) -> Any:
    """``value`` of option ``name`` checked against its type ``expected`` and its field's metadata.

    A float option takes an int or a float (finite) and gives a float; ``X | None`` takes ``None``.
    """
    if typing.get_origin(expected) in (typing.Union, types.UnionType):
        members = [member for member in typing.get_args(expected) if member is not type(None)]
        if value is None and len(members) < len(typing.get_args(expected)):
            return None
        expected = members[0]
    value = _typed(name, value, expected, declared.default)
    choices = declared.metadata.get("choices")
    if choices is not None and value not in choices:
        raise OptionError(f"Option {name!r} must be one of {tuple(choices)}, got {value!r}")
    for bound, (relation, holds) in BOUNDS.items():
        limit = declared.metadata.get(bound)
        if limit is not None and not holds(value, limit):
            raise OptionError(f"Option {name!r} must be {relation} {limit}, got {value!r}")
    return value


def _typed(name: str, value: Any, expected: type, default: Any) -> Any:
    like = "" if default is MISSING or default is None else f" like its default {default!r}"
    got = f"got {value!r} ({type(value).__name__})"
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise OptionError(f"Option {name!r} must be a finite number{like}, {got}")
        return float(value)
    if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise OptionError(f"Option {name!r} must be an integer{like}, {got}")
    if expected is bool and not isinstance(value, bool):
        raise OptionError(f"Option {name!r} must be true or false{like}, {got}")
    if expected is str and not isinstance(value, str):
        raise OptionError(f"Option {name!r} must be a string{like}, {got}")
    return value



class HeadOptions(MethodOptions):
    """Base of a similarity head's options dataclass (:class:`hfncl.models.heads.HeadPlugin`): ``namespace`` is the
    head's name, and a model's ``NCLConfig.head_options`` holds them by full name (``{"sgr.sim_dim": 256}``).

    ``flat_names`` maps an option to the ``NCLConfig`` field a config of checkpoint format 2 or older stored it in
    (unlisted: a field of the option's own name); :meth:`from_flat` reads those fields.
    """

    flat_names: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_flat(cls, flat: Mapping[str, Any], checkpoint_format: int) -> dict[str, Any]:
        """The options, by full name, that the flat fields ``flat`` of a config of ``checkpoint_format`` held
        (``None``: not set); the options they leave out take their defaults."""
        values = {}
        for declared in fields(cls):  # type: ignore[arg-type]
            value = flat.get(cls.flat_names.get(declared.name, declared.name))
            if value is not None:
                values[cls.full_name(declared.name)] = value
        return values
