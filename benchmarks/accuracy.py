"""Accuracy of every correspondence method x noise ratio x seed, as markdown tables.

    python benchmarks/accuracy.py                          # generated benchmark (90 runs; 48 took 24 min on 2 cores)
    python benchmarks/accuracy.py --benchmark proxy        # real-text proxy (Flickr8k captions; hours on 2 cores)
    python benchmarks/accuracy.py --quick                  # both, tiny: checks the script in about a minute

Methods: every installed plugin that learns from image-caption pairs and declares
``demo_settings`` (the demo's selection), or those named with ``--methods``; each trains
alone with its demo settings (epochs, warmup, options), or the ``--settings`` given instead
(which also trains a named method that declares none, and whose schedule the references
follow), and the demo's optimiser. Noise:
the NCR protocol (re-pair a share of the training captions) at each ratio of ``--ratios``.
A seed seeds both the noise split and the training; the data itself is fixed.

References (at every noisy ratio, per seed; ``--no-references`` leaves them out): the
**oracle** trains ``--oracle-method`` (default VSE++'s triplet) with the same model,
optimiser and seed on exactly the clean pairs of that ratio and seed, the bound a
perfect division reaches (:mod:`oracle`; the noise index is used only here, never by a
method); the **half-data control** trains it on all pairs of the first (1 - ratio) of the
images, as many clean pairs without the oracle's choice. Both train to convergence
(:func:`converged_settings`): at least as many optimiser steps per network as any method of
the table took at that ratio and seed (an oracle of a method's own counts that method's steps
per batch, :func:`steps_per_batch`), at the demo's learning rate, then at a tenth of it
until the validation rSum has not improved for ``--oracle-patience`` epochs; the best
validation checkpoint is tested, as for the methods. ``--oracle-patience 0`` trains them on
the oracle method's demo schedule (the schedule of ``--settings`` when given) as before
2026-11-27, when that oracle stopped while still climbing. More oracle methods
(``--oracle-method vsepp gsc``) add rows ``oracle (gsc)``; a method's share is then over the
best of the first oracle and its own. A share above 100% by more than the seeds' spread is
flagged: the oracle did not converge.

Benchmarks:
- ``generated``: :mod:`hfncl.data.synthetic` at a smaller size than the demo's (4 methods x 4
  ratios x 3 seeds took 24 minutes on 2 CPU cores; the default is now 6 methods and the
  references, 90 runs): 800 training images x 5
  captions (4000 pairs), 200 dev and 500 test images, the demo's model (embed 256, words 64).
- ``proxy``: :func:`hfncl.data.proxy.build_caption_proxy` on ``--captions-file``
  (Flickr8k): caption #0 of each image through all-MiniLM-L6-v2 gives 32 "regions" of 384
  dims, the other 4 captions are its texts; 1000 test, 500 dev and 4500 training images
  (18000 pairs). Skipped with a message when the file or the encoder package is absent.

Reports test rSum, i2t / t2i R@1, the share of the oracle's rSum (per seed, then averaged)
and the division's ROC-AUC, precision and recall against the hidden noise mask (last
epoch, network A; methods without a division show ``-``) as mean ± standard deviation over
the seeds. Writes ``accuracy_<benchmark>.md``, ``accuracy_<benchmark>_curves.png``
(validation rSum and division AUC by epoch, a column per ratio) and ``accuracy.json`` (every
run's test metrics, division quality per epoch and commit) to ``--output-dir``; each run
also leaves its ``row.json``, which ``--resume`` reuses, so a long table can be built over
several calls (rows record the commit they were trained on); with ``--resume`` a run killed part way
continues from its latest checkpoint (its row's seconds and CPU seconds are those of its epochs over every call,
from checkpoints that keep them, ``untimed_epochs`` the epochs of an older checkpoint that kept none).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import DEFAULT_CAPTIONS, machine, mean_spread, method_runs, proxy_sources, pyplot, quiet, write_report
from oracle import half_data_split, oracle_split, training_vocabulary

from hfncl.config import LATEST, TrainConfig
from hfncl.data.precomp import read_captions
from hfncl.data.proxy import ProxyConfig, build_caption_proxy
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.demo import DEMO_SIZES, DemoRun, _division_of_network_a, demo_train_config, shortened_settings
from hfncl.experiment import DataArguments, ModelArguments, run_experiment
from hfncl.integrity import atomic_write_text
from hfncl.plots import save_png
from hfncl.tasks.pairs import DEMO_MODEL

GENERATED = DEMO_SIZES["small"]
QUICK_GENERATED = SyntheticConfig(num_train=80, num_dev=20, num_test=40, num_concepts=16, feature_dim=16)
PROXY = ProxyConfig()
QUICK_PROXY = ProxyConfig(num_test=50, num_dev=30, max_images=200)
QUICK_MODEL = ModelArguments(embed_dim=32, word_dim=16)
QUICK_EPOCHS = 2
COLUMNS = (("rSum", "rsum"), ("i2t R@1", "i2t_r1"), ("t2i R@1", "t2i_r1"))
ORACLE = "oracle"
HALF_DATA = "half data"
REFERENCES = (ORACLE, HALF_DATA)
ORACLE_DECAYED_EPOCHS = 10
PLATEAU_EXTRA_EPOCHS = 60


def commit() -> str:
    """The checked-out commit of the code that trains (``+`` when the working tree differs), for the rows'
    provenance."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=here, capture_output=True, text=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def prepare_benchmark(
    name: str, args: argparse.Namespace, output_dir: Path, generated: SyntheticConfig = GENERATED,
    proxy: ProxyConfig = PROXY,
) -> tuple[Path | None, str]:
    """The benchmark's precomp directory and a line describing it (``generated``, ``proxy``: the sizes of the
    generated benchmark and of the proxy); ``None`` and the reason when it cannot be built."""
    if name == "generated":
        config = QUICK_GENERATED if args.quick else generated
        suffix = "" if config in (GENERATED, QUICK_GENERATED) else f"_{config.num_train}"
        directory = generate_precomp(output_dir / f"data_generated{suffix}", config)
        return directory, (
            f"generated benchmark ({config.num_train} train images x {config.captions_per_image} captions, "
            f"{config.num_test} test images)"
        )
    sources = proxy_sources(args.captions_file)
    if isinstance(sources, str):
        return None, f"proxy skipped: {sources}"
    captions, encoder = sources
    config = QUICK_PROXY if args.quick else proxy
    suffix = "" if config in (PROXY, QUICK_PROXY) else f"_{config.max_images}"
    directory = build_caption_proxy(captions, output_dir / f"data_proxy{suffix}", encoder, config)
    return directory, (
        f"real-text proxy from {captions.name} (MiniLM token vectors of caption #{config.region_caption} as "
        f"{config.max_regions} regions, the other captions as texts; {config.num_test} test images)"
    )


@dataclass(frozen=True)
class Job:
    """One training run of the table: a method (or a reference) at a noise ratio and seed."""

    row: str
    run: DemoRun
    seed: int
    data: DataArguments

    @property
    def name(self) -> str:
        return f"{self.row.replace(' ', '_')}_noise{round(self.run.noise_ratio * 100)}_seed{self.seed}"


def oracle_row(method: str, first: str) -> str:
    """The table row of the oracle trained with ``method``: ``oracle`` for the first oracle method, ``oracle (M)``
    else."""
    return ORACLE if method == first else f"{ORACLE} ({method})"


def jobs(args: argparse.Namespace, data_dir: Path, noise_kind: str = "caption") -> list[Job]:
    """Every run of the table: per ratio and seed, each method, then the oracles and the half-data control (noisy
    ratios); ``noise_kind`` ``"caption"`` (NCR protocol) or ``"image"`` (DECL protocol)."""
    out = []
    first = args.oracle_method[0]
    for ratio in args.ratios:
        for seed in args.seeds:
            noisy = DataArguments(data_dir=str(data_dir), noise_ratio=ratio, noise_seed=seed, noise_kind=noise_kind)
            if not args.references_only:
                out += [Job(run.plugin, run, seed, noisy) for run in method_runs(args.methods, ratio, args.settings)]
            if ratio == 0.0 or args.no_references:
                continue
            vocab = str(training_vocabulary(data_dir))
            references = [(oracle_row(method, first), method, oracle_split(data_dir, ratio, seed, noise_kind))
                          for method in args.oracle_method]
            if not args.no_half_data:
                references.append((HALF_DATA, first, half_data_split(data_dir, ratio)))
            for row, method, split in references:
                clean = DataArguments(data_dir=str(data_dir), train_split=split, vocab_file=vocab, noise_seed=seed)
                out.append(Job(row, reference_run(args, ratio, method), seed, clean))
    return out


def reference_run(args: argparse.Namespace, ratio: float, method: str | None = None) -> DemoRun:
    """A reference's run before its convergence schedule (:func:`converged_settings`): ``method`` (default the first
    ``--oracle-method``) with its demo settings, their schedule replaced by that of ``--settings`` (epochs, learning
    rate, batch, decay; not a method's warmup or options)."""
    reference = method_runs([method or args.oracle_method[0]], ratio)[0]
    schedule = {key: value for key, value in (args.settings or {}).items() if key not in ("options", "warmup_epochs")}
    return DemoRun(reference.plugin, ratio, {**reference.settings, **schedule})


def split_pairs(data_dir: str | Path, split: str) -> int:
    """The number of training pairs (captions, as the precomp reader reads them) of ``split``."""
    return sum(1 for _ in read_captions(Path(data_dir) / f"{split}_caps.txt"))


def method_steps(row: dict[str, Any], pairs: int) -> float:
    """A finished method run's optimiser steps per network; for a row recorded before they were, its epochs of full
    batches over ``pairs`` training pairs (one step per batch, an upper bound for a method that skips pairs)."""
    if row.get("steps_per_network") is not None:
        return float(row["steps_per_network"])
    return full_batches(row, pairs)


def full_batches(row: dict[str, Any], pairs: int) -> int:
    """A run's epochs of full batches over ``pairs`` training pairs (at its recorded batch size; the demo's 128 for a
    row recorded before rows kept it)."""
    return row["epochs"] * (pairs // row.get("batch_size", 128))


def steps_per_batch(method: str, rows: list[dict[str, Any]], pairs: int) -> float:
    """The optimiser steps per network ``method`` takes per batch, from its finished run among ``rows`` (TcVSE takes
    four: Eq. 9 and three consistency updates); 1 for a method not trained (or recorded before steps were)."""
    for row in rows:
        batches = full_batches(row, pairs)
        if row.get("plugin", row["method"]) == method and row.get("steps_per_network") and batches:
            return float(row["steps_per_network"]) / batches
    return 1.0


def plateau_rule(args: argparse.Namespace) -> bool:
    """Whether a call trains to the validation plateau (the leaderboard's ``--schedule plateau``); ``accuracy.py``'s
    own calls keep the fixed rule."""
    return getattr(args, "schedule", "fixed") == "plateau"


def converged_settings(
    settings: dict[str, Any], steps: float, steps_per_epoch: int, patience: int, plateau: bool = False
) -> dict[str, Any]:
    """A reference's settings trained to convergence: E epochs at the demo's learning rate, E the least that gives at
    least ``steps`` optimiser steps (and no fewer than its demo epochs), then at a tenth of it for up to
    ``ORACLE_DECAYED_EPOCHS`` more, stopped once the validation rSum has not improved for ``patience`` epochs (never
    before E + ``patience``); the best validation checkpoint is the one tested.

    ``plateau``: at the demo's learning rate until the validation rSum has not improved for ``patience`` epochs
    (never before E), then at a tenth of it until it has not for ``patience`` epochs more (``lr_decay_patience``),
    for at most ``PLATEAU_EXTRA_EPOCHS`` epochs past E: converged whatever the learning rate."""
    least = max(int(settings.get("epochs", 10)), math.ceil(steps / max(steps_per_epoch, 1)))
    if plateau:
        return {
            **settings,
            "epochs": least + PLATEAU_EXTRA_EPOCHS,
            "lr_decay_epochs": [],
            "lr_decay_patience": patience,
            "early_stopping_patience": patience,
            "early_stopping_min_epochs": least,
        }
    return {
        **settings,
        "epochs": least + ORACLE_DECAYED_EPOCHS,
        "lr_decay_epochs": [least],
        "early_stopping_patience": patience,
        "early_stopping_min_epochs": least + patience,
    }


def bounded_job(job: Job, rows: list[dict[str, Any]], args: argparse.Namespace) -> Job:
    """A reference ``job`` with its convergence schedule, from the method rows of its ratio and seed in ``rows`` (or,
    for methods not trained yet, their planned epochs); unchanged with ``--oracle-patience 0`` or for a method."""
    if not is_reference(job.row) or not args.oracle_patience:
        return job
    data_dir, ratio = job.data.data_dir, job.run.noise_ratio
    pairs = split_pairs(data_dir, "train")
    finished = [
        r for r in rows if r["noise_ratio"] == ratio and r["seed"] == job.seed and not is_reference(r["method"])
    ]
    steps = [method_steps(r, pairs) for r in finished]
    done = {r["method"] for r in finished}
    steps += [method_steps({"epochs": int(run.settings.get("epochs", 10))}, pairs)
              for run in method_runs(args.methods, ratio, args.settings) if run.plugin not in done]
    batch = int(job.run.settings.get("batch_size", 128))
    per_batch = steps_per_batch(job.run.plugin, finished, pairs)
    settings = converged_settings(job.run.settings, max(steps, default=0.0),
                                  round(split_pairs(data_dir, job.data.train_split) // batch * per_batch),
                                  args.oracle_patience, plateau_rule(args))
    return dataclasses.replace(job, run=DemoRun(job.run.plugin, ratio, settings))


def is_reference(method: str) -> bool:
    return method in REFERENCES or method.startswith(f"{ORACLE} (")


def train(
    job: Job, output_dir: Path, quick: bool, progress: bool, resume: bool, report_only: bool = False,
    model: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """One run; the row of the JSON report (read back from ``row.json`` with ``resume`` when the run finished before).

    With ``report_only``, a run that has not finished is not trained: ``None``. ``model`` replaces fields of the
    demo's model (``--model``).
    """
    run_dir = output_dir / job.name
    saved = run_dir / "row.json"
    if (resume or report_only) and saved.is_file():
        return json.loads(saved.read_text())
    if report_only:
        return None
    run = job.run
    config = train_config(job, run_dir, quick, progress)
    if resume and (run_dir / "checkpoints" / LATEST).exists():  # killed part way: continue, do not start again
        config.overwrite_output_dir, config.resume_from_checkpoint = False, LATEST
    result = run_experiment(
        job.data, config, dataclasses.replace(QUICK_MODEL if quick else DEMO_MODEL, **(model or {}))
    )
    runtime = result["runtime"]
    row = {
        "method": job.row,
        "plugin": run.plugin,
        "noise_ratio": run.noise_ratio,
        "seed": job.seed,
        "train_split": job.data.train_split,
        "batch_size": config.batch_size,
        "epochs": len(result["history"]),
        "planned_epochs": config.epochs,
        "steps_per_network": result["history"][-1].get("steps_per_network") if result["history"] else None,
        "best_epoch": result["best_epoch"],
        "test": result["test"],
        "division": _division_of_network_a(result["division"]),
        "epochs_record": [_epoch_record(record) for record in result["history"]],
        "seconds": runtime["train_seconds"],
        "cpu_seconds": runtime["train_cpu_seconds"],
        "untimed_epochs": runtime["untimed_epochs"],
        "commit": commit(),
    }
    atomic_write_text(saved, json.dumps(row, indent=1, default=float))
    return row


def train_config(job: Job, run_dir: Path, quick: bool, progress: bool = False) -> TrainConfig:
    """The training configuration :func:`train` gives ``job`` in ``run_dir`` (``quick``: shortened to
    ``QUICK_EPOCHS``)."""
    run = job.run
    settings = shortened_settings(run.settings, QUICK_EPOCHS) if quick else run.settings
    config = demo_train_config(DemoRun(run.plugin, run.noise_ratio, settings), run_dir, job.seed, progress)
    config.plot_divisions = False
    return config


def _epoch_record(record: dict[str, Any]) -> dict[str, Any]:
    """An epoch's validation rSum and network A's division quality (AUC, precision, recall), where recorded."""
    division = _division_of_network_a({k: v for k, v in record.items() if k.startswith("division")})
    out = {
        "epoch": record["epoch"],
        "val_rsum": record.get("val/rsum"),
        "steps_per_network": record.get("steps_per_network"),
    }
    out.update({key: division[key] for key in ("auc", "precision", "recall") if key in division})
    return out


def oracle_shares(rows: list[dict[str, Any]]) -> dict[tuple[str, float], list[float]]:
    """Per method and ratio, each seed's test rSum over the oracle's at the same ratio and seed: the best of the
    ``oracle`` row and, where one was trained, the method's own (``oracle (M)``)."""
    oracles = {
        (r["method"], r["noise_ratio"], r["seed"]): r["test"]["rsum"] for r in rows if r["method"].startswith(ORACLE)
    }
    shares: dict[tuple[str, float], list[float]] = {}
    for row in rows:
        key = (row["noise_ratio"], row["seed"])
        own = row["method"] if row["method"].startswith(ORACLE) else f"{ORACLE} ({row['method']})"
        candidates = [oracles[(name, *key)] for name in (ORACLE, own) if (name, *key) in oracles]
        if candidates and max(candidates):
            shares.setdefault((row["method"], row["noise_ratio"]), []).append(row["test"]["rsum"] / max(candidates))
    return shares


def unconverged_oracle_warnings(shares: dict[tuple[str, float], list[float]]) -> list[str]:
    """A line per method and ratio whose mean share of the oracle is above 100% by more than the seeds' spread
    (sample standard deviation; none with one seed): a method cannot beat the same model trained on exactly the
    clean pairs, so the oracle did not converge."""
    lines = []
    for (method, ratio), values in sorted(shares.items(), key=lambda item: (item[0][1], item[0][0])):
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        if statistics.mean(values) > 1.0 + spread:
            lines.append(
                f"warning: {method} at {ratio:.0%} noise reaches {100 * statistics.mean(values):.1f}% of the oracle, "
                f"above 100% by more than the seeds' spread ({100 * spread:.1f}): the oracle did not converge"
            )
    return lines


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| method | noise | epochs | " + " | ".join(name for name, _ in COLUMNS)
        + " | share of oracle | division AUC | precision | recall | time/run |",
        "|---|---|---|" + "---|" * len(COLUMNS) + "---|---|---|---|---|",
    ]
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (r["noise_ratio"], is_reference(r["method"]), r["method"])):
        groups.setdefault((row["method"], row["noise_ratio"]), []).append(row)
    shares = oracle_shares(rows)
    for (method, ratio), group in groups.items():
        metrics = " | ".join(mean_spread([r["test"][key] for r in group]) for _, key in COLUMNS)
        share = mean_spread([100 * s for s in shares.get((method, ratio), [])])
        division = " | ".join(
            mean_spread([r["division"].get(key) for r in group], 3) for key in ("auc", "precision", "recall")
        )
        seconds = sum(r["seconds"] for r in group) / len(group)
        share_cell = f"{share}%" if share != "-" else share
        epochs = (
            mean_spread([r["epochs"] for r in group], 0)
            if len({r["epochs"] for r in group}) > 1
            else str(group[0]["epochs"])
        )
        lines.append(f"| {method} | {ratio:.0%} | {epochs} | {metrics} | {share_cell} | {division} | {seconds:.0f}s |")
    warnings = unconverged_oracle_warnings(shares)
    return "\n".join(lines + ([""] + [f"- {line}" for line in warnings] if warnings else []))


def plot_curves(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Validation rSum and network A's division AUC by epoch, a column per noise ratio (seed means); ``None``
    without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    ratios = sorted({r["noise_ratio"] for r in rows})
    colors = {method: f"C{index % 10}" for index, method in enumerate(sorted({r["method"] for r in rows}))}
    figure, axes = plt.subplots(2, len(ratios), figsize=(4.2 * len(ratios), 6.4), squeeze=False)
    for column, ratio in enumerate(ratios):
        methods = sorted({r["method"] for r in rows if r["noise_ratio"] == ratio})
        for method in methods:
            group = [r["epochs_record"] for r in rows if r["noise_ratio"] == ratio and r["method"] == method]
            for key, axis in (("val_rsum", axes[0][column]), ("auc", axes[1][column])):
                epochs, means = _mean_curve(group, key)
                if epochs:
                    style = "--" if is_reference(method) else "-"
                    axis.plot(epochs, means, style, color=colors[method], marker="o", markersize=3, label=method)
        axes[0][column].set_title(f"{ratio:.0%} noise: validation rSum", fontsize=10)
        axes[1][column].set_title(f"{ratio:.0%} noise: division AUC (network A)", fontsize=10)
        for axis in axes[:, column]:
            axis.set_xlabel("epoch")
            if axis.lines:
                axis.legend(fontsize=7)
            else:
                axis.text(0.5, 0.5, "no noisy pairs: no AUC", ha="center", va="center", transform=axis.transAxes)
    return save_png(figure, path)


def _mean_curve(records: list[list[dict[str, Any]]], key: str) -> tuple[list[int], list[float]]:
    """Epochs (1-based) where every run recorded ``key``, and the runs' mean there."""
    by_epoch: dict[int, list[float]] = {}
    for record in records:
        for epoch in record:
            if epoch.get(key) is not None and epoch[key] == epoch[key]:  # NaN: AUC with one class
                by_epoch.setdefault(epoch["epoch"], []).append(epoch[key])
    epochs = sorted(e for e, values in by_epoch.items() if len(values) == len(records))
    return epochs, [statistics.mean(by_epoch[e]) for e in epochs]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", nargs="+", choices=("generated", "proxy"), default=None,
                        help="Benchmarks to run (default: generated; with --quick: both).")
    parser.add_argument("--methods", nargs="+", default=None, help="Methods (default: the demo's selection).")
    parser.add_argument("--settings", type=json.loads, default=None,
                        help="JSON training settings (epochs, warmup_epochs, options) replacing the demo settings "
                        "of the --methods, e.g. for a method that declares none; their schedule (all but "
                        "warmup_epochs and options) also trains the oracle and the half-data control.")
    parser.add_argument("--model", type=json.loads, default=None,
                        help='JSON of ModelArguments fields replacing the demo model\'s, e.g. '
                        '\'{"similarity": "sgr", "head_options": {"sgr.sim_dim": 32}}\'.')
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.0, 0.2, 0.5, 0.7], help="Noise ratios.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="Seeds of noise and training.")
    parser.add_argument("--captions-file", default=str(DEFAULT_CAPTIONS), help="Flickr8k captions.txt for the proxy.")
    parser.add_argument("--output-dir", default="runs/bench_accuracy", help="Where data, runs and tables go.")
    parser.add_argument("--quick", action="store_true",
                        help=f"Tiny data and model, {QUICK_EPOCHS} epochs, ratios 0 and 0.5, seeds 0 and 1.")
    parser.add_argument("--progress", action="store_true", help="Show the epochs' progress bars.")
    parser.add_argument("--oracle-method", nargs="+", default=["vsepp"],
                        help="The methods the oracle trains with on the clean pairs (default vsepp: the plain "
                        "triplet); the first also trains the half-data control, each other one adds a row "
                        "'oracle (M)' that bounds method M with the first.")
    parser.add_argument("--oracle-patience", type=int, default=2,
                        help="Train the references to convergence: at least the methods' optimiser steps, then until "
                        "the validation rSum has not improved for this many epochs (0: the oracle method's demo "
                        "schedule).")
    parser.add_argument("--no-references", action="store_true", help="Leave out the oracle and half-data rows.")
    parser.add_argument("--no-half-data", action="store_true", help="Leave out the half-data control.")
    parser.add_argument("--references-only", action="store_true",
                        help="Train only the oracle and half-data rows (their steps bound the methods' planned "
                        "schedules).")
    parser.add_argument("--report-only", action="store_true",
                        help="Train nothing: the tables of the runs that finished (their row.json), the others "
                        "left out.")
    parser.add_argument("--resume", action="store_true",
                        help="Reuse the row.json of runs that finished before (the table then mixes commits: each row "
                             "records its own) and continue runs killed part way from their latest checkpoint.")
    args = parser.parse_args(argv)
    if args.benchmark is None:
        args.benchmark = ["generated", "proxy"] if args.quick else ["generated"]
    if args.settings is not None and not args.methods:
        parser.error("--settings needs --methods")
    if args.quick:
        args.ratios, args.seeds = [0.0, 0.5], [0, 1]
    if not all(0.0 <= r < 1.0 for r in args.ratios):
        parser.error(f"--ratios must lie in [0, 1), got {args.ratios}")
    if args.references_only and args.no_references:
        parser.error("--references-only and --no-references leave nothing to train")
    if args.oracle_patience < 0:
        parser.error(f"--oracle-patience must be >= 0, got {args.oracle_patience}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    output_dir = Path(args.output_dir)
    report: dict[str, Any] = {"machine": machine(), "settings": args.settings, "benchmarks": {}}
    for name in args.benchmark:
        data_dir, description = prepare_benchmark(name, args, output_dir)
        if data_dir is None:
            print(description)
            report["benchmarks"][name] = {"skipped": description}
            continue
        started = time.perf_counter()
        planned = jobs(args, data_dir)
        rows: list[dict[str, Any]] = []
        for job in planned:
            row = train(bounded_job(job, rows, args), output_dir / name, args.quick, args.progress, args.resume,
                        args.report_only, args.model)
            if row:
                rows.append(row)
        if not rows:
            print(f"{name}: no finished run to report")
            continue
        minutes = sum(row["seconds"] for row in rows) / 60
        header = (
            f"Accuracy on the {description}; test metrics, mean ± std over seeds {args.seeds}; share of oracle: "
            f"test rSum over the {ORACLE}'s ({args.oracle_method[0]} on exactly the clean pairs"
            + (
                f", trained to convergence with patience {args.oracle_patience}"
                if args.oracle_patience
                else ", demo schedule"
            )
            + f") at the same ratio and seed; {HALF_DATA}: {args.oracle_method[0]} on all pairs of the first "
            f"(1 - ratio) of the images; division "
            f"of network A, last epoch; {minutes:.1f} min of training in all "
            f"({(time.perf_counter() - started) / 60:.1f} in this call); {report['machine']}"
        )
        if len(rows) < len(planned):
            header += f"; {len(planned) - len(rows)} of the {len(planned)} planned runs not finished yet (not shown)"
        if args.settings is not None:
            header += f"; settings {json.dumps(args.settings)}"
        if args.model is not None:
            header += f"; model {json.dumps(args.model)}"
        write_report(output_dir / f"accuracy_{name}.md", markdown(rows, header))
        plot_curves(rows, output_dir / f"accuracy_{name}_curves.png")
        report["benchmarks"][name] = {"description": description, "minutes": minutes, "runs": rows}
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "accuracy.json").write_text(json.dumps(report, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
