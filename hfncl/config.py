"""Training configuration: what a run trains, with which plugins, for how long.

The model's own configuration is :class:`hfncl.models.NCLConfig` (a transformers
``PretrainedConfig``); this dataclass holds everything else and is parsed from the
command line by recipes with :class:`hfncl.dataclass_parser.DataclassArgumentParser`. Beside
it, what every layer reads the same way: the cache root (:func:`default_cache_root`) and an
error on one line (:func:`one_line`), as configuration errors are reported.
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar


def default_cache_root() -> Path:
    """Where hfncl caches converted data and listings: ``$HFNCL_CACHE`` or ``~/.cache/hfncl``."""
    return Path(os.environ.get("HFNCL_CACHE", Path.home() / ".cache" / "hfncl"))


def one_line(error: BaseException) -> str:
    """An error's message on one line (a multi-line message's lines joined by ``; ``)."""
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


OPTIMIZERS = ("adam", "adamw")
MIXED_PRECISIONS = ("no", "fp16", "bf16")
LATEST = "latest"
RUN_CONFIG_FILE = "run_config.yaml"
RUN_ONLY_FIELDS = ("overwrite_output_dir", "resume", "resume_from_checkpoint", "resume_ignore_mismatch")
"""TrainConfig fields that say how one invocation treats its output directory, not what the run trains: never
saved in ``run_config.yaml``, so repeating a run from it neither replaces nor resumes anything unless asked."""


class SettingError(ValueError, argparse.ArgumentTypeError):
    """A refused setting: a ``ValueError`` to Python callers, and on the command line argparse's error with this
    message (not argparse's generic "invalid value")."""


class JsonObject(dict[str, Any]):
    """Values by name, of the field ``field_name``; built from a mapping or, on the command line, a JSON object."""

    field_name: ClassVar[str] = ""
    example: ClassVar[str] = ""

    def __init__(self, value: str | Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> None:
        name = self.field_name
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as error:
                raise SettingError(f"{name} must be a JSON object, got {value!r} ({error})") from error
            if not isinstance(value, dict):
                raise SettingError(f"{name} must be a JSON object, got {type(value).__name__} {value!r}")
        try:
            super().__init__(value or {})
        except (TypeError, ValueError) as error:  # neither a mapping nor (name, value) pairs
            raise SettingError(
                f"{name} must be a JSON object such as {self.example}, got {value!r} ({type(value).__name__})"
            ) from error


class PluginOptions(JsonObject):
    """Plugin options by full name; built from a mapping or, on the command line, a JSON object."""

    field_name = "TrainConfig.options"
    example = '{"plugin.option": 0.2}'


class HeadOptionValues(JsonObject):
    """Similarity-head options by full name (``ModelArguments.head_options``); on the command line a JSON object."""

    field_name = "ModelArguments.head_options"
    example = '{"sgr.sim_dim": 512}'


def check_field_types(settings: Any) -> None:
    """Refuse a field of the dataclass ``settings`` whose value does not have its annotated type.

    ``int`` takes integers only (not ``2.5``, not ``true``), ``float`` any real number but a bool, ``bool``
    and ``str`` their own type, ``list[X]`` a list of ``X`` (a Python caller's tuple is stored as a list), never
    a scalar: a configuration file writes ``lr_decay_epochs: [30]`` where the command line writes
    ``--lr_decay_epochs 30``. ``X | None`` also takes ``None``; other annotations (``PluginOptions``) are
    checked by their own constructors. Command-line flags reach here already converted by argparse;
    configuration files and Python callers are checked here, the same way.

    Raises:
        ValueError: one line naming the class, the field, the expected type and the value.
    """
    hints = typing.get_type_hints(type(settings))
    for spec in fields(settings):
        annotation, value = hints[spec.name], getattr(settings, spec.name)
        if isinstance(value, tuple) and _list_item(annotation) is not None:
            value = list(value)
            setattr(settings, spec.name, value)
        expected = _expected_type(annotation, value)
        if expected is not None:
            raise ValueError(
                f"{type(settings).__name__}.{spec.name} must be {expected}, got {value!r} ({type(value).__name__})"
            )


SCALARS: dict[type, tuple[str, str]] = {
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    bool: ("true or false", "booleans"),
    str: ("a string", "strings"),
}


def _kind(annotation: Any) -> tuple[Any, bool]:
    """The annotated type without ``| None``, and whether ``None`` is allowed (``None, False`` for other unions)."""
    members = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    kinds = [member for member in members if member is not type(None)]
    return (kinds[0] if len(kinds) == 1 else None), len(kinds) < len(members)


def _list_item(annotation: Any) -> Any:
    """``X`` of an annotation ``list[X]`` (or ``list[X] | None``); ``None`` for any other annotation."""
    kind, _ = _kind(annotation)
    return typing.get_args(kind)[0] if typing.get_origin(kind) is list else None


def _expected_type(annotation: Any, value: Any) -> str | None:
    """What ``annotation`` expects, in words, when ``value`` does not have that type; ``None`` when it does, or
    when the annotation is none that :func:`check_field_types` knows."""
    kind, optional = _kind(annotation)
    if value is None and optional:
        return None
    item = _list_item(annotation)
    if item in SCALARS:
        fits = isinstance(value, list) and all(is_scalar(element, item) for element in value)
        expected = f"a list of {SCALARS[item][1]}"
    elif kind in SCALARS:
        fits, expected = is_scalar(value, kind), SCALARS[kind][0]
    else:
        return None
    return None if fits else expected + (" or null" if optional else "")


def is_scalar(value: Any, kind: type) -> bool:
    """Whether ``value`` is a ``kind`` (int, float, bool or str) as :func:`check_field_types` reads them."""
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    return isinstance(value, kind)


@dataclass
class TrainConfig:
    """Hyper-parameters of the trainer and the names of the active plugins."""

    plugins: list[str] = field(default_factory=list, metadata={"help": "Active method plugins, by entry-point name."})
    options: "PluginOptions" = field(
        default_factory=lambda: PluginOptions(),
        metadata={"help": 'Plugin options overriding their declared defaults, as JSON: \'{"plugin.option": 0.2}\'.'},
    )
    output_dir: str = field(default="runs/hfncl", metadata={"help": "Checkpoints, logs and the best model."})
    epochs: int = field(default=40, metadata={"help": "Epochs, warmup included.", "aliases": ["--num_train_epochs"]})
    warmup_epochs: int = field(default=0, metadata={"help": "Epochs trained with the warmup loss before dividing."})
    batch_size: int = field(default=128, metadata={"help": "Global batch size (split across processes)."})
    eval_batch_size: int = field(default=256, metadata={"help": "Batch size of encoding passes."})
    learning_rate: float = field(default=2e-4, metadata={"help": "Initial learning rate."})
    optimizer: str = field(default="adam", metadata={"help": "adam, or adamw (decoupled weight decay)."})
    weight_decay: float = field(default=0.0, metadata={"help": "Weight decay of the optimiser (AdamW: decoupled)."})
    lr_decay_epochs: list[int] = field(
        default_factory=lambda: [30],
        metadata={
            "help": "Epochs at which lr decays, counted from 0 at the first epoch, warmup included (a code that "
            "counts after W warmup epochs decays at E: give W + E)."
        },
    )
    lr_decay_factor: float = field(default=0.1, metadata={"help": "Multiplier applied at each decay epoch."})
    lr_decay_patience: int = field(
        default=0,
        metadata={
            "help": "Decay on a plateau: when > 0, the rate also decays once (by lr_decay_factor) after the validation "
            "metric has not improved for this many epochs (not before early_stopping_min_epochs), and early "
            "stopping waits for that decay (0: off; needs a validation split)."
        },
    )
    text_tower_lr_scale: float = field(
        default=1.0,
        metadata={
            "help": "Learning-rate multiplier of a pretrained (transformer) text tower's encoder weights, its "
            "projection head keeping the base rate (e.g. 0.1: BERT at a tenth of the rate)."
        },
    )
    freeze_text_tower_epochs: int = field(
        default=0,
        metadata={
            "help": "Epochs, from the first, in which a pretrained (transformer) text tower's encoder weights are not "
            "updated (its projection head and the rest of the model train)."
        },
    )
    grad_clip: float = field(default=2.0, metadata={"help": "Gradient norm clip (0 disables)."})
    early_stopping_patience: int = field(
        default=0,
        metadata={
            "help": "Stop when the validation metric has not improved for this many epochs (0: train every epoch; "
            "needs a validation split)."
        },
    )
    early_stopping_min_epochs: int = field(
        default=0, metadata={"help": "Epochs trained before early stopping may end the run."}
    )
    seed: int = field(default=0, metadata={"help": "Seeds initialisation, shuffling and everything random."})
    init_weights: str | None = field(
        default=None,
        metadata={
            "help": "A saved model (a save_pretrained or best/ directory, or a Hub id) whose weights start the "
            "training in place of a fresh initialisation; it must have the run's networks and shapes."
        },
    )
    save_steps: int = field(
        default=0, metadata={"help": "Also checkpoint every N optimiser steps (0: epoch ends only)."}
    )
    num_workers: int = field(default=0, metadata={"help": "DataLoader worker processes."})
    mixed_precision: str = field(
        default="no",
        metadata={
            "help": "no, fp16 or bf16 (Accelerate): autocast of the encoders, similarity heads and evaluation; "
            "scores stay float32; bf16 also on CPUs."
        },
    )
    log_with: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Accelerate trackers (tensorboard, wandb, ...; all; none), as TrainingArguments.report_to: "
            "a list or one name.",
            "aliases": ["--report_to"],
        },
    )
    run_name: str | None = field(
        default=None, metadata={"help": "The run's name in the trackers (default: the output directory's name)."}
    )
    resume: bool = field(default=False, metadata={"help": "Same as --resume_from_checkpoint latest."})
    resume_from_checkpoint: str | None = field(
        default=None,
        metadata={
            "help": "latest: continue the run in output_dir from its latest checkpoint; or a checkpoint directory."
        },
    )
    resume_ignore_mismatch: bool = field(
        default=False,
        metadata={
            "help": "Resume even when the checkpoint was trained on other data, noise or settings (refused by "
            "default); results.json records the fields that differ."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Replace the results of a previous run in output_dir instead of refusing to start."},
    )
    plot_divisions: bool = field(
        default=True, metadata={"help": "Save a PNG of each division's statistic by hidden mask (needs matplotlib)."}
    )
    progress: bool = field(default=True, metadata={"help": "Show tqdm progress bars on the main process."})

    def __post_init__(self) -> None:
        self.options = PluginOptions(self.options)
        self.log_with = tracker_names(self.log_with)
        check_field_types(self)
        if self.resume and self.resume_from_checkpoint is None:
            self.resume_from_checkpoint = LATEST
        for name, fits, expected in self._value_rules():
            value = getattr(self, name)
            if not fits(value):
                raise ValueError(f"TrainConfig.{name} must be {expected}, got {value!r}")
        if self.log_with:
            check_trackers(self.log_with)

    def _value_rules(self) -> tuple[tuple[str, Callable[[Any], bool], str], ...]:
        """(field, test, what the field must be) of each value check, made in this order after the types'."""
        return (
            ("optimizer", lambda v: v in OPTIMIZERS, f"one of {sorted(OPTIMIZERS)}"),
            ("mixed_precision", lambda v: v in MIXED_PRECISIONS, f"one of {list(MIXED_PRECISIONS)}"),
            ("epochs", lambda v: v >= 1, ">= 1"),
            ("eval_batch_size", lambda v: v >= 1, ">= 1"),
            ("save_steps", lambda v: v >= 0, ">= 0"),
            ("num_workers", lambda v: v >= 0, ">= 0"),
            ("early_stopping_patience", lambda v: v >= 0, ">= 0"),
            ("early_stopping_min_epochs", lambda v: v >= 0, ">= 0"),
            ("lr_decay_patience", lambda v: v >= 0, ">= 0 (0: no decay on a plateau)"),
            ("batch_size", lambda v: v >= 2, ">= 2 (a batch needs negatives)"),
            ("learning_rate", lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
            ("weight_decay", lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
            ("lr_decay_factor", lambda v: 0 < v <= 1, "in (0, 1] (the rate's multiplier at each decay epoch)"),
            (
                "lr_decay_epochs",
                lambda v: all(epoch >= 0 for epoch in v),
                "epochs >= 0 (one at or past `epochs` is allowed: that run never reaches it)",
            ),
            ("grad_clip", lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0 (0 disables clipping)"),
            ("text_tower_lr_scale", lambda v: math.isfinite(v) and v > 0, "a finite number > 0"),
            ("freeze_text_tower_epochs", lambda v: 0 <= v <= self.epochs, f"between 0 and epochs={self.epochs}"),
            ("warmup_epochs", lambda v: 0 <= v <= self.epochs, f"between 0 and epochs={self.epochs}"),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True))

    @classmethod
    def load(cls, path: str | Path) -> "TrainConfig":
        return cls(**json.loads(Path(path).read_text()))


def tracker_names(value: Any) -> Any:
    """``log_with`` (``report_to``) as transformers' ``TrainingArguments.report_to`` takes it: a list of tracker
    names, one name as a string, ``"all"``, or ``"none"`` for no tracker (``[]``); other values are left to the
    type check."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)) and [str(name).lower() for name in value] == ["none"]:
        return []
    return value


def check_trackers(names: list[str]) -> None:
    """Refuse a tracker Accelerate does not know or whose package is not installed."""
    from accelerate.tracking import get_available_trackers
    from accelerate.utils import LoggerType

    known = [kind.value for kind in LoggerType]
    available = [str(kind) for kind in get_available_trackers()]
    for name in names:
        if name not in known:
            raise ValueError(f"TrainConfig.log_with: unknown tracker {name!r}, expected some of {known}")
        if name != "all" and name not in available:
            raise ValueError(
                f"TrainConfig.log_with: tracker {name!r} is not installed (pip install {name}; "
                f"installed: {', '.join(available) or 'none'})"
            )


def save_run_config(path: str | Path, *arguments: Any) -> Path:
    """Write the fields of ``arguments`` (dataclasses) as one YAML mapping that ``--config`` reads back, without
    :data:`RUN_ONLY_FIELDS`: repeating a run from the file never replaces or resumes a directory unless asked."""
    import yaml

    values: dict[str, Any] = {}
    for argument in arguments:
        values.update(json.loads(json.dumps(asdict(argument))))
    for name in RUN_ONLY_FIELDS:
        values.pop(name, None)
    path = Path(path)
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path
