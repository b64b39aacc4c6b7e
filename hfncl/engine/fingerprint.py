"""What a run is: the fingerprint its checkpoints carry, and the check that a resume continues that run.

A fingerprint is a flat mapping of named fields to JSON values:

``training.NAME``     every :class:`hfncl.config.TrainConfig` field that changes what is trained (plugins,
                      options, batch size, learning rate, seed, epochs, ...); not where the run writes, how it
                      shows progress, how often it checkpoints, its workers, trackers, or the resume flags
                      (:data:`UNTRAINED_FIELDS`).
``data.NAME``         the data arguments; a value naming an existing file or directory is given as its resolved
                      path, and the card's dataset name is left out.
``model.NAME``        the model arguments.
``model_used.NAME``   every model field the run uses, resolved: the plugins' ``model_defaults`` under the model
                      arguments, the settings' defaults under both (the task's ``model_settings``), so that a
                      plugin whose model defaults changed since does not resume into another model.
``files.NAME/PATH``   every file under such a path (hidden files, the run's own output directory and the files
                      of splits the run does not read left out, which other runs may write meanwhile):
                      text files (captions, metadata, vocabularies) and small ``.npy`` files (noise indexes,
                      labels) by their SHA-256; larger binary files (region features, images) by size and
                      modification time, as the feature cache keys them.
``noise_index``       the SHA-256 of the ``noise_index.npy`` the run wrote, when it writes one.

Every checkpoint saves it as ``run_fingerprint.json``, with the fields earlier resumes continued across
(``continued_across``); a resume compares it with the run's own (:func:`check_fingerprint`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from hfncl.config import TrainConfig
from hfncl.integrity import atomic_write_text, file_sha256

FINGERPRINT_FILE = "run_fingerprint.json"
NOISE_INDEX_FIELD = "noise_index"
UNTRAINED_FIELDS = frozenset(
    {
        "output_dir", "progress", "resume", "resume_from_checkpoint", "resume_ignore_mismatch",
        "overwrite_output_dir", "save_steps", "num_workers", "log_with", "run_name", "plot_divisions",
    }
)
DESCRIPTIVE_FIELDS = frozenset({"dataset_name"})
HASHED_SUFFIXES = frozenset({".txt", ".tsv", ".json", ".jsonl", ".csv"})
HASHED_NPY_BYTES = 16 << 20
_SHOWN_FIELDS = 6
MODEL_USED = "model_used."


class ResumeMismatchError(ValueError):
    """The checkpoint to resume was trained on other data, noise or settings than the run asks for."""


def run_fingerprint(
    config: TrainConfig,
    data_args: Any = None,
    model_args: Any = None,
    output_dir: str | Path | None = None,
    unread: Callable[[Path], bool] | None = None,
    model_used: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The fingerprint of a run of ``config`` on ``data_args`` and ``model_args`` (dataclasses, or ``None``), and
    of the model fields it uses, resolved (``model_used``, or ``None``).

    ``output_dir`` (default ``config.output_dir``) is left out of the data directories' files, and so is every
    file (a resolved path) for which ``unread`` answers true: another split's (:meth:`ExperimentTask.unread_files`).
    """
    values = _values(config)
    fingerprint = {f"training.{k}": v for k, v in values.items() if k not in UNTRAINED_FIELDS}
    if model_args is not None:
        fingerprint.update((f"model.{k}", v) for k, v in _values(model_args).items())
    if model_used is not None:
        fingerprint.update((f"{MODEL_USED}{k}", v) for k, v in _as_json(model_used).items())
    if data_args is not None:
        exclude = Path(output_dir if output_dir is not None else config.output_dir).resolve()
        fingerprint.update(_data_fields(_values(data_args), exclude, unread or _reads_all))
    return fingerprint


def noise_fingerprint(output_dir: str | Path) -> dict[str, str]:
    """``{"noise_index": SHA-256}`` of ``OUTPUT_DIR/noise_index.npy``; empty when the run wrote none."""
    path = Path(output_dir) / "noise_index.npy"
    return {NOISE_INDEX_FIELD: f"sha256:{file_sha256(path)}"} if path.is_file() else {}


def file_signature(path: Path) -> str:
    """A file's identity: ``sha256:HEX`` for text and small ``.npy`` files, else ``size:BYTES mtime_ns:NS``."""
    stat = path.stat()
    hashed = path.suffix in HASHED_SUFFIXES or (path.suffix == ".npy" and stat.st_size <= HASHED_NPY_BYTES)
    return f"sha256:{file_sha256(path)}" if hashed else f"size:{stat.st_size} mtime_ns:{stat.st_mtime_ns}"


def save_fingerprint(directory: str | Path, fingerprint: dict[str, Any], continued_across: list[str]) -> Path:
    """Write ``directory/run_fingerprint.json``: the fingerprint and the fields resumes continued across."""
    record = {"fields": fingerprint, "continued_across": continued_across}
    return atomic_write_text(Path(directory) / FINGERPRINT_FILE, json.dumps(record, indent=1, sort_keys=True))


def read_fingerprint(checkpoint: str | Path) -> tuple[dict[str, Any] | None, list[str]]:
    """A checkpoint's fingerprint (``None``: saved before fingerprints, or unreadable) and its ``continued_across``."""
    try:
        record = json.loads((Path(checkpoint) / FINGERPRINT_FILE).read_text())
        return dict(record["fields"]), list(record["continued_across"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, []


def differing_fields(saved: dict[str, Any], current: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
    """The fields whose values differ (or that only one of the fingerprints has), sorted; ``skip``: left out. A
    training field that a checkpoint saved before the field existed lacks is no difference while the run keeps the
    field's default (:func:`training_defaults`); nor are the resolved model fields (``model_used.NAME``) of a
    checkpoint saved before they were recorded, which has none of them (its ``model.NAME`` are still compared)."""
    added = {k: v for k, v in training_defaults().items() if k not in saved}
    unrecorded = (MODEL_USED,) if not any(k.startswith(MODEL_USED) for k in saved) else ()
    return sorted(
        k for k in saved.keys() | current.keys()
        if k not in skip and saved.get(k) != current.get(k) and not (k in added and current.get(k) == added[k])
        and not (unrecorded and k.startswith(unrecorded))
    )


def training_defaults() -> dict[str, Any]:
    """The default of every fingerprinted :class:`~hfncl.config.TrainConfig` field, as ``training.NAME``."""
    return {f"training.{k}": v for k, v in _values(TrainConfig()).items() if k not in UNTRAINED_FIELDS}


def refuse_mismatch(
    checkpoint: str | Path, current: dict[str, Any], *, ignore_mismatch: bool, skip: tuple[str, ...] = ()
) -> None:
    """Refuse to resume ``checkpoint`` when its fingerprint differs from ``current`` (fields ``skip`` left out)
    and the mismatch is not ignored; a checkpoint without a readable fingerprint passes (see :func:`check_fingerprint`).

    Raises:
        ResumeMismatchError: on one line naming the fields that differ.
    """
    saved, _ = read_fingerprint(checkpoint)
    if saved is None or ignore_mismatch:
        return
    differing = differing_fields(saved, current, skip)
    if differing:
        raise ResumeMismatchError(
            f"{checkpoint} was trained on other data, noise or settings than this run asks for: "
            f"{_describe(saved, current, differing)}; resume with that run's settings and data, start the new run "
            "in another output_dir, or pass --resume_ignore_mismatch to continue across the difference on purpose"
        )


def check_fingerprint(checkpoint: str | Path, current: dict[str, Any], *, ignore_mismatch: bool) -> list[str]:
    """The fields a resume of ``checkpoint`` continues across: those earlier resumes did, and those that differ
    now (only with ``ignore_mismatch``, with a warning naming them). A checkpoint saved before fingerprints
    resumes with a warning that nothing was checked.

    Raises:
        ResumeMismatchError: the fingerprints differ and ``ignore_mismatch`` is not set.
    """
    saved, continued = read_fingerprint(checkpoint)
    if saved is None:
        warnings.warn(
            f"{checkpoint} has no readable {FINGERPRINT_FILE} (saved before hfncl recorded run fingerprints): "
            "resuming without checking that it was trained on this run's data, noise and settings",
            stacklevel=3,
        )
        return continued
    refuse_mismatch(checkpoint, current, ignore_mismatch=ignore_mismatch)
    differing = differing_fields(saved, current)
    if differing:
        warnings.warn(
            f"resuming {checkpoint} across a mismatch (--resume_ignore_mismatch): "
            f"{_describe(saved, current, differing)}",
            stacklevel=3,
        )
    return sorted(set(continued) | set(differing))


def _describe(saved: dict[str, Any], current: dict[str, Any], fields: list[str]) -> str:
    """``name (saved -> current)`` of the first differing fields, and how many more."""
    shown = [f"{name} ({_short(saved.get(name))} -> {_short(current.get(name))})" for name in fields[:_SHOWN_FIELDS]]
    more = len(fields) - _SHOWN_FIELDS
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _short(value: Any) -> str:
    """A field's value as the message shows it: JSON, with a SHA-256 cut to its first 12 digits."""
    if value is None:
        return "absent"
    if isinstance(value, str) and value.startswith("sha256:"):
        return value[:19]
    return json.dumps(value)


def _values(arguments: Any) -> dict[str, Any]:
    """A dataclass's fields as JSON reads them back (:func:`_as_json`)."""
    return _as_json({field.name: getattr(arguments, field.name) for field in fields(arguments)})


def _as_json(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as JSON reads them back (tuples as lists, option mappings as plain dicts)."""
    return dict(json.loads(json.dumps(values, default=str)))


def _reads_all(path: Path) -> bool:
    """No file is left out."""
    return False


def _data_fields(values: dict[str, Any], exclude: Path, unread: Callable[[Path], bool]) -> dict[str, Any]:
    """``data.NAME`` of the data arguments, paths resolved, and ``files.NAME/PATH`` of what those paths hold."""
    found: dict[str, Any] = {}
    for name, value in values.items():
        if name in DESCRIPTIVE_FIELDS:
            continue
        path = Path(value) if isinstance(value, str) and value and not name.endswith("_split") else None
        if path is None or not path.exists():
            found[f"data.{name}"] = value
            continue
        root = path.resolve()
        found[f"data.{name}"] = str(root)
        found.update((f"files.{name}/{relative}", signature) for relative, signature in _files(root, exclude, unread))
    return found


def _files(root: Path, exclude: Path, unread: Callable[[Path], bool]) -> list[tuple[str, str]]:
    """``(relative path, signature)`` of the file ``root``, or of every file under the directory ``root`` but
    those ``unread`` names."""
    if root.is_file():
        return [(root.name, file_signature(root))]
    found = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        hidden = any(part.startswith(".") for part in relative.parts)
        if hidden or not path.is_file() or path.resolve().is_relative_to(exclude) or unread(path):
            continue
        found.append((relative.as_posix(), file_signature(path)))
    return found
