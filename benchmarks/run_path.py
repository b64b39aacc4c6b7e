"""The path a run's configuration takes through the code, and how often a run sets up its plugins.

    python benchmarks/run_path.py [--plugins vsepp] [--json]

Runs one micro ``run_experiment`` (a generated benchmark of 16 training images, one epoch)
under :func:`sys.setprofile` and follows the :class:`hfncl.config.TrainConfig` object:

- a **stop** is a function of ``hfncl`` that receives the run's configuration (or its
  ``plugins`` list or ``options`` mapping, the parts a run hands on) as an argument
  (``self`` whose ``config`` attribute it is does not count: a method reading its own
  object is not a step of the path); each function counts once;
- a **climb** is a stop called, through any frames, from a stop in a *lower* layer
  (``docs/architecture.md``'s layers, read from ``pyproject.toml``'s import-linter contract):
  a callee that the layering says should be handing the configuration down, not fetching it
  back up; each (caller, callee) edge counts once;
- **plugin set-ups**: how many times the run builds a plugin manager, resolves options,
  checks the division fields, loads a plugin and scans the entry points.

The figures are the ones issue 42 counts (``docs/architecture.md`` lists the path).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COUNTED = {
    "hfncl.plugins.build_plugin_manager": "plugin managers built",
    "hfncl.plugins.resolve_options": "option resolutions",
    "hfncl.plugin_setup.check_division_fields": "division-field checks",
    "hfncl.registry.load_plugin": "plugin loads",
    "hfncl.registry.installed_entry_points": "entry-point scans",
}


def layer_ranks(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, int]:
    """Top-level module of ``hfncl`` -> its layer's rank (0 the highest), from the import-linter layers contract."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    layers = next(contract["layers"] for contract in contracts if contract.get("type") == "layers")
    ranks = {}
    for rank, layer in enumerate(layers):
        for part in layer.replace(":", "|").split("|"):
            ranks[part.strip()] = rank
    return ranks


def module_rank(module: str, ranks: dict[str, int]) -> int | None:
    """The layer rank of ``hfncl.X...`` (``None`` for a module outside the layers, such as ``hfncl`` itself)."""
    parts = module.split(".")
    return ranks.get(parts[1]) if len(parts) > 1 and parts[0] == "hfncl" else None


@dataclass
class Walk:
    """What :func:`follow` saw: the stops in first-call order, the climbs and the counted calls."""

    stops: list[str] = field(default_factory=list)
    climbs: list[tuple[str, str]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def modules(self) -> list[str]:
        return sorted({stop.split(":")[0] for stop in self.stops})

    def summary(self) -> dict[str, Any]:
        return {
            "stops": len(self.stops),
            "modules": len(self.modules),
            "climbs": len(self.climbs),
            **{label: self.counts[name] for name, label in COUNTED.items()},
            "path": self.stops,
            "climb_edges": [f"{a} -> {b}" for a, b in self.climbs],
        }


def _qualified(frame: FrameType) -> str:
    code = frame.f_code
    return f"{frame.f_globals.get('__name__', '?')}:{code.co_qualname}"


def _argument_values(frame: FrameType) -> list[Any]:
    """The values a call received, ``self`` left out, ``*args`` and ``**kwargs`` spread."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:count])
    for flag, position in ((0x04, count), (0x08, count + bool(code.co_flags & 0x04))):
        if code.co_flags & flag:
            names.append(code.co_varnames[position])
    values: list[Any] = []
    for name in names:
        if name == "self" or name not in frame.f_locals:
            continue
        value = frame.f_locals[name]
        keywords = name == names[-1] and code.co_flags & 0x08 and isinstance(value, dict)
        values.extend(value if isinstance(value, tuple) else value.values() if keywords else [value])
    return values


def follow(config: Any, run: Any, ranks: dict[str, int]) -> Walk:
    """Call ``run()`` and record the stops and climbs of ``config`` and the counted calls (see the module docstring)."""
    walk = Walk()
    parts = (config, config.plugins, config.options)
    seen_stops: set[str] = set()
    seen_climbs: set[tuple[str, str]] = set()
    stop_frames: dict[int, str] = {}

    def enclosing_stop(frame: FrameType | None) -> str | None:
        while frame is not None:
            if id(frame) in stop_frames:
                return stop_frames[id(frame)]
            frame = frame.f_back
        return None

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "return":
            stop_frames.pop(id(frame), None)
            return
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("hfncl."):
            return
        name = f"{module}.{frame.f_code.co_name}"
        if name in COUNTED:
            walk.counts[name] += 1
        if not any(value is part for value in _argument_values(frame) for part in parts):
            return
        stop = _qualified(frame)
        caller = enclosing_stop(frame.f_back)
        stop_frames[id(frame)] = stop
        if stop not in seen_stops:
            seen_stops.add(stop)
            walk.stops.append(stop)
        if caller is None:
            return
        caller_rank, callee_rank = (module_rank(s.split(":")[0], ranks) for s in (caller, stop))
        if caller_rank is not None and callee_rank is not None and callee_rank < caller_rank:
            if (caller, stop) not in seen_climbs:
                seen_climbs.add((caller, stop))
                walk.climbs.append((caller, stop))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return walk


def micro_run(plugins: list[str], directory: Path) -> tuple[Any, Any]:
    """The configuration of a one-epoch run on a generated micro benchmark, and the call that runs it."""
    from hfncl.config import TrainConfig
    from hfncl.data.synthetic import SyntheticConfig, generate_precomp
    from hfncl.experiment import DataArguments, ModelArguments, run_experiment

    data_dir = generate_precomp(
        directory / "data",
        SyntheticConfig(num_train=16, num_dev=11, num_test=11, num_concepts=8, num_regions=6, feature_dim=8, seed=2),
    )
    config = TrainConfig(
        plugins=plugins, output_dir=str(directory / "run"), epochs=1, warmup_epochs=0, batch_size=8, progress=False
    )
    data_args = DataArguments(data_dir=str(data_dir), noise_ratio=0.2)
    model_args = ModelArguments(embed_dim=8, word_dim=8)
    return config, lambda: run_experiment(data_args, config, model_args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plugins", nargs="+", default=["vsepp"])
    parser.add_argument("--json", action="store_true", help="print the whole walk as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        config, run = micro_run(args.plugins, Path(directory))
        walk = follow(config, run, layer_ranks())
    summary = walk.summary()
    if args.json:
        print(json.dumps(summary, indent=1))
        return
    for stop in summary["path"]:
        print(f"  {stop}")
    for edge in summary["climb_edges"]:
        print(f"  climb: {edge}")
    print(", ".join(f"{key} {value}" for key, value in summary.items() if not isinstance(value, list)))


if __name__ == "__main__":
    main()
