"""The README's main job: methods side by side on the generated benchmark with noise.

Generates the seeded benchmark (:mod:`hfncl.data.synthetic`), corrupts the training
pairs by caption-level shuffling (the NCR protocol), trains every installed plugin that
declares ``demo_settings`` with the same seed, and prints R@1/5/10, rSum and how well
each method found the noisy pairs.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import transformers

from hfncl.config import TrainConfig
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.experiment import DataArguments, ModelArguments, run_experiment
from hfncl.plugins import PluginError, build_plugin_manager, installed_entry_points

DEMO_MODEL = ModelArguments(embed_dim=256, word_dim=64)


@dataclass(frozen=True)
class DemoRun:
    """One row of the comparison: a plugin at a noise ratio, with the settings it declared."""

    plugin: str
    noise_ratio: float
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.plugin}_noise{int(round(self.noise_ratio * 100))}"


def demo_runs(noise_ratios: tuple[float, ...] = (0.5,), plugins: list[str] | None = None) -> tuple[DemoRun, ...]:
    """A run per installed plugin that declares ``demo_settings`` (or per named plugin), per noise ratio."""
    names = plugins if plugins is not None else sorted(installed_entry_points())
    runs = []
    for name in names:
        settings = build_plugin_manager([name]).hook.demo_settings()
        if settings is None:
            if plugins is not None:
                raise PluginError(f"Plugin {name!r} declares no demo_settings, so the demo cannot train it alone")
            continue
        runs.extend(DemoRun(name, ratio, dict(settings)) for ratio in noise_ratios)
    return tuple(runs)


def demo_train_config(run: DemoRun, output_dir: Path, seed: int, progress: bool) -> TrainConfig:
    """The papers' optimiser (Adam 2e-4, batch 128, x0.1 decay late in training) with the plugin's settings."""
    epochs = int(run.settings.get("epochs", 10))
    values: dict[str, Any] = dict(
        plugins=[run.plugin],
        output_dir=str(output_dir),
        epochs=epochs,
        batch_size=128,
        learning_rate=2e-4,
        lr_decay_epochs=[int(epochs * 0.8)],
        seed=seed,
        progress=progress,
    )
    values.update(run.settings)
    return TrainConfig(**values)


def run_demo(
    output_dir: str | Path = "runs/demo",
    runs: tuple[DemoRun, ...] | None = None,
    data: SyntheticConfig = SyntheticConfig(),
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Train every run of ``runs`` on the generated benchmark; return one result per run."""
    output_dir = Path(output_dir)
    data_dir = generate_precomp(output_dir / "data", data)
    results = []
    for run in runs if runs is not None else demo_runs():
        run_dir = output_dir / run.label
        started = time.perf_counter()
        result = run_experiment(
            DataArguments(data_dir=str(data_dir), noise_ratio=run.noise_ratio, noise_seed=seed),
            demo_train_config(run, run_dir, seed, progress),
            DEMO_MODEL,
        )
        result.update(label=run.plugin, seconds=time.perf_counter() - started)
        results.append(result)
    return results


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def format_table(results: list[dict[str, Any]]) -> str:
    """A markdown table: one row per run, recalls, rSum and division quality."""
    header = (
        "| method | noise | i2t R@1 | R@5 | R@10 | t2i R@1 | R@5 | R@10 | rSum | division AUC | precision | recall | time |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in results:
        t, d = r["test"], _division_of_network_a(r["division"])
        lines.append(
            f"| {r['label']} | {r['noise_ratio']:.0%} | {_cell(t['i2t_r1'])} | {_cell(t['i2t_r5'])} | "
            f"{_cell(t['i2t_r10'])} | {_cell(t['t2i_r1'])} | {_cell(t['t2i_r5'])} | {_cell(t['t2i_r10'])} | "
            f"{_cell(t['rsum'])} | {_cell(d.get('auc'), 3)} | {_cell(d.get('precision'), 3)} | "
            f"{_cell(d.get('recall'), 3)} | {r.get('seconds', 0):.0f}s |"
        )
    return "\n".join(lines)


def _division_of_network_a(division: dict[str, float]) -> dict[str, float]:
    """The last epoch's division quality of the first network (``division/...`` or ``division/net0/...``)."""
    out = {}
    for key, value in division.items():
        parts = key.split("/")
        if len(parts) == 2 or parts[1] == "net0":
            out[parts[-1]] = value
    return out


def main(
    output_dir: str = "runs/demo",
    seed: int = 0,
    progress: bool = True,
    noise_ratios: tuple[float, ...] = (0.5,),
    plugins: list[str] | None = None,
) -> int:
    """Run the comparison, print the table, save it as JSON and markdown.

    The libraries' own progress bars (dataset conversion, checkpoint writing) are
    silenced so that the epochs' bars and the table are what a person sees.
    """
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    results = run_demo(output_dir, demo_runs(noise_ratios, plugins), seed=seed, progress=progress)
    table = format_table(results)
    print(table)
    Path(output_dir, "comparison.md").write_text(table + "\n")
    Path(output_dir, "comparison.json").write_text(
        json.dumps([{k: v for k, v in r.items() if k != "history"} for r in results], indent=1, default=float)
    )
    return 0
