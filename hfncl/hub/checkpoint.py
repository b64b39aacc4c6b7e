"""Checkpoint directories: saving a trained model with its record and card, checking one, reading its vocabulary.

A published hfncl checkpoint is one directory (or Hub repository) holding
``config.json`` and the safetensors weights of every network (what
``save_pretrained`` writes), ``vocab.json`` (the text tower's vocabulary),
``hfncl_run.json`` (the run record) and ``README.md`` (the model card); a model whose
image tower reads pixels also keeps its image processor in ``image_processor/``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from safetensors import SafetensorError, safe_open
from transformers import AutoModel, PretrainedConfig, PreTrainedModel

from hfncl.data.errors import DataFormatError
from hfncl.data.image_processor import image_processor_from_pretrained
from hfncl.data.vocab import TokenizerVocabulary, Vocabulary
from hfncl.hub.card import CARD_FILE, CONFIG_FILE, read_config, write_model_card
from hfncl.hub.record import RUN_RECORD, CheckpointError, DataDescription, RunRecord, read_run_record, write_run_record
from hfncl.registry import PluginProvenance, load_plugin, plugin_provenance

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
VOCAB_FILE = "vocab.json"
IMAGE_PROCESSOR_SUBFOLDER = "image_processor"
"""Where a checkpoint with a pixel image tower keeps the image processor it was trained with."""


def save_trained_model(
    model: PreTrainedModel, directory: str | Path, record: RunRecord, provenance: PluginProvenance | None = None
) -> Path:
    """Save a trained model with ``save_pretrained``, its run record and its card.

    The package and version of every plugin that trained it (``provenance``, the run's
    :class:`hfncl.plugin_setup.RunPlugins.provenance`; default: read from the installed entry
    points) are written into ``config.json`` first, so that loading the model where a plugin
    is missing names the package to install; the first line of each plugin's docstring and
    the BibTeX of its ``citation`` hook go into the record, for the card.
    """
    directory = Path(directory)
    if provenance is None:
        provenance = plugin_provenance({name: load_plugin(name) for name in model.config.plugins})
    sources = provenance.sources
    model.config.plugin_distributions = {name: source.distribution for name, source in sources.items()}
    model.config.plugin_versions = {name: source.version for name, source in sources.items()}
    model.save_pretrained(str(directory))
    write_run_record(
        directory,
        replace(record, plugin_summaries=provenance.summaries, plugin_citations=provenance.citations),
    )
    write_model_card(directory)
    return directory


def add_test_results(
    checkpoint: str | Path,
    data: DataDescription | None,
    test: dict[str, float],
    model_cards_dir: str | Path | None = None,
) -> list[Path]:
    """Add the data description (``None``: none, e.g. for category labels) and the test metrics to a
    checkpoint's record and regenerate its card.

    Returns the card files written (``README.md`` of the checkpoint, and
    ``model_cards_dir/<name>.md`` when ``model_cards_dir`` is given).
    """
    record = read_run_record(checkpoint)
    record.data, record.test = data, dict(test)
    write_run_record(checkpoint, record)
    return write_model_card(checkpoint, model_cards_dir=model_cards_dir)


def weight_files(checkpoint: str | Path) -> list[Path]:
    """The weight files of a checkpoint: ``model.safetensors``, or the index and the shards it names."""
    checkpoint = Path(checkpoint)
    index = checkpoint / WEIGHTS_INDEX
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
            raise CheckpointError(f"{index} is not a safetensors index with a 'weight_map': {error}") from error
        return [index, *(checkpoint / shard for shard in shards)]
    if (checkpoint / WEIGHTS_FILE).is_file():
        return [checkpoint / WEIGHTS_FILE]
    raise CheckpointError(f"{checkpoint} has no {WEIGHTS_FILE} (nor {WEIGHTS_INDEX}): no weights to load")


def _saved_tensors(files: list[Path]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Tensor name -> (shape, safetensors dtype such as ``F32``), read from the safetensors headers (no weights are
    read)."""
    tensors_of = {}
    for path in files:
        if path.suffix != ".safetensors":
            continue
        if not path.is_file():
            raise CheckpointError(f"{path} does not exist, but the weight index names it")
        try:
            with safe_open(str(path), framework="pt") as tensors:
                for name in tensors.keys():
                    saved = tensors.get_slice(name)
                    tensors_of[name] = (tuple(saved.get_shape()), saved.get_dtype())
        except SafetensorError as error:
            raise CheckpointError(f"{path} is corrupted or truncated: {error}") from error
    return tensors_of


def _dtype_kind(dtype: str) -> str:
    """``float``, ``bool`` or ``integer`` for a safetensors dtype name (``F32``, ``BF16``, ``BOOL``, ``I64`` ...) or a
    torch dtype's name."""
    name = dtype.lower().removeprefix("torch.")
    if name in ("bool",):
        return "bool"
    return "float" if name.startswith(("f", "bf")) or "float" in name else "integer"


def check_weights(
    config: PretrainedConfig,
    files: list[Path],
    checkpoint: str | Path,
    model_class: type | None = None,
    consequence: str = "",
) -> None:
    """Every tensor the architecture of ``config`` needs is saved, with its shape and its dtype's kind (floating
    point, integer or bool), and nothing else: a model loads whole or not at all.

    The architecture is ``model_class`` (default: the model class ``AutoModel`` registers for the config's type),
    built on the meta device (no memory, no initialisation). ``consequence`` ends the message (e.g. "; nothing was
    loaded").

    Raises:
        CheckpointError: in one line naming the first missing, extra, mis-shaped or mistyped tensor and how many
            tensors are wrong.
    """
    with torch.device("meta"):
        model = AutoModel.from_config(config) if model_class is None else model_class(config)
        expected = {name: (tuple(t.shape), str(t.dtype)) for name, t in model.state_dict().items()}
    saved = _saved_tensors(files)
    problems = [f"tensor {name} is missing" for name in sorted(set(expected) - set(saved))]
    problems += [f"tensor {name} is not one of the model's" for name in sorted(set(saved) - set(expected))]
    for name in sorted(set(saved) & set(expected)):
        (shape, dtype), (want_shape, want_dtype) = saved[name], expected[name]
        if shape != want_shape:
            problems.append(f"tensor {name} has shape {list(shape)}, the model's is {list(want_shape)}")
        elif _dtype_kind(dtype) != _dtype_kind(want_dtype):
            problems.append(
                f"tensor {name} is stored as {dtype} ({_dtype_kind(dtype)}), the model's is "
                f"{want_dtype.removeprefix('torch.')} ({_dtype_kind(want_dtype)})"
            )
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CheckpointError(
            f"The weights of {checkpoint} do not fit its config.json: {problems[0]}{more}{consequence}"
        )


def checkpoint_files(checkpoint: str | Path, card: Path | None = None) -> list[Path]:
    """The files that make up a publishable checkpoint, after checking that each can be read.

    Checks that ``config.json`` parses (and is not of a newer checkpoint format), that
    the safetensors headers are intact and hold exactly the tensors the config's
    architecture needs, that ``vocab.json`` matches ``config.vocab_size`` (or, for a
    transformer text tower, that ``tokenizer/`` loads; a category-label model on
    precomputed features has neither), that a model whose image tower reads pixels has an
    ``image_processor/`` that loads, and that the card exists. ``hfncl_run.json`` is included when present.
    ``card``: the card file to publish instead of the checkpoint's ``README.md`` (one generated elsewhere).

    Raises:
        CheckpointError: naming the file that is missing or wrong.
    """
    checkpoint = Path(checkpoint)
    config = read_config(checkpoint)
    weights = weight_files(checkpoint)
    check_weights(config, weights, checkpoint)
    text_files = text_vocabulary_files(checkpoint, config)
    card = card or checkpoint / CARD_FILE
    if not card.is_file():
        raise CheckpointError(f"{card} does not exist: generate the model card with `hfncl card {checkpoint}`")
    files = [checkpoint / CONFIG_FILE, *weights, *text_files, *_image_processor_files(checkpoint, config), card]
    if (checkpoint / RUN_RECORD).is_file():
        files.append(checkpoint / RUN_RECORD)
    return files


def _image_processor_files(checkpoint: Path, config: PretrainedConfig) -> list[Path]:
    """The files of ``image_processor/`` of a pixel image tower, checked to load (none for other towers)."""
    folder = checkpoint / IMAGE_PROCESSOR_SUBFOLDER
    if getattr(config, "image_tower", None) != "transformer":
        return []
    if not folder.is_dir():
        raise CheckpointError(
            f"{folder} does not exist: the model's image tower reads pixels and needs the image processor it was "
            "trained with (hfncl.hub.checkpoint.save_image_processor writes it)"
        )
    try:
        image_processor_from_pretrained(checkpoint, IMAGE_PROCESSOR_SUBFOLDER)
    except OSError as error:
        raise CheckpointError(str(error)) from error
    return sorted(p for p in folder.rglob("*") if p.is_file())


def save_image_processor(processor: Any, directory: str | Path) -> Path:
    """Write the image processor of a pixel image tower into ``directory/image_processor``; returns that folder."""
    target = Path(directory) / IMAGE_PROCESSOR_SUBFOLDER
    processor.save_pretrained(str(target))
    return target


def load_image_processor(name_or_path: str | Path, config: PretrainedConfig) -> Any | None:
    """The image processor of a checkpoint (directory or Hub id) whose image tower reads pixels, else ``None``.

    Read from the checkpoint's ``image_processor/``, never from the tower's source, so it
    loads offline like the model.

    Raises:
        CheckpointError: a pixel model's checkpoint without a loadable ``image_processor/``.
    """
    if getattr(config, "image_tower", None) != "transformer":
        return None
    try:
        return image_processor_from_pretrained(name_or_path, IMAGE_PROCESSOR_SUBFOLDER)
    except OSError as error:
        raise CheckpointError(
            f"{error}. A model whose image tower reads pixels needs the image processor it was trained with in "
            f"{IMAGE_PROCESSOR_SUBFOLDER}/ (hfncl.hub.checkpoint.save_image_processor writes it)"
        ) from error


def text_vocabulary_type(config: PretrainedConfig) -> type[Vocabulary] | type[TokenizerVocabulary] | None:
    """What tokenises captions for a model of ``config``: a :class:`Vocabulary` (GRU text tower),
    a :class:`TokenizerVocabulary` (transformer text tower), or ``None`` for a model without a
    text tower (a category-label model reads precomputed text features)."""
    tower = getattr(config, "text_tower", None)
    if tower is None:
        return None
    return TokenizerVocabulary if tower == "transformer" else Vocabulary


def text_vocabulary_files(checkpoint: str | Path, config: PretrainedConfig) -> list[Path]:
    """The checked files of the text vocabulary a checkpoint of ``config`` needs (none for a category-label model).

    Raises:
        CheckpointError: naming the file that is missing or wrong.
    """
    kind = text_vocabulary_type(config)
    if kind is None:
        return []
    if kind is TokenizerVocabulary:
        return _tokenizer_files(Path(checkpoint))
    return [_checked_vocabulary(Path(checkpoint), config)]


def _tokenizer_files(checkpoint: Path) -> list[Path]:
    """The files of the checkpoint's ``tokenizer/`` folder, after checking that they load."""
    folder = checkpoint / TokenizerVocabulary.SUBFOLDER
    files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    if not files:
        raise CheckpointError(
            f"{folder} holds no tokenizer: a transformer text tower needs the tokenizer it was trained with"
        )
    try:
        TokenizerVocabulary.from_pretrained(folder)
    except OSError as error:
        raise CheckpointError(str(error)) from error
    return files


def _checked_vocabulary(checkpoint: Path, config: PretrainedConfig) -> Path:
    """``vocab.json`` of a GRU text tower, checked to parse and to match ``config.vocab_size``."""
    vocab_path = checkpoint / VOCAB_FILE
    if not vocab_path.is_file():
        raise CheckpointError(f"{vocab_path} does not exist: a published model needs the vocabulary of its text tower")
    try:
        vocab = Vocabulary.from_json(vocab_path)
    except DataFormatError as error:
        raise CheckpointError(str(error)) from error
    if len(vocab) != config.vocab_size:
        raise CheckpointError(
            f"{vocab_path} has {len(vocab)} words but config.json says vocab_size {config.vocab_size}"
        )
    return vocab_path


def save_text_vocabulary(vocab: Vocabulary | TokenizerVocabulary, directory: str | Path) -> None:
    """Write what tokenises captions for the model: ``vocab.json``, or a tokenizer in ``tokenizer/``."""
    if isinstance(vocab, TokenizerVocabulary):
        vocab.save_pretrained(directory)
    else:
        vocab.save_json(Path(directory) / VOCAB_FILE)


def load_text_vocabulary(name_or_path: str | Path, config: PretrainedConfig) -> Vocabulary | TokenizerVocabulary:
    """The caption tokeniser of a checkpoint (directory or Hub id).

    Its tokenizer (``tokenizer/``) for a transformer text tower, else its vocabulary
    (:func:`load_vocabulary`).
    """
    if config.text_tower == "transformer":
        return TokenizerVocabulary.from_pretrained(name_or_path, subfolder=TokenizerVocabulary.SUBFOLDER)
    return load_vocabulary(name_or_path)


def load_vocabulary(
    name_or_path: str | Path,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    token: str | bool | None = None,
) -> Vocabulary:
    """The vocabulary (``vocab.json``) of a checkpoint in a local directory or a Hub repository.

    Hub files are cached like ``from_pretrained``'s, so with ``HF_HUB_OFFLINE=1`` a
    repository downloaded before still loads.

    Raises:
        CheckpointError: a local directory without ``vocab.json``, or a name that is
            neither a directory nor a Hub repository id.
        OSError: the Hub file cannot be fetched (offline, unknown repository, no file).
    """
    path = Path(name_or_path)
    if path.is_dir():
        if not (path / VOCAB_FILE).is_file():
            raise CheckpointError(f"{path / VOCAB_FILE} does not exist: the checkpoint carries no vocabulary")
        return Vocabulary.from_json(path / VOCAB_FILE)
    name = str(name_or_path)
    try:
        downloaded = hf_hub_download(name, VOCAB_FILE, revision=revision, cache_dir=cache_dir, token=token)
    except HFValidationError as error:
        raise CheckpointError(f"{name!r} is neither a local directory nor a Hub repository id") from error
    except LocalEntryNotFoundError as error:
        raise OSError(
            f"Cannot fetch {VOCAB_FILE} of {name!r}: it is not a local directory, the Hub cannot be reached "
            "(HF_HUB_OFFLINE=1 or no network) and the file is not in the local Hub cache."
        ) from error
    return Vocabulary.from_json(downloaded)
