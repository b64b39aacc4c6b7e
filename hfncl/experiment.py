"""One training run from data on disk to test metrics: what recipes, the demo and tests call."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hfncl.config import TrainConfig
from hfncl.data import (
    NOISE_KINDS,
    DataFormatError,
    NoisyPairDataset,
    Vocabulary,
    caption_level_noise,
    caption_pairing,
    image_level_noise,
    load_noise_index,
    load_precomp_split,
    save_noise_index,
)
from hfncl.engine.encoding import RetrievalSplit, evaluate_retrieval
from hfncl.engine.trainer import Trainer
from hfncl.models import NCLConfig, NCLModel


@dataclass
class DataArguments:
    """Where the data is and how its training pairs are corrupted."""

    data_dir: str = field(metadata={"help": "SCAN precomp directory ({split}_ims.npy, {split}_caps.txt|tsv)."})
    noise_ratio: float = field(default=0.0, metadata={"help": "Share of training pairs to corrupt."})
    noise_kind: str = field(
        default="caption", metadata={"help": "caption: re-pair a share of captions (caption level); image: permute a share of images (image level)."}
    )
    noise_file: str | None = field(
        default=None, metadata={"help": "Read this noise index (.npy, ours or a published one) instead of generating."}
    )
    noise_seed: int = field(default=0, metadata={"help": "Seed of the noise split."})
    vocab_file: str | None = field(
        default=None, metadata={"help": "SCAN vocab json; default: built from the training captions."}
    )
    train_split: str = "train"
    val_split: str = "dev"
    test_split: str = "test"
    feature_dtype: str = field(default="float32", metadata={"help": "Arrow storage of region features."})
    test_folds: int = field(
        default=1, metadata={"help": "Also report test metrics averaged over this many folds (MS-COCO: 5 x 1K)."}
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.noise_ratio < 1.0:
            raise ValueError(f"noise_ratio must be in [0, 1), got {self.noise_ratio}")
        if self.noise_kind not in NOISE_KINDS:
            raise ValueError(f"noise_kind must be one of {NOISE_KINDS}, got {self.noise_kind!r}")


@dataclass
class ModelArguments:
    """The two-tower model's size (the papers' defaults: word 300, joint space 1024)."""

    embed_dim: int = field(default=1024, metadata={"help": "Joint embedding dimension."})
    word_dim: int = field(default=300, metadata={"help": "Word embedding dimension."})
    text_layers: int = field(default=1, metadata={"help": "BiGRU layers."})
    image_pooling: str = field(default="mean", metadata={"help": "Pooling over regions: mean or max."})


def _noise_index(args: DataArguments, num_images: int, captions_per_image: int, output_dir: Path) -> np.ndarray:
    """The caption-level pairing of the training set: read from ``noise_file``, or generated and saved."""
    if args.noise_file:
        return load_noise_index(args.noise_file, num_images, captions_per_image)
    if args.noise_kind == "caption":
        index = caption_level_noise(num_images, captions_per_image, args.noise_ratio, args.noise_seed)
    else:
        index = image_level_noise(num_images, args.noise_ratio, args.noise_seed)
    output_dir.mkdir(parents=True, exist_ok=True)
    save_noise_index(output_dir / "noise_index.npy", index)
    return caption_pairing(index, num_images, captions_per_image)


def prepare_data(args: DataArguments, output_dir: str | Path, image_dim: int | None = None):
    """Load the splits, the vocabulary and the noisy training pairs."""
    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        raise DataFormatError(f"Data directory {str(data_dir)!r} does not exist or is not a directory")
    load = dict(feature_dtype=args.feature_dtype, expected_feature_dim=image_dim)
    train = load_precomp_split(data_dir, args.train_split, **load)
    dims = train.images.features["regions"].shape
    load.update(expected_feature_dim=dims[-1], expected_regions=dims[0])
    val = load_precomp_split(data_dir, args.val_split, **load)
    test = load_precomp_split(data_dir, args.test_split, **load)
    vocab = Vocabulary.from_json(args.vocab_file) if args.vocab_file else Vocabulary.build(train.captions)
    pairing = _noise_index(args, train.num_images, train.captions_per_image, Path(output_dir))
    return {
        "train": NoisyPairDataset(train, vocab, pairing),
        "val": RetrievalSplit.from_precomp(val, vocab),
        "test": RetrievalSplit.from_precomp(test, vocab),
        "vocab": vocab,
        "image_dim": dims[-1],
    }


def run_experiment(
    data_args: DataArguments, config: TrainConfig, model_args: ModelArguments | None = None
) -> dict[str, Any]:
    """Train on ``data_args`` with ``config``; evaluate the best checkpoint on the test split."""
    data = prepare_data(data_args, config.output_dir)
    model_config = NCLConfig(
        image_dim=data["image_dim"], vocab_size=len(data["vocab"]), **asdict(model_args or ModelArguments())
    )
    trainer = Trainer(config, model_config, data["train"], data["val"])
    summary = trainer.train()
    best_dir = Path(config.output_dir) / "best"
    model = NCLModel.from_pretrained(str(best_dir)) if best_dir.exists() else trainer.model
    if trainer.accelerator.is_main_process and best_dir.exists():
        data["vocab"].save_json(best_dir / "vocab.json")
    test = evaluate_retrieval(model, data["test"], batch_size=config.eval_batch_size, folds=data_args.test_folds)
    divisions = [h for h in summary["history"] if any(k.startswith("division") for k in h)]
    result = {
        "plugins": config.plugins,
        "noise_ratio": data_args.noise_ratio,
        "true_noise_ratio": float(1.0 - data["train"].clean_mask.mean()),
        "test": test,
        "best_epoch": summary["best_epoch"],
        "best_val_rsum": summary["best_rsum"],
        "division": {k: v for k, v in divisions[-1].items() if k.startswith("division")} if divisions else {},
        "history": summary["history"],
    }
    if trainer.accelerator.is_main_process:
        Path(config.output_dir, "results.json").write_text(json.dumps(result, indent=1, default=float))
    return result

