"""Training and evaluation speed of every method on the generated benchmark, per device.

    python benchmarks/speed.py --output-dir runs/bench_speed     # CPU, and CUDA when available
    python benchmarks/speed.py --shape f30k --methods ncr        # Flickr30K-sized regions and model
    python benchmarks/speed.py --quick                           # tiny data, seconds per method
    python benchmarks/speed.py --methods ncr --option ncr.division_statistics=pass

For each method (those declaring ``demo_settings``, or ``--methods``): trains on a
generated benchmark at 50% caption noise for one warmup epoch if the method warms up,
then two more epochs, and times the last epoch through the trainer's hook calls
(:class:`hfncl.profiling.HookTimer`). ``--shape`` picks the benchmark and model:

- ``demo``: the demo's (3000 images x 5 captions of 8 x 64-d regions, 64-d words, a
  256-d GRU): the text encoder dominates every stage;
- ``f30k``: Flickr30K's shapes (36 x 2048-d regions, the papers' 300-d words and 1024-d
  joint space) on 600 images x 5 captions, where the image encoder weighs as in the papers;
- ``quick``: tiny data and model (``--quick``), to check the script in seconds.

Times of the last epoch:

- epoch: from ``epoch_start`` to ``epoch_end`` (the division stage and every pass over
  the data; validation and checkpointing come after it and are not counted);
- division: the ``divide`` call (statistics pass and fit; about zero for methods without one);
- pairs/s: training pairs of the data set per second of that epoch (a method trained
  in two passes, one per network, goes through each pair twice);
- evaluation: ``evaluate_retrieval`` (encode every image and caption, rank both ways)
  on the first 1K and on all 5K test images (x 5 captions) with the trained networks.

``--option KEY=VALUE`` (repeatable) sets a plugin option for every timed method, e.g.
NCR's division from the losses recorded in the training steps instead of a pass; the rows
name the options they ran with. Each device runs in its own process. Writes
``speed-{shape}.md`` and ``.json`` (``speed-{shape}-KEY=VALUE.*`` with options).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from common import machine, method_runs, quiet, write_report
from torch.utils.data import Subset

from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.demo import DemoRun, demo_train_config, shortened_settings
from hfncl.engine.encoding import RetrievalSplit, evaluate_retrieval
from hfncl.engine.trainer import Trainer
from hfncl.experiment import DataArguments, ModelArguments
from hfncl.models import NCLConfig
from hfncl.plugin_setup import run_plugins
from hfncl.profiling import HookTimer
from hfncl.tasks.pair_data import prepare_data
from hfncl.tasks.pairs import DEMO_MODEL, PAIRS, model_fields

NOISE_RATIO = 0.5
DIVISION_LIMIT = 0.15
SHAPES: dict[str, tuple[dict, ModelArguments, str]] = {
    "demo": ({}, DEMO_MODEL, "the demo's benchmark"),
    "f30k": (
        dict(num_train=600, num_dev=100, num_regions=36, feature_dim=2048),
        ModelArguments(),
        "the generated benchmark at Flickr30K's shapes (36 x 2048 regions, the papers' 1024-d model)",
    ),
    "quick": (
        dict(num_train=120, num_dev=20, num_concepts=16, feature_dim=16),
        ModelArguments(embed_dim=32, word_dim=16),
        "tiny benchmark (--quick)",
    ),
}


def first_images(split: RetrievalSplit, count: int) -> RetrievalSplit:
    """The first ``count`` images of a split with their captions."""
    if count > split.num_images:
        raise ValueError(f"an evaluation size of {count} exceeds the {split.num_images} test images")
    k = split.captions_per_image
    return RetrievalSplit(Subset(split.images, range(count)), Subset(split.captions, range(count * k)), k)


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as plugin options; a value is read as JSON where it parses (numbers, booleans), else
    kept as text."""
    options = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key:
            raise ValueError(f"--option expects KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def with_options(run: DemoRun, options: dict[str, Any]) -> DemoRun:
    """``run`` with ``options`` added to the plugin options of its settings."""
    if not options:
        return run
    settings = dict(run.settings, options={**run.settings.get("options", {}), **options})
    return DemoRun(run.plugin, run.noise_ratio, settings)


def options_label(options: dict[str, Any], separator: str = ", ") -> str:
    """``KEY=VALUE`` of each option, joined by ``separator``."""
    return separator.join(f"{key}={value}" for key, value in options.items())


def run_label(plugin: str, options: dict[str, Any]) -> str:
    """The method's name in the table and its run folder: the plugin, with its options if any."""
    return plugin + (f" ({options_label(options)})" if options else "")


def measure(
    run: DemoRun, data_dir: Path, output_dir: Path, device: str, eval_sizes: list[int], shape: str,
    options: dict[str, Any],
) -> dict:
    """Train ``run`` with ``options`` for warmup + 2 epochs on ``device`` and time its last epoch and its evaluation."""
    warmup = 1 if run.settings.get("warmup_epochs", 0) > 0 else 0
    run = with_options(run, options)
    settings = dict(shortened_settings(run.settings, warmup + 2), warmup_epochs=warmup)
    config = demo_train_config(
        DemoRun(run.plugin, run.noise_ratio, settings), output_dir / run_label(run.plugin, options), 0, False
    )
    config.plot_divisions = False
    data = prepare_data(DataArguments(data_dir=str(data_dir), noise_ratio=run.noise_ratio), config.output_dir)
    model_args = SHAPES[shape][1]
    model_config = NCLConfig(
        image_dim=data.image_dim,
        image_regions=data.image_regions,
        vocab_size=len(data.vocab),
        **model_fields(config.plugins, model_args),
    )
    accelerator = Accelerator(cpu=device == "cpu")
    timer = HookTimer(["epoch_start", "divide", "epoch_end", "train_step"])
    trainer = Trainer(config, model_config, data.train, None, task=PAIRS, accelerator=accelerator, callbacks=[timer],
                      plugins=run_plugins(config))
    trainer.train()
    epoch = timer.between("epoch_start", "epoch_end")[-1]
    epoch_start = timer.calls["epoch_start"][-1][0]
    division = timer.seconds("divide")[-1] if timer.calls["divide"] else 0.0
    steps = sum(start >= epoch_start for start, _ in timer.calls["train_step"])
    row = {
        "device": device,
        "method": run_label(run.plugin, options),
        "pairs": len(data.train),
        "networks": trainer.num_networks,
        "passes": len(trainer.passes),
        "steps": steps,
        "epoch_s": epoch,
        "division_s": division,
        "division_share": division / epoch,
        "pairs_per_s": len(data.train) / epoch,
    }
    for size in eval_sizes:
        if accelerator.device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        evaluate_retrieval(
            trainer.model,
            first_images(data.test, size),
            batch_size=config.eval_batch_size,
            device=accelerator.device,
            hook=trainer.hook,
        )
        if accelerator.device.type == "cuda":
            torch.cuda.synchronize()
        row[f"eval_{size}_s"] = time.perf_counter() - started
    return row


def markdown(rows: list[dict], eval_sizes: list[int], header: str) -> str:
    evals = " | ".join(
        f"eval {size // 1000 if size >= 1000 else size}{'K' if size >= 1000 else ''} (s)" for size in eval_sizes
    )
    lines = [
        header,
        "",
        "| device | method | pairs | networks x passes | steps | epoch (s) | pairs/s | division (s) | division share | "
        f"{evals} |",
        "|---|---|---|---|---|---|---|---|---|" + "---|" * len(eval_sizes),
    ]
    for r in rows:
        times = " | ".join(f"{r[f'eval_{size}_s']:.2f}" for size in eval_sizes)
        lines.append(
            f"| {r['device']} | {r['method']} | {r['pairs']} | {r['networks']} x {r['passes']} | {r['steps']} | "
            f"{r['epoch_s']:.1f} | {r['pairs_per_s']:.0f} | {r['division_s']:.2f} | {r['division_share']:.1%} | "
            f"{times} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/bench_speed", help="Where the data, runs and tables go.")
    parser.add_argument("--methods", nargs="+", default=None, help="Methods to time (default: the demo's).")
    parser.add_argument("--device", choices=("cpu", "cuda"), nargs="+", default=None,
                        help="Devices (default: cpu, and cuda when torch.cuda.is_available()).")
    parser.add_argument("--eval-sizes", type=int, nargs="+", default=None,
                        help="Test images to evaluate (default 1000 5000).")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="demo",
                        help="Benchmark and model sizes (see above).")
    parser.add_argument("--quick", action="store_true", help="Same as --shape quick: checks the script in seconds.")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="A plugin option for every timed method (repeatable), e.g. ncr.division_statistics=pass.")
    parser.add_argument("--results-json", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.shape = "quick"
    if args.eval_sizes is None:
        args.eval_sizes = [100, 200] if args.shape == "quick" else [1000, 5000]
    if args.device is None:
        args.device = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if "cuda" in args.device and not torch.cuda.is_available():
        parser.error("--device cuda: torch.cuda.is_available() is False on this machine")
    return args


def benchmark_data(output_dir: Path, eval_sizes: list[int], shape: str) -> Path:
    """The benchmark of ``shape`` with as many test images as the largest evaluation."""
    return generate_precomp(output_dir / "data" / shape, SyntheticConfig(num_test=max(eval_sizes), **SHAPES[shape][0]))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    output_dir = Path(args.output_dir)
    data_dir = benchmark_data(output_dir, args.eval_sizes, args.shape)
    options = parse_options(args.option)
    if args.results_json:
        device = args.device[0]
        rows = [
            measure(run, data_dir, output_dir / device / args.shape, device, args.eval_sizes, args.shape, options)
            for run in method_runs(args.methods, NOISE_RATIO)
        ]
        Path(args.results_json).write_text(json.dumps({"machine": machine(device), "rows": rows}, indent=1))
        return 0
    rows, machines = [], []
    for device in args.device:
        child = output_dir / f"speed-{device}-{args.shape}.json"
        command = [
            sys.executable, __file__, "--output-dir", str(output_dir), "--device", device, "--results-json", str(child)
        ]
        command += ["--eval-sizes", *map(str, args.eval_sizes)] + (["--methods", *args.methods] if args.methods else [])
        command += [f"--option={pair}" for pair in args.option]
        subprocess.run(command + ["--shape", args.shape], check=True)
        measured = json.loads(child.read_text())
        rows += measured["rows"]
        machines.append(f"{device}: {measured['machine']}")
    size = SHAPES[args.shape][2]
    header = (
        f"Speed on {size}, {rows[0]['pairs']} training pairs, {NOISE_RATIO:.0%} noise; last of warmup + 2 epochs. "
        + "; ".join(machines)
    )
    text = markdown(rows, args.eval_sizes, header)
    for r in rows:
        if r["division_share"] > 0.001:
            verdict = "meets" if r["division_share"] < DIVISION_LIMIT else "DOES NOT meet"
            text += (
                f"\n\n{r['method']} ({r['device']}): division {r['division_share']:.1%} of the epoch, {verdict} the < "
                f"{DIVISION_LIMIT:.0%} target."
            )
    name = f"speed-{args.shape}" + (f"-{options_label(options, '-')}" if options else "")
    write_report(output_dir / f"{name}.md", text)
    (output_dir / f"{name}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
