"""Every image-text recipe, reduced, on the real-text proxy: does its loss fall, does its division
find the noise, where does its rSum land beside VSE++'s?

    python benchmarks/recipes_proxy.py                          # 8 runs, about 1.5 h on one core for the first 7
    python benchmarks/recipes_proxy.py --recipes ncr_f30k vsepp_f30k --epochs 6
    python benchmarks/recipes_proxy.py --paper-width            # the recipes' own widths (hours)
    python benchmarks/recipes_proxy.py --quick                  # tiny: checks the script in minutes
    python benchmarks/recipes_proxy.py --recipes gsc_f30k --options '{"gsc.structure": "head"}' --output-dir DIR

Each recipe of ``recipes/`` that learns from image-caption pairs runs as a user runs it
(``python recipes/NAME.py``: its paper's similarity head, towers, batch, optimiser, margins,
thresholds and options), on a small real-text proxy cut from ``--captions-file`` (Flickr8k:
caption #0's MiniLM token vectors as 32 "regions" of 384 dims, the other four captions as
its texts; 1000 training images (4000 pairs), 100 dev and 200 test images), with the NCR
protocol's noise at ``--noise-ratio`` and seed ``--seed``. Only the schedule and the width are
reduced, through a ``--config`` file the run also saves:

- ``--warmup-epochs`` epochs of warmup for every recipe, then ``--epochs`` epochs; no lr decay. The
  warmup stands in for the papers' first division, which comes after some 1100 steps (NCR's and UGNCL's
  warmup epochs, GSC's first epoch, whose labels start at 1) where a proxy epoch is 31 steps: an SGR head
  that has not yet learnt to rank divides at chance, and its division then starves it. In a recipe
  without a warmup of its own the warmup epochs train its usual loss (VSE++, TcVSE) or keep its labels
  at 1 (GSC);
- joint space 256 and SGR/SAF/SCAN similarity 64 (the recipes' 1024 / 256 with
  ``--paper-width``);
- a Hub text tower (TcVSE's BERT-base) is replaced by the local all-MiniLM-L6-v2, a BERT of 6
  layers, since the Hub is out of reach here.

``--options`` (JSON) sets plugin options over each recipe's own, to change one thing; a recipe
whose plugins do not declare an option refuses it, so name the recipes it is for with ``--recipes``,
and an ``--output-dir`` of its own (runs are kept by recipe name).

Recipes whose reduced settings are the same (a method's Flickr30K, MS-COCO and CC152K recipes
differ only in schedule) train once; their row names them all.

Reports per row: the training losses of network A by phase (first -> last epoch), the
division's ROC-AUC by epoch and its last precision / recall against the hidden noise mask,
the shares of named division sets (UGNCL's four), test rSum and its difference from the
``vsepp_f30k`` row. Writes ``recipes_proxy.md``, ``recipes_proxy_curves.png`` (validation rSum
and division AUC by epoch) and ``recipes_proxy.json`` to ``--output-dir``; each run keeps its
folder (``results.json``, ``train.log``), which ``--resume`` reuses; ``--report-only`` tables the finished
runs and trains nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import runpy
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import DEFAULT_CAPTIONS, correspondence_methods, machine, proxy_sources, pyplot, quiet, write_report

from hfncl.data.proxy import ProxyConfig, build_caption_proxy
from hfncl.plots import save_png

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"
PROXY = ProxyConfig(num_test=200, num_dev=100, max_images=1300)
QUICK_PROXY = ProxyConfig(num_test=30, num_dev=20, max_images=130)
REDUCED_WIDTH = {"embed_dim": 256, "sim_dim": 64}
QUICK_WIDTH = {"embed_dim": 32, "sim_dim": 16, "word_dim": 16}
"""Model widths of the reduced runs; ``sim_dim`` is the option of the recipe's head that has one (SGR / SAF)."""
REFERENCE = "vsepp_f30k"
HUB_TEXT_TOWERS = ("bert-base-uncased",)
SCHEDULE = ("epochs", "warmup_epochs", "lr_decay_epochs", "output_dir")


@dataclass(frozen=True)
class RecipeRun:
    """One training run: the recipes it stands for (same reduced settings) and its ``--config`` values."""

    recipes: tuple[str, ...]
    config: dict[str, Any]

    @property
    def name(self) -> str:
        return self.recipes[0]


def recipe_settings(recipe: str) -> dict[str, Any]:
    """A recipe's effective settings (its ``--print-config``: data, training, model, options), read in this process."""
    printed = io.StringIO()
    argv = sys.argv
    sys.argv = [str(RECIPES / f"{recipe}.py"), "--print-config"]
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exit:
        if exit.code:
            raise RuntimeError(f"recipes/{recipe}.py --print-config exited with {exit.code}") from None
    finally:
        sys.argv = argv
    return json.loads(printed.getvalue())


def image_text_recipes(settings: dict[str, dict[str, Any]], methods: list[str]) -> list[str]:
    """The recipes among ``settings`` whose plugins all learn from image-caption pairs (``methods``)."""
    return [name for name, s in settings.items() if all(p in methods for p in s["training"]["plugins"])]


def reduced_config(settings: dict[str, Any], args: argparse.Namespace, text_tower: str | None) -> dict[str, Any]:
    """The ``--config`` values of a recipe's reduced run: schedule, widths and data; the rest stays the recipe's."""
    config: dict[str, Any] = {
        "epochs": args.warmup_epochs + args.epochs,
        "warmup_epochs": args.warmup_epochs,
        "lr_decay_epochs": [],
        "noise_ratio": args.noise_ratio,
        "noise_seed": args.seed,
        "seed": args.seed,
        "progress": False,
        "train_split": "train",
        "val_split": "dev",
        "test_split": "test",
        "test_folds": 1,
    }
    if not args.paper_width:
        width = dict(QUICK_WIDTH if args.quick else REDUCED_WIDTH)
        head_width = f"{settings['model']['similarity']}.sim_dim"
        if head_width in settings["head_options"]:
            config["head_options"] = {**settings["head_options"], head_width: width["sim_dim"]}
        config.update({name: value for name, value in width.items() if name != "sim_dim"})
    if args.options:
        config["options"] = {**settings["training"]["options"], **args.options}
    if settings["model"].get("text_tower_name") in HUB_TEXT_TOWERS and text_tower is not None:
        config["text_tower"] = text_tower
    return config


def comparable(settings: dict[str, Any], config: dict[str, Any]) -> str:
    """What a reduced run trains with, as a key: the recipe's settings less its schedule and output folder, under
    the reduced ``config``; recipes with equal keys would train the same run."""
    training = {k: v for k, v in settings["training"].items() if k not in SCHEDULE}
    return json.dumps(
        {"training": training, "model": settings["model"], "options": settings["options"], "config": config},
        sort_keys=True,
    )


def plan(settings: dict[str, dict[str, Any]], args: argparse.Namespace, text_tower: str | None) -> list[RecipeRun]:
    """One run per distinct reduced configuration; a run lists every recipe it stands for, a Flickr30K recipe
    first (the one that runs: the proxy is Flickr-sized)."""
    groups: dict[str, list[str]] = {}
    configs: dict[str, dict[str, Any]] = {}
    for name in sorted(settings):
        config = reduced_config(settings[name], args, text_tower)
        key = comparable(settings[name], config)
        groups.setdefault(key, []).append(name)
        configs[key] = config
    return [
        RecipeRun(tuple(sorted(names, key=lambda name: "f30k" not in name)), configs[key])
        for key, names in groups.items()
    ]


def train(
    run: RecipeRun, data_dir: Path, output_dir: Path, resume: bool, report_only: bool = False
) -> dict[str, Any] | None:
    """Run the recipe in a child process as a user would; its ``results.json`` and the wall time (with
    ``report_only``, ``None`` for a run that has not finished: nothing trains). A run killed before it
    finished continues from its latest checkpoint with ``resume`` and starts again without it.

    Raises:
        RuntimeError: the recipe exited with an error (the last lines of its log name it).
    """
    run_dir = output_dir / run.name
    results = run_dir / "results.json"
    timing = run_dir / "seconds.json"
    if (resume or report_only) and results.is_file() and timing.is_file():
        return {"results": json.loads(results.read_text()), **json.loads(timing.read_text())}
    if report_only:
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = {**run.config, "data_dir": str(data_dir), "output_dir": str(run_dir)}
    killed_before = (run_dir / "checkpoints").is_dir()
    continues = resume and killed_before
    config_file = run_dir / "reduced.json"
    config_file.write_text(json.dumps(settings, indent=1))
    command = [sys.executable, str(RECIPES / f"{run.name}.py"), "--config", str(config_file)]
    if killed_before:  # what one command does with the run's folder is a flag, never in its settings file
        command += ["--resume_from_checkpoint", "latest"] if continues else ["--overwrite_output_dir"]
    started = time.perf_counter()
    with (run_dir / "train.log").open("a" if continues else "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        tail = (run_dir / "train.log").read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"recipes/{run.name}.py exited with {done.returncode}: {' | '.join(tail)}")
    timing.write_text(json.dumps({"seconds": seconds}))
    return {"results": json.loads(results.read_text()), "seconds": seconds}


def network_a(record: dict[str, Any], kind: str) -> dict[str, float]:
    """An epoch record's ``kind`` ("train" or "division") entries of network A: ``kind/.../net0/...`` or, with one
    network, ``kind/...``; keyed by the rest of the name without the network."""
    out = {}
    for key, value in record.items():
        parts = key.split("/")
        networks = [p for p in parts[1:] if p.startswith("net") and p[3:].isdigit()]
        if parts[0] == kind and networks in ([], ["net0"]):
            out["/".join(p for p in parts[1:] if p != "net0")] = value
    return out


def loss_phases(history: list[dict[str, Any]]) -> str:
    """Each training loss of network A, first -> last epoch it was recorded (``(1 ep)`` when once)."""
    series: dict[str, list[float]] = {}
    for record in history:
        for name, value in network_a(record, "train").items():
            series.setdefault(name, []).append(value)
    cells = []
    for name, values in series.items():
        cells.append(
            f"{name} {values[0]:.3g} (1 ep)" if len(values) == 1 else f"{name} {values[0]:.3g} → {values[-1]:.3g}"
        )
    return "; ".join(cells) or "-"


def division_cells(history: list[dict[str, Any]]) -> tuple[str, str, str]:
    """Network A's division AUC by epoch, its last precision / recall, and its named sets' last shares."""
    records = [network_a(r, "division") for r in history]
    records = [r for r in records if "auc" in r]
    if not records:
        return "-", "-", "-"
    aucs = " ".join(f"{r['auc']:.2f}" for r in records)
    last = records[-1]
    shares = ", ".join(f"{k[: -len('_share')]} {100 * v:.0f}%" for k, v in sorted(last.items()) if k.endswith("_share"))
    return aucs, f"{last['precision']:.2f} / {last['recall']:.2f}", shares or "-"


def row_of(run: RecipeRun, outcome: dict[str, Any], reference: float | None) -> dict[str, Any]:
    results = outcome["results"]
    history = results["history"]
    aucs, precision_recall, sets = division_cells(history)
    rsum = results["test"]["rsum"]
    return {
        "recipes": list(run.recipes),
        "config": run.config,
        "warmup_epochs": run.config["warmup_epochs"],
        "epochs": run.config["epochs"],
        "losses": loss_phases(history),
        "division_auc_by_epoch": aucs,
        "precision_recall": precision_recall,
        "sets": sets,
        "test": results["test"],
        "vs_vsepp": None if reference is None or REFERENCE in run.recipes else rsum - reference,
        "val_rsum_by_epoch": [r.get("val/rsum") for r in history],
        "auc_by_epoch": [network_a(r, "division").get("auc") for r in history],
        "seconds": outcome["seconds"],
    }


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| recipes | epochs (warmup) | losses of network A, first → last epoch | division AUC by epoch | "
        "precision / recall | division sets | test rSum | − VSE++ | minutes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        versus = "-" if row["vs_vsepp"] is None else f"{row['vs_vsepp']:+.1f}"
        versus = "reference" if REFERENCE in row["recipes"] else versus
        lines.append(
            f"| {', '.join(row['recipes'])} | {row['epochs']} ({row['warmup_epochs']}) | {row['losses']} | "
            f"{row['division_auc_by_epoch']} | {row['precision_recall']} | {row['sets']} | "
            f"{row['test']['rsum']:.1f} | {versus} | {row['seconds'] / 60:.1f} |"
        )
    return "\n".join(lines)


def plot_curves(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Validation rSum and network A's division AUC by epoch, a line per run; ``None`` without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for row in rows:
        for axis, key in ((left, "val_rsum_by_epoch"), (right, "auc_by_epoch")):
            points = [(e + 1, v) for e, v in enumerate(row[key]) if v is not None and v == v]
            if points:
                axis.plot(*zip(*points, strict=True), marker="o", markersize=3, label=row["recipes"][0])
    left.set_title("validation rSum", fontsize=10)
    right.set_title("division AUC (network A)", fontsize=10)
    for axis in (left, right):
        axis.set_xlabel("epoch")
        if axis.lines:
            axis.legend(fontsize=7)
    return save_png(figure, path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", nargs="+", default=None, help="Recipes (default: every image-text recipe).")
    parser.add_argument("--epochs", type=int, default=3, help="Epochs after warmup (default 3).")
    parser.add_argument(
        "--warmup-epochs", type=int, default=1, help="Warmup epochs of every recipe, before its division (default 1)."
    )
    parser.add_argument("--noise-ratio", type=float, default=0.5, help="Noise ratio (default 0.5).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the noise split and the training (default 0).")
    parser.add_argument("--paper-width", action="store_true", help="Keep the recipes' joint and similarity widths.")
    parser.add_argument("--captions-file", default=str(DEFAULT_CAPTIONS), help="Flickr8k captions.txt.")
    parser.add_argument("--output-dir", default="runs/bench_recipes_proxy", help="Where data, runs and tables go.")
    parser.add_argument("--resume", action="store_true", help="Reuse the runs that finished before.")
    parser.add_argument("--report-only", action="store_true", help="Train nothing: the table of the finished runs.")
    parser.add_argument("--quick", action="store_true", help="Tiny proxy and widths, 1 epoch after warmup.")
    parser.add_argument(
        "--options", type=json.loads, default={}, help="JSON of plugin options over the recipes' own (default none)."
    )
    args = parser.parse_args(argv)
    if not isinstance(args.options, dict):
        parser.error(f"--options must be a JSON object of plugin options, got {args.options!r}")
    if args.quick:
        args.epochs = 1
    if args.epochs < 1 or args.warmup_epochs < 0:
        parser.error(f"--epochs must be >= 1 and --warmup-epochs >= 0, got {args.epochs} and {args.warmup_epochs}")
    if not 0.0 <= args.noise_ratio < 1.0:
        parser.error(f"--noise-ratio must lie in [0, 1), got {args.noise_ratio}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    sources = proxy_sources(args.captions_file)
    if isinstance(sources, str):
        print(f"skipped: {sources}")
        return 0
    captions, encoder = sources
    names = args.recipes or sorted(path.stem for path in RECIPES.glob("*.py"))
    unknown = [name for name in names if not (RECIPES / f"{name}.py").is_file()]
    if unknown:
        print(f"error: --recipes {unknown}: not in {RECIPES}", file=sys.stderr)
        return 2
    settings = {name: recipe_settings(name) for name in names}
    settings = {name: settings[name] for name in image_text_recipes(settings, correspondence_methods())}
    output_dir = Path(args.output_dir)
    config = QUICK_PROXY if args.quick else PROXY
    data_dir = build_caption_proxy(captions, output_dir / "data", encoder, config)
    runs = sorted(plan(settings, args, str(encoder)), key=lambda run: run.name != REFERENCE)
    outcomes = [
        (run, outcome) for run in runs if (outcome := train(run, data_dir, output_dir, args.resume, args.report_only))
    ]
    reference = next((o["results"]["test"]["rsum"] for run, o in outcomes if REFERENCE in run.recipes), None)
    rows = [row_of(run, outcome, reference) for run, outcome in outcomes]
    width = (
        "the recipes' widths"
        if args.paper_width
        else ", ".join(f"{k} {v}" for k, v in (QUICK_WIDTH if args.quick else REDUCED_WIDTH).items())
    )
    header = (
        f"Recipes on the real-text proxy ({config.max_images - config.num_test - config.num_dev} training images x 4 "
        f"captions, {config.num_dev} dev, {config.num_test} test images), {args.noise_ratio:.0%} noise, seed "
        f"{args.seed}; {args.warmup_epochs} epochs of warmup and {args.epochs} after, no lr decay, {width}; "
        + (f"options {json.dumps(args.options)}; " if args.options else "")
        + f"{sum(r['seconds'] for r in rows) / 60:.1f} min in all; {machine()}"
    )
    if len(rows) < len(runs):
        header += f"; {len(runs) - len(rows)} of the {len(runs)} runs not finished (not shown)"
    write_report(output_dir / "recipes_proxy.md", markdown(rows, header))
    plot_curves(rows, output_dir / "recipes_proxy_curves.png")
    (output_dir / "recipes_proxy.json").write_text(
        json.dumps({"machine": machine(), "rows": rows}, indent=1, default=float)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
