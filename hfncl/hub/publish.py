"""Publishing to the Hugging Face Hub: a checkpoint directory, or a model with its companion files.

hfncl's models' ``push_to_hub`` (:class:`hfncl.models.loading.HfnclPreTrainedModel`) calls
:func:`push_model`: this module knows a model only as a transformers ``PreTrainedModel`` and its
config's fields, never its class.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import huggingface_hub
from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi, snapshot_download
from huggingface_hub.errors import HfHubHTTPError
from transformers import PretrainedConfig, PreTrainedModel

from hfncl.data.vocab import TokenizerVocabulary, Vocabulary
from hfncl.hub.card import CARD_FILE, build_model_card, card_name, read_config
from hfncl.hub.checkpoint import (
    IMAGE_PROCESSOR_SUBFOLDER,
    VOCAB_FILE,
    checkpoint_files,
    save_image_processor,
    save_text_vocabulary,
    save_trained_model,
    text_vocabulary_files,
    text_vocabulary_type,
)
from hfncl.hub.record import RUN_RECORD, CheckpointError, RunRecord, read_run_record
from hfncl.hub.source import CheckpointSource
from hfncl.integrity import atomic_write_text

LOGIN_HINT = (
    "check the network, and log in with `hf auth login` or set HF_TOKEN to a token that may write the repository"
)
_NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    HfHubHTTPError,
    ConnectionError,  # huggingface_hub's OfflineModeIsEnabled
    *(base for base in HfHubHTTPError.__mro__ if base.__name__ == "HTTPError"),  # the HTTP client's base error
)
"""What a Hub request raises when the Hub cannot be reached or refuses (connection, timeout, status)."""


class HubUploadError(OSError):
    """A push that did not reach the Hub or that the Hub refused, on one line saying what to do; nothing was
    uploaded and the checkpoint directory is unchanged."""




def push_checkpoint(
    checkpoint: str | Path,
    repo_id: str,
    private: bool | None = None,
    commit_message: str | None = None,
    token: str | bool | None = None,
    keep_card: bool = False,
    license: str | None = None,
) -> CommitInfo:
    """Upload a checkpoint (all its networks, config, vocabulary, record and card) to a Hub model repository.

    The card is regenerated first from the checkpoint's record, naming ``repo_id`` in
    its usage example and metadata, unless ``keep_card`` asks to upload ``README.md`` as
    it is. The files are checked (:func:`hfncl.hub.checkpoint.checkpoint_files`) before
    anything is sent; the repository is created if needed, and the files go up in one
    commit. Only the checkpoint's own files are sent, never other files of the directory.

    Args:
        checkpoint: the checkpoint directory.
        repo_id: ``user/name`` (or ``org/name``) of the model repository.
        private: visibility of a repository created here (an existing one keeps its own).
        commit_message: default ``"Upload <name> with hfncl"``.
        token: Hub token; default: the saved login or ``HF_TOKEN``.
        keep_card: upload the existing ``README.md`` unchanged.
        license: Hub license identifier for the regenerated card's metadata.

    Returns:
        The commit (its ``commit_url`` and ``oid``).

    Raises:
        CheckpointError: a file of the checkpoint is missing or wrong (nothing sent).
        HubUploadError: no token, no network, or the Hub refused; one line, and the checkpoint's ``README.md`` is
            not rewritten (the regenerated card is written there only after the upload succeeded).
    """
    checkpoint = Path(checkpoint)
    if not checkpoint.is_dir():  # the path first: no token or network would make it exist
        raise CheckpointError(
            f"{checkpoint}: no such checkpoint directory" + (" (it is a file)" if checkpoint.exists() else "")
        )
    if not (token or huggingface_hub.get_token()):  # HF_TOKEN or the saved login; before reading anything
        raise HubUploadError(f"Nothing was uploaded to {repo_id}: no Hub token{_offline_note()}; {LOGIN_HINT}")
    with tempfile.TemporaryDirectory(prefix="hfncl-card-") as temporary:
        card = None
        if not keep_card:  # published first; written into the checkpoint only once the Hub has it
            card = Path(temporary) / CARD_FILE
            text = build_model_card(read_config(checkpoint), read_run_record(checkpoint), repo_id, license)
            card.write_text(str(text))
        files = checkpoint_files(checkpoint, card=card)
        api = HfApi(token=token)
        operations = [
            CommitOperationAdd(
                path_in_repo=CARD_FILE if path == card else path.relative_to(checkpoint).as_posix(),
                path_or_fileobj=str(path),
            )
            for path in files
        ]
        try:
            repo = api.create_repo(repo_id, private=private, exist_ok=True)
            commit = api.create_commit(
                repo_id=repo.repo_id,
                operations=operations,
                commit_message=commit_message or f"Upload {card_name(repo_id)} with hfncl",
            )
        except _NETWORK_ERRORS as error:
            reason = " ".join(str(error).split())[:200]
            raise HubUploadError(f"Pushing to {repo_id} failed ({reason}){_offline_note()}: {LOGIN_HINT}") from None
        if card is not None:
            atomic_write_text(checkpoint / CARD_FILE, card.read_text())
    return commit


def _offline_note() -> str:
    """What a failed push adds when ``HF_HUB_OFFLINE`` is set: the Hub is switched off here, not unreachable."""
    return ", and HF_HUB_OFFLINE is set (unset it to reach the Hub)" if huggingface_hub.is_offline_mode() else ""


def push_model(
    model: PreTrainedModel,
    repo_id: str,
    source: CheckpointSource | None = None,
    vocabulary: Vocabulary | TokenizerVocabulary | None = None,
    record: RunRecord | None = None,
    private: bool | None = None,
    commit_message: str | None = None,
    token: str | bool | None = None,
    license: str | None = None,
    image_processor: Any | None = None,
) -> CommitInfo:
    """Publish a model as a complete checkpoint through :func:`push_checkpoint` (``model.push_to_hub`` calls this).

    The model's current weights and config are saved into a temporary directory with its
    text vocabulary and run record, each taken from the argument when given, else copied
    from ``source`` (the checkpoint the model was loaded from; a Hub repository's files
    are fetched at the commit the model was loaded from). A ``record`` given here is
    saved as the trainer saves one (:func:`hfncl.hub.save_trained_model`). Everything is
    checked before anything is written or sent.

    Args:
        model: an hfncl model (:class:`hfncl.models.NCLModel`, :class:`hfncl.models.CategoryModel`, ...).
        repo_id: ``user/name`` (or ``org/name``) of the model repository.
        source: where the model was loaded from (``model.checkpoint_source``), if anywhere.
        vocabulary: the text vocabulary (``None``: from ``source``; a category-label model has none).
        record: the run record (``None``: from ``source``); required, the card is generated from it.
        image_processor: the image processor of a model whose image tower reads pixels
            (``None``: ``image_processor/`` of ``source``); other models take none.
        private, commit_message, token, license: as in :func:`push_checkpoint`.

    Raises:
        CheckpointError: the vocabulary or the record is neither given nor in ``source``
            (the message says how to supply it), a vocabulary does not fit the model's
            text tower, or a file of ``source`` is malformed.
        OSError: the companion files of a Hub ``source`` cannot be fetched.
    """
    config = model.config
    kind = text_vocabulary_type(config)
    _check_vocabulary_argument(vocabulary, kind, type(model).__name__, config)
    needs_vocabulary = kind if vocabulary is None else None  # the kind of vocabulary to take from the source
    needs_record = record is None
    reads_pixels = getattr(config, "image_tower", None) == "transformer"
    if image_processor is not None and not reads_pixels:
        raise CheckpointError(
            f"{type(model).__name__}'s image tower reads precomputed features, so push_to_hub takes no image_processor="
        )
    needs_processor = reads_pixels and image_processor is None
    directory = None
    if source is not None and (needs_vocabulary or needs_record or needs_processor):
        directory = _companion_directory(source, needs_vocabulary, needs_record, needs_processor, token)
    missing = []
    if needs_processor and (directory is None or not (directory / IMAGE_PROCESSOR_SUBFOLDER).is_dir()):
        missing.append(
            f"the image processor ({IMAGE_PROCESSOR_SUBFOLDER}/) of the pixel image tower: pass image_processor=<the "
            "transformers image processor the model was trained with>"
        )
    if needs_vocabulary is not None and not _has_text_vocabulary(directory, needs_vocabulary):
        missing.append(_VOCABULARY_HINTS[needs_vocabulary])
    if needs_record and (directory is None or not (directory / RUN_RECORD).is_file()):
        missing.append(
            f"the run record ({RUN_RECORD}) the model card is generated from: pass record=<the "
            "hfncl.hub.RunRecord of the run that trained the model>"
        )
    if missing:
        raise CheckpointError(_missing_message(type(model).__name__, repo_id, source, missing))
    text_files: list[Path] = []
    if directory is not None:  # every companion the arguments lack is there (else it is missing)
        text_files = text_vocabulary_files(directory, config) if needs_vocabulary else []
        if needs_record:
            read_run_record(directory)  # checked here, so that an error names the file of the source
    with tempfile.TemporaryDirectory(prefix="hfncl-push-") as temporary:
        checkpoint = Path(temporary)
        if record is None:
            model.save_pretrained(str(checkpoint))
        else:
            save_trained_model(model, checkpoint, record)
        if vocabulary is not None:
            save_text_vocabulary(vocabulary, checkpoint)
        if image_processor is not None:
            save_image_processor(image_processor, checkpoint)
        if directory is not None:
            _copy_companions(directory, checkpoint, needs_record, needs_processor, text_files)
        return push_checkpoint(
            checkpoint, repo_id, private=private, commit_message=commit_message, token=token, license=license
        )


_VOCABULARY_HINTS = {
    Vocabulary: f"the text vocabulary ({VOCAB_FILE}): pass vocabulary=<the hfncl.data.Vocabulary the model was "
    "trained with>",
    TokenizerVocabulary: f"the text tokenizer ({TokenizerVocabulary.SUBFOLDER}/): pass vocabulary=<the "
    "hfncl.data.TokenizerVocabulary the model was trained with>",
}


def _check_vocabulary_argument(
    vocabulary: Vocabulary | TokenizerVocabulary | None, kind: type | None, model_name: str, config: PretrainedConfig
) -> None:
    """A ``vocabulary`` argument fits the model's text tower (and a GRU tower's ``vocab_size``)."""
    if vocabulary is None:
        return
    if kind is None:
        raise CheckpointError(
            f"{model_name} is a category-label model trained on precomputed features: it has no text vocabulary, "
            "so push_to_hub takes no vocabulary="
        )
    if not isinstance(vocabulary, kind):
        tower = "transformer" if kind is TokenizerVocabulary else "GRU"
        raise CheckpointError(
            f"vocabulary= must be a {kind.__name__} for a {tower} text tower, got {type(vocabulary).__name__}"
        )
    if kind is Vocabulary and len(vocabulary) != config.vocab_size:
        raise CheckpointError(
            f"vocabulary= has {len(vocabulary)} words but the model's config.vocab_size is {config.vocab_size}"
        )


def _companion_directory(
    source: CheckpointSource,
    vocabulary_kind: type | None,
    needs_record: bool,
    needs_processor: bool,
    token: str | bool | None,
) -> Path:
    """The directory of ``source`` holding its companion files: the local checkpoint, or the Hub
    repository's cached snapshot at the loaded commit with the needed files fetched."""
    if source.is_local:
        return Path(source.name_or_path) / source.subfolder
    prefix = f"{source.subfolder}/" if source.subfolder else ""
    patterns = [prefix + RUN_RECORD] if needs_record else []
    if needs_processor:
        patterns.append(f"{prefix}{IMAGE_PROCESSOR_SUBFOLDER}/*")
    if vocabulary_kind is Vocabulary:
        patterns.append(prefix + VOCAB_FILE)
    elif vocabulary_kind is TokenizerVocabulary:
        patterns.append(f"{prefix}{TokenizerVocabulary.SUBFOLDER}/*")
    try:
        snapshot = snapshot_download(
            source.name_or_path,
            revision=source.revision,
            cache_dir=source.cache_dir,
            allow_patterns=patterns,
            token=token,
        )
    except OSError as error:
        raise OSError(
            f"Cannot fetch {', '.join(patterns)} of {source}, where the model was loaded from: {error}. "
            "Pass vocabulary= and record= to push_to_hub, or publish a saved checkpoint directory with `hfncl push`."
        ) from error
    return Path(snapshot) / source.subfolder


def _copy_companions(
    directory: Path, checkpoint: Path, record: bool, image_processor: bool, text_files: list[Path]
) -> None:
    """Copy the companion files taken from the source ``directory`` into ``checkpoint``: the run
    record and the image processor where asked, and ``text_files`` (of ``directory``)."""
    if record:
        shutil.copyfile(directory / RUN_RECORD, checkpoint / RUN_RECORD)
    if image_processor:
        shutil.copytree(directory / IMAGE_PROCESSOR_SUBFOLDER, checkpoint / IMAGE_PROCESSOR_SUBFOLDER)
    for path in text_files:
        target = checkpoint / path.relative_to(directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def _has_text_vocabulary(directory: Path | None, kind: type) -> bool:
    if directory is None:
        return False
    if kind is TokenizerVocabulary:
        folder = directory / TokenizerVocabulary.SUBFOLDER
        return folder.is_dir() and any(path.is_file() for path in folder.rglob("*"))
    return (directory / VOCAB_FILE).is_file()


def _missing_message(model_name: str, repo_id: str, source: CheckpointSource | None, missing: list[str]) -> str:
    where = (
        "The model was built in memory, not loaded with from_pretrained, so there is no checkpoint to take them from."
        if source is None
        else f"{source}, where the model was loaded from, does not have them."
    )
    return (
        f"Nothing was uploaded: {model_name}.push_to_hub({repo_id!r}) publishes a complete hfncl checkpoint, "
        "and it is missing\n  - " + "\n  - ".join(missing) + f"\n{where} Or save a complete checkpoint "
        "(hfncl.hub.save_trained_model, hfncl.hub.save_text_vocabulary) and publish it with "
        f"`hfncl push CHECKPOINT {repo_id}`."
    )
