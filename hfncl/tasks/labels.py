"""The labels task: category-labelled features with noisy labels, tested by mAP.

Read the features (:func:`hfncl.data.load_labelled_dataset` or, for one unsplit set of
``.npy`` files, :func:`hfncl.data.load_labelled_arrays`), corrupt the training labels of
every modality (:func:`hfncl.data.inject_label_noise`, saved as ``OUTPUT_DIR/label_noise.json``)
or read noisy labels from a file, train a :class:`hfncl.models.CategoryModel`, and report
I2T / T2I mAP of the best checkpoint (by validation mean mAP; without a validation split, the
last epoch's model) on the test split. Its data and model arguments (:class:`LabelDataArguments`,
:class:`CategoryModelArguments`) are defined in :mod:`hfncl.arguments` and importable from here.
:class:`CategoryTask` holds all of it, with how the trainer batches, encodes and validates the samples;
its instance :data:`LABELS` is the :class:`hfncl.tasks.ExperimentTask` that
:func:`hfncl.experiment.run_experiment` runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from transformers import PretrainedConfig

from hfncl.arguments import CategoryModelArguments, LabelDataArguments
from hfncl.data import (
    LabelledDataset,
    inject_label_noise,
    load_label_noise,
    load_labelled_arrays,
    load_labelled_dataset,
)
from hfncl.data.label_noise import LabelNoise
from hfncl.data.labelled import MODALITIES, LabelledSplit
from hfncl.data.noisy_labels import NoisyLabelledDataset, collate_labelled
from hfncl.data.synthetic import SyntheticConfig
from hfncl.data.synthetic_labels import LabelledSyntheticConfig, generate_labelled
from hfncl.engine.progress import progress_bar
from hfncl.evaluation.map import cross_modal_map
from hfncl.hub import DataDescription
from hfncl.hub.card import CardTexts, plugin_names, register_card_texts
from hfncl.models import CategoryConfig, CategoryModel, CategoryNetwork
from hfncl.plugin_setup import RunPlugins
from hfncl.types import Batch, CategoryOutputs

NOISE_FILE = "label_noise.json"


def load_labelled(args: LabelDataArguments) -> LabelledDataset:
    """The train / valid / test splits the arguments name."""
    options: dict[str, Any] = dict(
        label_base=args.label_base, num_classes=args.num_classes, feature_dtype=args.feature_dtype
    )
    if args.data_path is not None:
        return load_labelled_dataset(args.data_path, layout=args.layout, valid_size=args.valid_size, **options)
    if args.image_features is None or args.text_features is None or args.labels is None:
        raise ValueError("give either data_path, or all of image_features, text_features and labels (one unsplit set)")
    fractions = (args.split_fractions[0], args.split_fractions[1], args.split_fractions[2])
    arrays = (args.image_features, args.text_features, args.labels)
    return load_labelled_arrays(*arrays, split_fractions=fractions, **options)


def prepare_labelled_data(args: LabelDataArguments, output_dir: str | Path) -> LabelData:
    """The splits, and the training set with its noisy labels (generated and saved, or read)."""
    dataset = load_labelled(args)
    clean = {m: dataset.train.labels(m) for m in MODALITIES}
    if args.noise_file:
        noise = load_label_noise(args.noise_file, clean, dataset.num_classes)
    else:
        noise = inject_label_noise(
            clean, dataset.num_classes, args.noise_ratio, kind=args.noise_kind, seed=args.noise_seed
        )
        noise.save(Path(output_dir) / NOISE_FILE)
    return LabelData(
        dataset=dataset,
        train=NoisyLabelledDataset(dataset.train, noise),
        val=dataset.valid,
        test=dataset.test,
        noise=noise,
        noise_rate=None if args.noise_file else args.noise_ratio,
    )


@dataclass(frozen=True)
class LabelData:
    """What a labels run trains, validates and tests on (:func:`prepare_labelled_data`).

    Attributes:
        dataset: the splits as read, with clean labels.
        train: the training samples with their noisy labels.
        val, test: the validation split (``None``: no validation, the last epoch's model is tested) and the
            test split.
        noise: the label noise of the training split.
        noise_rate: the rate the labels were corrupted with when the run generated the noise;
            ``None`` for noisy labels read from a file (their rate is not known to the methods).
    """

    dataset: LabelledDataset
    train: NoisyLabelledDataset
    val: LabelledSplit | None
    test: LabelledSplit
    noise: LabelNoise
    noise_rate: float | None


DEMO_MODEL = CategoryModelArguments(embed_dim=64, hidden_dim=256)
"""The model of ``hfncl demo`` for label-noise methods."""

_USAGE = """import hfncl  # registers the model type with the transformers Auto classes
from transformers import AutoModel

model = AutoModel.from_pretrained("{model_id}")
image_embeds, text_embeds = model.encode_image(image_features), model.encode_text(text_features)"""


class CategoryTask:
    """Category-labelled samples with noisy labels: :class:`CategoryModel`, :class:`CategoryOutputs`, selected and
    tested by mAP; the trainer's task (:class:`hfncl.engine.tasks.Task`) and the rest of a whole run.

    ``noise_rate`` is the rate the training labels were corrupted with when the run knows it (it generated the
    noise, :meth:`for_run`): the label-noise paper assumes it known (Sec. 3.2), and a method that does reads it
    as ``trainer.noise_rate``. ``None`` when it is not known (e.g. noisy labels read from a file).
    """

    kind = "labels"
    best_metric = "mean_map"
    data_arguments = LabelDataArguments
    model_arguments = CategoryModelArguments
    metric_columns: tuple[tuple[str, str, int], ...] = (
        ("I2T mAP", "i2t_map", 3),
        ("T2I mAP", "t2i_map", 3),
        ("mean mAP", "mean_map", 3),
    )
    demo_model = DEMO_MODEL
    demo_training: dict[str, Any] = dict(batch_size=100, learning_rate=1e-4, lr_decay_epochs=[])
    """The label-noise paper's optimiser: Adam 1e-4, batch 100, no decay."""

    def __init__(self, noise_rate: float | None = None) -> None:
        if noise_rate is not None and not 0.0 <= noise_rate < 1.0:
            raise ValueError(f"CategoryTask.noise_rate must be in [0, 1) or None, got {noise_rate}")
        self.noise_rate = noise_rate

    def prepare(
        self, args: LabelDataArguments, model_args: CategoryModelArguments, plugins: RunPlugins, output_dir: str | Path
    ) -> LabelData:
        """The splits and the noisy training labels (:func:`prepare_labelled_data`)."""
        return prepare_labelled_data(args, output_dir)

    def unread_files(self, args: LabelDataArguments) -> Callable[[Path], bool] | None:
        """``None``: every file of the data paths is the run's (its splits are the files it names)."""
        return None

    def model_config(self, data: LabelData, model_args: CategoryModelArguments, plugins: RunPlugins) -> CategoryConfig:
        """``model_args`` with the features' sizes and the number of classes of the data."""
        return CategoryConfig(
            image_dim=data.dataset.train.feature_dim("image"),
            text_dim=data.dataset.train.feature_dim("text"),
            num_classes=data.dataset.num_classes,
            **asdict(model_args),
        )

    def model_settings(self, model_args: CategoryModelArguments, plugins: RunPlugins) -> dict[str, Any]:
        """The model fields a run would use besides those the data decide."""
        return asdict(model_args)

    def for_run(self, args: LabelDataArguments, data: LabelData) -> CategoryTask:
        """This task told the noise rate when the run generated the noise, for its trainer."""
        return CategoryTask(data.noise_rate)

    def build_model(self, model_config: CategoryConfig) -> CategoryModel:
        if not isinstance(model_config, CategoryConfig):
            raise TypeError(f"label-noise training needs a CategoryConfig, got {type(model_config).__name__}")
        return CategoryModel(model_config)

    def pretrained_text_parameters(self, model: CategoryModel) -> list[torch.nn.Parameter]:
        """None: a category model maps precomputed features with MLPs."""
        return []

    def collate(self, items: list[dict[str, Any]]) -> Batch:
        return collate_labelled(items)

    def encode(self, module: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, ...]:
        return tuple(module(batch["image"], batch["text"]))

    def outputs(
        self, network: torch.nn.Module, gathered: tuple[torch.Tensor, ...], index: torch.Tensor
    ) -> CategoryOutputs:
        image_embeds, text_embeds = gathered
        return CategoryOutputs(image_embeds, text_embeds, cast(CategoryNetwork, network).normalized_prototypes(), index)

    @torch.no_grad()
    def evaluate(
        self,
        model: CategoryModel,
        split: LabelledSplit,
        *,
        batch_size: int,
        device: torch.device | str,
        hook: Any,
        progress: bool = False,
    ) -> dict[str, float]:
        """I2T and T2I mAP over the full cosine ranking of ``split`` (its labels), and their mean.

        With several networks the ranking is by their mean cosine similarity
        (:meth:`CategoryModel.retrieval_embeddings`). ``progress`` shows a bar over the batches.
        """
        was_training = model.training
        model.eval()
        try:
            embeds = {}
            for modality in MODALITIES:
                features = torch.from_numpy(split.features(modality))
                starts = progress_bar(range(0, features.size(0), batch_size), f"evaluation: {modality}", progress)
                embeds[modality] = torch.cat(
                    [
                        model.retrieval_embeddings(modality, features[start : start + batch_size].to(device)).cpu()
                        for start in starts
                    ]
                )
        finally:
            model.train(was_training)
        return cross_modal_map(embeds["image"], split.labels("image"), embeds["text"], split.labels("text"))

    def clean_masks(self, train_data: Any) -> dict[str, np.ndarray]:
        masks = train_data.clean_masks
        return {m: np.asarray(masks[m], dtype=bool) for m in MODALITIES}

    def model_report(self, model_config: PretrainedConfig, model: torch.nn.Module) -> list[str]:
        """Nothing to report before training."""
        return []

    def save_companions(self, data: LabelData, directory: Path) -> None:
        """Nothing: a category model reads features, without a vocabulary or an image processor."""

    def test(
        self,
        args: LabelDataArguments,
        data: LabelData,
        model: CategoryModel,
        *,
        batch_size: int,
        device: torch.device | str,
        hook: Any,
        progress: bool,
    ) -> dict[str, float]:
        """Test I2T and T2I mAP over the full cosine ranking, and their mean (:meth:`evaluate`)."""
        return self.evaluate(model, data.test, batch_size=batch_size, device=device, hook=hook, progress=progress)

    def results_header(self, args: LabelDataArguments, data: LabelData, num_processes: int) -> dict[str, Any]:
        """The first fields of ``results.json``: the dataset, the noise asked for and measured per modality."""
        return {
            "dataset": Path(args.source()).name,
            "noise_kind": data.noise.kind,
            "noise_ratio": args.noise_ratio if args.noise_file is None else None,
            "true_noise_ratio": {m: data.noise.realised_ratio(m) for m in MODALITIES},
        }

    def description(self, args: LabelDataArguments, data: LabelData) -> DataDescription | None:
        """None: :class:`hfncl.hub.DataDescription` describes image-caption pairs, so the card's data section
        stays empty."""
        return None

    def card_texts(self, config: PretrainedConfig, model_id: str) -> CardTexts:
        """What a card says about a model trained on samples with noisy category labels."""
        return CardTexts(
            summary="A cross-modal retrieval model trained with hfncl on samples with noisy category labels "
            f"by the plugin(s) {plugin_names(config)}.",
            architecture="A network per modality mapping precomputed features into a common space, with "
            f"shared class prototypes, repeated in {config.num_networks} independently initialised network(s).",
            selection_metric="mean mAP",
            evaluation="Mean average precision over the full ranking of the test set with cosine similarity "
            "(I2T: images query texts; T2I: texts query images; a retrieved item is relevant when it "
            "shares the query's category), and the mean of the two.",
            usage=_USAGE.format(model_id=model_id),
        )

    def demo_data(self, directory: Path, size: SyntheticConfig, seed: int) -> Path:
        """The demo's generated label-noise benchmark (10 classes, 400 training samples; ``size`` is for
        pairs), in ``directory/labelled_data``."""
        return generate_labelled(directory / "labelled_data", LabelledSyntheticConfig(seed=seed))

    def demo_arguments(self, data_path: Path, noise_ratio: float, seed: int) -> LabelDataArguments:
        """The demo's data arguments: its generated features, with symmetric noise of ``noise_ratio``."""
        return LabelDataArguments(data_path=str(data_path), noise_ratio=noise_ratio, noise_seed=seed)


LABELS = CategoryTask()
register_card_texts(CategoryConfig.model_type, LABELS.card_texts)
