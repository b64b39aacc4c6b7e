"""Memory and epoch time against training-set size, with memory-mapped 36 x 2048 float16 regions.

    python benchmarks/scale.py --data-dir /big/disk/hfncl_scale --sizes 10000 100000 1000000
    python benchmarks/scale.py --data-dir /tmp/hfncl_scale --quick          # 1K and 5K pairs, small regions

For each size N (training pairs, 5 captions per image, so N / 5 images):

1. Generates the training split with :mod:`hfncl.data.synthetic`'s concepts, streamed to
   disk ``--chunk`` images at a time: ``train_ims.npy`` is written through a memory map
   (float16, N/5 x 36 x 2048; 1M pairs are 29.5 GB) and never held in RAM, then converted
   chunk by chunk into the memory-mapped Arrow dataset training reads (as much again on
   disk: 1M pairs need about 60 GB free). Both are reused when present.
2. In a fresh process (so that its peak RSS is its own): loads the split, builds the
   vocabulary and the noisy pairs (50% caption noise), and trains ``--method`` (default
   NCR, the papers' model: 1024-d joint space) with batch 128 for ``--steps`` optimiser
   steps of its first epoch, then stops. The step time is the median interval between
   steps after the first 5; the **epoch time is extrapolated**: steps per epoch (pairs /
   128, times the method's passes) x step time. With ``--full-epoch-max N``, sizes up to N
   also train two whole epochs (warmup, then one with the division) and report them measured.

Memory is sampled every 20 ms from ``/proc/self/status``: peak RSS (``VmHWM``, the
high-water mark of the worker's own address space; not ``ru_maxrss``, which Linux carries
over from the parent through fork and exec, and the parent's conversion touches the whole
feature file) and the peak of its anonymous part (``RssAnon``: what the process allocated). The rest of RSS
is file-backed pages of the memory-mapped data, page cache the kernel drops under
pressure; it grows with the data the run has touched, not with what it holds.
Writes ``scale.md`` and ``scale.json`` to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from common import machine, quiet, write_report

from hfncl.data import NoisyPairDataset, Vocabulary, caption_level_noise, caption_pairing, load_precomp_split
from hfncl.data.synthetic import SyntheticConfig, _World

CAPTIONS_PER_IMAGE = 5
STEP_WARMUP = 5


def scale_config(regions: int, dim: int, seed: int = 0) -> SyntheticConfig:
    """The generator's concepts at real feature sizes (36 regions: 3 concepts x 4 regions + background)."""
    return SyntheticConfig(num_regions=regions, feature_dim=dim, regions_per_concept=4, seed=seed)


def generate_streaming(directory: Path, pairs: int, config: SyntheticConfig, chunk: int) -> Path:
    """Write ``train_ims.npy`` (float16) and ``train_caps.txt`` for ``pairs`` pairs, ``chunk`` images at a time.

    Reused when ``scale_stamp.json`` records the same size and config.
    """
    stamp = directory / "scale_stamp.json"
    wanted = json.dumps({"pairs": pairs, "config": repr(config)})
    if stamp.exists() and stamp.read_text() == wanted:
        return directory
    if pairs % CAPTIONS_PER_IMAGE:
        raise ValueError(f"--sizes: {pairs} pairs is not a multiple of {CAPTIONS_PER_IMAGE} captions per image")
    directory.mkdir(parents=True, exist_ok=True)
    num_images = pairs // CAPTIONS_PER_IMAGE
    rng = np.random.default_rng(config.seed)
    world = _World(config, rng)
    shape = (num_images, config.num_regions, config.feature_dim)
    images = np.lib.format.open_memmap(directory / "train_ims.npy", mode="w+", dtype=np.float16, shape=shape)
    with (directory / "train_caps.txt").open("w") as captions:
        for start in range(0, num_images, chunk):
            features, texts = world.split(min(chunk, num_images - start), rng)
            images[start : start + len(features)] = features
            captions.write("\n".join(texts) + "\n")
    images.flush()
    del images
    stamp.write_text(wanted)
    return directory


class MemorySampler(threading.Thread):
    """Samples ``VmRSS``, ``RssAnon`` and ``RssFile`` (MiB) from /proc/self/status; keeps each one's peak."""

    def __init__(self, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peak = {"VmRSS": 0.0, "RssAnon": 0.0, "RssFile": 0.0}
        self._halt = threading.Event()

    @staticmethod
    def read() -> dict[str, float]:
        values = {}
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                values[key] = int(rest.split()[0]) / 1024
        return values

    def run(self) -> None:
        while not self._halt.is_set():
            for key, value in self.read().items():
                if key in self.peak:
                    self.peak[key] = max(self.peak[key], value)
            time.sleep(self.interval)

    def stop(self) -> dict[str, float]:
        self._halt.set()
        self.join()
        return dict(self.peak)


def measure(args: argparse.Namespace, size: int) -> dict:
    """Train on the size's data in this process; steps, times and memory (run only in a fresh process)."""
    from hfncl.config import TrainConfig
    from hfncl.engine.trainer import Trainer
    from hfncl.models import NCLConfig
    from hfncl.plugin_setup import run_plugins
    from hfncl.plugins import build_plugin_manager
    from hfncl.profiling import HookLimitReached, HookTimer
    from hfncl.tasks import PAIRS

    quiet()
    sampler = MemorySampler()
    sampler.start()
    baseline = MemorySampler.read()
    directory = Path(args.data_dir) / f"pairs-{size}"
    split = load_precomp_split(directory, "train", feature_dtype="float16", cache_dir=directory / "arrow")
    vocab = Vocabulary.build(split.captions)
    noise = caption_level_noise(split.num_images, split.captions_per_image, 0.5, 0)
    train = NoisyPairDataset(split, vocab, caption_pairing(noise, split.num_images, split.captions_per_image))
    full = size <= args.full_epoch_max
    warmup = 1 if build_plugin_manager([args.method]).hook.divide.get_hookimpls() else 0
    config = TrainConfig(
        plugins=[args.method],
        output_dir=str(Path(args.output_dir) / f"run-{size}"),
        epochs=warmup + 1 if full else 1,
        warmup_epochs=warmup,
        batch_size=args.batch_size,
        lr_decay_epochs=[],
        plot_divisions=False,
        progress=False,
    )
    model_config = NCLConfig(image_dim=split.region_shape[1], vocab_size=len(vocab))
    limits = {} if full else {"train_step": args.steps}
    timer = HookTimer(["epoch_start", "divide", "epoch_end", "train_step"], limits)
    trainer = Trainer(config, model_config, train, None, task=PAIRS, callbacks=[timer], plugins=run_plugins(config))
    try:
        trainer.train()
    except HookLimitReached:
        pass
    memory = sampler.stop()
    starts = [start for start, _ in timer.calls["train_step"]]
    step = statistics.median(np.diff(starts[STEP_WARMUP:]))
    steps_per_epoch = (len(train) // args.batch_size) * len(trainer.passes)
    row = {
        "pairs": len(train),
        "images": split.num_images,
        "steps_run": len(starts),
        "step_s": step,
        "steps_per_epoch": steps_per_epoch,
        "epoch_s_extrapolated": steps_per_epoch * step,
        "baseline_rss_mib": baseline["VmRSS"],
        "peak_rss_mib": MemorySampler.read()["VmHWM"],
        "peak_anon_mib": memory["RssAnon"],
        "peak_file_mib": memory["RssFile"],
    }
    if full:
        epochs = timer.between("epoch_start", "epoch_end")
        row["epoch_s_measured"] = epochs
        row["division_s"] = timer.seconds("divide")
    return row


def markdown(rows: list[dict], header: str) -> str:
    lines = [
        header,
        "",
        "| pairs | images | steps run | step (s) | epoch (s), extrapolated | epoch (s), measured | peak RSS (MiB) | "
        "peak anonymous RSS (MiB) | peak file-backed RSS (MiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        measured = " / ".join(f"{s:.0f}" for s in r.get("epoch_s_measured", [])) or "-"
        lines.append(
            f"| {r['pairs']} | {r['images']} | {r['steps_run']} | {r['step_s']:.3f} | {r['epoch_s_extrapolated']:.0f} "
            f"| {measured} | {r['peak_rss_mib']:.0f} | {r['peak_anon_mib']:.0f} | {r['peak_file_mib']:.0f} |"
        )
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        lines += [
            "",
            f"From {first['pairs']} to {last['pairs']} pairs: "
            f"peak RSS {last['peak_rss_mib'] / first['peak_rss_mib'] - 1:+.1%}, "
            f"peak anonymous RSS {last['peak_anon_mib'] / first['peak_anon_mib'] - 1:+.1%} (target: under +20%); "
            f"step time {last['step_s'] / first['step_s'] - 1:+.1%} (constant step time = linear epoch time).",
        ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True, help="Where the generated data goes (1M pairs: ~60 GB).")
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="Training pairs (default 10000 100000 1000000)."
    )
    parser.add_argument("--method", default="ncr", help="The method trained (default ncr).")
    parser.add_argument("--steps", type=int, default=60, help="Optimiser steps trained per size.")
    parser.add_argument("--full-epoch-max", type=int, default=0, help="Sizes up to this also train two whole epochs.")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--chunk", type=int, default=256, help="Images generated and converted at a time.")
    parser.add_argument("--output-dir", default="runs/bench_scale", help="Where the runs and tables go.")
    parser.add_argument("--quick", action="store_true", help="1K and 5K pairs of 36 x 64 regions, 12 steps.")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result-json", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sizes is None:
        args.sizes = [1000, 5000] if args.quick else [10000, 100000, 1000000]
    if args.quick:
        args.steps = min(args.steps, 12)
    if args.steps <= STEP_WARMUP + 1:
        parser.error(f"--steps must exceed {STEP_WARMUP + 1} (the first {STEP_WARMUP} steps are not timed)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        Path(args.result_json).write_text(json.dumps(measure(args, args.worker)))
        return 0
    quiet()
    config = scale_config(36, 64 if args.quick else 2048)
    rows = []
    for size in sorted(args.sizes):
        directory = generate_streaming(Path(args.data_dir) / f"pairs-{size}", size, config, args.chunk)
        load_precomp_split(
            directory, "train", feature_dtype="float16", cache_dir=directory / "arrow", chunk_size=args.chunk
        )
        result = Path(args.output_dir) / f"scale-{size}.json"
        result.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
        subprocess.run(command + ["--worker", str(size), "--result-json", str(result)], check=True)
        rows.append(json.loads(result.read_text()))
        print(json.dumps(rows[-1]))
    header = (
        f"Scale: {args.method}, batch {args.batch_size}, {args.steps} steps per size "
        f"({'36 x 64' if args.quick else '36 x 2048'} float16 regions, memory-mapped); {machine()}"
    )
    write_report(Path(args.output_dir) / "scale.md", markdown(rows, header))
    (Path(args.output_dir) / "scale.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
