"""The figures of a run as its model card shows them: metric names, markdown tables of the evaluations and of
the division quality, and the test metrics as the Hub's model-index entries (:class:`huggingface_hub.EvalResult`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from huggingface_hub import EvalResult

from hfncl.evaluation.recall import RANK_KEYS, RECALL_KEYS
from hfncl.hub.record import CheckpointError, RunRecord

TASK_TYPE = "image-text-retrieval"
TASK_NAME = "Image-text retrieval"
FOLD_PREFIX = "fold_"
_DIRECTIONS = {"i2t": "Image-to-text", "t2i": "Text-to-image"}
_MAP_LABELS = {"i2t_map": "I2T mAP", "t2i_map": "T2I mAP", "mean_map": "mean mAP"}
_RANKS = {"medr": ("medr", "median rank"), "meanr": ("meanr", "mean rank")}
_DIVISION_COLUMNS = {
    "auc": "ROC-AUC",
    "precision": "precision",
    "recall": "recall",
    "accuracy": "accuracy",
    "predicted_clean_ratio": "treated as clean",
    "true_noise_ratio": "truly noisy",
}


def metric_label(key: str, long: bool = False) -> str:
    """Column header (``"i2t R@1"``) or full name (``"Image-to-text R@1"``) of a retrieval metric key."""
    direction, _, name = key.partition("_")
    if key == "rsum":
        return "rSum"
    if key in _MAP_LABELS:
        return _MAP_LABELS[key]
    if direction in _DIRECTIONS and name.startswith("r") and name[1:].isdigit():
        return f"{_DIRECTIONS[direction] if long else direction} R@{name[1:]}"
    if direction in _DIRECTIONS and name in _RANKS:
        return f"{_DIRECTIONS[direction]} {_RANKS[name][1]}" if long else f"{direction} {_RANKS[name][0]}"
    return key


def _is_number(value: Any) -> bool:
    """A finite int or float (NaN marks an undefined metric, e.g. AUC when one class is missing)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _ordered_keys(rows: Iterable[Mapping[str, Any]], known: Iterable[str]) -> list[str]:
    """The keys present in any row: the known ones in their order, then the others sorted."""
    present = set().union(*[set(row) for row in rows])
    known = list(known)
    return [k for k in known if k in present] + sorted(present - set(known))


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _metric_cell(value: Any, digits: int) -> str:
    return f"{value:.{digits}f}" if _is_number(value) else "–"


def split_metrics(metrics: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """Metrics of the whole split and of the fold average (``fold_*`` keys, prefix removed)."""
    whole = {k: v for k, v in metrics.items() if not k.startswith(FOLD_PREFIX)}
    folds = {k[len(FOLD_PREFIX) :]: v for k, v in metrics.items() if k.startswith(FOLD_PREFIX)}
    return whole, folds


def evaluation_rows(record: RunRecord) -> list[tuple[str, dict[str, float]]]:
    """(label, metrics) of every evaluation the record holds: test, test fold average, validation."""
    rows = []
    if record.test is not None:
        data = record.data
        whole, folds = split_metrics(record.test)
        where = f"`{data.test_split}` ({data.test_images} images)" if data else "test"
        rows.append((f"test: {where}", whole))
        if folds and data:
            per_fold = data.test_images // data.test_folds
            rows.append((f"test: `{data.test_split}`, mean of {data.test_folds} folds of {per_fold} images", folds))
    where = f"`{record.data.val_split}`" if record.data else "validation"
    rows.append((f"validation: {where}, epoch {record.best_epoch}", dict(record.validation)))
    return rows


def evaluation_table(record: RunRecord) -> str:
    rows = evaluation_rows(record)
    columns = _ordered_keys([metrics for _, metrics in rows], (*RECALL_KEYS, "rsum", *RANK_KEYS, *_MAP_LABELS))
    body = [[label] + [_metric_cell(metrics.get(k), 2) for k in columns] for label, metrics in rows]
    return markdown_table(["split"] + [metric_label(k) for k in columns], body)


def division_rows(division: Mapping[str, float]) -> list[tuple[str, dict[str, float]]]:
    """Group the trainer's flat keys (``division/auc``, ``division/net1/auc``) by network."""
    networks: dict[str, dict[str, float]] = {}
    for key, value in division.items():
        parts = key.split("/")
        if parts[0] != "division" or len(parts) not in (2, 3):
            raise CheckpointError(f"division quality key {key!r} is not division/<metric> or division/net<K>/<metric>")
        network = parts[1] if len(parts) == 3 else "all"
        networks.setdefault(network, {})[parts[-1]] = value
    return sorted(networks.items())


def division_table(division: Mapping[str, float]) -> str:
    """The division quality per network as a markdown table, or ``""`` when there is none."""
    rows = division_rows(division)
    if not rows:
        return ""
    columns = _ordered_keys([metrics for _, metrics in rows], _DIVISION_COLUMNS)
    body = [[network] + [_metric_cell(metrics.get(k), 3) for k in columns] for network, metrics in rows]
    return markdown_table(["network"] + [_DIVISION_COLUMNS.get(k, k) for k in columns], body)


def eval_results(record: RunRecord) -> list[EvalResult]:
    """The test metrics as model-index entries (none before a full run adds the test results)."""
    if record.test is None or record.data is None:
        return []
    data = record.data
    whole, folds = split_metrics(record.test)
    common: dict[str, Any] = dict(
        task_type=TASK_TYPE,
        task_name=TASK_NAME,
        dataset_type=data.dataset,
        dataset_name=data.dataset,
        dataset_split=data.test_split,
    )
    results = [
        EvalResult(metric_type=key, metric_name=metric_label(key, long=True), metric_value=round(value, 2), **common)
        for key, value in whole.items()
        if _is_number(value)
    ]
    results += [
        EvalResult(
            metric_type=FOLD_PREFIX + key,
            metric_name=f"{metric_label(key, long=True)} ({data.test_folds}-fold mean)",
            metric_value=round(value, 2),
            **common,
        )
        for key, value in folds.items()
        if _is_number(value)
    ]
    return results
