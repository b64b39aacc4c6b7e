"""Training configuration: what a run trains, with which plugins, for how long.

The model's own configuration is :class:`hfncl.models.NCLConfig` (a transformers
``PretrainedConfig``); this dataclass holds everything else and is parsed from the
command line by recipes with ``transformers.HfArgumentParser``. Beside it, what every layer
reads the same way: the cache root (:func:`default_cache_root`) and an error on one line
(:func:`one_line`), as configuration errors are reported.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


def default_cache_root() -> Path:
    """Where hfncl caches converted data and listings: ``$HFNCL_CACHE`` or ``~/.cache/hfncl``."""
    return Path(os.environ.get("HFNCL_CACHE", Path.home() / ".cache" / "hfncl"))


def one_line(error: BaseException) -> str:
    """An error's message on one line (a multi-line message's lines joined by ``; ``)."""
    return "; ".join(line.strip() for line in str(error).splitlines() if line.strip())


OPTIMIZERS = ("adam", "adamw")
LATEST = "latest"
RUN_CONFIG_FILE = "run_config.yaml"


class PluginOptions(dict[str, Any]):
    """Plugin options by name; built from a mapping or, on the command line, a JSON object."""

    def __init__(self, value: str | Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> None:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as error:
                raise ValueError(f"options must be a JSON object, got {value!r}: {error}") from error
            if not isinstance(value, dict):
                raise ValueError(f"options must be a JSON object, got {type(value).__name__}")
        super().__init__(value or {})


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
        metadata={"help": "Accelerate trackers (tensorboard, wandb, ...).", "aliases": ["--report_to"]},
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
        if self.resume and self.resume_from_checkpoint is None:
            self.resume_from_checkpoint = LATEST
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"TrainConfig.optimizer must be one of {sorted(OPTIMIZERS)}, got {self.optimizer!r}")
        for name, least in (
            ("epochs", 1), ("eval_batch_size", 1), ("save_steps", 0), ("num_workers", 0),
            ("early_stopping_patience", 0), ("early_stopping_min_epochs", 0),
        ):
            if getattr(self, name) < least:
                raise ValueError(f"TrainConfig.{name} must be >= {least}, got {getattr(self, name)}")
        if self.batch_size < 2:
            raise ValueError(f"TrainConfig.batch_size must be >= 2 (a batch needs negatives), got {self.batch_size}")
        if self.log_with:
            check_trackers(self.log_with)
        if not (math.isfinite(self.text_tower_lr_scale) and self.text_tower_lr_scale > 0):
            raise ValueError(
                f"TrainConfig.text_tower_lr_scale must be a finite number > 0, got {self.text_tower_lr_scale}"
            )
        if not 0 <= self.freeze_text_tower_epochs <= self.epochs:
            raise ValueError(
                f"TrainConfig.freeze_text_tower_epochs must be between 0 and epochs={self.epochs}, "
                f"got {self.freeze_text_tower_epochs}"
            )
        if not 0 <= self.warmup_epochs <= self.epochs:
            raise ValueError(
                f"TrainConfig.warmup_epochs must be between 0 and epochs={self.epochs}, got {self.warmup_epochs}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True))

    @classmethod
    def load(cls, path: str | Path) -> "TrainConfig":
        return cls(**json.loads(Path(path).read_text()))


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
    """Write the fields of ``arguments`` (dataclasses) as one YAML mapping that ``--config`` reads back."""
    import yaml

    values: dict[str, Any] = {}
    for argument in arguments:
        values.update(json.loads(json.dumps(asdict(argument))))
    path = Path(path)
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path
