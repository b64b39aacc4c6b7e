"""Discovering installed methods: their listing, their hooks checked against the specification, and the plugin
manager of the methods a run names.

Installed methods are the entry points of the ``hfncl`` group (the built-in ones too:
``pyproject.toml`` registers them exactly as a third-party package would); :mod:`hfncl.registry` reads them.
A run sets its plugins up once with :func:`hfncl.plugin_setup.run_plugins`, which builds its manager here.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

from hfncl import hookspecs, registry
from hfncl.options import MethodOptions, OptionError, option_help
from hfncl.registry import (
    METHODS,
    MissingPluginError,
    PluginError,
    PluginProvenance,
    PluginSource,
    implements,
    installed_entry_points,
    load_plugin,
    plugin_citations,
    plugin_provenance,
    plugin_sources,
    refuse_unknown,
    registered_entry_points,
    require_plugins,
)

ENTRY_POINT_GROUP = METHODS


@dataclass(frozen=True)
class PluginInfo:
    """One installed plugin, as ``hfncl plugins`` lists it."""

    name: str
    value: str
    distribution: str
    version: str
    hooks: tuple[str, ...]
    error: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    summary: str = ""
    """The first line of the plugin module's docstring."""
    data_kind: str = "pairs"
    """What it learns from (its ``data_kind`` hook): ``pairs`` or ``labels``."""
    options_doc: str = ""
    """The docstring of its options class, on one line."""
    option_help: dict[str, str] = field(default_factory=dict)
    """What each option takes (:func:`hfncl.options.option_help`), by full name."""


def check_plugin_names(names: list[str]) -> None:
    """Refuse a run's plugin names from the entry points alone, before any plugin is imported: none named, one
    named twice, or one no installed package registers (the first, in the order :func:`build_plugin_manager`
    loads them).

    Raises:
        PluginError: in one line.
    """
    if not names:
        raise PluginError("No plugins named: a run needs at least one method plugin (see `hfncl plugins`).")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PluginError(f"Plugins named more than once: {', '.join(duplicates)}")
    installed = registry.installed_entry_points()
    for name in reversed(names):
        refuse_unknown(name, installed)


def hook_names() -> list[str]:
    """Names of every hook in the specification, in its order (``hfncl.hookspecs.__all__``)."""
    return [name for name in hookspecs.__all__ if hasattr(getattr(hookspecs, name), f"{hookspecs.PROJECT}_spec")]


def implemented_hooks(plugin: Any) -> tuple[str, ...]:
    """Hooks a plugin object implements."""
    marker = f"{hookspecs.PROJECT}_impl"
    return tuple(name for name in hook_names() if hasattr(getattr(plugin, name, None), marker))


DECLARATIONS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "options": (lambda answer: inspect.isclass(answer) and issubclass(answer, MethodOptions),
                "a MethodOptions subclass (the class itself) or None"),
    "option_defaults": (lambda answer: isinstance(answer, dict), "a dict of option name -> default, or None"),
    "citation": (lambda answer: isinstance(answer, str), "a BibTeX string or None"),
    "demo_settings": (lambda answer: isinstance(answer, dict), "a dict of TrainConfig fields or None"),
    "audit_settings": (lambda answer: isinstance(answer, dict), "a dict of TrainConfig fields or None"),
    "data_kind": (lambda answer: isinstance(answer, str), "a data kind such as 'pairs' (a str) or None"),
    "model_defaults": (lambda answer: isinstance(answer, dict), "a dict of NCLConfig fields or None"),
}
"""The hooks that take no argument (what a plugin declares), each with a test of its answer and the answer
expected; ``None`` is always allowed."""


def check_declarations(manager: pluggy.PluginManager) -> None:
    """Call every registered plugin's declaration hooks (:data:`DECLARATIONS`) and check the type of each answer.

    Raises:
        PluginError: in one line naming the plugin, the hook and the type expected, for a hook that raises or
            answers another type.
    """
    for hook_name, (fits, expected) in DECLARATIONS.items():
        for implementation in getattr(manager.hook, hook_name).get_hookimpls():
            where = f"Plugin {implementation.plugin_name!r}: hook {hook_name}()"
            try:
                answer = implementation.function()
            except Exception as error:
                raise PluginError(f"{where} raised {type(error).__name__}: {error} (expected {expected})") from error
            if answer is not None and not fits(answer):
                shown = repr(answer)
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                raise PluginError(f"{where} returned {type(answer).__name__} {shown}, expected {expected}")


_HOOK_ERRORS: dict[type[BaseException], type[PluginError]] = {}


def hook_error(manager_hook: Any, hook_name: str, error: Exception) -> PluginError:
    """``error`` (a ``TypeError`` or ``AttributeError``: most often a value of the wrong type) raised while hook
    ``hook_name`` ran, as a :class:`PluginError` that is still of ``error``'s type, naming the plugins implementing
    the hook and the type the hook specification says it returns."""
    kind = type(error)
    if kind not in _HOOK_ERRORS:
        _HOOK_ERRORS[kind] = type(f"Plugin{kind.__name__}", (PluginError, kind), {"__doc__": PluginError.__doc__})
    plugins = [impl.plugin_name for impl in reversed(getattr(manager_hook, hook_name).get_hookimpls())]
    expected = str(inspect.signature(getattr(hookspecs, hook_name)).return_annotation).strip("'\"")
    return _HOOK_ERRORS[kind](
        f"hook {hook_name} of plugin {' / '.join(repr(name) for name in plugins)} failed with {kind.__name__}: "
        f"{error} (the hook takes the arguments of hfncl.hookspecs.{hook_name} and returns {expected})"
    )


def build_plugin_manager(names: list[str]) -> pluggy.PluginManager:
    """A plugin manager with exactly the named plugins registered, validated against the spec.

    pluggy calls the most recently registered plugin first; plugins are registered in
    reverse order so that for first-result hooks the plugin named first wins
    (``["method", "extra"]``: method divides and rectifies, both add loss terms).
    """
    check_plugin_names(names)
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    known_hooks = hook_names()
    for name in reversed(names):
        plugin = load_plugin(name)
        try:
            manager.register(plugin, name=name)
        except pluggy.PluginValidationError as error:
            raise PluginError(f"Plugin {name!r} does not fit the hook specification: {error}") from error
        except ValueError as error:
            raise PluginError(f"Plugin {name!r} is the same object as another named plugin: {error}") from error
        unknown = [
            attr
            for attr in dir(plugin)
            if hasattr(getattr(plugin, attr, None), f"{hookspecs.PROJECT}_impl") and attr not in known_hooks
        ]
        if unknown:
            raise PluginError(
                f"Plugin {name!r} implements unknown hook(s) {', '.join(unknown)}; "
                f"the hooks are: {', '.join(hook_names())}"
            )
    check_declarations(manager)
    return manager


def describe_installed() -> list[PluginInfo]:
    """Every installed plugin with its distribution, version, hooks and options with their defaults
    (for ``hfncl plugins``)."""
    infos = []
    for name, entry_point in sorted(registry.installed_entry_points().items()):
        dist = entry_point.dist
        hooks: tuple[str, ...] = ()
        options: dict[str, Any] = {}
        described: dict[str, Any] = {}
        problem = None
        try:
            plugin = load_plugin(name)
            hooks = implemented_hooks(plugin)
            options = dict(plugin.option_defaults() or {}) if "option_defaults" in hooks else {}
            declared = plugin.options() if "options" in hooks else None
            options.update(declared.defaults() if declared is not None else {})
            described = {
                "summary": (inspect.getdoc(plugin) or "").strip().split("\n")[0],
                "data_kind": (plugin.data_kind() if "data_kind" in hooks else None) or "pairs",
                "options_doc": " ".join((inspect.getdoc(declared) or "").split()) if declared is not None else "",
                "option_help": option_help(declared) if declared is not None else {},
            }
        except PluginError as error:
            problem = str(error)
        except Exception as error:  # a plugin's own options or option_defaults failing
            problem = f"its options raised {type(error).__name__}: {error}"
        infos.append(
            PluginInfo(
                name=name,
                value=entry_point.value,
                distribution=dist.name if dist else "?",
                version=dist.version if dist else "?",
                hooks=hooks,
                error=problem,
                options=options,
                **described,
            )
        )
    return infos


def _fits(value: Any, default: Any) -> bool:
    """Whether an option ``value`` has the type of its declared ``default``
    (an int fits a float; JSON lists fit tuples)."""
    if default is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and math.isfinite(value)
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def option_classes(hook: Any) -> list[type[MethodOptions]]:
    """The options dataclasses the active plugins declare (their ``options`` hook)."""
    return [declared for declared in hook.options() if declared is not None]


def resolve_options(hook: Any, plugins: list[str], options: Mapping[str, Any]) -> dict[str, Any]:
    """Every active plugin's options by full name: declared defaults overridden by ``options``, checked.

    Typed options (:mod:`hfncl.options`) are checked against their dataclass fields and
    returned converted (a float option set to 1 is 1.0); an untyped one (``option_defaults``)
    must have its default's type.

    Raises:
        PluginError: in one line, naming an option no active plugin declares, or a value its
            declaration refuses (with what it expected).
    """
    classes = option_classes(hook)
    defaults: dict[str, Any] = {}
    for declared in [*hook.option_defaults(), *(options_class.defaults() for options_class in classes)]:
        defaults.update(declared or {})
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise PluginError(f"Unknown option(s) {unknown} for plugins {plugins}; declared options: {sorted(defaults)}")
    merged = defaults | dict(options)
    typed: dict[str, Any] = {}
    try:
        for options_class in classes:
            typed.update(options_class.read(merged).by_full_name())
    except OptionError as error:
        raise PluginError(str(error)) from error
    for name, value in options.items():
        if name not in typed and not _fits(value, defaults[name]):
            expected = "a finite number" if isinstance(defaults[name], float) else type(defaults[name]).__name__
            raise PluginError(
                f"Option {name!r} must be {expected} like its default {defaults[name]!r}, got {value!r} "
                f"({type(value).__name__})"
            )
    return merged | typed


def plugin_answers(names: list[str], hook: str, **kwargs: Any) -> list[Any]:
    """Each named plugin's own answer to ``hook`` called with ``kwargs``, in the order named (``None`` from a plugin
    without it), read from the loaded plugins without a plugin manager: what a run's settings are made from before
    its plugins are set up (:func:`run_plugins` builds the one manager a training has)."""
    answers = []
    for name in names:
        plugin = load_plugin(name)
        answers.append(getattr(plugin, hook)(**kwargs) if implements(plugin, hook) else None)
    return answers


def first_answer(names: list[str], hook: str, **kwargs: Any) -> Any:
    """The answer of the first named plugin that answers ``hook`` (as a first-result hook of a run of ``names``
    would give it; :func:`plugin_answers`), or ``None``."""
    return next((answer for answer in plugin_answers(names, hook, **kwargs) if answer is not None), None)


__all__ = [
    "ENTRY_POINT_GROUP",
    "MissingPluginError",
    "PluginError",
    "PluginInfo",
    "PluginProvenance",
    "PluginSource",
    "build_plugin_manager",
    "check_plugin_names",
    "describe_installed",
    "first_answer",
    "installed_entry_points",
    "load_plugin",
    "plugin_answers",
    "plugin_citations",
    "plugin_provenance",
    "plugin_sources",
    "registered_entry_points",
    "require_plugins",
    "resolve_options",
]
