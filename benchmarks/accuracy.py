"""Accuracy of every correspondence method x noise ratio x seed, as markdown tables.

    python benchmarks/accuracy.py                          # generated benchmark (< 30 min on 2 cores)
    python benchmarks/accuracy.py --benchmark proxy        # real-text proxy (Flickr8k captions; hours on 2 cores)
    python benchmarks/accuracy.py --quick                  # both, tiny: checks the script in about a minute

Methods: every installed plugin that learns from image-caption pairs and declares
``demo_settings`` (the demo's selection), or those named with ``--methods``; each trains
alone with its demo settings (epochs, warmup, options), or the ``--settings`` given instead
(which also trains a named method that declares none), and the demo's optimiser. Noise:
the NCR protocol (re-pair a share of the training captions) at each ratio of ``--ratios``.
A seed seeds both the noise split and the training; the data itself is fixed.

Benchmarks:
- ``generated``: :mod:`hfncl.data.synthetic` at a smaller size than the demo's, so that 4
  methods x 4 ratios x 3 seeds fit in 30 minutes on 2 CPU cores: 800 training images x 5
  captions (4000 pairs), 200 dev and 500 test images, the demo's model (embed 256, words 64).
- ``proxy``: :func:`hfncl.data.proxy.build_caption_proxy` on ``--captions-file``
  (Flickr8k): caption #0 of each image through all-MiniLM-L6-v2 gives 32 "regions" of 384
  dims, the other 4 captions are its texts; 1000 test, 500 dev and 4500 training images
  (18000 pairs). Skipped with a message when the file or the encoder package is absent.

Reports test rSum, i2t / t2i R@1 and the division's ROC-AUC against the hidden noise mask
(last epoch, network A; methods without a division show ``-``) as mean ± standard
deviation over the seeds. Writes ``accuracy_<benchmark>.md`` and ``accuracy.json``
(every run's test metrics and division quality) to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from common import machine, mean_spread, method_runs, quiet, shortened, write_report
from hfncl.data.proxy import ProxyConfig, build_caption_proxy, default_encoder_dir
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.demo import DEMO_MODEL, DemoRun, _division_of_network_a, demo_train_config
from hfncl.experiment import DataArguments, ModelArguments, run_experiment

GENERATED = SyntheticConfig(num_train=800, num_dev=200, num_test=500)
QUICK_GENERATED = SyntheticConfig(num_train=80, num_dev=20, num_test=40, num_concepts=16, feature_dim=16)
PROXY = ProxyConfig()
QUICK_PROXY = ProxyConfig(num_test=50, num_dev=30, max_images=200)
QUICK_MODEL = ModelArguments(embed_dim=32, word_dim=16)
QUICK_EPOCHS = 2
SHARED_DATA = Path(os.environ.get("HFNCL_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
DEFAULT_CAPTIONS = SHARED_DATA / "flickr8k" / "captions.txt"
COLUMNS = (("rSum", "rsum"), ("i2t R@1", "i2t_r1"), ("t2i R@1", "t2i_r1"))


def prepare_benchmark(name: str, args: argparse.Namespace, output_dir: Path) -> tuple[Path | None, str]:
    """The benchmark's precomp directory and a line describing it; ``None`` and the reason when it cannot be built."""
    if name == "generated":
        config = QUICK_GENERATED if args.quick else GENERATED
        directory = generate_precomp(output_dir / "data_generated", config)
        return directory, (
            f"generated benchmark ({config.num_train} train images x {config.captions_per_image} captions, "
            f"{config.num_test} test images)"
        )
    captions = Path(args.captions_file)
    if not captions.is_file():
        return None, f"proxy skipped: the captions file {captions} is not there (shared data absent)"
    try:
        encoder = default_encoder_dir()
    except ModuleNotFoundError as error:
        return None, f"proxy skipped: {error}"
    config = QUICK_PROXY if args.quick else PROXY
    directory = build_caption_proxy(captions, output_dir / "data_proxy", encoder, config)
    return directory, (
        f"real-text proxy from {captions.name} (MiniLM token vectors of caption #{config.region_caption} as "
        f"{config.max_regions} regions, the other captions as texts; {config.num_test} test images)"
    )


def train(run: DemoRun, data_dir: Path, seed: int, output_dir: Path, quick: bool, progress: bool) -> dict[str, Any]:
    """One method at one noise ratio and seed; the row of the JSON report."""
    settings = shortened(run.settings, QUICK_EPOCHS) if quick else run.settings
    config = demo_train_config(DemoRun(run.plugin, run.noise_ratio, settings), output_dir, seed, progress)
    config.plot_divisions = False
    started = time.perf_counter()
    result = run_experiment(
        DataArguments(data_dir=str(data_dir), noise_ratio=run.noise_ratio, noise_seed=seed),
        config,
        QUICK_MODEL if quick else DEMO_MODEL,
    )
    return {
        "method": run.plugin,
        "noise_ratio": run.noise_ratio,
        "seed": seed,
        "epochs": config.epochs,
        "test": result["test"],
        "division": _division_of_network_a(result["division"]),
        "seconds": time.perf_counter() - started,
    }


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| method | noise | epochs | " + " | ".join(name for name, _ in COLUMNS) + " | division AUC | time/run |",
        "|---|---|---|" + "---|" * len(COLUMNS) + "---|---|",
    ]
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["method"], row["noise_ratio"]), []).append(row)
    for (method, ratio), group in groups.items():
        metrics = " | ".join(mean_spread([r["test"][key] for r in group]) for _, key in COLUMNS)
        auc = mean_spread([r["division"].get("auc") for r in group], 3)
        seconds = sum(r["seconds"] for r in group) / len(group)
        lines.append(f"| {method} | {ratio:.0%} | {group[0]['epochs']} | {metrics} | {auc} | {seconds:.0f}s |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", nargs="+", choices=("generated", "proxy"), default=None,
                        help="Benchmarks to run (default: generated; with --quick: both).")
    parser.add_argument("--methods", nargs="+", default=None, help="Methods (default: the demo's selection).")
    parser.add_argument("--settings", type=json.loads, default=None,
                        help="JSON training settings (epochs, warmup_epochs, options) replacing the demo settings "
                        "of the --methods, e.g. for a method that declares none.")
    parser.add_argument("--ratios", type=float, nargs="+", default=[0.0, 0.2, 0.5, 0.7], help="Noise ratios.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="Seeds of noise and training.")
    parser.add_argument("--captions-file", default=str(DEFAULT_CAPTIONS), help="Flickr8k captions.txt for the proxy.")
    parser.add_argument("--output-dir", default="runs/bench_accuracy", help="Where data, runs and tables go.")
    parser.add_argument("--quick", action="store_true",
                        help=f"Tiny data and model, {QUICK_EPOCHS} epochs, ratios 0 and 0.5, seeds 0 and 1.")
    parser.add_argument("--progress", action="store_true", help="Show the epochs' progress bars.")
    args = parser.parse_args(argv)
    if args.benchmark is None:
        args.benchmark = ["generated", "proxy"] if args.quick else ["generated"]
    if args.settings is not None and not args.methods:
        parser.error("--settings needs --methods")
    if args.quick:
        args.ratios, args.seeds = [0.0, 0.5], [0, 1]
    if not all(0.0 <= r < 1.0 for r in args.ratios):
        parser.error(f"--ratios must lie in [0, 1), got {args.ratios}")
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
        rows = [
            train(run, data_dir, seed, output_dir / name / f"{run.label}_seed{seed}", args.quick, args.progress)
            for ratio in args.ratios
            for run in method_runs(args.methods, ratio, args.settings)
            for seed in args.seeds
        ]
        minutes = (time.perf_counter() - started) / 60
        header = (
            f"Accuracy on the {description}; test metrics, mean ± std over seeds {args.seeds}; "
            f"{minutes:.1f} min in all; {report['machine']}"
        )
        if args.settings is not None:
            header += f"; settings {json.dumps(args.settings)}"
        write_report(output_dir / f"accuracy_{name}.md", markdown(rows, header))
        report["benchmarks"][name] = {"description": description, "minutes": minutes, "runs": rows}
    (output_dir / "accuracy.json").write_text(json.dumps(report, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
