"""Category cross-modal retrieval mAP over the full ranking (I2T, T2I, mean) as an ``evaluate`` metric.

Each example is one image-text pair: both embeddings and both class labels;
:func:`hfncl.evaluation.cross_modal_map` computes the numbers (cosine similarity, ties
share one cut-off, a query without relevant items has AP 0).
"""

from __future__ import annotations

import datasets
import evaluate
import numpy as np

from hfncl.evaluation import cross_modal_map

_INPUTS = """
Args:
    image_embeds: (N, D) image embeddings, one row per pair.
    image_labels: (N,) integer class of each image.
    text_embeds: (N, D) text embeddings.
    text_labels: (N,) integer class of each text.
    chunk_size: queries scored per block.
Returns:
    i2t_map, t2i_map and mean_map (fractions in [0, 1]), exactly as hfncl.evaluation computes them.
Example:
    >>> import evaluate, hfncl
    >>> metric = evaluate.load(hfncl.metrics_path("map"))
    >>> metric.compute(
    ...     image_embeds=[[1, 0], [0, 1]], image_labels=[0, 1], text_embeds=[[1, 0], [0, 1]], text_labels=[0, 1]
    ... )
    {'i2t_map': 1.0, 't2i_map': 1.0, 'mean_map': 1.0}
"""


class Map(evaluate.Metric):
    """hfncl's cross-modal mAP of paired image and text embeddings."""

    def _info(self) -> evaluate.MetricInfo:
        embeds = datasets.List(datasets.Value("float64"))
        return evaluate.MetricInfo(
            description=__doc__,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "image_embeds": embeds,
                    "image_labels": datasets.Value("int64"),
                    "text_embeds": embeds,
                    "text_labels": datasets.Value("int64"),
                }
            ),
        )

    def _compute(
        self,
        image_embeds: list[list[float]],
        image_labels: list[int],
        text_embeds: list[list[float]],
        text_labels: list[int],
        chunk_size: int = 256,
    ) -> dict[str, float]:
        return cross_modal_map(
            np.asarray(image_embeds, dtype=np.float64),
            np.asarray(image_labels, dtype=np.int64),
            np.asarray(text_embeds, dtype=np.float64),
            np.asarray(text_labels, dtype=np.int64),
            chunk_size,
        )
