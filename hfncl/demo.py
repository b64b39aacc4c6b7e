"""The README's main job: methods side by side on the generated benchmark with noise.

Generates the seeded benchmark (:mod:`hfncl.data.synthetic`), corrupts the training
pairs by caption-level shuffling (the NCR protocol), trains every installed plugin that
declares ``demo_settings`` with the same seed, and prints R@1/5/10, rSum and how well
each method found the noisy pairs. Plugins that train on category-labelled data
(``data_kind`` "labels") run on a generated label-noise benchmark instead
(:mod:`hfncl.data.synthetic_labels`: 10 classes, 400 training samples, symmetric noise
at the same ratio per modality) and get their own table: I2T / T2I mAP and division quality.
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

from hfncl.category_experiment import CategoryModelArguments, LabelDataArguments, run_category_experiment
from hfncl.config import TrainConfig
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.data.synthetic_labels import LabelledSyntheticConfig, generate_labelled
from hfncl.experiment import DataArguments, ModelArguments, run_experiment
from hfncl.plugins import PluginError, build_plugin_manager, installed_entry_points

DEMO_MODEL = ModelArguments(embed_dim=256, word_dim=64)
LABEL_DEMO_MODEL = CategoryModelArguments(embed_dim=64, hidden_dim=256)


@dataclass(frozen=True)
class DemoRun:
    """One row of the comparison: a plugin at a noise ratio, with the settings it declared."""

    plugin: str
    noise_ratio: float
    settings: dict[str, Any] = field(default_factory=dict)
    data_kind: str = "pairs"

    @property
    def label(self) -> str:
        return f"{self.plugin}_noise{int(round(self.noise_ratio * 100))}"


def demo_runs(noise_ratios: tuple[float, ...] = (0.5,), plugins: list[str] | None = None) -> tuple[DemoRun, ...]:
    """A run per installed plugin that declares ``demo_settings`` (or per named plugin), per noise ratio."""
    names = plugins if plugins is not None else sorted(installed_entry_points())
    runs: list[DemoRun] = []
    for name in names:
        hook = build_plugin_manager([name]).hook
        settings = hook.demo_settings()
        if settings is None:
            if plugins is not None:
                raise PluginError(f"Plugin {name!r} declares no demo_settings, so the demo cannot train it alone")
            continue
        kind = "labels" if "labels" in hook.data_kind() else "pairs"
        runs.extend(DemoRun(name, ratio, dict(settings), kind) for ratio in noise_ratios)
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
        overwrite_output_dir=True,  # every demo trains afresh, replacing its previous results
    )
    if run.data_kind == "labels":  # the label-noise paper's optimiser: Adam 1e-4, batch 100, no decay
        values.update(batch_size=100, learning_rate=1e-4, lr_decay_epochs=[])
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
    runs = runs if runs is not None else demo_runs()
    data_dir = generate_precomp(output_dir / "data", data) if any(r.data_kind == "pairs" for r in runs) else None
    labelled_dir = None
    if any(r.data_kind == "labels" for r in runs):
        labelled_dir = generate_labelled(output_dir / "labelled_data", LabelledSyntheticConfig(seed=seed))
    results = []
    for run in runs:
        run_dir = output_dir / run.label
        started = time.perf_counter()
        config = demo_train_config(run, run_dir, seed, progress)
        if run.data_kind == "labels":
            result = run_category_experiment(
                LabelDataArguments(data_path=str(labelled_dir), noise_ratio=run.noise_ratio, noise_seed=seed),
                config,
                LABEL_DEMO_MODEL,
            )
        else:
            result = run_experiment(
                DataArguments(data_dir=str(data_dir), noise_ratio=run.noise_ratio, noise_seed=seed), config, DEMO_MODEL
            )
        result.update(label=run.plugin, seconds=time.perf_counter() - started, data_kind=run.data_kind)
        results.append(result)
    return results


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def format_label_table(results: list[dict[str, Any]]) -> str:
    """A markdown table of the label-noise runs: mAP per direction, their mean, division quality."""
    header = "| method | noise | I2T mAP | T2I mAP | mean mAP | division AUC | precision | recall | time |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in results:
        t, d = r["test"], _division_of_network_a(r["division"])
        lines.append(
            f"| {r['label']} | {r['noise_ratio']:.0%} | {_cell(t['i2t_map'], 3)} | {_cell(t['t2i_map'], 3)} | "
            f"{_cell(t['mean_map'], 3)} | {_cell(d.get('auc'), 3)} | {_cell(d.get('precision'), 3)} | "
            f"{_cell(d.get('recall'), 3)} | {r.get('seconds', 0):.0f}s |"
        )
    return "\n".join(lines)


def format_table(results: list[dict[str, Any]]) -> str:
    """A markdown table: one row per run, recalls, rSum and division quality."""
    header = (
        "| method | noise | i2t R@1 | R@5 | R@10 | t2i R@1 | R@5 | R@10 | rSum "
        "| division AUC | precision | recall | time |"
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
        if len(parts) == 2 or (len(parts) == 3 and parts[1] == "net0"):
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
    tables = [
        formatter([r for r in results if r["data_kind"] == kind])
        for kind, formatter in (("pairs", format_table), ("labels", format_label_table))
        if any(r["data_kind"] == kind for r in results)
    ]
    table = "\n\n".join(tables)
    print(table)
    Path(output_dir, "comparison.md").write_text(table + "\n")
    Path(output_dir, "comparison.json").write_text(
        json.dumps([{k: v for k, v in r.items() if k != "history"} for r in results], indent=1, default=float)
    )
    return 0
