"""NCR's Table 4 at small scale: what co-rectify adds over co-divide alone, against two clean references.

    python benchmarks/ncr_ablation.py --output-dir runs/ncr_ablation       # 6 runs, 11-21 min on 2 cores

On the demo's generated benchmark (3000 training images x 5 captions, the demo's model
and NCR settings: 10 epochs, 4 of warmup, seed 0) it trains NCR

1. on clean pairs (the reference of "loses at most 10% of its clean rSum");
2. on the clean pairs of the first half of the training images (7500 pairs; the same dev
   and test sets and vocabulary): as many clean pairs as the noisy set holds, the rSum an
   oracle division could reach at most;
3. at 50% caption noise, the full method with the demo's options (co-divide + co-rectify,
   the noisy part joining in the middle of the epochs after warmup as in the authors'
   training loop, its batches split into a clean and a noisy part);
4. at 50% noise with the noisy part trained in every epoch after warmup
   (``ncr.noisy_part_start = 0``: Algorithm 1 read literally);
5. at 50% noise with ``ncr.co_rectify = false``: the clean part with y = 1, the noisy
   part left out (Table 4's second row);
6. at 50% noise with co-divide fitted on L_w from a gradient-free pass over the training
   set before each epoch (``ncr.division_statistics = "pass"``: Algorithm 1 read literally)
   instead of the losses recorded during the previous epoch's training steps.

Writes ``ncr_ablation.md`` and ``ncr_ablation.json``: test R@1 both ways, rSum, its ratio
to the clean rSum, and the last division's precision, recall and AUC.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from common import machine, quiet, with_option, write_report
from oracle import half_data_split, training_vocabulary

from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.demo import DemoRun, demo_runs, demo_train_config
from hfncl.experiment import DataArguments, run_experiment
from hfncl.tasks.pairs import DEMO_MODEL

SEED = 0
"""The seed of the noise split and of training, as the demo's."""


def ablation_runs() -> list[tuple[str, DemoRun, float]]:
    """(label, run, share of the training images) of the six configurations, with NCR's demo settings."""
    settings = demo_runs((0.0,), ["ncr"])[0].settings
    full, half = 1.0, 0.5
    no_rectify = with_option(settings, "ncr.co_rectify", False)
    noisy_every_epoch = with_option(settings, "ncr.noisy_part_start", 0.0)
    from_pass = with_option(settings, "ncr.division_statistics", "pass")
    return [
        ("clean", DemoRun("ncr", 0.0, settings), full),
        ("clean, half the images", DemoRun("ncr", 0.0, settings), half),
        ("50% noise", DemoRun("ncr", 0.5, settings), full),
        ("50% noise, noisy part in every epoch", DemoRun("ncr", 0.5, noisy_every_epoch), full),
        ("50% noise, no co-rectify", DemoRun("ncr", 0.5, no_rectify), full),
        ("50% noise, division from a pass over the data", DemoRun("ncr", 0.5, from_pass), full),
    ]


def training_data(data_dir: Path, noise_ratio: float, share: float) -> DataArguments:
    """The benchmark at ``noise_ratio``; with ``share`` < 1 the clean pairs of that share of the training images
    (``oracle.half_data_split``), with the full training split's vocabulary, so dev and test stay the same."""
    if share == 1.0:
        return DataArguments(data_dir=str(data_dir), noise_ratio=noise_ratio, noise_seed=SEED)
    if noise_ratio:
        raise ValueError(f"a share of the training images is a clean reference, got noise ratio {noise_ratio}")
    split = half_data_split(data_dir, 1.0 - share)
    vocab = str(training_vocabulary(data_dir))
    return DataArguments(data_dir=str(data_dir), train_split=split, vocab_file=vocab, noise_seed=SEED)


def markdown(rows: list[dict], header: str) -> str:
    lines = [
        header,
        "",
        "| NCR run | training pairs | i2t R@1 | t2i R@1 | rSum | rSum / clean | division precision | recall | AUC |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    clean = rows[0]["rsum"]
    for row in rows:
        division = row["division"]

        def cell(key: str, division: dict[str, float] = division) -> str:
            value = division.get(f"division/net0/{key}")
            return "-" if value is None or math.isnan(value) else f"{value:.3f}"

        lines.append(
            f"| {row['label']} | {row['pairs']} | {row['i2t_r1']:.1f} | {row['t2i_r1']:.1f} | {row['rsum']:.1f} | "
            f"{row['rsum'] / clean:.3f} | {cell('precision')} | {cell('recall')} | {cell('auc')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/ncr_ablation", help="Where the data, runs and tables go.")
    args = parser.parse_args(argv)
    quiet()
    output = Path(args.output_dir)
    data = SyntheticConfig()
    data_dir = generate_precomp(output / "data", data)
    rows = []
    for index, (label, run, share) in enumerate(ablation_runs()):
        started = time.perf_counter()
        config = demo_train_config(run, output / f"run-{index}", SEED, progress=False)
        result = run_experiment(training_data(data_dir, run.noise_ratio, share), config, DEMO_MODEL)
        seconds = time.perf_counter() - started
        test = result["test"]
        rows.append(
            {
                "label": label,
                "pairs": round(share * data.num_train) * data.captions_per_image,
                "i2t_r1": test["i2t_r1"],
                "t2i_r1": test["t2i_r1"],
                "rsum": test["rsum"],
                "test": test,
                "division": result["division"],
                "seconds": seconds,
            }
        )
        print(f"{label}: rSum {test['rsum']:.1f} ({seconds:.0f} s)", flush=True)
    header = f"NCR ablation on the generated benchmark (demo model and settings, seed 0); {machine()}"
    write_report(output / "ncr_ablation.md", markdown(rows, header))
    (output / "ncr_ablation.json").write_text(json.dumps(rows, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
