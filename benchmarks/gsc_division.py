"""GSC's division quality epoch by epoch (its Fig. 5c-d at small scale): accuracy and AUC of y against the hidden mask.

    python benchmarks/gsc_division.py --output-dir runs/gsc_division                # 40% noise, 32 epochs, ~7 min
    python benchmarks/gsc_division.py --noise-ratios 0.4 0.6 --epochs 40

Trains GSC with its demo settings (two networks, 2 epochs with y = 1, Adam 2e-4 without
decay) for ``--epochs`` epochs on the small generated benchmark (1500 training images x
5 captions, seed 0) and records, after every epoch, the division of network A: accuracy
of the clean set y >= 0.5 and ROC-AUC of y against the hidden clean mask. The labels
y = min(y_CM, y_IM) rank clean above noisy pairs early (AUC), but y_CM, a pair's
softmax share among the batch's 128 candidates at tau 0.07, only passes 0.5 for most
clean pairs once the model is confident: accuracy lags the AUC by many epochs.

Writes ``gsc_division.md`` (the curve every 4 epochs and the first epoch reaching 0.9),
``gsc_division.json`` and ``gsc_division.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from common import machine, quiet, write_report

from hfncl.data.synthetic import SyntheticConfig
from hfncl.demo import DemoRun, demo_runs, run_demo

BENCHMARK = SyntheticConfig(num_train=1500, num_dev=300, num_test=500)


def division_curve(history: list[dict], metric: str) -> list[float]:
    """Network A's division ``metric`` per epoch (NaN before the first division)."""
    return [epoch.get(f"division/net0/{metric}", math.nan) for epoch in history]


def first_epoch_reaching(values: list[float], level: float) -> int | None:
    """The first epoch (counted from 1) whose value is at least ``level``."""
    return next((epoch for epoch, value in enumerate(values, start=1) if value >= level), None)


def markdown(rows: list[dict], header: str, every: int = 4) -> str:
    epochs = len(rows[0]["accuracy"])
    shown = [e for e in range(every, epochs + 1, every)] or [epochs]
    lines = [
        header,
        "",
        "| noise | measure | " + " | ".join(f"epoch {e}" for e in shown) + " | first epoch >= 0.9 | test rSum |",
    ]
    lines.append("|---|---|" + "---|" * len(shown) + "---|---|")
    for row in rows:
        for measure in ("accuracy", "auc"):
            values = row[measure]
            first = first_epoch_reaching(values, 0.9)
            lines.append(
                f"| {row['noise_ratio']:.0%} | {measure} | "
                + " | ".join(f"{values[e - 1]:.3f}" for e in shown)
                + f" | {first if first is not None else 'not reached'} | {row['rsum']:.1f} |"
            )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    for row in rows:
        epochs = range(1, len(row["accuracy"]) + 1)
        axis.plot(epochs, row["accuracy"], label=f"accuracy, {row['noise_ratio']:.0%} noise")
        axis.plot(epochs, row["auc"], linestyle="--", label=f"AUC, {row['noise_ratio']:.0%} noise")
    axis.axhline(0.9, color="grey", linewidth=0.8)
    axis.set_xlabel("epoch")
    axis.set_ylabel("division of network A vs hidden mask")
    axis.set_ylim(0.3, 1.0)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/gsc_division", help="Where the data, runs, table and plot go.")
    parser.add_argument("--noise-ratios", type=float, nargs="+", default=[0.4])
    parser.add_argument("--epochs", type=int, default=32)
    args = parser.parse_args(argv)
    quiet()
    output = Path(args.output_dir)
    settings = demo_runs((0.0,), ["gsc"])[0].settings
    rows = []
    for ratio in args.noise_ratios:
        run = DemoRun("gsc", ratio, {**settings, "epochs": args.epochs})
        result = run_demo(output / f"noise-{int(round(ratio * 100))}", (run,), BENCHMARK, progress=False)[0]
        rows.append(
            {
                "noise_ratio": ratio,
                "accuracy": division_curve(result["history"], "accuracy"),
                "auc": division_curve(result["history"], "auc"),
                "rsum": result["test"]["rsum"],
                "seconds": result["seconds"],
            }
        )
    header = (
        f"GSC, demo settings for {args.epochs} epochs, 1500 training images x 5 captions, seed 0; "
        f"division accuracy of y >= 0.5 and AUC of y, network A; {machine()}"
    )
    write_report(output / "gsc_division.md", markdown(rows, header))
    (output / "gsc_division.json").write_text(json.dumps(rows, indent=1, default=float))
    plot(rows, output / "gsc_division.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
