"""``hfncl demo``: the installed methods on a generated benchmark with noise, and their comparison."""

from __future__ import annotations

import argparse

from hfncl.commands.common import add_progress_argument


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``hfncl demo``."""
    help = (
        "Train the installed methods on a generated benchmark with noise and print the comparison (a few minutes; "
        "--full: the full comparison of benchmarks/README.md)."
    )
    parser = subparsers.add_parser("demo", help=help, description=help)
    parser.add_argument("--output-dir", default="runs/demo", help="Where the data, checkpoints and table go.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the data, the noise and the training.")
    add_progress_argument(parser)
    parser.add_argument(
        "--noise-ratios", type=float, nargs="+", default=[0.5], help="Noise ratios to train at (0 adds a clean run)."
    )
    parser.add_argument("--plugins", nargs="+", help="Only these plugins (default: every plugin with demo settings).")
    parser.add_argument(
        "--full",
        action="store_true",
        help="The full comparison of benchmarks/README.md: every method on 3000 training images with its own demo "
        "settings (about 17 minutes on 2 CPU cores) instead of the quick demo (600 images, at most 3 epochs at 5x "
        "the learning rate).",
    )
    parser.add_argument(
        "--size",
        choices=("tiny", "quick", "small", "full"),
        help="Generated benchmark: tiny (200 training images), quick (600, the default), small (800), full (3000, "
        "the default of --full).",
    )
    parser.add_argument("--epochs", type=int, help="Train every method this many epochs (default: the demo's plan).")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The README's main job (see :mod:`hfncl.demo`)."""
    print("hfncl demo: loading torch, transformers, datasets and the methods", flush=True)
    from hfncl.demo import main as demo_main

    return demo_main(
        args.output_dir,
        seed=args.seed,
        progress=not args.no_progress,
        noise_ratios=tuple(args.noise_ratios),
        plugins=args.plugins,
        size=args.size,
        epochs=args.epochs,
        full=args.full,
    )
