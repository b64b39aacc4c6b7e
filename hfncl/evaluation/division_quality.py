"""How well a method split the training pairs into clean and noisy ones.

The ground-truth clean mask is hidden from the methods; after each division the
trainer compares the method's clean probability and clean / noisy partition with it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numpy.typing import ArrayLike
from sklearn.metrics import roc_auc_score


def _as_array(values: torch.Tensor | ArrayLike) -> np.ndarray:
    """A 1-D numpy copy of a torch tensor (any device) or array-like."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    return np.asarray(values).reshape(-1)


def _as_mask(values: torch.Tensor | ArrayLike, name: str) -> np.ndarray:
    """A boolean mask from booleans or 0/1 values; anything else is rejected."""
    array = _as_array(values)
    if array.dtype != np.bool_ and not np.isin(array, (0, 1)).all():
        raise ValueError(f"{name} must be boolean (or 0/1), got values outside {{0, 1}}")
    return array.astype(bool)


def _ratio(numerator: int, denominator: int) -> float:
    """``numerator / denominator``, NaN when the denominator is 0."""
    return numerator / denominator if denominator else math.nan


def division_quality(
    clean_prob: torch.Tensor | ArrayLike,
    predicted_clean: torch.Tensor | ArrayLike,
    true_clean: torch.Tensor | ArrayLike,
) -> dict[str, float]:
    """Precision, recall, ROC-AUC and accuracy of a clean / noisy division.

    Args:
        clean_prob: ``(N,)`` the method's probability (or any score) that each pair is clean.
        predicted_clean: ``(N,)`` boolean, the pairs the method treats as clean.
        true_clean: ``(N,)`` boolean, the hidden ground truth.

    Returns:
        ``precision``: share of predicted-clean pairs that are truly clean (NaN if none
        is predicted clean); ``recall``: share of truly clean pairs predicted clean (NaN
        if none is clean); ``auc``: ROC-AUC of ``clean_prob`` against ``true_clean``
        (NaN when only one class is present, where it is undefined); ``accuracy``;
        ``predicted_clean_ratio``; ``true_noise_ratio``.

    Raises:
        ValueError: if the inputs are empty, differ in length, or a mask is not boolean.
    """
    scores = _as_array(clean_prob).astype(np.float64)
    predicted = _as_mask(predicted_clean, "predicted_clean")
    truth = _as_mask(true_clean, "true_clean")
    if not len(scores) == len(predicted) == len(truth):
        raise ValueError(
            "clean_prob, predicted_clean and true_clean must have the same length, got "
            f"{len(scores)}, {len(predicted)} and {len(truth)}"
        )
    if len(truth) == 0:
        raise ValueError("division_quality needs at least one pair")
    true_positives = int((predicted & truth).sum())
    both_classes = 0 < truth.sum() < len(truth)
    return {
        "precision": _ratio(true_positives, int(predicted.sum())),
        "recall": _ratio(true_positives, int(truth.sum())),
        "auc": float(roc_auc_score(truth, scores)) if both_classes else math.nan,
        "accuracy": float((predicted == truth).mean()),
        "predicted_clean_ratio": float(predicted.mean()),
        "true_noise_ratio": float(1.0 - truth.mean()),
    }


SET_PREFIX = "set/"


def partition_report(
    extras: dict[str, torch.Tensor], true_clean: torch.Tensor | ArrayLike
) -> list[tuple[str, float, float]]:
    """``(name, share, purity)`` of every named set ``extras["set/NAME"]`` of a division.

    ``share`` is the set's fraction of all pairs, ``purity`` the fraction of its pairs
    that are truly clean (NaN for an empty set).
    """
    truth = _as_mask(true_clean, "true_clean")
    report = []
    for key in sorted(k for k in extras if k.startswith(SET_PREFIX)):
        members = _as_mask(extras[key], key)
        if len(members) != len(truth):
            raise ValueError(f"division set {key!r} has {len(members)} entries for {len(truth)} pairs")
        report.append(
            (key[len(SET_PREFIX) :], float(members.mean()), _ratio(int((members & truth).sum()), int(members.sum())))
        )
    return report
