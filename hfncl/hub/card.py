"""Model cards generated from a checkpoint's ``config.json`` and run record.

The card is rendered from ``templates/model_card.md`` with
:meth:`huggingface_hub.ModelCard.from_template`. Its metadata is a
:class:`huggingface_hub.ModelCardData` whose ``eval_results`` become the Hub's
``model-index``, so the Hub shows the test results on the model page. Everything in the
card comes from the checkpoint: the config (plugins, their packages and versions, the
architecture, the plugin options) and the run record (hyper-parameters, data, noise,
metrics, division quality, the BibTeX of the plugins' papers). The sentences that depend on
the kind of model (:class:`CardTexts`) are those the task of its kind registered
for its model type (:func:`register_card_texts`, :mod:`hfncl.tasks`); its tables of figures and model-index entries
are :mod:`hfncl.hub.card_tables`'.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData
from transformers import AutoConfig, PretrainedConfig

from hfncl.hub.card_tables import TASK_TYPE, division_table, eval_results, evaluation_table, markdown_table
from hfncl.hub.record import (
    CheckpointError,
    DataDescription,
    IncompatibleCheckpointError,
    RunRecord,
    read_run_record,
)
from hfncl.integrity import atomic_write_text

CARD_FILE = "README.md"
CONFIG_FILE = "config.json"
TEMPLATE = Path(__file__).with_name("templates") / "model_card.md"
LIBRARY_NAME = "hfncl"
HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")

# Fields of every hfncl model config that describe how the model was made rather than its architecture.
CONFIG_METADATA = frozenset(
    {"plugins", "plugin_versions", "plugin_options", "plugin_distributions", "hfncl_version", "checkpoint_format"}
)
# TrainConfig fields that do not change what is learned (paths, logging, resources) or have their own section.
NOT_HYPERPARAMETERS = frozenset(
    {
        "plugins",
        "options",
        "output_dir",
        "log_with",
        "run_name",
        "resume",
        "resume_from_checkpoint",
        "overwrite_output_dir",
        "progress",
        "num_workers",
        "save_steps",
        "plot_divisions",
        "eval_batch_size",
    }
)


@dataclass(frozen=True)
class CardTexts:
    """The sentences of a card that depend on the kind of model (pairs or category labels)."""

    summary: str
    architecture: str
    selection_metric: str
    evaluation: str
    usage: str
    pipeline_tag: str = "feature-extraction"
    """The Hub's task of the model: it encodes each modality into a joint space that ranks the other."""
    intended_uses: tuple[str, ...] = (
        "Ranking one modality's items for a query of the other (the usage below), on data prepared as the "
        "training data was, in a domain like the training data's.",
        "Research on learning from noisy correspondence: comparing methods, and the division quality below, on "
        "benchmarks with injected noise.",
    )
    out_of_scope: tuple[str, ...] = (
        "Other domains, or features from another extractor, without measuring the model there first.",
        "Decisions about people: the training captions' biases carry over, and nothing here measures them.",
        "Taking the model's clean / noisy division as a verdict on real data: its quality was measured against "
        "injected noise only.",
    )


CardTextsOf = Callable[[PretrainedConfig, str], CardTexts]
"""The card texts of a model from its config and the id the card names it by."""

_CARD_TEXTS: dict[str, CardTextsOf] = {}


def register_card_texts(model_type: str, texts: CardTextsOf) -> None:
    """Make ``texts`` what cards say about models of ``model_type`` (the tasks of :mod:`hfncl.tasks`
    register theirs when imported, as importing :mod:`hfncl` does)."""
    _CARD_TEXTS[model_type] = texts


def card_texts(config: PretrainedConfig, model_id: str) -> CardTexts:
    """What the card says about a model of ``config``'s model type, as its task registered.

    Raises:
        CheckpointError: no task registered card texts for the model type.
    """
    if config.model_type not in _CARD_TEXTS:
        raise CheckpointError(
            f"no card texts are registered for model type {config.model_type!r} (known: {sorted(_CARD_TEXTS)}): "
            "import hfncl, whose tasks register them"
        )
    return _CARD_TEXTS[config.model_type](config, model_id)


def plugin_names(config: PretrainedConfig) -> str:
    """The plugins that trained a model as code spans (``"`ncr`, `vsepp`"``), for a card's sentences."""
    return ", ".join(f"`{p}`" for p in config.plugins) or "(none recorded)"


_NOISE_KINDS = {
    "caption": "caption-level (a share of the captions re-paired with other images)",
    "image": "image-level (a share of the images permuted among themselves)",
}
def _value_cell(value: Any) -> str:
    """A config or hyper-parameter value as a code span (lists and dicts as JSON-like text)."""
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def noise_sentence(data: DataDescription) -> str:
    """How the training pairs were corrupted, with the measured share of wrong pairs."""
    measured = f"{data.true_noise_ratio:.1%} of the {data.train_pairs} training pairs are wrong"
    if data.noise_file:
        protocol = f" (protocol `{data.noise_protocol}`)" if data.noise_protocol else ""
        return f"pairing read from the noise index `{data.noise_file}`{protocol}; {measured}."
    if not data.noise_ratio:
        return f"none, the dataset's own pairs; {measured}."
    kind = _NOISE_KINDS.get(data.noise_kind or "", f"`{data.noise_kind}`")
    protocol = f"protocol `{data.noise_protocol}`, " if data.noise_protocol else ""
    return f"{protocol}{kind}, ratio {data.noise_ratio * 100:g}%, seed {data.noise_seed}; {measured}."


def architecture_fields(config: PretrainedConfig) -> dict[str, Any]:
    """The config class's constructor fields that describe the architecture and that this model uses, with their
    values: not those its own choices leave unread (``config.unused_fields()``, such as a GRU's sizes beside a
    transformer text tower, or a similarity head's settings beside another head).

    Read from the class of ``config`` (any hfncl model config: :class:`hfncl.models.NCLConfig`,
    :class:`hfncl.models.CategoryConfig`, ...).
    """
    unused = set(config.unused_fields()) if hasattr(config, "unused_fields") else set()
    names = [
        name
        for name, parameter in inspect.signature(type(config).__init__).parameters.items()
        if name != "self"
        and parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        and name not in CONFIG_METADATA
        and name not in unused
    ]
    return {name: getattr(config, name) for name in names}


def compute_sentence(record: RunRecord) -> str:
    """The card's Compute section: the processes, device, precision and training time the run recorded."""
    epochs = f"{record.best_epoch} of {record.training.get('epochs', '?')} epoch(s) to the saved weights"
    compute = record.compute
    if not compute:
        return f"{epochs}; the device and time were not recorded (a checkpoint saved before hfncl recorded them)."
    seconds = compute.get("seconds")
    took = "" if seconds is None else f", {seconds / 3600:.2g} hour(s) of training"
    return (
        f"{epochs}{took} on {compute.get('processes', 1)} process(es) of {compute.get('device', '?')}, "
        f"mixed precision `{compute.get('mixed_precision', 'no')}`."
    )


def _plugins_table(config: PretrainedConfig, record: RunRecord) -> str:
    rows = [
        [
            f"`{name}`",
            f"`{config.plugin_distributions.get(name, '?')}`",
            config.plugin_versions.get(name, "?"),
            record.plugin_summaries.get(name, "").replace("|", "\\|"),
        ]
        for name in config.plugins
    ]
    return markdown_table(["plugin", "package", "version", "method"], rows)


def _requirements(config: PretrainedConfig) -> str:
    """``pip install`` arguments: hfncl and every plugin package, at the versions that trained the model."""
    pins = {"hfncl": config.hfncl_version}
    for name in config.plugins:
        if name in config.plugin_distributions:
            pins[config.plugin_distributions[name]] = config.plugin_versions.get(name)
    return " ".join(f"'{package}=={version}'" if version else package for package, version in pins.items())


def citations(config: PretrainedConfig, record: RunRecord) -> list[str]:
    """The BibTeX the plugins gave (``RunRecord.plugin_citations``), in the order of ``config.plugins``, each once."""
    entries = [record.plugin_citations[name] for name in config.plugins if name in record.plugin_citations]
    return list(dict.fromkeys(entries))


def limitations(config: PretrainedConfig, record: RunRecord) -> list[str]:
    """What the card's Limitations section says: where the scores hold and what they do not show."""
    towers = {getattr(config, "image_tower", None), getattr(config, "text_tower", None)}
    items = [
        "The scores hold for inputs made like the training data's: "
        + (
            "image features from the same extractor (a model trained on precomputed region features needs "
            "that detector's features, not raw images)"
            if "transformer" not in towers
            else "images and captions prepared by the towers' own processors"
        )
        + ", and captions in the vocabulary or tokenizer saved with the checkpoint.",
        "Test metrics are measured on the test split of the training dataset only; they say little about "
        "retrieval on other domains.",
    ]
    if record.data is not None and (record.data.noise_ratio or record.data.noise_file):
        items.append(
            "The training noise was injected into a curated dataset; real web pairs are wrong in other ways "
            "(partly related, not shuffled), and the division quality above needs the injected noise's ground "
            "truth, which real data does not have."
        )
    items.append(
        "A retrieval model inherits the biases of its training images and captions and of its feature extractor."
    )
    return items


def _title(config: PretrainedConfig, record: RunRecord) -> str:
    plugins = " + ".join(config.plugins) or "hfncl"
    if record.data is None:
        return f"{plugins} image-text retrieval model"
    data = record.data
    if data.noise_file:
        noise = f"noise from {Path(data.noise_file).name}"
    elif data.noise_ratio:
        noise = f"{data.noise_ratio * 100:g}% {data.noise_kind}-level noise"
    else:
        noise = "no noise"
    return f"{plugins} on {data.dataset}, {noise}"


def build_model_card(
    config: PretrainedConfig,
    record: RunRecord,
    model_id: str,
    license: str | None = None,
    template: str | Path = TEMPLATE,
) -> ModelCard:
    """The card of a model from its config and run record.

    Args:
        config: the checkpoint's config (plugins, their packages and versions, architecture).
        record: what the run measured for the checkpoint.
        model_id: the Hub id (or path) the usage example loads; the model-index's name when it is a Hub
            id, else the plugins and the dataset (:func:`_title`), never a local path. A dataset named by a
            Hub id is listed in ``datasets``.
        license: a Hub license identifier for the metadata, if known.
        template: the Jinja template to render (``card_data`` is its YAML header).
    """
    texts = card_texts(config, model_id)
    hub_dataset = record.data.dataset if record.data and HUB_ID.fullmatch(record.data.dataset) else None
    published = HUB_ID.fullmatch(model_id) is not None and not Path(model_id).exists()
    card_data = ModelCardData(
        model_name=model_id if published else _title(config, record),
        library_name=LIBRARY_NAME,
        license=license,
        datasets=[hub_dataset] if hub_dataset else None,
        tags=[LIBRARY_NAME, TASK_TYPE, "noisy-correspondence", *config.plugins],
        eval_results=eval_results(record) or None,
        pipeline_tag=texts.pipeline_tag,
    )
    hyperparameters = {k: v for k, v in record.training.items() if k not in NOT_HYPERPARAMETERS}
    options = sorted(config.plugin_options.items())
    return ModelCard.from_template(
        card_data,
        template_path=str(template),
        model_name=_title(config, record),
        model_id=model_id,
        summary=texts.summary,
        architecture=texts.architecture,
        selection_metric=texts.selection_metric,
        evaluation=texts.evaluation,
        usage=texts.usage,
        hfncl_version=config.hfncl_version,
        plugin_names=", ".join(f"`{p}`" for p in config.plugins) or "no recorded plugin",
        plugin_count=len(config.plugins),
        plugins_table=_plugins_table(config, record),
        options_table=markdown_table(["option", "value"], [[f"`{k}`", _value_cell(v)] for k, v in options])
        if options
        else "",
        architecture_table=markdown_table(
            ["field", "value"], [[f"`{k}`", _value_cell(v)] for k, v in architecture_fields(config).items()]
        ),
        data=record.data,
        noise=noise_sentence(record.data) if record.data else "",
        training_table=markdown_table(
            ["hyper-parameter", "value"], [[f"`{k}`", _value_cell(v)] for k, v in sorted(hyperparameters.items())]
        ),
        best_epoch=record.best_epoch,
        evaluation_table=evaluation_table(record),
        division_table=division_table(record.division),
        requirements=_requirements(config),
        license=license,
        limitations=limitations(config, record),
        intended_uses=texts.intended_uses,
        out_of_scope=texts.out_of_scope,
        compute=compute_sentence(record),
        citations=citations(config, record),
    )


def card_name(checkpoint: str | Path) -> str:
    """A file name for a checkpoint's card: the run's directory name for ``RUN/best``, else its own name."""
    path = Path(checkpoint).resolve()
    return path.parent.name if path.name == "best" else path.name


def read_config(checkpoint: str | Path) -> PretrainedConfig:
    """The config of a checkpoint directory (without loading weights or plugins), of its own model type.

    The config class ``AutoConfig`` registers for the checkpoint's ``model_type``
    (:class:`hfncl.models.NCLConfig`, :class:`hfncl.models.CategoryConfig`): importing
    :mod:`hfncl.models` registers them.
    """
    path = Path(checkpoint) / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist: {checkpoint} is not a saved hfncl checkpoint")
    try:
        return AutoConfig.from_pretrained(str(checkpoint))
    except IncompatibleCheckpointError as error:
        raise IncompatibleCheckpointError(f"{checkpoint}: {error}") from error


def write_model_card(
    checkpoint: str | Path,
    repo_id: str | None = None,
    license: str | None = None,
    model_cards_dir: str | Path | None = None,
) -> list[Path]:
    """(Re)generate ``README.md`` of a checkpoint from its config and run record.

    Args:
        checkpoint: the checkpoint directory (``config.json`` and ``hfncl_run.json``).
        repo_id: the Hub id the card is published under; default: the checkpoint path.
        license: a Hub license identifier for the metadata.
        model_cards_dir: also write the card to ``model_cards_dir/<card_name>.md``.

    Returns:
        The files written.
    """
    checkpoint = Path(checkpoint)
    card = build_model_card(read_config(checkpoint), read_run_record(checkpoint), repo_id or str(checkpoint), license)
    written = [checkpoint / CARD_FILE]
    if model_cards_dir is not None:
        Path(model_cards_dir).mkdir(parents=True, exist_ok=True)
        written.append(Path(model_cards_dir) / f"{card_name(repo_id or checkpoint)}.md")
    for path in written:
        atomic_write_text(path, str(card))
    return written
