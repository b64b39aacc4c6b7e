"""Retrieval metrics (R@K, rSum, ranks; COCO 5-fold) and noise-division quality."""

from hfncl.evaluation.division import division_quality
from hfncl.evaluation.retrieval import (
    RANK_KEYS,
    RECALL_KEYS,
    RowScorer,
    coco_5fold_metrics,
    coco_5fold_per_fold,
    embedding_scorer,
    retrieval_metrics,
    retrieval_metrics_from_matrix,
)

__all__ = [
    "RANK_KEYS",
    "RECALL_KEYS",
    "RowScorer",
    "coco_5fold_metrics",
    "coco_5fold_per_fold",
    "division_quality",
    "embedding_scorer",
    "retrieval_metrics",
    "retrieval_metrics_from_matrix",
]
