"""NCR's Fig. 3b on the generated benchmark: per-sample loss after warmup, the fitted mixture, the hidden mask.

    python benchmarks/division_plot.py --output-dir runs/bench_division   # NCR, the demo's benchmark, 50% noise
    python benchmarks/division_plot.py --quick                             # tiny data, one warmup epoch

Trains ``--method`` (default NCR; any method whose division carries ``extras["statistic"]``)
through its warmup epochs with its demo settings, then asks it for the division it makes
when the first epoch after warmup starts, and draws each network's division with
:func:`hfncl.plots.plot_division`: the histogram of the per-sample statistic (NCR: the
peer's L_w) for truly clean and truly noisy pairs (the hidden mask, which the method never
sees), the fitted mixture's density where the division carries ``extras["mixture"]``, and below,
the histogram of the clean probability the method assigned. Writes ``division_<method>_net<K>.png`` and prints the
division's ROC-AUC, precision and recall against the hidden mask.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import quiet

from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.demo import DemoRun, demo_runs, demo_train_config, shortened_settings
from hfncl.engine.trainer import Trainer
from hfncl.evaluation import division_quality
from hfncl.experiment import DataArguments, ModelArguments
from hfncl.models import NCLConfig
from hfncl.plots import plot_division
from hfncl.plugin_setup import run_plugins
from hfncl.tasks.pair_data import prepare_data
from hfncl.tasks.pairs import DEMO_MODEL, PAIRS, model_fields

QUICK_DATA = SyntheticConfig(num_train=200, num_dev=40, num_test=40, num_concepts=16, feature_dim=16)
QUICK_MODEL = ModelArguments(embed_dim=32, word_dim=16)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", default="ncr", help="A method that divides (default ncr).")
    parser.add_argument("--noise-ratio", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="runs/bench_division")
    parser.add_argument("--quick", action="store_true", help="Tiny data and model, one warmup epoch.")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    output_dir = Path(args.output_dir)
    run = demo_runs((args.noise_ratio,), [args.method])[0]
    settings = shortened_settings(run.settings, 2) if args.quick else dict(run.settings)
    warmup = int(settings.get("warmup_epochs", 0))
    settings.setdefault("lr_decay_epochs", [int(settings["epochs"] * 0.8)])  # the full run's schedule
    settings.update(epochs=warmup, warmup_epochs=warmup)
    config = demo_train_config(DemoRun(run.plugin, run.noise_ratio, settings), output_dir / "run", args.seed, False)
    data_dir = generate_precomp(output_dir / "data", QUICK_DATA if args.quick else SyntheticConfig())
    data = prepare_data(
        DataArguments(data_dir=str(data_dir), noise_ratio=args.noise_ratio, noise_seed=args.seed), config.output_dir
    )
    model_config = NCLConfig(
        image_dim=data.image_dim,
        image_regions=data.image_regions,
        vocab_size=len(data.vocab),
        **model_fields(config.plugins, QUICK_MODEL if args.quick else DEMO_MODEL),
    )
    trainer = Trainer(config, model_config, data.train, None, task=PAIRS, plugins=run_plugins(config))
    trainer.train()
    answer = trainer.hook.divide(trainer=trainer, epoch=warmup)
    if answer is None:
        print(f"{args.method} makes no division; nothing to draw", file=sys.stderr)
        return 2
    divisions = answer if isinstance(answer, list) else [answer]
    true_clean = data.train.clean_mask
    for net, division in enumerate(divisions):
        if "statistic" not in division.extras:
            print(f"{args.method}'s division carries no extras['statistic']; nothing to draw", file=sys.stderr)
            return 2
        path = plot_division(
            division.extras["statistic"],
            division.clean_prob,
            true_clean,
            output_dir / f"division_{args.method}_net{net}.png",
            title=f"{args.method}, {args.noise_ratio:.0%} noise: division after {warmup} warmup epochs, network {net}",
            mixture=division.extras.get("mixture"),
            statistic_name=division.statistic_name,
        )
        quality = division_quality(division.clean_prob, division.clean, true_clean)
        print(f"{path}: " + ", ".join(f"{k} {float(v):.3f}" for k, v in quality.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
