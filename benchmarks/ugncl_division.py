"""UGNCL's three-way division on the paper's SGR head, epoch by epoch, under each reading of Eq. 3 and xi1.

    python benchmarks/ugncl_division.py --output-dir runs/ugncl_division       # 3 runs, ~25 min on 2 cores
    python benchmarks/ugncl_division.py --variants excess --xi1 0.001 0.01

Trains one UGNCL network with its two image views on an SGR head (the demo's joint space
256 and words 64, sim 64, 3 reasoning steps) on the small generated benchmark (800 training
images x 5 captions) at ``--noise-ratio``, 5 warmup epochs then 5 with the division, Adam
5e-4 without decay in batches of 32: an SGR head trained from scratch needs several hundred
steps before it ranks at all (at the demo's batch 128 and lr 2e-4 it is still at chance after
the 62 steps of two epochs here). After every epoch it records the shares of
UGNCL's four sets (determined-clean, determined-noisy, hard-clean, hard-noisy; Eq. 8-11),
the division's ROC-AUC of the soft label against the hidden clean mask, and the test rSum
of the best checkpoint. One run per evidence reading (``ugncl.evidence``: ``excess``, the
default, Eq. 3 less its floor of 1 on the raw score; ``raw``, Eq. 3 on the raw score as the
authors' code; ``printed``, Eq. 3 on the sigmoid similarity) and per xi1 of ``--xi1``.

Writes ``ugncl_division.md`` (a table per run: the sets' shares by epoch) and
``ugncl_division.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from common import constant_lr_schedule, machine, quiet, write_report

from hfncl.demo import DEMO_SIZES, DemoRun, demo_train_config
from hfncl.experiment import run_experiment
from hfncl.tasks import PAIRS

SETS = ("clean", "noisy", "hard_clean", "hard_noisy")
SGR_OPTIONS = {"sgr.sim_dim": 64, "sgr.reasoning_steps": 3}
SGR_MODEL = dataclasses.replace(PAIRS.demo_model, similarity="sgr", head_options=SGR_OPTIONS, image_views=2)
PLAIN_LAYERS = dict(
    head_options=SGR_OPTIONS
    | {"sgr.attention_negative_slope": 0.0, "sgr.pooling_batch_norm": False, "sgr.pooling_dropout": 0.0},
    word_dropout=0.0,
)
"""The paper's plain SGR head: ReLU attention, no batch norm, no dropout (``--plain-head``)."""


def run_variant(output: Path, args: argparse.Namespace, evidence: str, xi1: float) -> dict:
    """Train UGNCL-SGR with one evidence reading and xi1; the sets' shares and AUC per epoch, test rSum."""
    settings = constant_lr_schedule(args) | {"options": {"ugncl.evidence": evidence, "ugncl.xi1": xi1}}
    run = DemoRun("ugncl", args.noise_ratio, settings)
    run_dir = output / f"{evidence}-xi1_{xi1:g}{'-plain' if args.plain_head else ''}"
    data_dir = PAIRS.demo_data(output, DEMO_SIZES[args.size], 0)
    config = demo_train_config(run, run_dir, seed=0, progress=False)
    model = dataclasses.replace(SGR_MODEL, **PLAIN_LAYERS) if args.plain_head else SGR_MODEL
    result = run_experiment(PAIRS.demo_arguments(data_dir, args.noise_ratio, 0), config, model)
    history = result["history"]
    return {
        "evidence": evidence,
        "xi1": xi1,
        "shares": {name: [epoch.get(f"division/{name}_share") for epoch in history] for name in SETS},
        "auc": [epoch.get("division/net0/auc", epoch.get("division/auc")) for epoch in history],
        "val_rsum": [epoch.get("val/rsum") for epoch in history],
        "rsum": result["test"]["rsum"],
    }


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(rows: list[dict], header: str) -> str:
    lines = [header]
    for row in rows:
        epochs = len(row["auc"])
        lines += [
            "",
            f"**evidence {row['evidence']}, xi1 {row['xi1']:g}**: test rSum {row['rsum']:.1f}",
            "",
            "| epoch | " + " | ".join(str(e) for e in range(1, epochs + 1)) + " |",
            "|---|" + "---|" * epochs,
        ]
        for name in SETS:
            lines.append(f"| {name} share | " + " | ".join(_cell(v) for v in row["shares"][name]) + " |")
        lines.append("| division AUC | " + " | ".join(_cell(v) for v in row["auc"]) + " |")
        lines.append("| validation rSum | " + " | ".join(_cell(v, 1) for v in row["val_rsum"]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/ugncl_division", help="Where the data, runs and table go.")
    parser.add_argument("--size", choices=sorted(DEMO_SIZES), default="small", help="Generated benchmark size.")
    parser.add_argument("--noise-ratio", type=float, default=0.5)
    parser.add_argument("--variants", nargs="+", default=["excess", "raw", "printed"], help="ugncl.evidence readings.")
    parser.add_argument("--xi1", type=float, nargs="+", default=[0.001], help="KL weights of Eq. 14.")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--warmup-epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument(
        "--plain-head", action="store_true", help="The paper's plain head instead of the official code's layers."
    )
    args = parser.parse_args(argv)
    quiet()
    output = Path(args.output_dir)
    rows = []
    for evidence in args.variants:
        for xi1 in args.xi1:
            rows.append(run_variant(output, args, evidence, xi1))
            (output / "ugncl_division.json").write_text(json.dumps(rows, indent=1, default=float))
    header = (
        f"UGNCL on {'the plain' if args.plain_head else 'the official layers of'} SGR (two image views), "
        f"{args.size} generated benchmark, {args.noise_ratio:.0%} noise, "
        f"{args.warmup_epochs} warmup + {args.epochs - args.warmup_epochs} epochs, batch {args.batch_size}, "
        f"Adam {args.learning_rate:g}, seed 0; {machine()}"
    )
    write_report(output / "ugncl_division.md", markdown(rows, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
