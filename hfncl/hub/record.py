"""The run record of a checkpoint (``hfncl_run.json``): what its model card is generated from.

The trainer writes the record when it saves the best model: the training
hyper-parameters, the epoch saved, its validation metrics and the quality of the
division it trained with. A full run (:func:`hfncl.experiment.run_experiment`) then adds
the data and noise description and the test metrics of that checkpoint. Nothing in the
record is typed in by hand, so a card shows only what a run measured.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

RUN_RECORD = "hfncl_run.json"


class CheckpointError(ValueError):
    """A checkpoint directory lacks a file, or holds one that cannot be read; the message names it."""


class IncompatibleCheckpointError(ValueError):
    """``config.json`` was written by a newer hfncl, in a checkpoint format this one cannot read."""


@dataclass(frozen=True)
class DataDescription:
    """The data a model was trained and tested on, and how its training pairs were corrupted.

    Attributes:
        dataset: name of the dataset (the data directory's name).
        train_split, val_split, test_split: the split names read from the data directory.
        train_pairs: number of training pairs (captions).
        train_images: number of training images.
        captions_per_image: captions per image.
        test_images: images of the test split.
        noise_kind: ``"caption"`` (re-pairing a share of captions) or ``"image"``
            (permuting a share of images); ``None`` when the pairing came from ``noise_file``.
        noise_ratio: share of pairs asked to be corrupted; ``None`` with ``noise_file``.
        noise_seed: seed of the generated noise; ``None`` with ``noise_file``.
        noise_file: the noise index file read instead of generating one, if any.
        true_noise_ratio: share of training pairs that are actually wrong (measured).
        test_folds: test metrics are also averaged over this many folds when above 1.
        noise_protocol: the noise protocol's name (:func:`hfncl.data.noise.protocol_names`), of the generated noise
            or of the noise file's pairing; ``None`` without noise.
    """

    dataset: str
    train_split: str
    val_split: str
    test_split: str
    train_pairs: int
    train_images: int
    captions_per_image: int
    test_images: int
    noise_kind: str | None
    noise_ratio: float | None
    noise_seed: int | None
    noise_file: str | None
    true_noise_ratio: float
    test_folds: int = 1
    noise_protocol: str | None = None


@dataclass
class RunRecord:
    """What a training run measured for one saved checkpoint.

    Attributes:
        training: the :class:`hfncl.config.TrainConfig` fields of the run.
        best_epoch: the epoch whose weights the checkpoint holds, counted from 1 as on the console.
        validation: retrieval metrics of that epoch on the validation split.
        division: division quality of that epoch against the hidden clean mask, keyed as
            the trainer reports it (``division/<metric>``, or ``division/net<K>/<metric>``
            with several networks); empty during warmup or for methods that do not divide.
        data: the data and noise description, once a full run adds it.
        test: test metrics of the checkpoint, once a full run adds them.
        plugin_summaries: the first line of each plugin's module docstring, read when the
            model was saved (what the method is, in its author's words).
        plugin_citations: the BibTeX each plugin's ``citation`` hook gave when the model was
            saved, by plugin name (absent from records written before the hook: empty).
        compute: what trained it, for the card's Compute section: ``processes``, ``device`` (its kind and
            name), ``mixed_precision`` and ``seconds`` of training up to the saved epoch in the process that
            saved it (empty in records written before it was recorded).
    """

    training: dict[str, Any]
    best_epoch: int
    validation: dict[str, float]
    division: dict[str, float] = field(default_factory=dict)
    data: DataDescription | None = None
    test: dict[str, float] | None = None
    plugin_summaries: dict[str, str] = field(default_factory=dict)
    plugin_citations: dict[str, str] = field(default_factory=dict)
    compute: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, payload: Any, source: str) -> RunRecord:
        """Rebuild a record read from ``source``, with an error naming the field that is wrong."""
        if not isinstance(payload, dict):
            raise CheckpointError(f"{source}: expected a JSON object, got {type(payload).__name__}")
        known = {f.name for f in fields(cls)}
        missing = sorted({"training", "best_epoch", "validation"} - set(payload))
        unknown = sorted(set(payload) - known)
        if missing or unknown:
            raise CheckpointError(f"{source}: missing field(s) {missing}, unknown field(s) {unknown}")
        if not isinstance(payload["training"], dict):
            raise CheckpointError(f"{source}: 'training' must be an object of TrainConfig fields")
        if isinstance(payload["best_epoch"], bool) or not isinstance(payload["best_epoch"], int):
            raise CheckpointError(f"{source}: 'best_epoch' must be an integer, got {payload['best_epoch']!r}")
        for name in ("validation", "division", "test"):
            _check_metrics(payload.get(name), name, source, optional=name != "validation")
        data = payload.get("data")
        if data is not None:
            data = _data_description(data, source)
        summaries, citations = (_texts(payload, name, source) for name in ("plugin_summaries", "plugin_citations"))
        compute = payload.get("compute") or {}
        if not isinstance(compute, dict):
            raise CheckpointError(f"{source}: 'compute' must be an object, got {type(compute).__name__}")
        return cls(
            training=payload["training"],
            best_epoch=payload["best_epoch"],
            validation=payload["validation"],
            division=payload.get("division") or {},
            data=data,
            test=payload.get("test"),
            plugin_summaries=summaries,
            plugin_citations=citations,
            compute=compute,
        )


def _texts(payload: dict[str, Any], name: str, source: str) -> dict[str, str]:
    """The optional field ``name`` of a record: an object of plugin name -> text (empty when absent)."""
    texts = payload.get(name) or {}
    if not isinstance(texts, dict) or not all(isinstance(v, str) for v in texts.values()):
        raise CheckpointError(f"{source}: '{name}' must be an object of plugin name -> text")
    return texts


def _check_metrics(values: Any, name: str, source: str, optional: bool) -> None:
    if values is None and optional:
        return
    if not isinstance(values, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values()
    ):
        raise CheckpointError(f"{source}: '{name}' must be an object of metric name -> number, got {values!r}")


def _data_description(data: Any, source: str) -> DataDescription:
    names = {f.name for f in fields(DataDescription)}
    required = {f.name for f in fields(DataDescription) if f.name not in ("test_folds", "noise_protocol")}
    if not isinstance(data, dict) or required - set(data) or set(data) - names:
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise CheckpointError(f"{source}: 'data' must have the fields {sorted(names)}, got {got}")
    return DataDescription(**data)


def write_run_record(directory: str | Path, record: RunRecord) -> Path:
    """Write ``record`` as ``directory/hfncl_run.json`` (NaN, for undefined metrics, is kept as NaN), whole or not at
    all (:func:`hfncl.integrity.atomic_write_text`, imported when a record is written: reading a model needs none)."""
    from hfncl.integrity import atomic_write_text

    return atomic_write_text(Path(directory) / RUN_RECORD, json.dumps(record.to_dict(), indent=1))


def read_run_record(directory: str | Path) -> RunRecord:
    """The record of a checkpoint directory.

    Raises:
        CheckpointError: the directory has no ``hfncl_run.json`` or it is malformed.
    """
    path = Path(directory) / RUN_RECORD
    if not path.is_file():
        raise CheckpointError(
            f"{path} does not exist: a model card is generated from the results a training run records "
            "there (the trainer writes it next to the best model)."
        )
    try:
        payload = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error
    return RunRecord.from_dict(payload, str(path))
