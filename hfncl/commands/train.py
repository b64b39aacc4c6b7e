"""``hfncl train``: installed plugins trained by name, with the arguments of a recipe (:mod:`hfncl.recipe`)."""

from __future__ import annotations

import argparse

TRAIN_DESCRIPTION = """hfncl train: train the named plugin(s) on a data directory; the run ends with one line saying
where the best model and results.json are.

installed plugins: {plugins} (`hfncl plugins` describes each, with its options)

examples (NAME: an installed plugin):
  hfncl train --plugins NAME --data-dir /data/f30k_precomp --noise-ratio 0.5 --output-dir runs/NAME_50
  hfncl train --plugins NAME --data-dir DIR --options '{{"NAME.OPTION": 0.3}}' --epochs 10 --print-config
  hfncl train --config runs/NAME_50/run_config.yaml --output-dir runs/NAME_50_again
  ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 -m hfncl.cli train --plugins NAME ..."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``hfncl train``, whose arguments (``--help`` too) are the recipe runner's: :func:`hfncl.cli.main` hands
    it every argument after ``train``."""
    help = "Train installed plugin(s) by name on a precomp data directory: hfncl train --plugins NAME --data-dir DIR"
    parser = subparsers.add_parser("train", help=help, description=help, add_help=False)
    parser.set_defaults(func=run, takes_rest=True)


def run(args: argparse.Namespace) -> int:
    """``hfncl train`` with the arguments after it (``args.rest``)."""
    return train(args.rest)


def train(arguments: list[str]) -> int:
    """``hfncl train``: like a recipe, with the plugins named on the command line (``--help`` lists the installed
    ones, with examples)."""
    from hfncl.plugins import installed_entry_points
    from hfncl.recipe import run_recipe

    plugins = ", ".join(sorted(installed_entry_points())) or "none"
    return run_recipe(
        TRAIN_DESCRIPTION.format(plugins=plugins), plugins=[], defaults={}, argv=arguments, prog="hfncl train"
    )
