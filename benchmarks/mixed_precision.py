"""Mixed precision on the CPU: NCR on an SGR head trained in float32 and under bf16 autocast, side by side.

    python benchmarks/mixed_precision.py --output-dir runs/mixed_precision      # 2 runs, ~25 min on 2 cores
    python benchmarks/mixed_precision.py --quick                                 # tiny: checks the script

Trains NCR (two networks, the official SGR layers at the demo's joint space 256, words 64, sim 64,
3 reasoning steps) on the small generated benchmark (800 training images x 5 captions) at
``--noise-ratio``, once with ``mixed_precision: no`` and once with ``bf16`` (Accelerate's
autocast: encoders, head and evaluation in bf16, scores float32), the same seed, data and
schedule (``--warmup-epochs`` warmup epochs, Adam ``--learning-rate`` in batches of
``--batch-size``: an SGR head from scratch needs a few hundred steps before it ranks). Then it
evaluates the float32 run's best checkpoint on the test split under bf16 autocast
(``hfncl evaluate --mixed-precision bf16``), which isolates what scoring in bf16 does to the metrics.

Reports per run the test rSum, the division's AUC in the last epoch, the validation rSum by epoch
and the CPU seconds of training (``time.process_time`` of this process, one torch thread unless
``OMP_NUM_THREADS`` says otherwise); writes ``mixed_precision.md`` and ``mixed_precision.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch
from common import constant_lr_schedule, machine, quiet, write_report

from hfncl.data import load_precomp_split
from hfncl.demo import DEMO_SIZES, DemoRun, demo_train_config
from hfncl.engine.encoding import RetrievalSplit, evaluate_retrieval
from hfncl.experiment import run_experiment
from hfncl.hub import load_text_vocabulary
from hfncl.models import NCLModel
from hfncl.tasks import PAIRS

SGR_MODEL = dataclasses.replace(
    PAIRS.demo_model, similarity="sgr", head_options={"sgr.sim_dim": 64, "sgr.reasoning_steps": 3}
)
PRECISIONS = ("no", "bf16")


def train(output: Path, data_dir: Path, args: argparse.Namespace, precision: str) -> dict:
    """One NCR-SGR run in ``precision``: test rSum, last division AUC, validation rSum by epoch, CPU seconds."""
    settings = constant_lr_schedule(args) | {"mixed_precision": precision}
    run_dir = output / f"ncr-sgr-{precision}"
    config = demo_train_config(DemoRun("ncr", args.noise_ratio, settings), run_dir, seed=args.seed, progress=False)
    start = time.process_time()
    result = run_experiment(PAIRS.demo_arguments(data_dir, args.noise_ratio, args.seed), config, SGR_MODEL)
    history = result["history"]
    aucs = [epoch.get("division/net0/auc") for epoch in history if epoch.get("division/net0/auc") is not None]
    return {
        "precision": precision,
        "rsum": result["test"]["rsum"],
        "auc": aucs[-1] if aucs else None,
        "val_rsum": [epoch.get("val/rsum") for epoch in history],
        "cpu_seconds": time.process_time() - start,
        "best": str(run_dir / "best"),
    }


def evaluate_in(checkpoint: str, data_dir: Path, precision: str) -> float:
    """Test rSum of a saved model scored under ``precision``'s autocast (``hfncl evaluate --mixed-precision``)."""
    model = NCLModel.from_pretrained(checkpoint)
    split = RetrievalSplit.from_precomp(
        load_precomp_split(str(data_dir), "test", expected_feature_dim=model.config.image_dim),
        load_text_vocabulary(checkpoint, model.config),
    )
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        return evaluate_retrieval(model, split)["rsum"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/mixed_precision", help="Where the data, runs and table go.")
    parser.add_argument("--size", choices=sorted(DEMO_SIZES), default="small", help="Generated benchmark size.")
    parser.add_argument("--noise-ratio", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--warmup-epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="Tiny benchmark, 2 epochs: checks the script in a minute.")
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.epochs, args.warmup_epochs = "tiny", 2, 1
    quiet()
    output = Path(args.output_dir)
    data_dir = PAIRS.demo_data(output, DEMO_SIZES[args.size], 0)
    rows = []
    for precision in PRECISIONS:
        rows.append(train(output, data_dir, args, precision))
        (output / "mixed_precision.json").write_text(json.dumps(rows, indent=1))
    full = rows[0]
    scored = {precision: evaluate_in(full["best"], data_dir, precision) for precision in PRECISIONS}
    (output / "mixed_precision.json").write_text(json.dumps({"runs": rows, "fp32_model_scored_in": scored}, indent=1))
    lines = [
        f"NCR on the official SGR layers (256/64, 3 steps), {args.size} generated benchmark, {args.noise_ratio:.0%} "
        f"noise, {args.warmup_epochs} warmup + {args.epochs - args.warmup_epochs} epochs, batch {args.batch_size}, "
        f"Adam {args.learning_rate:g}, seed {args.seed}, {torch.get_num_threads()} torch thread(s); {machine()}",
        "",
        "| training precision | test rSum | division AUC (last epoch, net A) | training CPU s | "
        "validation rSum by epoch |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        curve = " / ".join("-" if v is None else f"{v:.0f}" for v in row["val_rsum"])
        auc = "-" if row["auc"] is None else f"{row['auc']:.3f}"
        lines.append(f"| {row['precision']} | {row['rsum']:.1f} | {auc} | {row['cpu_seconds']:.0f} | {curve} |")
    lines += [
        "",
        f"The float32 run's best model scored on the test split in float32: rSum {scored['no']:.1f}; "
        f"under bf16 autocast: {scored['bf16']:.1f}.",
    ]
    write_report(output / "mixed_precision.md", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
