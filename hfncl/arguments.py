"""The arguments of a run, importable without torch, transformers or datasets: the data and model argument
dataclasses of each kind of data (the flags ``hfncl train`` and the recipes parse, with their checks against the
values of :mod:`hfncl.choices`).

:class:`DataArguments` and :class:`ModelArguments` are the pairs task's (:mod:`hfncl.tasks.pairs`),
:class:`LabelDataArguments` and :class:`CategoryModelArguments` the labels task's
(:mod:`hfncl.tasks.labels`); the tasks import them from here, so that the command line checks its
arguments before it loads any framework.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hfncl.choices import (
    AUTO,
    FEATURE_DTYPES,
    LABEL_NOISE_KINDS,
    LAYOUT_CHOICES,
    NOISE_KINDS,
    check_format_name,
    check_layout_name,
)
from hfncl.config import check_field_types
from hfncl.limits import check_sizes


@dataclass
class DataArguments:
    """Where the data is and how its training pairs are corrupted."""

    data_dir: str = field(
        metadata={
            "help": "SCAN precomp directory ({split}_ims.npy, {split}_caps.txt|tsv), or an imagefolder of raw images "
            "({split}/ folders with images and metadata.jsonl) for a model with a pixel image tower."
        }
    )
    data_format: str = field(
        default="auto",
        metadata={
            "help": "precomp, imagefolder, a format an installed package registers (entry-point group "
            "hfncl.data_formats), or auto: the first installed format or imagefolder ({train_split}/metadata.jsonl) "
            "that recognises the data, else precomp."
        },
    )
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "The dataset's name on the model card (a Hub dataset id such as 'nlphuji/flickr30k' is also "
            "listed in the card's datasets); default: the data directory's name, with its parent's when it is "
            "a generic one such as 'data'."
        },
    )
    noise_ratio: float = field(default=0.0, metadata={"help": "Share of training pairs to corrupt."})
    noise_kind: str = field(
        default="caption",
        metadata={
            "help": "caption: re-pair a share of captions (caption level); image: permute a share of images "
            "(image level)."
        },
    )
    noise_file: str | None = field(
        default=None,
        metadata={
            "help": "Read this noise index (.npy, ours or a published one) instead of generating; it decides the "
            "noise: results.json records its measured ratio, and a --noise-ratio that disagrees is refused."
        },
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
        check_field_types(self)
        if not 0.0 <= self.noise_ratio < 1.0:
            raise ValueError(f"noise_ratio must be in [0, 1), got {self.noise_ratio}")
        if self.noise_kind not in NOISE_KINDS:
            raise ValueError(f"noise_kind must be one of {NOISE_KINDS}, got {self.noise_kind!r}")
        check_format_name(self.data_format)
        if self.feature_dtype not in FEATURE_DTYPES:
            raise ValueError(f"feature_dtype must be one of {FEATURE_DTYPES}, got {self.feature_dtype!r}")
        if self.test_folds < 1:
            raise ValueError(f"test_folds must be >= 1, got {self.test_folds}")


@dataclass
class ModelArguments:
    """The model's architecture (:class:`hfncl.models.NCLConfig` fields).

    A field left at ``None`` takes the value the active plugins ask for in
    ``model_defaults`` (e.g. two image views), else NCLConfig's default (the papers'
    encoder: 300-d words, a 1024-d joint space, one GRU layer, mean pooling).
    """

    embed_dim: int | None = field(default=None, metadata={"help": "Joint embedding dimension (default 1024)."})
    word_dim: int | None = field(default=None, metadata={"help": "Word embedding dimension (default 300)."})
    text_layers: int | None = field(default=None, metadata={"help": "BiGRU layers (default 1)."})
    image_pooling: str | None = field(
        default=None, metadata={"help": "Pooling over regions: mean or max (a vision tower also takes pooler)."}
    )
    image_views: int | None = field(default=None, metadata={"help": "Image views W (default 1)."})
    text_pooling: str | None = field(default=None, metadata={"help": "Pooling over words: mean or max."})
    similarity: str | None = field(
        default=None,
        metadata={
            "help": "Similarity head: cosine (default), sgr or saf (SGRAF), scan (SCAN t2i attention), or a head an "
            "installed package registers (entry-point group hfncl.similarity_heads)."
        },
    )
    sim_dim: int | None = field(
        default=None, metadata={"help": "SGR / SAF similarity representation size (default 256)."}
    )
    reasoning_steps: int | None = field(default=None, metadata={"help": "SGR graph-reasoning steps (default 3)."})
    attention_lambda: float | None = field(
        default=None, metadata={"help": "SGR / SAF / SCAN text-to-region attention temperature lambda (default 9)."}
    )
    scan_pooling: str | None = field(
        default=None, metadata={"help": "SCAN pooling of the word relevances: lse (default) or avg."}
    )
    scan_lse_lambda: float | None = field(default=None, metadata={"help": "SCAN LogSumExp lambda_2 (default 6)."})
    attention_negative_slope: float | None = field(
        default=None,
        metadata={"help": "SGR / SAF attention LeakyReLU slope (default 0.1, the official code's; 0: ReLU)."},
    )
    pooling_batch_norm: bool | None = field(
        default=None, metadata={"help": "SGR / SAF batch norms in the image self-attention (default true)."}
    )
    pooling_dropout: float | None = field(
        default=None, metadata={"help": "SGR / SAF dropout in the self-attention poolings (default 0.4)."}
    )
    word_dropout: float | None = field(
        default=None, metadata={"help": "Dropout on the GRU's word embeddings (default 0.4 with SGR / SAF, else 0)."}
    )
    text_tower: str | None = field(
        default=None,
        metadata={"help": "gru (a biGRU, when unset), or a Hub id / directory of a BERT-family or CLIP text encoder."},
    )
    image_tower: str | None = field(
        default=None,
        metadata={
            "help": "regions (default: precomputed features), or a Hub id / directory of a CLIP vision encoder and "
            "its image processor, which reads the raw images of an imagefolder."
        },
    )
    lora_rank: int | None = field(default=None, metadata={"help": "LoRA rank on the transformer towers (0: none)."})
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA alpha (default 16)."})
    lora_dropout: float | None = field(default=None, metadata={"help": "LoRA dropout (default 0)."})
    lora_target_modules: list[str] | None = field(
        default=None, metadata={"help": "Layers LoRA adapts (default: the tower's attention query and value)."}
    )
    lora_towers: list[str] | None = field(
        default=None, metadata={"help": "Transformer towers that get LoRA adapters: text, image (default: every one)."}
    )
    pretrained_heads: bool | None = field(
        default=None,
        metadata={
            "help": "Start a CLIP tower's head from CLIP's projection (default true); false draws each network's "
            "head fresh, so co-trained networks start apart."
        },
    )

    def __post_init__(self) -> None:
        check_field_types(self)
        check_sizes(asdict(self), "ModelArguments")

    def explicit(self) -> dict[str, Any]:
        """The fields given a value; ``text_tower`` NAME becomes ``text_tower="transformer"``, ``text_tower_name=NAME``
        (and ``image_tower`` NAME ``image_tower="transformer"``, ``image_tower_name=NAME``)."""
        values = {k: v for k, v in asdict(self).items() if v is not None}
        for part, plain in (("text", "gru"), ("image", "regions")):
            tower = values.pop(f"{part}_tower", None)
            if tower is not None:
                values[f"{part}_tower"] = plain if tower == plain else "transformer"
                if tower != plain:
                    values[f"{part}_tower_name"] = tower
        return values


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
    split_fractions: list[float] = field(
        default_factory=lambda: [0.8, 0.1, 0.1],
        metadata={
            "help": "Unsplit set: train / validation / test fractions per class, in file order (default 0.8 0.1 0.1: "
            "Pascal-Sentence's 40 / 5 / 5 of DSCMR; 0.7 0.1 0.2 tests 10 per class, 200 samples)."
        },
    )
    layout: str | None = field(
        default=None,
        metadata={
            "help": "An installed layout (entry-point group hfncl.label_layouts; default: the one that recognises "
            "data_path).",
            "choices": LAYOUT_CHOICES,
        },
    )
    label_base: int = field(default=0, metadata={"help": "Index of the first class in the files (1 for Wikipedia)."})
    num_classes: int | None = field(default=None, metadata={"help": "Number of classes (default: from the labels)."})
    valid_size: int | None = field(
        default=None,
        metadata={
            "help": "Without a validation split in the files: the first N test samples validate (unset: half); 0: "
            "no validation split at all, the whole test split tests the last epoch's model."
        },
    )
    noise_ratio: float = field(default=0.0, metadata={"help": "Share of training labels corrupted per modality."})
    noise_kind: str = field(default="symmetric", metadata={"help": "symmetric or asymmetric (next class)."})
    noise_seed: int = field(default=0, metadata={"help": "Seed of the label noise."})
    noise_file: str | None = field(
        default=None, metadata={"help": "Read noisy labels (ours, or MRL's list-of-lists JSON) instead of generating."}
    )
    feature_dtype: str = field(default="float32", metadata={"help": "Arrow storage of the features."})

    def __post_init__(self) -> None:
        check_field_types(self)
        arrays = (self.image_features, self.text_features, self.labels)
        if self.data_path is not None and any(a is not None for a in arrays):
            raise ValueError(
                "give either data_path, or all of image_features, text_features and labels (one unsplit set)"
            )
        if len(self.split_fractions) != 3:
            raise ValueError(
                f"split_fractions must be three fractions (train, validation, test), got {self.split_fractions}"
            )
        if self.valid_size is not None and self.valid_size < 0:
            raise ValueError(f"valid_size must be >= 0 (0: no validation split), got {self.valid_size}")
        if not 0.0 <= self.noise_ratio < 1.0:
            raise ValueError(f"noise_ratio must be in [0, 1), got {self.noise_ratio}")
        if self.noise_kind not in LABEL_NOISE_KINDS:
            raise ValueError(f"noise_kind must be one of {LABEL_NOISE_KINDS}, got {self.noise_kind!r}")
        if self.layout is not None:
            check_layout_name(self.layout)

    def source(self) -> str:
        """The file or directory the features are read from (the image features of an unsplit set)."""
        return self.data_path or self.image_features or ""


@dataclass
class CategoryModelArguments:
    """The model's architecture (:class:`hfncl.models.CategoryConfig` fields)."""

    embed_dim: int = field(default=512, metadata={"help": "Common space dimension (512 in the paper)."})
    hidden_dim: int = field(default=4096, metadata={"help": "Hidden width of each modality's 3-layer MLP."})

    def __post_init__(self) -> None:
        check_field_types(self)
        check_sizes(asdict(self), "CategoryModelArguments")


ARGUMENTS_OF_KIND: dict[str, tuple[type[Any], type[Any]]] = {
    "pairs": (DataArguments, ModelArguments),
    "labels": (LabelDataArguments, CategoryModelArguments),
}
"""The data and model arguments of each kind of data (its task's ``data_arguments`` and ``model_arguments``,
:mod:`hfncl.tasks`), for a recipe's ``--help`` that imports no task."""


__all__ = [
    "ARGUMENTS_OF_KIND",
    "AUTO",
    "CategoryModelArguments",
    "DataArguments",
    "LabelDataArguments",
    "ModelArguments",
]
