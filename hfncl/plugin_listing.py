"""``hfncl plugins`` without importing every plugin each time: the listing, cached by what it depends on.

Listing a plugin's hooks and option defaults means importing it, and plugins import
torch, scikit-learn and the models (about 10 s of CPU). The listing is kept in
``$HFNCL_CACHE/plugins/<key>.json`` (:func:`hfncl.config.default_cache_root`), where the
key hashes everything the listing is read from: each entry point (name, target, package and
version), the file and modification time of each plugin module (found without importing
it; only its parent packages load), and hfncl's own version and contract modules. Installing,
upgrading or editing a plugin changes the key, so a stale listing is never shown;
``--refresh`` rebuilds it anyway.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import asdict
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

from hfncl import plugins, registry
from hfncl.config import default_cache_root
from hfncl.integrity import atomic_write_text
from hfncl.plugins import PluginInfo

CONTRACT_MODULES = (
    "hfncl.registry", "hfncl.plugins", "hfncl.hookspecs", "hfncl.hookspecs.declarations", "hfncl.hookspecs.training",
    "hfncl.hookspecs.retrieval", "hfncl.options", "hfncl.trainer_view",
)


def _module_stamp(module: str) -> list[Any]:
    """The file of ``module`` and its modification time, found without executing the module itself."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as error:  # a parent package that fails to import
        return [module, f"unfound: {type(error).__name__}: {error}"]
    origin = spec.origin if spec is not None else None
    if origin is None or not os.path.isfile(origin):
        return [module, None]
    return [origin, os.stat(origin).st_mtime_ns]


def listing_key(entry_points: dict[str, EntryPoint]) -> str:
    """SHA-256 over the entry points, their packages, the plugin modules' files and hfncl's contract."""
    from hfncl import __version__

    parts: list[Any] = [__version__, [_module_stamp(module) for module in CONTRACT_MODULES]]
    for name, entry_point in sorted(entry_points.items()):
        dist = entry_point.dist
        module = entry_point.value.split(":", 1)[0]
        parts.append([name, entry_point.value, dist.name if dist else None, dist.version if dist else None])
        parts.append(_module_stamp(module))
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


def plugin_record(info: PluginInfo) -> dict[str, Any]:
    """A plugin as a JSON-ready dict: its hooks, or the error that keeps it from loading."""
    record = asdict(info)
    record["hooks"] = list(info.hooks)
    return record


def listed_plugins(refresh: bool = False, cache_root: str | Path | None = None) -> list[PluginInfo]:
    """:func:`hfncl.plugins.describe_installed`, read from the cache when nothing it depends on changed."""
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    path = root / "plugins" / f"{listing_key(registry.installed_entry_points())}.json"
    if not refresh and path.is_file():
        try:
            return [PluginInfo(**dict(record, hooks=tuple(record["hooks"]))) for record in json.loads(path.read_text())]
        except (ValueError, TypeError, KeyError):  # a damaged cache file is rebuilt
            pass
    infos = plugins.describe_installed()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps([plugin_record(info) for info in infos], default=str))
    return infos
