"""Retrieval metrics (R@K, rSum, ranks; COCO 5-fold; mAP over labels) and noise-division quality."""

from hfncl.evaluation.division_quality import division_quality, partition_report
from hfncl.evaluation.map import MAP_KEYS, average_precisions, cross_modal_map, mean_average_precision
from hfncl.evaluation.recall import (
    RANK_KEYS,
    RECALL_KEYS,
    RowScorer,
    check_split_size,
    coco_5fold_metrics,
    coco_5fold_per_fold,
    embedding_scorer,
    retrieval_metrics,
    retrieval_metrics_from_matrix,
)

__all__ = [
    "MAP_KEYS",
    "RANK_KEYS",
    "RECALL_KEYS",
    "RowScorer",
    "average_precisions",
    "check_split_size",
    "coco_5fold_metrics",
    "coco_5fold_per_fold",
    "cross_modal_map",
    "division_quality",
    "partition_report",
    "embedding_scorer",
    "mean_average_precision",
    "retrieval_metrics",
    "retrieval_metrics_from_matrix",
]
