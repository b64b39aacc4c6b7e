"""One training run on category-labelled features with noisy labels, from files to test mAP.

The label-noise counterpart of :mod:`hfncl.experiment`: read the features
(:func:`hfncl.data.load_labelled_dataset` or, for one unsplit set of ``.npy`` files,
:func:`hfncl.data.load_labelled_arrays`), corrupt the training labels of every modality
(:func:`hfncl.data.inject_label_noise`, saved as ``OUTPUT_DIR/label_noise.json``) or read
noisy labels from a file, train a :class:`hfncl.models.CategoryModel` with the named
plugins, and report I2T / T2I mAP of the best checkpoint (by validation mean mAP) on
the test split.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hfncl.config import RUN_CONFIG_FILE, TrainConfig, save_run_config
from hfncl.data import (
    LABEL_NOISE_KINDS,
    DataFormatError,
    LabelledDataset,
    inject_label_noise,
    load_label_noise,
    load_labelled_arrays,
    load_labelled_dataset,
)
from hfncl.data.labelled import MODALITIES
from hfncl.data.noisy_labels import NoisyLabelledDataset
from hfncl.engine.callbacks import library_progress_bars
from hfncl.engine.ownership import owned_run_dir
from hfncl.engine.tasks import CategoryTask
from hfncl.engine.trainer import Trainer
from hfncl.hub.card import write_model_card
from hfncl.hub.record import read_run_record, write_run_record
from hfncl.integrity import atomic_write_text, write_manifest
from hfncl.models import CategoryConfig, CategoryModel
from hfncl.plot_callbacks import training_figures

NOISE_FILE = "label_noise.json"


@dataclass
class LabelDataArguments:
    """Where the labelled features are and how the training labels are corrupted.

    Give ``data_path`` (a file or directory the readers know), or the three ``.npy``
    files of one unsplit set (``image_features``, ``text_features``, ``labels``).
    """

    data_path: str | None = field(
        default=None, metadata={"help": "Feature file (.h5/.mat: imgs_deep or tr_te keys) or per_file directory."}
    )
    image_features: str | None = field(default=None, metadata={"help": "Unsplit set: image (or view 1) features .npy."})
    text_features: str | None = field(default=None, metadata={"help": "Unsplit set: text (or view 2) features .npy."})
    labels: str | None = field(default=None, metadata={"help": "Unsplit set: labels .npy (split 80/10/10 per class)."})
    layout: str | None = field(default=None, metadata={"help": "imgs_deep, tr_te or per_file (default: detected)."})
    label_base: int = field(default=0, metadata={"help": "Index of the first class in the files (1 for Wikipedia)."})
    num_classes: int | None = field(default=None, metadata={"help": "Number of classes (default: from the labels)."})
    valid_size: int | None = field(
        default=None, metadata={"help": "Without a validation split: the first N test samples validate (default half)."}
    )
    noise_ratio: float = field(default=0.0, metadata={"help": "Share of training labels corrupted per modality."})
    noise_kind: str = field(default="symmetric", metadata={"help": "symmetric or asymmetric (next class)."})
    noise_seed: int = field(default=0, metadata={"help": "Seed of the label noise."})
    noise_file: str | None = field(
        default=None, metadata={"help": "Read noisy labels (ours, or MRL's list-of-lists JSON) instead of generating."}
    )
    feature_dtype: str = field(default="float32", metadata={"help": "Arrow storage of the features."})

    def __post_init__(self) -> None:
        arrays = (self.image_features, self.text_features, self.labels)
        if (self.data_path is None) == all(a is None for a in arrays) or (
            self.data_path is None and any(a is None for a in arrays)
        ):
            raise ValueError(
                "give either data_path, or all of image_features, text_features and labels (one unsplit set)"
            )
        if not 0.0 <= self.noise_ratio < 1.0:
            raise ValueError(f"noise_ratio must be in [0, 1), got {self.noise_ratio}")
        if self.noise_kind not in LABEL_NOISE_KINDS:
            raise ValueError(f"noise_kind must be one of {LABEL_NOISE_KINDS}, got {self.noise_kind!r}")

    def source(self) -> str:
        return self.data_path or self.image_features or ""


@dataclass
class CategoryModelArguments:
    """The model's architecture (:class:`hfncl.models.CategoryConfig` fields)."""

    embed_dim: int = field(default=512, metadata={"help": "Common space dimension (512 in the paper)."})
    hidden_dim: int = field(default=4096, metadata={"help": "Hidden width of each modality's 3-layer MLP."})


def load_labelled(args: LabelDataArguments) -> LabelledDataset:
    """The train / valid / test splits the arguments name."""
    options: dict[str, Any] = dict(
        label_base=args.label_base, num_classes=args.num_classes, feature_dtype=args.feature_dtype
    )
    if args.data_path is not None:
        return load_labelled_dataset(args.data_path, layout=args.layout, valid_size=args.valid_size, **options)
    if args.image_features is None or args.text_features is None or args.labels is None:
        raise ValueError("give either data_path, or all of image_features, text_features and labels (one unsplit set)")
    return load_labelled_arrays(args.image_features, args.text_features, args.labels, **options)


def prepare_labelled_data(args: LabelDataArguments, output_dir: str | Path) -> dict[str, Any]:
    """The splits, and the training set with its noisy labels (generated and saved, or read)."""
    dataset = load_labelled(args)
    clean = {m: dataset.train.labels(m) for m in MODALITIES}
    if args.noise_file:
        noise = load_label_noise(args.noise_file, clean, dataset.num_classes)
        noise_rate = None
    else:
        noise = inject_label_noise(
            clean, dataset.num_classes, args.noise_ratio, kind=args.noise_kind, seed=args.noise_seed
        )
        noise.save(Path(output_dir) / NOISE_FILE)
        noise_rate = args.noise_ratio
    return {
        "dataset": dataset,
        "train": NoisyLabelledDataset(dataset.train, noise),
        "val": dataset.valid,
        "test": dataset.test,
        "noise": noise,
        "task": CategoryTask(noise_rate),
    }


def run_category_experiment(
    data_args: LabelDataArguments, config: TrainConfig, model_args: CategoryModelArguments | None = None
) -> dict[str, Any]:
    """Train on ``data_args`` with ``config``; evaluate the best checkpoint's mAP on the test split.

    Writes ``OUTPUT_DIR/results.json`` (test mAP, the last division's quality, history)
    and adds the test mAP to the best checkpoint's run record and model card (the
    card's data section stays empty: :class:`hfncl.hub.DataDescription` describes
    image-caption pairs).
    """
    with owned_run_dir(config), library_progress_bars(config.progress):
        return _train_and_test(data_args, config, model_args)


def _train_and_test(
    data_args: LabelDataArguments, config: TrainConfig, model_args: CategoryModelArguments | None
) -> dict[str, Any]:
    data = prepare_labelled_data(data_args, config.output_dir)
    dataset = data["dataset"]
    model_config = CategoryConfig(
        image_dim=dataset.train.feature_dim("image"),
        text_dim=dataset.train.feature_dim("text"),
        num_classes=dataset.num_classes,
        **asdict(model_args or CategoryModelArguments()),
    )
    trainer = Trainer(
        config, model_config, data["train"], data["val"], task=data["task"], callbacks=training_figures()
    )
    if trainer.accelerator.is_main_process:
        save_run_config(
            Path(config.output_dir, RUN_CONFIG_FILE), data_args, config, model_args or CategoryModelArguments()
        )
    summary = trainer.train()
    best_dir = Path(config.output_dir) / "best"
    model = CategoryModel.from_pretrained(str(best_dir)) if best_dir.exists() else trainer.model
    test = data["task"].evaluate(
        model,
        data["test"],
        batch_size=config.eval_batch_size,
        device=trainer.accelerator.device,
        hook=trainer.hook,
        progress=config.progress and trainer.accelerator.is_local_main_process,
    )
    divisions = [h for h in summary["history"] if any(k.startswith("division") for k in h)]
    noise = data["noise"]
    result = {
        "plugins": config.plugins,
        "dataset": Path(data_args.source()).name,
        "noise_kind": noise.kind,
        "noise_ratio": data_args.noise_ratio if data_args.noise_file is None else None,
        "true_noise_ratio": {m: noise.realised_ratio(m) for m in MODALITIES},
        "test": test,
        "best_epoch": summary["best_epoch"],
        "best_val_mean_map": summary["best_score"],
        "division": {k: v for k, v in divisions[-1].items() if k.startswith("division")} if divisions else {},
        "history": summary["history"],
    }
    if trainer.accelerator.is_main_process:
        atomic_write_text(Path(config.output_dir, "results.json"), json.dumps(result, indent=1, default=float))
        if best_dir.exists():
            record = read_run_record(best_dir)
            record.test = dict(test)
            write_run_record(best_dir, record)
            write_model_card(best_dir)
            write_manifest(best_dir)
    return result


__all__ = [
    "CategoryModelArguments",
    "DataFormatError",
    "LabelDataArguments",
    "load_labelled",
    "prepare_labelled_data",
    "run_category_experiment",
]
