"""One against two CPU processes: the same division and metrics, and the throughput of each.

    python benchmarks/distributed.py --output-dir runs/bench_distributed    # NCR, the demo's benchmark, 2 epochs
    python benchmarks/distributed.py --quick                                # tiny data: about a minute

Launches this script under ``torchrun --standalone --nproc_per_node P`` with
``ACCELERATE_USE_CPU=true`` for P = 1 and 2 (Accelerate then runs MULTI_CPU over gloo;
``accelerate launch --cpu --num_processes 2`` of accelerate 1.15 starts a single process).
The global batch is the same either way: two processes take half each and gather. Each run
trains ``--method`` for one warmup epoch and one epoch with a division, evaluates the
final networks on the test split, and saves its divisions. Torch uses 2 threads in the
single process and 1 per process with two, so both use the 2 cores. Compares the
division (clean probabilities, clean set, division quality per epoch), the test metrics
and the losses; throughput is training pairs per second of the epochs (from
``epoch_start`` to ``epoch_end``). Writes ``distributed.md`` and ``distributed.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from common import machine, quiet, write_report

from hfncl.config import TrainConfig
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.engine.encoding import evaluate_retrieval
from hfncl.engine.trainer import Trainer
from hfncl.experiment import DataArguments, ModelArguments
from hfncl.models import NCLConfig
from hfncl.plugin_setup import run_plugins
from hfncl.profiling import HookTimer
from hfncl.tasks.pair_data import prepare_data
from hfncl.tasks.pairs import DEMO_MODEL, PAIRS, model_fields

QUICK_DATA = SyntheticConfig(num_train=160, num_dev=40, num_test=40, num_concepts=16, feature_dim=16, seed=1)
QUICK_MODEL = ModelArguments(embed_dim=32, word_dim=16)
LAUNCH = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
CORES = 2


def worker(args: argparse.Namespace) -> None:
    """One run (inside ``accelerate launch``); the main process writes ``result.json`` and ``divisions.pt``."""
    quiet()
    output_dir = Path(args.worker)
    config = TrainConfig(
        plugins=[args.method],
        output_dir=str(output_dir),
        epochs=2,
        warmup_epochs=1,
        batch_size=32 if args.quick else 128,
        lr_decay_epochs=[],
        plot_divisions=False,
        progress=False,
    )
    data = prepare_data(DataArguments(data_dir=args.data_dir, noise_ratio=0.5), output_dir)
    model_config = NCLConfig(
        image_dim=data.image_dim,
        image_regions=data.image_regions,
        vocab_size=len(data.vocab),
        **model_fields(config.plugins, QUICK_MODEL if args.quick else DEMO_MODEL),
    )
    timer = HookTimer(["epoch_start", "epoch_end"])
    trainer = Trainer(
        config, model_config, data.train, data.val, task=PAIRS, callbacks=[timer], plugins=run_plugins(config)
    )
    summary = trainer.train()
    test = evaluate_retrieval(trainer.model, data.test, batch_size=config.eval_batch_size, hook=trainer.hook)
    if trainer.accelerator.is_main_process:
        epochs = timer.between("epoch_start", "epoch_end")
        divisions = {f"net{k}": d.clean_prob for k, d in enumerate(trainer.divisions) if d is not None}
        torch.save(divisions, output_dir / "divisions.pt")
        result = {
            "processes": trainer.world_size,
            "pairs": len(data.train),
            "epoch_s": epochs,
            "pairs_per_s": len(data.train) * len(epochs) / sum(epochs),
            "history": summary["history"],
            "test": test,
        }
        (output_dir / "result.json").write_text(json.dumps(result, indent=1, default=float))


def launch(processes: int, args: argparse.Namespace, data_dir: Path, output_dir: Path) -> dict:
    command = LAUNCH + ["--nproc_per_node", str(processes), __file__, "--method", args.method]
    command += ["--data-dir", str(data_dir), "--worker", str(output_dir)] + (["--quick"] if args.quick else [])
    environment = dict(os.environ, OMP_NUM_THREADS=str(max(1, CORES // processes)), ACCELERATE_USE_CPU="true")
    subprocess.run(command, check=True, env=environment)
    result = json.loads((output_dir / "result.json").read_text())
    result["divisions"] = torch.load(output_dir / "divisions.pt", weights_only=True)
    return result


def compare(one: dict, two: dict) -> dict:
    """Largest differences between the runs: clean probabilities, division and validation records, test, losses."""
    def largest(a: dict, b: dict, keep) -> float:
        keys = [k for k in a if keep(k) and isinstance(a[k], (int, float))]
        return max((abs(a[k] - b[k]) for k in keys), default=0.0)

    pairs = list(zip(one["history"], two["history"], strict=True))
    return {
        "clean_prob": max(
            (float((one["divisions"][k] - two["divisions"][k]).abs().max()) for k in one["divisions"]), default=0.0
        ),
        "clean_set_differs": sum(
            int(((one["divisions"][k] >= 0.5) != (two["divisions"][k] >= 0.5)).sum()) for k in one["divisions"]
        ),
        "division_and_validation": max(largest(a, b, lambda k: not k.startswith("train/")) for a, b in pairs),
        "test": largest(one["test"], two["test"], lambda k: True),
        "train_loss": max(largest(a, b, lambda k: k.startswith("train/")) for a, b in pairs),
    }


def markdown(one: dict, two: dict, diff: dict, header: str) -> str:
    lines = [
        header,
        "",
        "| processes | epoch times (s) | pairs/s | test rSum | division AUC (net A, last epoch) |",
        "|---|---|---|---|---|",
    ]
    for result in (one, two):
        auc = result["history"][-1].get("division/net0/auc", result["history"][-1].get("division/auc", float("nan")))
        times = " / ".join(f"{s:.1f}" for s in result["epoch_s"])
        lines.append(
            f"| {result['processes']} | {times} | {result['pairs_per_s']:.0f} | {result['test']['rsum']:.2f} | "
            f"{auc:.4f} |"
        )
    lines += [
        "",
        f"Largest difference, 1 vs 2 processes: clean probability {diff['clean_prob']:.2e} "
        f"({diff['clean_set_differs']} pairs change sets), division quality and validation metrics "
        f"{diff['division_and_validation']:.2e}, test metrics {diff['test']:.2e}, mean training losses "
        f"{diff['train_loss']:.2e}.",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="ncr", help="The method trained (default ncr).")
    parser.add_argument("--output-dir", default="runs/bench_distributed")
    parser.add_argument("--quick", action="store_true", help="Tiny data (160 images), batch 32, tiny model.")
    parser.add_argument("--data-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    quiet()
    output_dir = Path(args.output_dir)
    data_dir = generate_precomp(output_dir / "data", QUICK_DATA if args.quick else SyntheticConfig())
    one, two = (launch(p, args, data_dir, output_dir / f"processes-{p}") for p in (1, 2))
    diff = compare(one, two)
    size = "tiny benchmark (--quick)" if args.quick else "the demo's benchmark"
    header = (
        f"{args.method} on {size}, {one['pairs']} pairs, 50% noise, 1 warmup + 1 divided epoch, "
        f"global batch {32 if args.quick else 128}; {machine()}"
    )
    write_report(output_dir / "distributed.md", markdown(one, two, diff, header))
    summary = {k: {n: v for n, v in r.items() if n != "divisions"} for k, r in (("one", one), ("two", two))}
    (output_dir / "distributed.json").write_text(json.dumps({**summary, "difference": diff}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
