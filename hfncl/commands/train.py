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
        TRAIN_DESCRIPTION.format(plugins=plugins), plugins=argument_plugins(arguments), defaults={}, argv=arguments,
        prog="hfncl train",
    )


def argument_plugins(arguments: list[str]) -> list[str]:
    """The plugins whose task's arguments ``hfncl train`` parses: those named by ``--plugins`` (or by the ``--config``
    file) when the arguments give a field only the category-label data has (``--data-path``, ``--layout``, ...):
    :func:`hfncl.recipe.run_recipe` then imports them for their task's arguments. None otherwise, so that the
    image-caption pairs' arguments are checked before any framework is imported."""
    named, given = _named_plugins(arguments)
    return named if named and given & _label_only_fields() else []


def _label_only_fields() -> set[str]:
    """The fields of the category-label data arguments that the image-caption ones lack."""
    from dataclasses import fields

    from hfncl.arguments import DataArguments, LabelDataArguments

    return {field.name for field in fields(LabelDataArguments)} - {field.name for field in fields(DataArguments)}


def _named_plugins(arguments: list[str]) -> tuple[list[str], set[str]]:
    """``--plugins`` of ``arguments`` (else the ``plugins`` of their ``--config`` file), and the field names the
    flags and the file give (``--data-path`` is ``data_path``); nothing from a file that cannot be read (the recipe
    parser then says why)."""
    import yaml

    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--plugins", nargs="+", default=[])
    early.add_argument("--config", default=None)
    known, _ = early.parse_known_args(arguments)
    given = {token[2:].split("=")[0].replace("-", "_") for token in arguments if token.startswith("--")}
    settings: object = None
    if known.config:
        try:
            with open(known.config, encoding="utf-8") as file:
                settings = yaml.safe_load(file)
        except (OSError, yaml.YAMLError):
            settings = None
    if isinstance(settings, dict):
        given |= {str(key) for key in settings}
        if not known.plugins and isinstance(settings.get("plugins"), list):
            return [str(name) for name in settings["plugins"]], given
    return list(known.plugins), given
