"""The README's main job: methods side by side on the generated benchmark with noise.

Generates the seeded benchmark (:mod:`hfncl.data.synthetic`), corrupts the training
pairs by caption-level shuffling (the NCR protocol), trains every installed plugin that
declares ``demo_settings`` with the same seed, and prints R@1/5/10, rSum and how well
each method found the noisy pairs. Each plugin trains on the kind of data it declares
(``data_kind``), through that kind's task (:mod:`hfncl.tasks`), which gives the generated
benchmark, the model and the metric columns: plugins that train on category-labelled data
(``"labels"``) run on a generated label-noise benchmark (:mod:`hfncl.data.synthetic_labels`:
10 classes, 400 training samples, symmetric noise at the same ratio per modality) and get
their own table: I2T / T2I mAP and division quality.

By default the demo is the quick one (:data:`QUICK`), a few minutes on two CPU cores: the
pair methods train on a benchmark of 600 images for a few epochs at a higher learning
rate in smaller batches, the label methods for a third of their epochs at a higher learning rate,
long enough that every dividing method separates the noisy pairs far better than
chance; ``full`` (:data:`FULL`) is the full comparison of benchmarks/README.md, each method on 3000 images with
the schedule of its ``demo_settings``.
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import datasets
import transformers

from hfncl.config import TrainConfig, one_line
from hfncl.data.synthetic import SIZES, SyntheticConfig
from hfncl.experiment import run_experiment
from hfncl.plugins import PluginError, first_answer, installed_entry_points
from hfncl.tasks import LABELS, PAIRS, TASKS, ExperimentTask, task_of_plugins

DEMO_SIZES = SIZES


@dataclass(frozen=True)
class Schedule:
    """How a plan trains the methods of one kind of data: the epochs of every method (``None``: its
    ``demo_settings``' own; never lengthened, warmup cut to leave epochs that divide), a factor on each method's
    learning rate, and the batch size (``None``: the method's own)."""

    epochs: int | None = None
    learning_rate_scale: float = 1.0
    batch_size: int | None = None

    def applied(self, settings: dict[str, Any], learning_rate: float) -> dict[str, Any]:
        """``settings`` as this schedule trains them; ``learning_rate`` is the rate they train at unscaled."""
        out = dict(settings)
        if self.epochs is not None and self.epochs < int(out.get("epochs", 10)):
            out = shortened_settings(out, self.epochs)
        if self.learning_rate_scale != 1.0:
            out["learning_rate"] = float(learning_rate) * self.learning_rate_scale
        if self.batch_size is not None:
            out["batch_size"] = self.batch_size
        return out


@dataclass(frozen=True)
class DemoPlan:
    """How a demo trains: the generated benchmark of the pair methods (a key of :data:`DEMO_SIZES`) and a
    :class:`Schedule` per kind of data (a task's ``kind``); methods of a kind without one keep their settings."""

    size: str
    schedules: dict[str, Schedule] = field(default_factory=dict)


QUICK = DemoPlan(
    "quick",
    {
        PAIRS.kind: Schedule(epochs=3, learning_rate_scale=5.0, batch_size=64),
        LABELS.kind: Schedule(epochs=10, learning_rate_scale=5.0),
    },
)
"""The default demo: the pair methods on 600 training images for at most 3 epochs (at most 2 of warmup) at 5x the
learning rate in batches of 64; the label methods (400 samples) for at most 10 epochs at 5x the learning rate."""

FULL = DemoPlan("full")
"""``hfncl demo --full``: the measured comparison of benchmarks/README.md."""


@dataclass(frozen=True)
class DemoRun:
    """One row of the comparison: a plugin at a noise ratio, with the settings it declared, on its task's data."""

    plugin: str
    noise_ratio: float
    settings: dict[str, Any] = field(default_factory=dict)
    task: ExperimentTask = PAIRS

    @property
    def label(self) -> str:
        return f"{self.plugin}_noise{int(round(self.noise_ratio * 100))}"


def demo_runs(noise_ratios: tuple[float, ...] = (0.5,), plugins: list[str] | None = None) -> tuple[DemoRun, ...]:
    """A run per installed plugin that declares ``demo_settings`` (or per named plugin), per noise ratio."""
    names = plugins if plugins is not None else sorted(installed_entry_points())
    runs: list[DemoRun] = []
    for name in names:
        settings = first_answer([name], "demo_settings")
        if settings is None:
            if plugins is not None:
                raise PluginError(f"Plugin {name!r} declares no demo_settings, so the demo cannot train it alone")
            continue
        task = task_of_plugins([name])
        runs.extend(DemoRun(name, ratio, dict(settings), task) for ratio in noise_ratios)
    return tuple(runs)


DEMO_OPTIMIZER: dict[str, Any] = {"batch_size": 128, "learning_rate": 2e-4}
"""The papers' optimiser settings the demo starts from (Adam is TrainConfig's default)."""


def demo_train_config(run: DemoRun, output_dir: Path, seed: int, progress: bool) -> TrainConfig:
    """The papers' optimiser (Adam 2e-4, batch 128, x0.1 decay late in training) with the task's demo training
    values (e.g. the label-noise paper's) and the plugin's settings."""
    epochs = int(run.settings.get("epochs", 10))
    values: dict[str, Any] = dict(
        DEMO_OPTIMIZER,
        plugins=[run.plugin],
        output_dir=str(output_dir),
        epochs=epochs,
        lr_decay_epochs=[int(epochs * 0.8)],
        seed=seed,
        progress=progress,
        overwrite_output_dir=True,  # every demo trains afresh, replacing its previous results
    )
    values.update(run.task.demo_training)
    values.update(run.settings)
    return TrainConfig(**values)


def run_demo(
    output_dir: str | Path = "runs/demo",
    runs: tuple[DemoRun, ...] | None = None,
    data: SyntheticConfig = SyntheticConfig(),
    seed: int = 0,
    progress: bool = True,
    keep_going: bool = False,
) -> list[dict[str, Any]]:
    """Train every run of ``runs`` on its task's generated benchmark (``data`` for pairs); return one result per run.

    With ``keep_going``, a run that raises becomes a result with its one-line ``error``
    (the traceback in ``<run dir>/error.txt``) and the other runs still train.
    """
    output_dir = Path(output_dir)
    runs = runs if runs is not None else demo_runs()
    data_paths = {
        task.kind: task.demo_data(output_dir, data, seed)
        for task in TASKS.values()
        if any(run.task.kind == task.kind for run in runs)
    }
    results = []
    for number, run in enumerate(runs, start=1):
        run_dir = output_dir / run.label
        started = time.perf_counter()
        try:
            config = demo_train_config(run, run_dir, seed, progress)
            where = f"({number}/{len(runs)}): {config.epochs} epochs in {run_dir}"
            print(f"{run.plugin} at {run.noise_ratio:.0%} noise {where}", flush=True)
            data_args = run.task.demo_arguments(data_paths[run.task.kind], run.noise_ratio, seed)
            result = run_experiment(data_args, config, run.task.demo_model)
        except Exception as error:
            if not keep_going:
                raise
            result = {"noise_ratio": run.noise_ratio, "error": f"{type(error).__name__}: {one_line(error)}"}
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "error.txt").write_text(traceback.format_exc())
            print(f"{run.plugin} failed: {result['error']} (traceback in {run_dir / 'error.txt'})", file=sys.stderr)
        result.update(label=run.plugin, seconds=time.perf_counter() - started, data_kind=run.task.kind)
        results.append(result)
    return results


def shortened_settings(settings: dict[str, Any], epochs: int) -> dict[str, Any]:
    """A method's demo settings trained for ``epochs`` epochs, its warmup cut so that at least one epoch divides."""
    out = dict(settings, epochs=epochs)
    if settings.get("warmup_epochs", 0) > 0:
        out["warmup_epochs"] = max(1, min(settings["warmup_epochs"], epochs - 1)) if epochs > 1 else 0
    if "lr_decay_epochs" in settings:
        out["lr_decay_epochs"] = [e for e in settings["lr_decay_epochs"] if e < epochs]
    return out


def planned_runs(runs: tuple[DemoRun, ...], plan: DemoPlan) -> tuple[DemoRun, ...]:
    """``runs`` as ``plan`` trains them: each run by the schedule of its task's kind, if the plan has one."""
    planned = []
    for run in runs:
        schedule = plan.schedules.get(run.task.kind)
        if schedule is not None:
            rate = {**DEMO_OPTIMIZER, **run.task.demo_training, **run.settings}["learning_rate"]
            run = replace(run, settings=schedule.applied(run.settings, rate))
        planned.append(run)
    return tuple(planned)


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def format_table(results: list[dict[str, Any]], task: ExperimentTask = PAIRS) -> str:
    """A markdown table of runs of ``task``: one row per run, the task's metric columns and division quality."""
    metrics = " | ".join(header for header, _, _ in task.metric_columns)
    header = f"| method | noise | {metrics} | division AUC | precision | recall | time |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in results:
        if "error" in r:
            lines.append(_failed_row(r, header.count("|") - 1))
            continue
        t, d = r["test"], _division_of_network_a(r["division"])
        cells = " | ".join(_cell(t[key], digits) for _, key, digits in task.metric_columns)
        lines.append(
            f"| {r['label']} | {r['noise_ratio']:.0%} | {cells} | {_cell(d.get('auc'), 3)} | "
            f"{_cell(d.get('precision'), 3)} | {_cell(d.get('recall'), 3)} | {r.get('seconds', 0):.0f}s |"
        )
    return "\n".join(lines)


def _failed_row(result: dict[str, Any], columns: int) -> str:
    """A table row for a run that failed: its error in the first metric cell, ``-`` in the others but time."""
    error = result["error"].replace("|", "\\|")
    cells = [result["label"], f"{result['noise_ratio']:.0%}", f"failed: {error}"] + ["-"] * (columns - 4)
    return "| " + " | ".join(cells + [f"{result.get('seconds', 0):.0f}s"]) + " |"


def _division_of_network_a(division: dict[str, float]) -> dict[str, float]:
    """The last epoch's division quality of the first network (``division/...`` or ``division/net0/...``)."""
    out = {}
    for key, value in division.items():
        parts = key.split("/")
        if len(parts) == 2 or (len(parts) == 3 and parts[1] == "net0"):
            out[parts[-1]] = value
    return out


def check_demo_arguments(output_dir: str | Path, size: str | None, epochs: int | None) -> None:
    """Refuse an unknown size, fewer than one epoch, or an output directory that cannot be one; create it.

    Raises:
        ValueError: naming the argument.
        OSError: the output directory cannot be created (a parent is a file, no permission).
    """
    if size is not None and size not in DEMO_SIZES:
        raise ValueError(f"demo size must be one of {sorted(DEMO_SIZES)}, got {size!r}")
    if epochs is not None and epochs < 1:
        raise ValueError(f"demo --epochs must be >= 1, got {epochs}")
    directory = Path(output_dir)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"demo --output-dir {directory} is an existing file, not a directory: give a directory")
    directory.mkdir(parents=True, exist_ok=True)


def main(
    output_dir: str = "runs/demo",
    seed: int = 0,
    progress: bool = True,
    noise_ratios: tuple[float, ...] = (0.5,),
    plugins: list[str] | None = None,
    size: str | None = None,
    epochs: int | None = None,
    full: bool = False,
) -> int:
    """Run the comparison, print the table, save it as JSON and markdown; 1 when a method failed.

    The demo is the quick one (:data:`QUICK`), or with ``full`` the full comparison (benchmarks/README.md)
    (:data:`FULL`). ``size`` picks another generated benchmark (:data:`DEMO_SIZES`), ``epochs``
    trains every method that long (warmup cut to leave an epoch that divides) instead.
    A method that fails becomes a row with its error; the others still train.
    The libraries' own progress bars (dataset conversion, checkpoint writing) are
    silenced so that the epochs' bars and the table are what a person sees. Arguments
    that cannot run (:func:`check_demo_arguments`) are one line on stderr and status 2.
    """
    try:
        check_demo_arguments(output_dir, size, epochs)
    except (ValueError, OSError) as error:
        print(f"hfncl: error: {one_line(error)}", file=sys.stderr)
        return 2
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    plan = FULL if full else QUICK
    schedule_plan = (
        plan
        if epochs is None
        else replace(plan, schedules={kind: replace(each, epochs=None) for kind, each in plan.schedules.items()})
    )
    runs = planned_runs(demo_runs(noise_ratios, plugins), schedule_plan)
    if epochs is not None:
        runs = tuple(replace(run, settings=shortened_settings(run.settings, epochs)) for run in runs)
    print(_plan_line(plan, size or plan.size, epochs, runs), flush=True)
    results = run_demo(output_dir, runs, DEMO_SIZES[size or plan.size], seed=seed, progress=progress, keep_going=True)
    tables = [
        format_table([r for r in results if r["data_kind"] == kind], task)
        for kind, task in TASKS.items()
        if any(r["data_kind"] == kind for r in results)
    ]
    table = "\n\n".join(tables)
    print(table)
    saved = Path(output_dir, "comparison.md")
    saved.write_text(table + "\n")
    saved.with_suffix(".json").write_text(
        json.dumps([{k: v for k, v in r.items() if k != "history"} for r in results], indent=1, default=float)
    )
    print(f"table saved to {saved} (every run's figures: {saved.with_suffix('.json')})")
    return 1 if any("error" in r for r in results) else 0


def _plan_line(plan: DemoPlan, size: str, epochs: int | None, runs: tuple[DemoRun, ...]) -> str:
    """What the demo is about to train, in one line (the quick demo says how to get the full one)."""
    parts = []
    for kind in dict.fromkeys(run.task.kind for run in runs):
        schedule = plan.schedules.get(kind, Schedule())
        what = f"{kind}: "
        if kind == PAIRS.kind:
            what += f"{DEMO_SIZES[size].num_train} generated training images, "
        if epochs is not None:
            what += f"{epochs} epochs each"
        elif schedule.epochs is not None:
            what += f"at most {schedule.epochs} epochs each"
        else:
            what += "each method's demo settings"
        if schedule.learning_rate_scale != 1.0:
            what += f", {schedule.learning_rate_scale:g}x the learning rate"
        if schedule.batch_size is not None:
            what += f", batches of {schedule.batch_size}"
        parts.append(what)
    line = f"hfncl demo: {len(runs)} runs; " + "; ".join(parts)
    full = "; hfncl demo --full trains the full comparison of benchmarks/README.md (about 17 minutes)"
    return line + ("" if plan is FULL else full)
