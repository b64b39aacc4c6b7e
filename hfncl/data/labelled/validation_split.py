"""The validation split where the files have none: the head of the test split, or per class in
file order for one unsplit set; or none at all (the rules of :mod:`hfncl.data.labelled`)."""

from __future__ import annotations

import numpy as np

from hfncl.data.labelled.dataset import SPLITS
from hfncl.data.labelled.labels import _ResolvedSplit


def _stratified_rows(labels: np.ndarray, fractions: tuple[float, float, float]) -> dict[str, np.ndarray]:
    if len(fractions) != 3 or min(fractions) < 0 or not np.isclose(sum(fractions), 1.0) or fractions[0] == 0:
        raise ValueError(f"split_fractions must be three non-negative fractions summing to 1, got {fractions}")
    rows: dict[str, list[np.ndarray]] = {split: [] for split in SPLITS}
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        n_train = round(len(members) * fractions[0])
        n_valid = round(len(members) * fractions[1])
        rows["train"].append(members[:n_train])
        rows["valid"].append(members[n_train : n_train + n_valid])
        rows["test"].append(members[n_train + n_valid :])
    return {split: np.sort(np.concatenate(parts)) for split, parts in rows.items()}


def _derive_splits(
    resolved: dict[str, _ResolvedSplit], valid_size: int | None, fractions: tuple[float, float, float]
) -> tuple[dict[str, _ResolvedSplit | None], str]:
    if valid_size == 0 and "test" in resolved:
        return {"train": resolved["train"], "valid": None, "test": resolved["test"]}, "none"
    if "valid" in resolved:
        return dict(resolved), "file"
    if "test" in resolved:
        test = resolved["test"]
        size = len(test.image_labels)
        valid_size = size // 2 if valid_size is None else valid_size
        if not 0 < valid_size < size:
            raise ValueError(
                f"valid_size must be 0 (no validation) or in 1..{size - 1} (the test split has {size} samples), "
                f"got {valid_size}"
            )
        return {
            "train": resolved["train"],
            "valid": test.subset(np.arange(valid_size)),
            "test": test.subset(np.arange(valid_size, size)),
        }, "head of test"
    whole = resolved["train"]
    rows = _stratified_rows(whole.image_labels, fractions)
    empty = [split for split, r in rows.items() if r.size == 0]
    if empty:
        raise ValueError(f"split_fractions {fractions} leave the {' and '.join(empty)} split empty")
    return {split: whole.subset(r) for split, r in rows.items()}, "per-class file order"
