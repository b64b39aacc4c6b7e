"""The entry-point groups through which packages extend hfncl, and the one reader of them.

Every extension (a method, a data format, a similarity head, a text or image tower, a label layout, a noise
protocol's name) is an entry point of one of the groups below, the built-in ones too: ``pyproject.toml`` registers
hfncl's own exactly as a third-party package would. This module imports nothing of hfncl: everything that names an
extension reads it from here.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

METHODS = "hfncl"
"""Method plugins (pluggy plugins of :mod:`hfncl.hookspecs`; the group is also pluggy's project name)."""
DATA_FORMATS = "hfncl.data_formats"
"""Data formats of image-caption pairs (:class:`hfncl.data.formats.DataFormat` objects)."""
SIMILARITY_HEADS = "hfncl.similarity_heads"
"""Similarity heads (``build(config) -> module`` callables, :mod:`hfncl.models.heads`)."""
TEXT_TOWERS = "hfncl.text_towers"
"""Text towers (``build(config) -> module`` callables, :mod:`hfncl.models.towers`)."""
IMAGE_TOWERS = "hfncl.image_towers"
"""Image towers (``build(config) -> module`` callables, :mod:`hfncl.models.towers`)."""
TOWERS = {"text": TEXT_TOWERS, "image": IMAGE_TOWERS}
"""The tower groups by the part of a model they build (``NCLConfig.text_tower`` / ``image_tower`` name one)."""
LABEL_LAYOUTS = "hfncl.label_layouts"
"""Layouts of category-labelled feature files (:class:`hfncl.data.labelled.layouts.LabelLayout` objects)."""
NOISE_PROTOCOLS = "hfncl.noise_protocols"
"""The published noise protocols (:class:`hfncl.data.noise.NoiseProtocol` objects, named as tables write them)."""


class PluginError(RuntimeError):
    """A plugin is unknown, cannot be imported, or does not fit the hook specification."""


class MissingPluginError(PluginError):
    """A checkpoint names a plugin that is not installed; the message names the package to install."""


def _package(entry_point: EntryPoint) -> str:
    dist = entry_point.dist
    return f"{dist.name} {dist.version} ({entry_point.value})" if dist else f"an unnamed package ({entry_point.value})"


def registered_entry_points(group: str, what: str = "Plugin") -> dict[str, EntryPoint]:
    """The entry points of ``group`` by name (methods, data formats, similarity heads, towers, label layouts: ``what``
    names the kind).

    Raises:
        PluginError: naming both packages when two register the same name.
    """
    installed: dict[str, EntryPoint] = {}
    for entry_point in entry_points(group=group):
        other = installed.setdefault(entry_point.name, entry_point)
        if other is not entry_point and _package(other) != _package(entry_point):
            raise PluginError(
                f"{what} name {entry_point.name!r} is registered by two packages, {_package(other)} and "
                f"{_package(entry_point)}: uninstall one, or rename its entry point"
            )
    return installed


def installed_towers(part: str) -> dict[str, EntryPoint]:
    """The entry points of the ``part`` (``"text"`` or ``"image"``) tower group, by name (hfncl's own among them)."""
    return registered_entry_points(TOWERS[part], f"{part.capitalize()} tower")


def installed_entry_points() -> dict[str, EntryPoint]:
    """The method plugins: the entry points of the ``hfncl`` group, by name (:func:`registered_entry_points`)."""
    return registered_entry_points(METHODS)


def refuse_unknown(name: str, installed: Mapping[str, EntryPoint]) -> None:
    """Refuse a plugin name that no installed package registers, listing the installed ones."""
    if name not in installed:
        known = ", ".join(sorted(installed)) or "none"
        raise PluginError(
            f"Unknown plugin {name!r}: no entry point of that name in group {METHODS!r} "
            f"(installed: {known}). Install the package that provides it, or fix the name."
        )


def load_plugin(name: str) -> Any:
    """Import the plugin registered under ``name``, with an error that names it."""
    installed = installed_entry_points()
    refuse_unknown(name, installed)
    entry_point = installed[name]
    try:
        plugin = entry_point.load()
    except Exception as error:
        raise PluginError(
            f"Plugin {name!r} is installed but failed to import ({entry_point.value}): "
            f"{type(error).__name__}: {error}"
        ) from error
    if inspect.isclass(plugin):
        raise PluginError(
            f"Plugin {name!r} ({entry_point.value}) exports a class; export a module or an instance, "
            "because pluggy registers the loaded object as it is."
        )
    return plugin


def implements(plugin: Any, hook: str) -> bool:
    """Whether a loaded plugin implements ``hook`` (carries pluggy's implementation marker for it)."""
    return hasattr(getattr(plugin, hook, None), f"{METHODS}_impl")


@dataclass(frozen=True)
class PluginSource:
    """The distribution package that installed a plugin, and its version."""

    distribution: str
    version: str


def plugin_sources(names: Iterable[str]) -> dict[str, PluginSource]:
    """Where each named plugin was installed from, read from its entry point's ``.dist``.

    Recorded in a checkpoint at training time, so that loading it where a plugin is
    missing can say which package to install. A plugin whose entry point has no
    distribution (one registered by hand rather than installed) is left out.

    Raises:
        PluginError: if a name is not an installed plugin.
    """
    installed = installed_entry_points()
    sources = {}
    for name in names:
        if name not in installed:
            raise PluginError(f"Unknown plugin {name!r}: no entry point of that name in group {METHODS!r}")
        dist = installed[name].dist
        if dist is not None:
            sources[name] = PluginSource(distribution=dist.name, version=dist.version)
    return sources


def plugin_citations(plugins: Mapping[str, Any]) -> dict[str, str]:
    """The BibTeX each loaded plugin (by name) returns from its ``citation`` hook, by plugin name.

    A plugin without the hook, or whose hook returns ``None`` or blank text, is left out.
    """
    citations = {}
    for name, plugin in plugins.items():
        text = plugin.citation() if implements(plugin, "citation") else None
        if text and text.strip():
            citations[name] = text.strip()
    return citations


@dataclass(frozen=True)
class PluginProvenance:
    """What a checkpoint records of the plugins that trained it: each one's installing package and version, the
    first line of its docstring and its BibTeX (read once per run, written with every saved model)."""

    sources: dict[str, PluginSource]
    summaries: dict[str, str]
    citations: dict[str, str]


def plugin_provenance(plugins: Mapping[str, Any]) -> PluginProvenance:
    """The :class:`PluginProvenance` of loaded plugins by name (:func:`plugin_sources`, :func:`plugin_citations`)."""
    return PluginProvenance(
        sources=plugin_sources(plugins),
        summaries={name: (inspect.getdoc(plugin) or "").split("\n")[0] for name, plugin in plugins.items()},
        citations=plugin_citations(plugins),
    )


def require_plugins(
    names: Iterable[str], distributions: Mapping[str, str], versions: Mapping[str, str], source: str
) -> None:
    """Raise :class:`MissingPluginError` if any named plugin is not installed.

    Args:
        names: the plugins a checkpoint was trained with.
        distributions: the package that provided each plugin at training time (may lack some).
        versions: the version of that package at training time (may lack some).
        source: what names the plugins (a checkpoint path or Hub id), for the message.
    """
    installed = installed_entry_points()
    missing = [name for name in names if name not in installed]
    if not missing:
        return
    advice = []
    for name in missing:
        package = distributions.get(name)
        if package is None:
            advice.append(
                f"plugin {name!r}: install the package that registers it in the {METHODS!r} entry-point "
                "group (the checkpoint does not record which)"
            )
        else:
            pin = f"{package}=={versions[name]}" if name in versions else package
            advice.append(f"plugin {name!r} comes from the package {package!r}: pip install '{pin}'")
    raise MissingPluginError(
        f"{source} was trained with plugin(s) that are not installed here:\n  " + "\n  ".join(advice)
    )
