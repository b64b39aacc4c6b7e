"""Argument parsing shared by the scripts in ``recipes/``: one method x one dataset each."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from transformers import HfArgumentParser

from hfncl.config import TrainConfig
from hfncl.data import DataFormatError
from hfncl.experiment import DataArguments, ModelArguments, run_experiment
from hfncl.plugins import PluginError


def run_recipe(
    description: str, plugins: list[str], defaults: dict[str, Any], argv: Sequence[str] | None = None
) -> int:
    """Parse ``argv`` into data, training and model arguments with the recipe's defaults; train; print results.

    ``defaults`` are DataArguments / TrainConfig / ModelArguments values the recipe
    fixes unless the command line overrides them (the paper's settings for that dataset).
    """
    parser = HfArgumentParser((DataArguments, TrainConfig, ModelArguments), description=description)
    parser.set_defaults(plugins=plugins, **defaults)
    try:
        data_args, config, model_args = parser.parse_args_into_dataclasses(
            args=list(argv) if argv is not None else None
        )
        result = run_experiment(data_args, config, model_args)
    except (DataFormatError, PluginError, ValueError, OSError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    print(json.dumps({"test": result["test"], "division": result["division"]}, indent=1))
    return 0


def one_line(error: Exception) -> str:
    """An error's message on one line (a multi-line message's lines joined by ``; ``)."""
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


def run_label_recipe(
    description: str, plugins: list[str], defaults: dict[str, Any], argv: Sequence[str] | None = None
) -> int:
    """:func:`run_recipe` for category-labelled features with noisy labels (mAP).

    ``defaults`` are :class:`hfncl.category_experiment.LabelDataArguments` /
    TrainConfig / :class:`hfncl.category_experiment.CategoryModelArguments` values.
    """
    from hfncl.category_experiment import CategoryModelArguments, LabelDataArguments, run_category_experiment

    parser = HfArgumentParser((LabelDataArguments, TrainConfig, CategoryModelArguments), description=description)
    parser.set_defaults(plugins=plugins, **defaults)
    try:
        data_args, config, model_args = parser.parse_args_into_dataclasses(
            args=list(argv) if argv is not None else None
        )
        result = run_category_experiment(data_args, config, model_args)
    except (DataFormatError, PluginError, ValueError, OSError) as error:
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    print(json.dumps({"test": result["test"], "division": result["division"]}, indent=1))
    return 0

