"""The arguments of a run, importable without torch, transformers or datasets: the data and model argument
dataclasses of each kind of data (the flags ``hfncl train`` and the recipes parse, with their checks against the
values of :mod:`hfncl.choices`).

:class:`DataArguments` and :class:`ModelArguments` are the pairs task's (:mod:`hfncl.tasks.pairs`),
:class:`LabelDataArguments` and :class:`CategoryModelArguments` the labels task's
(:mod:`hfncl.tasks.labels`); the tasks import them from here, so that the command line checks its
arguments before it loads any framework.
"""

from __future__ import annotations

from dataclasses import Field, asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from hfncl.choices import (
    AUTO,
    FEATURE_DTYPES,
    LABEL_NOISE_KINDS,
    LAYOUT_CHOICES,
    NOISE_KINDS,
    check_format_name,
    check_layout_name,
)
from hfncl.config import HeadOptionValues, check_field_types
from hfncl.model_settings import check_sizes, unset_arguments
from hfncl.registry import installed_towers


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
            "hfncl.data_formats), or auto: the one installed format that recognises the data (imagefolder: "
            "{train_split}/metadata.jsonl), else precomp."
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


class ModelArgumentBase:
    """What the model arguments do beside their fields: check them, and give the fields a run sets."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    """Those of the dataclass made from this class (:func:`~hfncl.model_settings.unset_arguments`)."""
    head_options: HeadOptionValues | None

    def __post_init__(self) -> None:
        check_field_types(self)
        if self.head_options is not None:  # a mapping from a recipe or a --config file
            self.head_options = HeadOptionValues(self.head_options)
        check_sizes(asdict(self), type(self).__name__)

    def explicit(self) -> dict[str, Any]:
        """The fields given a value; a ``text_tower`` NAME that is no installed tower (``hfncl.text_towers``), or is
        ``transformer``, becomes ``text_tower="transformer"``, ``text_tower_name=NAME`` (and ``image_tower`` NAME
        alike)."""
        values = {k: v for k, v in asdict(self).items() if v is not None}
        if "head_options" in values:
            values["head_options"] = dict(values["head_options"])
        for part in ("text", "image"):
            tower = values.pop(f"{part}_tower", None)
            if tower is not None and tower != "transformer" and tower in installed_towers(part):
                values[f"{part}_tower"] = tower
            elif tower is not None:
                values[f"{part}_tower"], values[f"{part}_tower_name"] = "transformer", tower
        return values


MODEL_ARGUMENTS_DOC = """The model's architecture: the flags of :class:`hfncl.model_settings.ModelSettings` (the
:class:`hfncl.models.NCLConfig` settings), each ``None`` when not given.

A field left at ``None`` takes the value the active plugins ask for in ``model_defaults`` (e.g. two image views),
else the setting's default (the papers' encoder: 300-d words, a 1024-d joint space, one GRU layer, mean pooling).
"""

if TYPE_CHECKING:

    class ModelArguments(ModelArgumentBase):
        """Made from :class:`~hfncl.model_settings.ModelSettings` (:func:`~hfncl.model_settings.unset_arguments`):
        a field per flag, typed ``X | None``."""

        def __init__(self, **settings: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

else:
    ModelArguments = unset_arguments(
        "ModelArguments", ModelArgumentBase, MODEL_ARGUMENTS_DOC, flag_types={"head_options": HeadOptionValues}
    )


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
