"""How long ``hfncl audit --model DIR`` takes, part by part, as the split grows (issue 44's target: under a minute of
CPU per 10K pairs at 100K pairs).

    OMP_NUM_THREADS=1 python benchmarks/audit_speed.py --pairs 10000 30000 100000
    python benchmarks/audit_speed.py --quick                                         # tiny: checks the script

Generates the benchmark (:mod:`hfncl.data.synthetic`, 5 captions per image) with as many training images as the
largest size needs; each size is its first images, their captions re-paired for ``--noise`` of them
(``benchmarks/audit.py``'s ``noisy_copy``). The default audit method (the installed plugin declaring
``audit_settings``) trains on the smallest size for ``--epochs`` with the demo's model, briefly (the seconds do not
depend on how well it ranks), and is saved; then each size is audited with it as ``hfncl audit --model DIR`` does
(:func:`hfncl.audit.run_audit`), each in a fresh process, so that its peak memory is its own. The parts, in the
audit's order: **read** (the split and the model, :func:`~hfncl.audit.training.load_trained`), **encode** (every image
and caption, :func:`~hfncl.audit.table.encode_split`), **score** (the p-values and re-pairings,
:func:`~hfncl.audit.scoring.score_pairs`), **table** (:func:`~hfncl.audit.table.pair_table`) and **files**
(``audit.parquet``, ``audit.csv``, ``audit.html``: :func:`~hfncl.audit.report.write_table`). Seconds are the
process's CPU seconds (``time.process_time``); wall seconds and the peak resident memory (``ru_maxrss``) beside them.
Writes ``audit_speed.md`` to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from audit import QUICK_MODEL, noisy_copy
from common import machine, quiet, write_report

from hfncl.audit.report import write_table
from hfncl.audit.scoring import score_pairs
from hfncl.audit.table import encode_split, pair_table
from hfncl.audit.training import audit_settings, default_plugins, load_trained, read_split, save_trained, train_method
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.tasks.pairs import DEMO_MODEL

PARTS = ("read", "encode", "score", "table", "files")
CAPTIONS_PER_IMAGE = SyntheticConfig().captions_per_image
QUICK_PAIRS = [200, 400]
TARGET = 60.0
"""Issue 44's target: CPU seconds per 10K pairs."""


def commit() -> str:
    """The checked-out commit, ``+`` when the library or this script differ from it."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "../hfncl", Path(__file__).name],
            cwd=here,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def prepare(output_dir: Path, sizes: list[int], noise: float, seed: int) -> dict[int, Path]:
    """Each size's noisy training split (a precomp directory), the first ``size / 5`` images of one generated
    benchmark."""
    images = max(sizes) // CAPTIONS_PER_IMAGE
    source = generate_precomp(
        output_dir / f"generated_{images}", SyntheticConfig(num_train=images, num_dev=10, num_test=10)
    )
    features = np.load(source / "train_ims.npy", mmap_mode="r")
    captions = (source / "train_caps.txt").read_text(encoding="utf-8").splitlines()
    splits = {}
    for size in sizes:
        subset = output_dir / f"pairs_{size}" / "clean"
        subset.mkdir(parents=True, exist_ok=True)
        np.save(subset / "train_ims.npy", np.ascontiguousarray(features[: size // CAPTIONS_PER_IMAGE]))
        (subset / "train_caps.txt").write_text("".join(line + "\n" for line in captions[:size]), encoding="utf-8")
        noisy_copy(subset, output_dir / f"pairs_{size}" / "data", noise, seed)
        splits[size] = output_dir / f"pairs_{size}" / "data"
    return splits


def train(data: Path, model_dir: Path, epochs: int, seed: int, quick: bool) -> float:
    """Train the default audit method on ``data`` for ``epochs`` and save it to ``model_dir``; its seconds."""
    model = QUICK_MODEL if quick else DEMO_MODEL
    plugins = default_plugins()
    started = time.perf_counter()
    trained = train_method(
        read_split(data, "train", model, plugins), audit_settings(plugins, epochs, seed, False, None), model
    )
    save_trained(trained, model_dir)
    return time.perf_counter() - started


def time_audit(data: Path, model_dir: Path, output_dir: Path) -> dict[str, Any]:
    """Audit ``data`` with the model at ``model_dir`` part by part (:data:`PARTS`); CPU and wall seconds of each,
    the pairs, the flagged ones and the peak resident memory (MB)."""
    row: dict[str, Any] = {"cpu": {}, "wall": {}}

    def timed(part: str, work: Callable[[], Any]) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        result = work()
        row["cpu"][part], row["wall"][part] = time.process_time() - cpu, time.perf_counter() - wall
        return result

    trained = timed("read", lambda: load_trained(model_dir, data, "train"))
    retriever = trained.retriever()
    embeds = timed("encode", lambda: encode_split(retriever, trained.data.split))
    scores = timed("score", lambda: score_pairs(retriever, *embeds, trained.data.split.captions_per_image))
    table = timed("table", lambda: pair_table(trained, scores))
    timed("files", lambda: write_table(table, output_dir, images=trained.data.image_reader()))
    row["pairs"], row["flagged"] = len(table), int(np.count_nonzero(table["flagged"]))
    row["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux
    return row


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    cells = " | ".join(f"{part} (s)" for part in PARTS)
    lines = [
        header,
        "",
        f"| pairs | images | flagged | {cells} | total CPU (s) | wall (s) | CPU s / 10K pairs | peak memory (MB) |",
        "|" + "---|" * (len(PARTS) + 7),
    ]
    for r in rows:
        cpu = sum(r["cpu"].values())
        parts = " | ".join(f"{r['cpu'][part]:.1f}" for part in PARTS)
        lines.append(
            f"| {r['pairs']} | {r['pairs'] // CAPTIONS_PER_IMAGE} | {r['flagged']} | {parts} | {cpu:.1f} | "
            f"{sum(r['wall'].values()):.1f} | {cpu / r['pairs'] * 1e4:.1f} | {r['peak_mb']:.0f} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", nargs="+", type=int, default=[10000, 30000, 100000], help="Split sizes to audit.")
    parser.add_argument("--noise", type=float, default=0.5, help="Share of the captions re-paired.")
    parser.add_argument("--epochs", type=int, default=2, help="Training epochs of the model (on the smallest size).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each audit.")
    parser.add_argument("--output-dir", default="runs/audit_speed")
    parser.add_argument("--quick", action="store_true", help="Tiny sizes and model: checks the script.")
    parser.add_argument("--one", nargs=3, metavar=("DATA", "MODEL", "OUTPUT"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    torch.set_num_threads(args.threads)
    if args.one:  # a child process: one audit, its row as JSON on the last line
        data, model_dir, output = map(Path, args.one)
        print(json.dumps(time_audit(data, model_dir, output)))
        return 0
    output_dir = Path(args.output_dir)
    sizes = sorted(QUICK_PAIRS if args.quick else args.pairs)
    splits = prepare(output_dir, sizes, args.noise, args.seed)
    model_dir = output_dir / "model"
    training = train(splits[sizes[0]], model_dir, args.epochs, args.seed, args.quick)
    print(f"trained on {sizes[0]} pairs in {training:.0f} s", flush=True)
    rows = []
    for size in sizes:
        child = [
            sys.executable,
            __file__,
            "--threads",
            str(args.threads),
            "--one",
            str(splits[size]),
            str(model_dir),
            str(output_dir / f"pairs_{size}" / "audit"),
        ]
        done = subprocess.run(child, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(markdown(rows[-1:], f"{size} pairs"), flush=True)
    command = f"python benchmarks/audit_speed.py {' '.join(sys.argv[1:])}"
    header = (
        f"{machine()}, torch threads {args.threads}, commit {commit()}; `{command}`; {args.noise:.0%} of the "
        f"captions re-paired, the model trained {args.epochs} epochs on the {sizes[0]} pairs; seconds are CPU "
        f"seconds (target: under {TARGET:.0f} per 10K pairs)"
    )
    write_report(output_dir / "audit_speed.md", markdown(rows, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
