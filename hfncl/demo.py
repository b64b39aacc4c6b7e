"""The README's main job: methods side by side on the generated benchmark with noise.

Generates the seeded benchmark (:mod:`hfncl.data.synthetic`), corrupts the training
pairs by the NCR caption-shuffling protocol, trains each method with the same seed
and prints R@1/5/10, rSum and how well each method found the noisy pairs.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hfncl.config import TrainConfig
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.experiment import DataArguments, ModelArguments, run_experiment

DEMO_MODEL = ModelArguments(embed_dim=256, word_dim=64)


@dataclass(frozen=True)
class DemoRun:
    """One row of the comparison: a method at a noise ratio."""

    label: str
    plugins: tuple[str, ...]
    noise_ratio: float
    epochs: int
    warmup_epochs: int = 0
    options: dict[str, Any] = field(default_factory=dict)


DEFAULT_RUNS = (
    DemoRun("vsepp", ("vsepp",), 0.0, epochs=12),
    DemoRun("vsepp", ("vsepp",), 0.5, epochs=12),
    DemoRun("ncr", ("ncr",), 0.5, epochs=12, warmup_epochs=3),
)


def demo_train_config(run: DemoRun, output_dir: Path, seed: int, progress: bool) -> TrainConfig:
    """The training settings of the demo: the papers' optimiser at the benchmark's small scale."""
    return TrainConfig(
        plugins=list(run.plugins),
        options=dict(run.options),
        output_dir=str(output_dir),
        epochs=run.epochs,
        warmup_epochs=run.warmup_epochs,
        batch_size=128,
        learning_rate=2e-4,
        lr_decay_epochs=[int(run.epochs * 0.75)],
        seed=seed,
        progress=progress,
    )


def run_demo(
    output_dir: str | Path = "runs/demo",
    runs: tuple[DemoRun, ...] = DEFAULT_RUNS,
    data: SyntheticConfig = SyntheticConfig(),
    seed: int = 0,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Train every run of ``runs`` on the generated benchmark; return one result per run."""
    output_dir = Path(output_dir)
    data_dir = generate_precomp(output_dir / "data", data)
    results = []
    for run in runs:
        run_dir = output_dir / f"{run.label}_noise{int(round(run.noise_ratio * 100))}"
        started = time.perf_counter()
        result = run_experiment(
            DataArguments(data_dir=str(data_dir), noise_ratio=run.noise_ratio, noise_seed=seed),
            demo_train_config(run, run_dir, seed, progress),
            DEMO_MODEL,
        )
        result.update(label=run.label, seconds=time.perf_counter() - started)
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


def main(output_dir: str = "runs/demo", seed: int = 0, progress: bool = True) -> int:
    """Run the default comparison, print the table, save it as JSON and markdown."""
    results = run_demo(output_dir, seed=seed, progress=progress)
    table = format_table(results)
    print(table)
    Path(output_dir, "comparison.md").write_text(table + "\n")
    Path(output_dir, "comparison.json").write_text(
        json.dumps([{k: v for k, v in r.items() if k != "history"} for r in results], indent=1, default=float)
    )
    return 0
