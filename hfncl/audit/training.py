"""Train a method on a user's own pairs, as they are, and keep its last verdict on each pair."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import hfncl.plugins as plugin_registry
from hfncl import registry
from hfncl.audit.data import AuditData, AuditError, read_audit_data
from hfncl.audit.finite import FiniteTraining
from hfncl.choices import AUTO
from hfncl.config import LATEST, TrainConfig
from hfncl.data import NoisyPairDataset, TokenizerVocabulary, Vocabulary
from hfncl.demo import shortened_settings
from hfncl.engine.callbacks import TrainerCallback
from hfncl.engine.fingerprint import run_fingerprint
from hfncl.engine.progress import library_progress_bars
from hfncl.engine.trainer import Trainer
from hfncl.hub.checkpoint import save_image_processor
from hfncl.models import NCLConfig, NCLModel
from hfncl.plugin_setup import run_plugins
from hfncl.tasks.pairs import PAIRS, ModelArguments, model_fields

if TYPE_CHECKING:
    from hfncl.retrieval import Retriever
    from hfncl.types import Division

DEFAULT_EPOCHS = 10
"""Epochs of a method that declares neither ``audit_settings`` nor ``demo_settings`` when ``epochs`` is not given."""


@dataclass(frozen=True)
class TrainedMethod:
    """What an audit reads after training: the data, its vocabulary, the model, every network's last division and
    the device the model is on.

    ``divisions`` maps a network's number to its last division (networks without one left out; none for a model
    read from a checkpoint, :func:`load_trained`).
    """

    data: AuditData
    vocab: Vocabulary | TokenizerVocabulary
    model: NCLModel
    divisions: dict[int, Division]
    device: torch.device
    hook: Any = None
    """The hook relay of the run that trained the model (``None``: built from its config when asked)."""

    def retriever(self) -> Retriever:
        """The trained model with its vocabulary, on its device, to encode and rank with."""
        from hfncl.retrieval import Retriever

        return Retriever(self.model, self.vocab, device=self.device, hook=self.hook)


def audit_plugins() -> list[str]:
    """The installed plugins that declare the ``audit_settings`` hook (those that fail to import left out), by name."""
    names = []
    for name in sorted(registry.installed_entry_points()):
        try:
            hooks = plugin_registry.implemented_hooks(plugin_registry.load_plugin(name))
        except plugin_registry.PluginError:
            continue
        if "audit_settings" in hooks:
            names.append(name)
    return names


def default_plugins() -> list[str]:
    """The method an audit trains when none is named: the one installed plugin that declares ``audit_settings``.

    Raises:
        AuditError: no installed plugin declares it, or several do (naming them).
    """
    candidates = audit_plugins()
    if len(candidates) == 1:
        return candidates
    if not candidates:
        raise AuditError(
            "no installed plugin declares audit_settings: name a method that divides the pairs with --plugins "
            "(`hfncl plugins` lists the installed ones)"
        )
    raise AuditError(f"several installed plugins can audit ({', '.join(candidates)}): name one with --plugins")


def method_settings(
    plugins: list[str], epochs: int | None, seed: int, progress: bool, training: dict[str, Any] | None
) -> TrainConfig:
    """The method's own ``audit_settings``, else its ``demo_settings`` (its settings for a small benchmark;
    :data:`DEFAULT_EPOCHS` epochs without either), cut to ``epochs`` (its warmup shortened so that an epoch
    divides), under the ``training`` overrides (:class:`~hfncl.config.TrainConfig` fields). The output directory
    is set when training."""
    declared = plugin_registry.first_answer(plugins, "audit_settings") or plugin_registry.first_answer(
        plugins, "demo_settings"
    )
    settings = dict(declared or {"epochs": DEFAULT_EPOCHS})
    if epochs is not None:
        settings = shortened_settings(settings, epochs)
    values: dict[str, Any] = {"plugins": list(plugins), "seed": seed, "progress": progress, "plot_divisions": False}
    return TrainConfig(**(values | settings | (training or {})))


def audit_settings(
    plugins: list[str], epochs: int | None, seed: int, progress: bool, training: dict[str, Any] | None
) -> TrainConfig:
    """The settings an audit trains its dividing method with (:func:`method_settings`).

    Raises:
        AuditError: the plugins make no division, or the epochs leave none after warmup.
    """
    if not any(registry.implements(registry.load_plugin(name), "divide") for name in plugins):
        raise AuditError(
            f"plugin {' + '.join(plugins)} makes no division (no `divide` hook): an audit needs a method that "
            "tells clean pairs from wrong ones (`hfncl plugins` lists the installed ones)"
        )
    config = method_settings(plugins, epochs, seed, progress, training)
    if config.epochs <= config.warmup_epochs:
        raise AuditError(
            f"{config.epochs} epochs with {config.warmup_epochs} warmup epochs: {' + '.join(plugins)} divides only "
            "after warmup; give more epochs"
        )
    return config


def read_split(
    data_dir: str | Path,
    split: str,
    model_args: ModelArguments,
    plugins: list[str],
    data_format: str = AUTO,
    write_clean: str | None = None,
) -> AuditData:
    """Split ``split`` of ``data_dir`` in ``data_format`` (:func:`~hfncl.audit.data.read_audit_data`), read as the
    model of ``plugins`` and ``model_args`` needs it: region features, or raw images through its pixel tower's image
    processor.

    Raises:
        DataFormatError: a missing directory, split or file, an empty or malformed one (naming the file), or data
            that do not fit the image tower.
        AuditError: ``write_clean`` for a format that cannot write a split.
    """
    fields = model_fields(plugins, model_args)
    tower = fields.get("image_tower_name") if fields.get("image_tower") == "transformer" else None
    return read_audit_data(data_dir, split, data_format, tower, write_clean=write_clean)


def data_fingerprint(data: AuditData) -> dict[str, Any]:
    """What a resumed audit must train on again (beside its settings): the split's format, its captions in order
    (SHA-256) and its images' number and input shape."""
    captions = hashlib.sha256("\n".join(data.split.captions).encode("utf-8")).hexdigest()
    return {
        "audit.format": data.format_name,
        "audit.captions": f"sha256:{captions}",
        "audit.images": [data.split.num_images, *data.split.image_shape],
    }


def train_model(
    data: AuditData,
    config: TrainConfig,
    model_args: ModelArguments,
    callbacks: list[TrainerCallback] | None = None,
    training_dir: Path | None = None,
    resume: bool = False,
    vocab_captions: Sequence[str] | None = None,
) -> tuple[Trainer, Vocabulary | TokenizerVocabulary]:
    """Train ``config``'s method on the pairs of ``data`` as they are (no noise added); return the trainer and the
    vocabulary (a word model's built from ``vocab_captions``, default the pairs' captions). The checkpoints go to
    ``training_dir`` (default: a temporary directory). With ``resume``, training continues from the latest
    checkpoint there when it has one, checked to be of the same settings, model and pairs (:func:`data_fingerprint`);
    without, the directory is emptied first."""
    plugins = run_plugins(config, data_kind=PAIRS.kind)  # the one plugin manager of this training
    fields = model_fields(plugins, model_args)
    tokenizer = fields.get("text_tower_name") if fields.get("text_tower") == "transformer" else None
    words = data.split.captions if vocab_captions is None else vocab_captions
    vocab = TokenizerVocabulary.from_pretrained(tokenizer) if tokenizer else Vocabulary.build(words)
    image: dict[str, Any] = {}
    if not data.data_format.reads_pixels:
        image["image_regions"], image["image_dim"] = data.split.image_shape
    model_config = NCLConfig(**image, vocab_size=len(vocab), **fields)
    with ExitStack() as stack:
        if training_dir is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hfncl-audit-")))
        else:
            directory = training_dir
            if not resume:
                shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True, exist_ok=True)
        run = replace(config, output_dir=str(directory), resume_from_checkpoint=LATEST if resume else None)
        used = PAIRS.model_settings(model_args, plugins)
        fingerprint = run_fingerprint(run, model_args=model_args, model_used=used) | data_fingerprint(data)
        dataset = NoisyPairDataset(data.split, vocab)
        watched = [*(callbacks or []), FiniteTraining()]  # a diverged model gives no verdict
        trainer = Trainer(
            run, model_config, dataset, task=PAIRS, callbacks=watched, fingerprint=fingerprint, plugins=plugins
        )
        trainer.train()
    return trainer, vocab


def train_method(
    data: AuditData,
    config: TrainConfig,
    model_args: ModelArguments,
    training_dir: Path | None = None,
    resume: bool = False,
) -> TrainedMethod:
    """Train ``config``'s method on the pairs of ``data`` (:func:`train_model`, checkpoints in ``training_dir``,
    continued with ``resume``) and keep every network's last division (restored with a resumed checkpoint)."""
    trainer, vocab = train_model(data, config, model_args, training_dir=training_dir, resume=resume)
    divisions = {net: division for net, division in enumerate(trainer.divisions) if division is not None}
    if not divisions:
        raise AuditError(f"{' + '.join(config.plugins)} made no division in {config.epochs} epochs")
    return TrainedMethod(data, vocab, trainer.model, divisions, trainer.accelerator.device, trainer.hook)


def train_scorer(
    data: AuditData,
    config: TrainConfig,
    model_args: ModelArguments,
    training_dir: Path | None = None,
    resume: bool = False,
    vocab_captions: Sequence[str] | None = None,
) -> TrainedMethod:
    """Train ``config``'s method on the pairs of ``data`` (:func:`train_model`) for its model alone: a method without
    a division may score too. No divisions are kept."""
    trainer, vocab = train_model(
        data, config, model_args, training_dir=training_dir, resume=resume, vocab_captions=vocab_captions
    )
    return TrainedMethod(data, vocab, trainer.model, {}, trainer.accelerator.device, trainer.hook)


MODEL_FOLDER = "model"
"""The folder of an audit's output directory that holds the trained model (``audit(..., model=...)`` reads it)."""
UNKNOWN_WORDS = 0.5
"""The share of a split's caption words outside a model's vocabulary above which the model is refused."""


def save_trained(trained: TrainedMethod, directory: Path) -> Path:
    """Save the trained model (safetensors), its vocabulary or tokenizer and a pixel tower's image processor into
    ``directory``, which ``audit(..., model=directory)`` and :meth:`hfncl.retrieval.Retriever.from_pretrained`
    read."""
    with library_progress_bars(True):
        trained.model.save_pretrained(directory)
    if isinstance(trained.vocab, Vocabulary):
        trained.vocab.save_json(directory / "vocab.json")
    else:
        trained.vocab.save_pretrained(directory)
    if trained.data.image_processor is not None:
        save_image_processor(trained.data.image_processor, directory)
    return directory


def load_trained(
    model_dir: str | Path,
    data_dir: str | Path,
    split: str,
    data_format: str = AUTO,
    write_clean: str | None = None,
) -> TrainedMethod:
    """A trained model (a checkpoint directory: ``best/`` of a run, an audit's ``model/``) and split ``split`` of
    ``data_dir`` in ``data_format`` to score with it, without divisions: region features, or raw images through the
    image processor saved with a pixel model. The model is checked against the split before anything is scored.

    Raises:
        AuditError: the model has no vocabulary, or was trained on other data: region features of another size, or
            more than :data:`UNKNOWN_WORDS` of the split's caption words outside its vocabulary; ``write_clean`` for a
            format that cannot write a split.
        OSError, CheckpointError: no checkpoint there. DataFormatError: as :func:`read_split`, or raw images for a
            region model and features for a pixel model.
    """
    from hfncl.retrieval import Retriever

    with library_progress_bars(True):  # a checkpoint read in a second: no bar before an error line
        retriever = Retriever.from_pretrained(model_dir)
    config, vocab = retriever.model.config, retriever.vocab
    if vocab is None:
        raise AuditError(f"the model at {model_dir} has no vocabulary (vocab.json) or tokenizer to read captions with")
    tower = config.image_tower_name if config.image_tower == "transformer" else None
    data = read_audit_data(
        data_dir, split, data_format, tower, write_clean=write_clean, image_processor=retriever.image_processor
    )
    where = f"split {split!r} of {data_dir} ({data.format_name})"
    if not data.data_format.reads_pixels and data.split.image_shape[-1] != config.image_dim:
        raise AuditError(
            f"{where}: region features of {data.split.image_shape[-1]} dims, the model at {model_dir} reads "
            f"{config.image_dim}: a model trained on other data"
        )
    if isinstance(vocab, Vocabulary):
        unknown = _unknown_share(vocab, data.split.captions)
        if unknown > UNKNOWN_WORDS:
            raise AuditError(
                f"{where}: {unknown:.0%} of the caption words are outside the vocabulary of the model at "
                f"{model_dir} (at most {UNKNOWN_WORDS:.0%}): a model trained on other data"
            )
    return TrainedMethod(data, vocab, retriever.model, {}, retriever.device)


def _unknown_share(vocab: Vocabulary, captions: Sequence[str], count: int = 2000) -> float:
    """The share of ``<unk>`` tokens among the words of the first ``count`` ``captions``."""
    ids = [token for caption in islice(captions, count) for token in vocab.encode(caption)[1:-1]]
    return sum(token == vocab.unk_id for token in ids) / max(len(ids), 1)
