"""hfncl's parser of dataclass fields builds the flags ``transformers.HfArgumentParser`` builds, and parses the
command line into the same arguments, without importing transformers (``hfncl train --help`` waits for no
framework)."""

from __future__ import annotations

import argparse

import pytest
from transformers import HfArgumentParser

from hfncl.arguments import CategoryModelArguments, DataArguments, LabelDataArguments, ModelArguments
from hfncl.config import TrainConfig
from hfncl.dataclass_parser import DataclassArgumentParser

PAIRS = (DataArguments, TrainConfig, ModelArguments)
LABELS = (LabelDataArguments, TrainConfig, CategoryModelArguments)
COMMAND_LINES = [
    (PAIRS, ["--data_dir", "d"]),
    (
        PAIRS,
        ["--data-dir", "d", "--plugins", "ncr", "vsepp", "--no_progress", "--plot_divisions", "false", "--resume"]
        + ["--head_options", '{"sgr.sim_dim": 8}', "--lr_decay_epochs", "3", "5", "--options", '{"ncr.alpha": 1}']
        + ["--num_train_epochs", "3", "--report_to", "none", "--lora_towers", "text", "--noise-ratio", "0.2"],
    ),
    (LABELS, ["--data_path", "f.h5", "--split_fractions", "0.7", "0.1", "0.2", "--hidden_dim", "8", "--no-progress"]),
]


def flags(parser: argparse.ArgumentParser) -> list[tuple]:
    """What each flag of ``parser`` takes: its names, destination, count, constant, default, type and help."""
    return [
        (a.option_strings, a.dest, a.nargs, a.const, a.default, getattr(a.type, "__name__", a.type), a.required, a.help)
        for a in parser._actions
    ]


@pytest.mark.parametrize("types", [PAIRS, LABELS], ids=["pairs", "labels"])
def test_the_flags_and_the_help_are_hf_argument_parsers(types: tuple[type, ...]) -> None:
    ours, theirs = DataclassArgumentParser(types, prog="p"), HfArgumentParser(types, prog="p")
    assert flags(ours) == flags(theirs)
    assert ours.format_help() == theirs.format_help()


@pytest.mark.parametrize(("types", "argv"), COMMAND_LINES, ids=["required", "every-kind-of-flag", "labels"])
def test_a_command_line_is_parsed_into_the_same_arguments(types: tuple[type, ...], argv: list[str]) -> None:
    ours = DataclassArgumentParser(types).parse_args_into_dataclasses(argv)
    assert ours == HfArgumentParser(types).parse_args_into_dataclasses(argv, look_for_args_file=False)


def test_arguments_no_flag_takes_are_refused_after_the_dataclasses_checks() -> None:
    parser = DataclassArgumentParser(PAIRS)
    with pytest.raises(ValueError, match=r"not used by the argument parser: \['--epochz', '3'\]"):
        parser.parse_args_into_dataclasses(["--data_dir", "d", "--epochz", "3"])
    with pytest.raises(ValueError, match="TrainConfig.epochs must be >= 1"):
        parser.parse_args_into_dataclasses(["--data_dir", "d", "--epochs", "0", "--epochz", "3"])
