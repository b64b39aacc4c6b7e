"""The base of hfncl's models: ``from_pretrained`` with errors that say what to do, and a
``push_to_hub`` that publishes a complete checkpoint (through :mod:`hfncl.hub.publish`, imported when a model
is pushed, so that loading a model loads no card or upload code)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from huggingface_hub import is_offline_mode
from safetensors import SafetensorError
from transformers import PreTrainedModel

from hfncl.hub.record import RUN_RECORD, CheckpointError, IncompatibleCheckpointError
from hfncl.hub.source import CheckpointSource, pin_source
from hfncl.registry import require_plugins

if TYPE_CHECKING:
    from huggingface_hub import CommitInfo

    from hfncl.data.vocab import TokenizerVocabulary, Vocabulary
    from hfncl.hub.record import RunRecord

PUSH_OPTIONS = ("vocabulary", "record", "image_processor", "commit_message", "private", "token", "license")
"""The keyword arguments :meth:`HfnclPreTrainedModel.push_to_hub` takes."""
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def require_safetensors(directory: Path) -> None:
    """Refuse a local checkpoint without safetensors weights: hfncl never unpickles a model's weights.

    Raises:
        OSError: on one line naming the pickle files found instead, if any.
    """
    if any(directory.glob("model*.safetensors")):
        return
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
    found = f"only pickle weights ({', '.join(pickles)})" if pickles else "no weights"
    raise OSError(
        f"{directory} has {found}: safetensors required (model.safetensors, as save_pretrained writes it); "
        "hfncl does not unpickle model weights, which can run code"
    )


def _verify_local(directory: Path) -> None:
    """Check a local checkpoint's config and weights against its manifest. A checkpoint hfncl saved (it has a run
    record) whose manifest is gone loads with a warning that nothing was verified; a directory written by
    ``save_pretrained`` alone has no manifest to check (:mod:`hfncl.integrity`, read when a checkpoint loads, not when
    ``hfncl`` is imported)."""
    from hfncl.integrity import MANIFEST, verify_manifest

    if not (directory / MANIFEST).is_file() and (directory / RUN_RECORD).is_file():
        warnings.warn(
            f"{directory} has no {MANIFEST}: its config and weights are loaded unverified (hfncl saves a "
            "checkpoint with one; save it again, or copy it whole, to have them checked)",
            stacklevel=4,
        )
    verify_manifest(directory, only=_read_when_loading, required=False)


def _read_when_loading(name: str) -> bool:
    """Whether ``from_pretrained`` reads the checkpoint file ``name``: the config and the weights."""
    return name == "config.json" or name.startswith("model") and ".safetensors" in name


def refuse_missing_local_path(name: str) -> None:
    """An ``OSError`` at once for a name that can only be meant as a local directory and is not one, instead of
    a Hub lookup (with its retries) that then blames the network: a name that is no valid Hub id (``./run``,
    ``/abs/run``, ``a/b/c``), or ``x/y`` where ``x`` is a local directory."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    path = Path(name).expanduser()
    if path.exists():
        return
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise OSError(f"{name} does not exist: no such local directory (nor is it a Hub id)") from None
    if len(path.parts) > 1 and Path(path.parts[0]).is_dir():
        raise OSError(
            f"{name} does not exist: no such local directory in {path.parts[0]}/ (for the Hub id of that name, "
            f"run from a directory without a {path.parts[0]}/ folder)"
        )


def _check_local_weights(model_class: type[PreTrainedModel], directory: Path) -> None:
    """Before anything is allocated: ``config.json``'s sizes within their bounds (the config's own checks,
    :mod:`hfncl.limits`), and every tensor of the model it describes saved with its shape and dtype kind, nothing
    else (:func:`hfncl.hub.checkpoint.check_weights`, on the meta device)."""
    from hfncl.hub.checkpoint import check_weights, weight_files

    config = model_class.config_class.from_pretrained(directory)
    try:
        check_weights(config, weight_files(directory), directory, model_class, "; nothing was loaded")
    except CheckpointError as error:
        if isinstance(error.__cause__, SafetensorError):
            raise error.__cause__ from None  # damaged weights: said as when transformers reads them
        raise


@contextmanager
def _quiet_load_report() -> Iterator[None]:
    """transformers' loading report (a multi-line table of missing or unexpected tensors) unprinted: a partial
    load is refused in one line instead (:func:`_refuse_partial_load`)."""
    from transformers.utils import logging as transformers_logging

    level = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(level)


def _refuse_partial_load(name: str, info: dict[str, Any]) -> None:
    """Refuse a model that transformers loaded only in part (a tensor missing, extra, or of another shape, which it
    would initialise at random), naming the first such tensor.

    Raises:
        CheckpointError: in one line.
    """
    problems = [f"tensor {key} is missing" for key in sorted(info.get("missing_keys") or ())]
    problems += [f"tensor {key} is not one of the model's" for key in sorted(info.get("unexpected_keys") or ())]
    problems += [
        f"tensor {item[0]} has shape {list(item[1])}, the model's is {list(item[2])}"
        for item in sorted(info.get("mismatched_keys") or (), key=str)
    ]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CheckpointError(
            f"The weights of {name} do not fit its config.json: {problems[0]}{more}; nothing was loaded"
        )


class HfnclPreTrainedModel(PreTrainedModel):
    """A transformers model whose loading names the problem: a newer checkpoint format, damaged
    weights, an offline Hub id, a missing plugin; and whose ``push_to_hub`` publishes a whole
    checkpoint (weights, config, vocabulary, run record, card; :func:`hfncl.hub.publish.push_model`, imported
    when a model is pushed). Subclasses set ``config_class``; a config carries the plugin metadata fields of
    :class:`hfncl.models.NCLConfig`.

    Attributes:
        checkpoint_source: where ``from_pretrained`` loaded the model from; ``None`` for a
            model built in memory.
    """

    checkpoint_source: CheckpointSource | None = None

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike, *model_args: Any, **kwargs: Any
    ) -> Any:
        """``PreTrainedModel.from_pretrained`` (local directory or Hub id) with errors that say what to do.

        ``AutoModel.from_pretrained`` ends here too, so the Auto classes give the same errors. Returns the model,
        or with ``output_loading_info=True`` the model and transformers' loading information (nothing missing,
        unexpected or mismatched: such a checkpoint is refused).
        The model remembers where it came from in :attr:`checkpoint_source`, for
        :meth:`push_to_hub`: a local directory, or a Hub id with the commit its revision is
        resolved to here, before loading, so that transformers loads that very commit.

        Raises:
            IncompatibleCheckpointError: ``config.json`` was written by a newer hfncl in a
                checkpoint format this one cannot read.
            hfncl.integrity.IntegrityError: (an ``OSError``) a local checkpoint's
                ``config.json`` or weights differ from its manifest (:mod:`hfncl.integrity`).
            hfncl.plugins.MissingPluginError: a plugin that trained the model is not
                installed; the message names the package to install.
            hfncl.hub.CheckpointError: (a ``ValueError``) a tensor of the model is missing from the weights, or they
                hold one the model has not, or one of another shape or dtype kind (floating point, integer, bool),
                named in one line; nothing is loaded (a local directory is checked before anything is allocated).
            ValueError: a ``config.json`` size over its bound (:mod:`hfncl.limits`).
            OSError: a local directory has no ``config.json`` or no safetensors weights (pickle weights are never
                read: ``use_safetensors=True``), the safetensors weights are corrupted or truncated, or
                ``HF_HUB_OFFLINE=1`` is set and a name that is not a local directory is not
                in the Hub cache.
        """
        name = str(pretrained_model_name_or_path)
        local = Path(name, kwargs.get("subfolder") or "")
        refuse_missing_local_path(name)
        if local.is_dir():
            if not (local / "config.json").is_file():
                raise OSError(f"{local} has no config.json: it is not a saved hfncl checkpoint")
            require_safetensors(local)
            _verify_local(local)
        kwargs.setdefault("use_safetensors", True)
        wants_info = bool(kwargs.pop("output_loading_info", False))
        source = pin_source(name, kwargs)
        try:
            if local.is_dir() and "config" not in kwargs:
                _check_local_weights(cls, local)
            with _quiet_load_report():
                model, info = super().from_pretrained(
                    pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
                )
            _refuse_partial_load(name, info)
        except IncompatibleCheckpointError as error:
            raise IncompatibleCheckpointError(f"{name}: {error}") from error
        except SafetensorError as error:
            raise OSError(
                f"The weights of {name!r} cannot be read: its safetensors file is corrupted or truncated ({error}). "
                "Save the model again, or download it again with force_download=True."
            ) from error
        except OSError as error:
            if is_offline_mode() and not os.path.isdir(name):
                raise OSError(
                    f"{name!r} is not a local directory, and HF_HUB_OFFLINE=1 forbids downloading it from the Hub "
                    "(nor is a complete copy in the local Hub cache). Give the path of a saved checkpoint, "
                    "or unset HF_HUB_OFFLINE."
                ) from error
            raise
        model.after_loading()
        config = model.config
        require_plugins(config.plugins, config.plugin_distributions, config.plugin_versions, source=name)
        model.checkpoint_source = source
        return (model, info) if wants_info else model

    def after_loading(self) -> None:
        """Restore what the saved weights do not carry (nothing by default)."""

    def push_to_hub(
        self,
        repo_id: str,
        *,
        vocabulary: Vocabulary | TokenizerVocabulary | None = None,
        record: RunRecord | None = None,
        commit_message: str | None = None,
        private: bool | None = None,
        token: str | bool | None = None,
        license: str | None = None,
        image_processor: Any | None = None,
        **unsupported: Any,
    ) -> CommitInfo:
        """Publish the model as a complete hfncl checkpoint, the way ``hfncl push`` does.

        The current weights and config are saved with ``save_pretrained`` into a temporary
        directory, the companion files are added, and the directory goes through
        :func:`hfncl.hub.push_checkpoint`: the files are checked, the card is regenerated
        naming ``repo_id``, and everything goes up in one commit. The companion files are:

        - the text vocabulary: ``vocab.json`` for a GRU text tower, ``tokenizer/`` for a
          transformer one; a category-label model (:class:`hfncl.models.CategoryModel`) has none;
        - the run record ``hfncl_run.json``. It is required: the model card is generated
          from it (training hyper-parameters, data, noise, metrics), and a checkpoint
          published without a card would not say what the model is or how good it is;
        - the image processor ``image_processor/`` of a model whose image tower reads pixels.

        Each is taken from the keyword argument when given, else from the checkpoint the
        model was loaded from (:attr:`checkpoint_source`: the local directory, or the Hub
        repository at the commit the weights came from, downloaded if needed). A record
        passed here is treated as the trainer treats one
        (:func:`hfncl.hub.save_trained_model`): the config is stamped with the installed
        packages and versions of its plugins and the record gets their summaries; a record
        taken from the loaded checkpoint keeps the provenance its config carries.

        Args:
            repo_id: ``user/name`` (or ``org/name``) of the model repository (created if needed).
            vocabulary: what tokenises captions for the model, written with
                :func:`hfncl.hub.save_text_vocabulary`: a :class:`hfncl.data.Vocabulary`
                (GRU text tower, ``len`` equal to ``config.vocab_size``) or a
                :class:`hfncl.data.TokenizerVocabulary` (transformer text tower).
            record: the :class:`hfncl.hub.RunRecord` of the run that trained the model.
            commit_message: default ``"Upload <name> with hfncl"``.
            private: visibility of a repository created here (an existing one keeps its own).
            token: Hub token; default: the saved login or ``HF_TOKEN``.
            license: Hub license identifier for the card's metadata.
            image_processor: for a model whose image tower reads pixels, the transformers
                image processor it was trained with (default: ``image_processor/`` of the
                checkpoint it was loaded from); other models take none.

        Returns:
            The commit (a ``str``, the commit URL, with ``commit_url`` and ``oid``).

        Raises:
            TypeError: an argument of ``PreTrainedModel.push_to_hub`` that this upload does
                not support (``revision``, ``create_pr``, ``max_shard_size``, ...).
            hfncl.hub.CheckpointError: before anything is sent, when the vocabulary or the
                record is unknown (the message says which keyword argument supplies it, or to
                publish a saved checkpoint directory with ``hfncl push``), when a vocabulary
                does not fit the text tower, or when a companion file is malformed.
            OSError: the companion files of a model loaded from a Hub id cannot be fetched.
        """
        if unsupported:
            raise TypeError(
                f"{type(self).__name__}.push_to_hub() got unsupported argument(s) {sorted(unsupported)}: it "
                f"publishes a complete hfncl checkpoint and takes only {', '.join(PUSH_OPTIONS)}."
            )
        from hfncl.hub.publish import push_model

        return push_model(
            self,
            repo_id,
            source=self.checkpoint_source,
            vocabulary=vocabulary,
            record=record,
            image_processor=image_processor,
            commit_message=commit_message,
            private=private,
            token=token,
            license=license,
        )
