"""Noisy category labels: symmetric and asymmetric label noise, per modality, seeded and saved.

The protocol of cross-modal retrieval with noisy labels (the label-noise paper in
``shared/papers``, Sec. 3; MRL, CVPR 2021) corrupts the training labels of every
modality independently:

* **symmetric**: exactly ``round(ratio * N)`` samples (round half to even), picked
  uniformly without replacement, get a label drawn uniformly from the K - 1 *other*
  classes: never their own class, never outside 0..K-1. (A public implementation draws
  the new label from 0..K inclusive, which both flips to a non-existent class K and
  sometimes "flips" a label to itself; this one does neither.)
* **asymmetric** (class-dependent): exactly ``round(ratio * N)`` picked samples get
  ``transition[y]``, by default the next class ``(y + 1) mod K``, or any given map.
  A class the map sends to itself keeps its label, so the realised rate equals
  ``ratio`` only for a map without fixed points (the default has none).

Each modality gets its own random stream, ``SeedSequence(seed).spawn(m)`` in the order
the modalities are given, so the same seed gives the same noise and the modalities'
corruptions are independent. The clean labels are kept next to the noisy ones (for
diagnostics only: a method must never see them) in a JSON file that
:func:`load_label_noise` reads back, together with the per-modality list-of-lists
JSON that MRL's code writes (``noise_labels_<r>_sym.json``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hfncl.choices import LABEL_NOISE_KINDS
from hfncl.data.precomp import DataFormatError

_FORMAT = "hfncl.label_noise"
_VERSION = 1


def _check_labels(labels: np.ndarray | Sequence[int], num_classes: int, name: str = "labels") -> np.ndarray:
    """``labels`` as a 1-D int64 array, rejected unless every entry is a class in 0..num_classes-1."""
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D vector of class indices, got shape {array.shape}")
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer class indices, got dtype {array.dtype}")
    outside = (array < 0) | (array >= num_classes)
    if outside.any():
        position = int(np.flatnonzero(outside)[0])
        raise ValueError(f"{name}[{position}] is {array[position]}, expected a class in 0..{num_classes - 1}")
    return array.astype(np.int64)


def _picked(size: int, ratio: float, rng: np.random.Generator) -> np.ndarray:
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"noise ratio must be in [0, 1], got {ratio}")
    return rng.choice(size, size=round(ratio * size), replace=False)


def symmetric_label_noise(
    labels: np.ndarray | Sequence[int], num_classes: int, ratio: float, rng: np.random.Generator
) -> np.ndarray:
    """A copy of ``labels`` with exactly ``round(ratio * N)`` entries moved to a uniformly drawn other class.

    The new label is ``(y + s) mod K`` with ``s`` uniform on 1..K-1, which is uniform over
    the K - 1 classes other than ``y``.
    """
    clean = _check_labels(labels, num_classes)
    picked = _picked(len(clean), ratio, rng)
    if picked.size and num_classes < 2:
        raise ValueError("symmetric label noise needs at least 2 classes")
    noisy = clean.copy()
    noisy[picked] = (clean[picked] + rng.integers(1, num_classes, size=picked.size)) % num_classes
    return noisy


def next_class_transition(num_classes: int) -> np.ndarray:
    """The default asymmetric map c -> (c + 1) mod K, as an int64 array indexed by class."""
    return (np.arange(num_classes, dtype=np.int64) + 1) % num_classes


def transition_array(transition: Mapping[int, int] | Sequence[int] | np.ndarray | None, num_classes: int) -> np.ndarray:
    """A class map as an int64 array ``t`` with ``t[c]`` the class that c turns into.

    ``None`` is :func:`next_class_transition`; a mapping lists the classes that change
    (the others map to themselves); a sequence gives ``t[c]`` for every class.
    """
    if transition is None:
        return next_class_transition(num_classes)
    if isinstance(transition, Mapping):
        table = np.arange(num_classes, dtype=np.int64)
        for source, target in transition.items():
            if not 0 <= int(source) < num_classes:
                raise ValueError(f"transition maps class {source}, expected a class in 0..{num_classes - 1}")
            table[int(source)] = int(target)
    else:
        table = np.asarray(transition)
        if table.shape != (num_classes,):
            raise ValueError(f"transition must have one entry per class, shape ({num_classes},), got {table.shape}")
    return _check_labels(table, num_classes, "transition")


def asymmetric_label_noise(
    labels: np.ndarray | Sequence[int],
    num_classes: int,
    ratio: float,
    rng: np.random.Generator,
    transition: Mapping[int, int] | Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """A copy of ``labels`` where exactly ``round(ratio * N)`` picked entries y become ``transition[y]``."""
    clean = _check_labels(labels, num_classes)
    table = transition_array(transition, num_classes)
    picked = _picked(len(clean), ratio, rng)
    noisy = clean.copy()
    noisy[picked] = table[clean[picked]]
    return noisy


@dataclass(frozen=True)
class LabelNoise:
    """Clean and noisy labels of every modality, and how the noise was made.

    ``clean[m]`` and ``noisy[m]`` are (N_m,) int64 arrays for modality ``m``; ``kind`` is
    one of :data:`LABEL_NOISE_KINDS`, or ``"file"`` for noise read from a published file
    (whose ``ratio`` is then the realised rate over all modalities and ``seed`` is None).
    """

    kind: str
    ratio: float
    seed: int | None
    num_classes: int
    clean: dict[str, np.ndarray]
    noisy: dict[str, np.ndarray]
    transition: np.ndarray | None = None

    @property
    def modalities(self) -> tuple[str, ...]:
        return tuple(self.noisy)

    def noisy_mask(self, modality: str) -> np.ndarray:
        """Bool (N,): samples of ``modality`` whose label was corrupted."""
        return self.noisy[modality] != self.clean[modality]

    def realised_ratio(self, modality: str) -> float:
        """Fraction of ``modality``'s samples whose label is wrong."""
        return float(self.noisy_mask(modality).mean()) if len(self.noisy[modality]) else 0.0

    def save(self, path: str | Path) -> Path:
        """Write everything, clean labels included, as JSON (``.json`` is appended if missing)."""
        path = Path(path)
        if path.suffix != ".json":
            path = path.with_name(path.name + ".json")
        payload = {
            "format": _FORMAT,
            "version": _VERSION,
            "kind": self.kind,
            "ratio": self.ratio,
            "seed": self.seed,
            "num_classes": self.num_classes,
            "transition": None if self.transition is None else self.transition.tolist(),
            "labels": {m: {"clean": self.clean[m].tolist(), "noisy": self.noisy[m].tolist()} for m in self.modalities},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload))
        return path


def inject_label_noise(
    labels: Mapping[str, np.ndarray | Sequence[int]],
    num_classes: int,
    ratio: float,
    *,
    kind: str = "symmetric",
    seed: int = 0,
    transition: Mapping[int, int] | Sequence[int] | np.ndarray | None = None,
) -> LabelNoise:
    """Corrupt each modality's labels independently (see the module docstring).

    ``labels`` maps a modality name (e.g. ``"image"``, ``"text"``) to its clean labels;
    ``transition`` is only used by ``kind="asymmetric"``.
    """
    if kind not in LABEL_NOISE_KINDS:
        raise ValueError(f"label noise kind must be one of {LABEL_NOISE_KINDS}, got {kind!r}")
    if kind == "symmetric" and transition is not None:
        raise ValueError("a transition map only applies to asymmetric label noise")
    if not labels:
        raise ValueError("labels must name at least one modality")
    streams = np.random.SeedSequence(seed).spawn(len(labels))
    clean = {m: _check_labels(values, num_classes, f"labels[{m!r}]") for m, values in labels.items()}
    table = transition_array(transition, num_classes) if kind == "asymmetric" else None
    noisy = {}
    for (modality, values), stream in zip(clean.items(), streams, strict=True):
        rng = np.random.default_rng(stream)
        if kind == "symmetric":
            noisy[modality] = symmetric_label_noise(values, num_classes, ratio, rng)
        else:
            noisy[modality] = asymmetric_label_noise(values, num_classes, ratio, rng, table)
    return LabelNoise(kind, float(ratio), seed, num_classes, clean, noisy, table)


def load_label_noise(
    path: str | Path,
    clean_labels: Mapping[str, np.ndarray | Sequence[int]] | None = None,
    num_classes: int | None = None,
) -> LabelNoise:
    """Read a file written by :meth:`LabelNoise.save`, or a list-of-lists noisy-label JSON.

    Ours carries its clean labels; if ``clean_labels`` is also given it must match them
    (a noise file made for other data is an error). A bare JSON list holds one list of
    noisy labels per modality (MRL's ``noise_labels_<r>_{sym,asym}.json``); it needs
    ``clean_labels`` (in the same modality order) and ``num_classes``. Any mismatch
    raises :class:`DataFormatError` naming the file and the field.
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: label noise file not found")
    try:
        payload = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataFormatError(f"{path}: not a JSON file ({err})") from None
    if isinstance(payload, list):
        return _from_lists(path, payload, clean_labels, num_classes)
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise DataFormatError(
            f"{path}: expected a JSON object with format {_FORMAT!r} or a JSON list of per-modality label lists"
        )
    if payload.get("version") != _VERSION:
        raise DataFormatError(f"{path}: version {payload.get('version')!r}, expected {_VERSION}")
    try:
        classes = int(payload["num_classes"])
        if num_classes is not None and classes != num_classes:
            raise DataFormatError(f"{path}: num_classes is {classes}, expected {num_classes}")
        clean = {m: _file_labels(path, f"labels.{m}.clean", v["clean"], classes) for m, v in payload["labels"].items()}
        noisy = {m: _file_labels(path, f"labels.{m}.noisy", v["noisy"], classes) for m, v in payload["labels"].items()}
        transition = payload["transition"]
        noise = LabelNoise(
            payload["kind"],
            float(payload["ratio"]),
            payload["seed"],
            classes,
            clean,
            noisy,
            None if transition is None else _file_labels(path, "transition", transition, classes),
        )
    except (KeyError, TypeError) as err:
        raise DataFormatError(f"{path}: missing or malformed field {err}") from None
    for modality in noise.modalities:
        if len(noise.clean[modality]) != len(noise.noisy[modality]):
            raise DataFormatError(
                f"{path}: labels.{modality} has {len(noise.clean[modality])} clean and "
                f"{len(noise.noisy[modality])} noisy labels"
            )
    if clean_labels is not None:
        _check_same_clean(path, noise, clean_labels)
    return noise


def _file_labels(path: Path, field: str, values: object, num_classes: int) -> np.ndarray:
    try:
        return _check_labels(np.asarray(values), num_classes, field)
    except ValueError as err:
        raise DataFormatError(f"{path}: {err}") from None


def _from_lists(
    path: Path,
    lists: list,
    clean_labels: Mapping[str, np.ndarray | Sequence[int]] | None,
    num_classes: int | None,
) -> LabelNoise:
    if clean_labels is None or num_classes is None:
        raise DataFormatError(f"{path}: a list-of-lists noise file needs clean_labels and num_classes to be read")
    if len(lists) != len(clean_labels):
        raise DataFormatError(f"{path}: {len(lists)} label lists, expected one per modality ({len(clean_labels)})")
    clean = {m: _check_labels(values, num_classes, f"clean_labels[{m!r}]") for m, values in clean_labels.items()}
    noisy = {}
    for position, (modality, values) in enumerate(clean.items()):
        noisy[modality] = _file_labels(path, f"list {position} ({modality})", lists[position], num_classes)
        if len(noisy[modality]) != len(values):
            raise DataFormatError(
                f"{path}: list {position} ({modality}) has {len(noisy[modality])} labels, expected {len(values)}"
            )
    wrong = sum(int((noisy[m] != clean[m]).sum()) for m in clean)
    total = sum(len(v) for v in clean.values())
    return LabelNoise("file", wrong / total if total else 0.0, None, num_classes, clean, noisy)


def _check_same_clean(path: Path, noise: LabelNoise, clean_labels: Mapping[str, np.ndarray | Sequence[int]]) -> None:
    if set(clean_labels) != set(noise.modalities):
        raise DataFormatError(f"{path}: modalities {list(noise.modalities)}, expected {list(clean_labels)}")
    for modality, values in clean_labels.items():
        if not np.array_equal(np.asarray(values), noise.clean[modality]):
            raise DataFormatError(
                f"{path}: labels.{modality}.clean differ from the dataset's labels (the noise was made for other data)"
            )
