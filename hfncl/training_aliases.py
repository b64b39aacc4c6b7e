"""``transformers.TrainingArguments``' names of :class:`hfncl.config.TrainConfig` fields, which a recipe's
command line (:mod:`hfncl.recipe`) takes as flags and ``--config`` keys beside the fields' own names:
``--per_device_train_batch_size`` (times the launched processes), ``--per_device_eval_batch_size``,
``--max_grad_norm``, ``--dataloader_num_workers``, ``--bf16`` and ``--fp16``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hfncl.config import SCALARS, SettingError, is_scalar


def launched_processes() -> int:
    """The processes a launcher started (``WORLD_SIZE`` of torchrun and ``accelerate launch --multi_gpu``, or an MPI
    launcher's size, the variables Accelerate reads); 1 without a launcher."""
    for name in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def _per_device_batch(value: Any) -> int:
    """A per-process batch size as the global ``batch_size``: times the launched processes."""
    count = int(value) if isinstance(value, str) and value.strip().isdigit() else value
    if not is_scalar(count, int):
        raise SettingError(f"per_device_train_batch_size must be an integer, got {value!r}")
    return int(count) * launched_processes()


def _same(name: str, kind: type) -> Callable[[Any], Any]:
    """The value as it is (a command-line string converted to ``kind``; a file's value is checked by the field)."""

    def convert(value: Any) -> Any:
        if not isinstance(value, str) or kind is str:
            return value
        try:
            return kind(value)
        except ValueError:
            raise SettingError(f"{name} must be {SCALARS[kind][0]}, got {value!r}") from None

    return convert


def _precision(kind: str) -> Callable[[Any], str]:
    """``--bf16`` / ``--fp16`` (with no value, or true / false) as ``mixed_precision``."""

    def convert(value: Any) -> str:
        text = str(value).lower()
        if text not in ("true", "false", "1", "0", "yes", "no"):
            raise SettingError(f"{kind} must be true or false, got {value!r}")
        return kind if text in ("true", "1", "yes") else "no"

    return convert


@dataclass(frozen=True)
class FieldAlias:
    """A ``transformers.TrainingArguments`` name that a flag or ``--config`` key may use for a TrainConfig field."""

    name: str
    field: str
    convert: Callable[[Any], Any]
    help: str


TRAINING_ARGUMENTS_ALIASES = (
    FieldAlias(
        "per_device_train_batch_size",
        "batch_size",
        _per_device_batch,
        "TrainingArguments' name: the batch of each process; batch_size = this x the launched processes.",
    ),
    FieldAlias("per_device_eval_batch_size", "eval_batch_size", _same("per_device_eval_batch_size", int),
               "TrainingArguments' name of --eval_batch_size (each process encodes in batches of this size)."),
    FieldAlias("max_grad_norm", "grad_clip", _same("max_grad_norm", float), "TrainingArguments' name of --grad_clip."),
    FieldAlias(
        "dataloader_num_workers", "num_workers", _same("dataloader_num_workers", int),
        "TrainingArguments' name of --num_workers.",
    ),
    FieldAlias("bf16", "mixed_precision", _precision("bf16"), "TrainingArguments' name of --mixed_precision bf16."),
    FieldAlias("fp16", "mixed_precision", _precision("fp16"), "TrainingArguments' name of --mixed_precision fp16."),
)
"""TrainingArguments names of TrainConfig fields, as flags and ``--config`` keys (not keyword arguments)."""


class _AliasAction(argparse.Action):
    """Stores a :class:`FieldAlias` flag's value, converted, in its TrainConfig field."""

    def __init__(self, option_strings: list[str], dest: str, alias: FieldAlias, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.alias = alias

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        try:
            setattr(namespace, self.dest, self.alias.convert(values))
        except SettingError as error:
            parser.error(str(error))


def add_field_aliases(parser: argparse.ArgumentParser) -> None:
    """Add the flags of :data:`TRAINING_ARGUMENTS_ALIASES` to a parser of TrainConfig's fields (``--bf16`` takes
    no value, or true / false)."""
    for alias in TRAINING_ARGUMENTS_ALIASES:
        flag = alias.field == "mixed_precision"
        parser.add_argument(
            f"--{alias.name}",
            dest=alias.field,
            action=_AliasAction,
            alias=alias,
            nargs="?" if flag else None,
            const="true" if flag else None,
            default=argparse.SUPPRESS,
            metavar="BOOL" if flag else alias.field.upper(),
            help=alias.help,
        )


def alias_value(action: argparse.Action, value: Any) -> Any:
    """A ``--config`` file's value of a key naming ``action``: converted when the key is a TrainingArguments name."""
    return action.alias.convert(value) if isinstance(action, _AliasAction) else value
