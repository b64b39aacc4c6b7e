"""The pairs task: image-caption pairs with noisy correspondence, from SCAN precomp features or an imagefolder.

Its data arguments (:class:`DataArguments`) and model arguments (:class:`ModelArguments`, the
fields of :class:`hfncl.models.NCLConfig`), defined in :mod:`hfncl.arguments` (which imports no
framework) and importable from here; the data a run trains and is tested on
(:mod:`hfncl.tasks.pair_data`), how the trainer batches, encodes and validates pairs,
test recall (R@K, rSum) and the text of its model cards: all in :class:`PairTask`, whose instance
:data:`PAIRS` is the :class:`hfncl.tasks.ExperimentTask` that :func:`hfncl.experiment.run_experiment` runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from transformers import PretrainedConfig

from hfncl.arguments import DataArguments, ModelArguments
from hfncl.data import collate_pairs
from hfncl.data.formats import unread_split_files
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.engine.encoding import RetrievalSplit, evaluate_retrieval
from hfncl.evaluation import check_split_size
from hfncl.hub import DataDescription, save_text_vocabulary
from hfncl.hub.card import CardTexts, plugin_names, register_card_texts
from hfncl.hub.checkpoint import save_image_processor
from hfncl.model_settings import setting_defaults
from hfncl.models import MatchingNetwork, NCLConfig, NCLModel
from hfncl.models.configuration import word_dropout_default
from hfncl.models.heads import resolve_head_options
from hfncl.models.provenance import CHECKPOINT_FORMAT
from hfncl.models.towers import parameter_counts
from hfncl.plugin_setup import RunPlugins, plugin_model_defaults
from hfncl.plugins import plugin_answers
from hfncl.tasks.pair_data import PairData, describe_data, noise_protocol, prepare_data
from hfncl.types import Batch, PairOutputs


def model_fields(plugins: RunPlugins | list[str], model_args: ModelArguments | None) -> dict[str, Any]:
    """NCLConfig fields of a run: the plugins' ``model_defaults`` under the explicit ``model_args`` (``plugins``: a
    run's plugins as set up, or the names of plugins to load for this answer)."""
    if isinstance(plugins, RunPlugins):
        values = plugin_model_defaults(plugins.hook)
    else:
        values = {}
        for answer in reversed(plugin_answers(plugins, "model_defaults")):
            values.update(answer or {})
    values.update((model_args or ModelArguments()).explicit())
    return values


DEMO_MODEL = ModelArguments(embed_dim=256, word_dim=64)
"""The model of ``hfncl demo`` (a narrower joint space and word embedding than the papers')."""

_USAGE = """import hfncl  # registers the model type with the transformers Auto classes
from hfncl.hub import load_text_vocabulary
from transformers import AutoModel

model = AutoModel.from_pretrained("{model_id}")
vocab = load_text_vocabulary("{model_id}", model.config)  # the SCAN vocabulary or the text tower's tokenizer"""


class PairTask:
    """Image-caption pairs with noisy correspondence: :class:`NCLModel`, :class:`PairOutputs`, selected and tested
    by recall (rSum); the trainer's task (:class:`hfncl.engine.tasks.Task`) and the rest of a whole run.

    ``noise_rate`` is the share of training pairs the run corrupted: the configured ratio, or the share a noise
    file re-pairs (:meth:`for_run`). Small-loss selection methods keep ``1 - noise_rate`` of the pairs and read it
    as ``trainer.noise_rate``. ``None`` when the run injected no noise: the data's own pairs, clean or with real
    noise of unknown rate (CC152K).
    """

    kind = "pairs"
    best_metric = "rsum"
    data_arguments = DataArguments
    model_arguments = ModelArguments
    metric_columns: tuple[tuple[str, str, int], ...] = (
        ("i2t R@1", "i2t_r1", 1),
        ("R@5", "i2t_r5", 1),
        ("R@10", "i2t_r10", 1),
        ("t2i R@1", "t2i_r1", 1),
        ("R@5", "t2i_r5", 1),
        ("R@10", "t2i_r10", 1),
        ("rSum", "rsum", 1),
    )
    demo_model = DEMO_MODEL
    demo_training: dict[str, Any] = {}

    def __init__(self, noise_rate: float | None = None) -> None:
        if noise_rate is not None and not 0.0 <= noise_rate < 1.0:
            raise ValueError(f"PairTask.noise_rate must be in [0, 1) or None, got {noise_rate}")
        self.noise_rate = noise_rate

    def prepare(
        self, args: DataArguments, model_args: ModelArguments, plugins: RunPlugins, output_dir: str | Path
    ) -> PairData:
        """The data, read as the model's towers need them: tokenised by a transformer text tower, pixels for a
        vision tower (:func:`prepare_data`).

        Raises:
            ValueError: the validation or test split is too small to score, or ``test_folds`` do not divide the
                test split (:func:`hfncl.evaluation.check_split_size`): refused before training, not after it.
        """
        towers = model_fields(plugins, model_args)
        tokenizer = towers.get("text_tower_name") if towers.get("text_tower") == "transformer" else None
        pixels = towers.get("image_tower_name") if towers.get("image_tower") == "transformer" else None
        data = prepare_data(args, output_dir, tokenizer=tokenizer, image_processor=pixels)
        check_split_size(data.val.num_images, f"validation split {args.val_split!r}")
        check_split_size(data.test.num_images, f"test split {args.test_split!r}", args.test_folds, "test_folds")
        return data

    def unread_files(self, args: DataArguments) -> Callable[[Path], bool] | None:
        """Whether a file of the data directory holds a split other than the run's training, validation and test
        splits (in the run's data format), so that the run's fingerprint leaves it out; ``None``: every file."""
        data_dir = Path(args.data_dir).resolve()
        if not data_dir.is_dir():
            return None
        return unread_split_files(args.data_format, data_dir, (args.train_split, args.val_split, args.test_split))

    def model_config(self, data: PairData, model_args: ModelArguments, plugins: RunPlugins) -> NCLConfig:
        """The plugins' ``model_defaults`` under the explicit ``model_args``, fitted to the data's features (their
        size and regions per image) and vocabulary."""
        image: dict[str, Any] = {} if data.image_dim is None else {"image_dim": data.image_dim}
        if data.image_regions is not None:
            image["image_regions"] = data.image_regions
        return NCLConfig(**image, vocab_size=len(data.vocab), **model_fields(plugins, model_args))

    def model_settings(self, model_args: ModelArguments, plugins: RunPlugins) -> dict[str, Any]:
        """Every model field a run would use: the settings' defaults under :meth:`model_config`'s fields, with
        ``word_dropout`` left at None as NCLConfig resolves it for the similarity head and every head option
        (declared defaults under the given ones)."""
        defaults = setting_defaults()
        settings = {spec.name: defaults[spec.name] for spec in fields(ModelArguments)}
        settings |= model_fields(plugins, model_args)
        if settings["word_dropout"] is None:
            settings["word_dropout"] = word_dropout_default(settings["similarity"])
        settings["head_options"] = resolve_head_options(
            settings["similarity"], settings["head_options"], {}, CHECKPOINT_FORMAT
        )
        return settings

    def for_run(self, args: DataArguments, data: PairData) -> PairTask:
        """This task told the noise the run injected (``None`` for the data's own pairs: unknown), for its
        trainer."""
        injected = args.noise_file or args.noise_ratio
        return PairTask(data.noise_ratio if injected else None)

    def build_model(self, model_config: NCLConfig) -> NCLModel:
        return NCLModel(model_config)

    def pretrained_text_parameters(self, model: NCLModel) -> list[torch.nn.Parameter]:
        """The weights ``TrainConfig.text_tower_lr_scale`` and ``freeze_text_tower_epochs`` act on: every network's
        pretrained text encoder (:meth:`NCLModel.pretrained_text_parameters`)."""
        return model.pretrained_text_parameters()

    def collate(self, items: list[dict[str, Any]]) -> Batch:
        return collate_pairs(items)

    def encode(self, module: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, ...]:
        """``(image_embeds, text_embeds)`` of every pair; in eval mode each distinct image is encoded once.

        A statistics pass over the training set (:meth:`hfncl.engine.trainer.Trainer.collect`,
        e.g. a division) reads pairs in dataset order, where an image's k captions sit
        side by side: encoding the image once instead of k times is the same result (an
        encoder in eval mode treats every image on its own) at a fraction of the cost.
        In training mode every row is encoded (dropout differs per row).
        """
        images, captions, lengths = batch["images"], batch["captions"], batch["lengths"]
        distinct = None if module.training else distinct_images(images, batch["image_index"])
        if distinct is None:
            return tuple(module(images, captions, lengths))
        first, slot = distinct
        network = cast(MatchingNetwork, module)
        return network.encode_image(images[first])[slot], network.encode_text(captions, lengths)

    def outputs(self, network: torch.nn.Module, gathered: tuple[torch.Tensor, ...], index: torch.Tensor) -> PairOutputs:
        image_embeds, text_embeds = gathered
        matching = cast(MatchingNetwork, network)
        view_scores = matching.view_scores(image_embeds, text_embeds)
        view_similarity = matching.squash(view_scores)
        return PairOutputs(image_embeds, text_embeds, view_similarity.mean(dim=0), index, view_similarity, view_scores)

    def evaluate(
        self,
        model: NCLModel,
        split: RetrievalSplit,
        *,
        batch_size: int,
        device: torch.device | str,
        hook: Any,
        progress: bool = False,
    ) -> dict[str, float]:
        """R@1/5/10, rSum, medr and meanr, scored as the active plugins rank (:func:`evaluate_retrieval`)."""
        return evaluate_retrieval(model, split, batch_size=batch_size, device=device, hook=hook, progress=progress)

    def clean_masks(self, train_data: Any) -> dict[str, np.ndarray]:
        return {"pairs": np.asarray(train_data.clean_mask, dtype=bool)}

    def model_report(self, model_config: PretrainedConfig, model: torch.nn.Module) -> list[str]:
        """The trainable and total parameters of each transformer tower (none for GRU and region towers)."""
        if "transformer" not in (model_config.text_tower, model_config.image_tower):
            return []
        return [
            f"{part}: {counts['trainable']:,} trainable of {counts['total']:,} parameters"
            for part, counts in parameter_counts(cast(NCLModel, model)).items()
        ]

    def save_companions(self, data: PairData, directory: Path) -> None:
        """Save what loading the checkpoint needs besides its weights: the vocabulary, the image processor."""
        save_text_vocabulary(data.vocab, directory)
        if data.image_processor is not None:
            save_image_processor(data.image_processor, directory)

    def test(
        self,
        args: DataArguments,
        data: PairData,
        model: NCLModel,
        *,
        batch_size: int,
        device: torch.device | str,
        hook: Any,
        progress: bool,
    ) -> dict[str, float]:
        """Test R@1/5/10, rSum, medr and meanr, also averaged over ``test_folds`` folds when above 1.

        Scored on :func:`evaluate_retrieval`'s default device, as pair runs always have: ``device`` is not used.
        """
        return evaluate_retrieval(
            model, data.test, batch_size=batch_size, folds=args.test_folds, hook=hook, progress=progress
        )

    def results_header(self, args: DataArguments, data: PairData, num_processes: int) -> dict[str, Any]:
        """The first fields of ``results.json``: the noise asked for and measured, and the processes."""
        return {
            "noise_ratio": data.noise_ratio,
            "noise_protocol": noise_protocol(args, data),
            "noise_file": args.noise_file,
            "true_noise_ratio": float(1.0 - data.train.clean_mask.mean()),
            "num_processes": num_processes,
        }

    def description(self, args: DataArguments, data: PairData) -> DataDescription:
        """The data and noise section of the model card (:func:`describe_data`)."""
        return describe_data(args, data)

    def card_texts(self, config: PretrainedConfig, model_id: str) -> CardTexts:
        """What a card says about a model trained on noisy image-caption pairs."""
        return CardTexts(
            summary="An image-text retrieval model trained with hfncl on noisy image-caption pairs by the "
            f"plugin(s) {plugin_names(config)}.",
            architecture="A two-tower model: an image tower, a text tower and a similarity head, repeated in "
            f"{config.num_networks} independently initialised network(s); the model's similarity is the mean "
            "over its networks.",
            selection_metric="rSum",
            evaluation="Recall@K in percent (i2t: images query captions; t2i: captions query images), rSum "
            "(the sum of the six recalls), and median / mean rank.",
            usage=_USAGE.format(model_id=model_id),
        )

    def demo_data(self, directory: Path, size: SyntheticConfig, seed: int) -> Path:
        """The demo's generated pairs of ``size`` (a precomp directory ``directory/data``)."""
        return generate_precomp(directory / "data", size)

    def demo_arguments(self, data_path: Path, noise_ratio: float, seed: int) -> DataArguments:
        """The demo's data arguments: its generated pairs, with caption-level noise of ``noise_ratio``."""
        return DataArguments(data_dir=str(data_path), noise_ratio=noise_ratio, noise_seed=seed)


def distinct_images(images: torch.Tensor, image_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(first, slot)`` with ``images[first][slot] == images``: the first row of each distinct image and
    each row's image among them, or ``None`` when every row is its own image.

    Rows are grouped by ``image_index`` and a group is only merged when its rows are
    equal (a plugin may have changed one pair's image input, e.g. by augmentation, and
    kept its index); if any group's rows differ, ``None``.
    """
    distinct, slot = torch.unique(image_index, return_inverse=True)
    rows = image_index.numel()
    if distinct.numel() == rows:
        return None
    positions = torch.arange(rows, device=image_index.device)
    first = torch.full_like(distinct, rows).scatter_reduce(0, slot, positions, reduce="amin")
    if not torch.equal(images[first][slot], images):
        return None
    return first, slot


PAIRS = PairTask()
register_card_texts(NCLConfig.model_type, PAIRS.card_texts)
