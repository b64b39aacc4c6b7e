"""Image-text retrieval (R@1/5/10, rSum, medr, meanr; COCO 5-fold 1K) as an ``evaluate`` metric.

Each example is one image's row of the ``(N, N * k)`` similarity matrix (caption ``c``
belongs to image ``c // k``); :func:`hfncl.evaluation.retrieval_metrics_from_matrix`, or
:func:`hfncl.evaluation.coco_5fold_metrics` when ``folds > 1``, computes the numbers.
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np
import torch

from hfncl.evaluation import coco_5fold_metrics, retrieval_metrics_from_matrix

_INPUTS = """
Args:
    similarities: one row per image, its similarity to every caption, shape (N, N * k);
        stored as float64, so float32 and float64 scores rank as given.
    captions_per_image: k (5 for Flickr30K and MS-COCO, 1 for CC152K). Default 1.
    folds: 1 (default) for the whole set; 5 with 5000 images for MS-COCO's 5-fold 1K,
        each fold's images against their own captions, the metrics averaged over folds.
    chunk_size: images scored per block.
Returns:
    i2t_r1, i2t_r5, i2t_r10, t2i_r1, t2i_r5, t2i_r10 (percent), rsum, and the 1-based
    i2t_medr, i2t_meanr, t2i_medr, t2i_meanr, exactly as hfncl.evaluation computes them.
Example:
    >>> import evaluate, hfncl
    >>> metric = evaluate.load(hfncl.metrics_path("retrieval"))
    >>> metric.compute(similarities=[[0.9, 0.1], [0.2, 0.8]])["rsum"]
    600.0
"""


class Retrieval(evaluate.Metric):
    """hfncl's retrieval metrics of a similarity matrix given row by row."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=__doc__,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features({"similarities": datasets.List(datasets.Value("float64"))}),
        )

    def _compute(
        self, similarities: list[list[float]], captions_per_image: int = 1, folds: int = 1, chunk_size: int = 1000
    ) -> dict[str, float]:
        matrix = torch.from_numpy(np.asarray(similarities, dtype=np.float64))
        if folds == 1:
            return retrieval_metrics_from_matrix(matrix, captions_per_image, chunk_size)
        if matrix.ndim != 2 or matrix.shape[1] != matrix.shape[0] * captions_per_image:
            raise ValueError(f"similarities must have shape (N, N * {captions_per_image}), got {tuple(matrix.shape)}")
        return coco_5fold_metrics(lambda rows: matrix[rows], matrix.shape[0], captions_per_image, folds, chunk_size)
