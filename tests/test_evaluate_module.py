"""hfncl's metrics as ``evaluate`` modules give exactly hfncl.evaluation's numbers."""

from __future__ import annotations

import evaluate
import numpy as np
import pytest
import torch

import hfncl
from hfncl.evaluation import coco_5fold_metrics, cross_modal_map, retrieval_metrics_from_matrix


@pytest.fixture(scope="module")
def retrieval() -> evaluate.Metric:
    return evaluate.load(hfncl.metrics_path("retrieval"))


def tied_scores(rows: int, columns: int, seed: int) -> np.ndarray:
    """float32 scores on a coarse grid, so that ties occur (whatever the tie rule, both sides apply the same)."""
    return np.random.default_rng(seed).integers(0, 6, (rows, columns)).astype(np.float32) / 4


@pytest.mark.parametrize("captions_per_image", [1, 5])
def test_retrieval_module_matches_hfncl(retrieval, captions_per_image):
    sims = tied_scores(12, 12 * captions_per_image, captions_per_image)
    expected = retrieval_metrics_from_matrix(torch.from_numpy(sims), captions_per_image)
    assert retrieval.compute(similarities=sims, captions_per_image=captions_per_image) == expected
    for start in range(0, 12, 5):  # rows streamed in batches, as over an evaluation loop
        retrieval.add_batch(similarities=sims[start : start + 5])
    assert retrieval.compute(captions_per_image=captions_per_image, chunk_size=4) == expected


def test_retrieval_module_coco_5fold_matches_hfncl(retrieval):
    sims = np.random.default_rng(2).normal(size=(20, 100)).astype(np.float32)
    tensor = torch.from_numpy(sims)
    expected = coco_5fold_metrics(lambda rows: tensor[rows], 20, 5, folds=5)
    assert retrieval.compute(similarities=sims, captions_per_image=5, folds=5) == expected
    with pytest.raises(ValueError, match=r"similarities must have shape \(N, N \* 5\), got \(20, 99\)"):
        retrieval.compute(similarities=sims[:, :99], captions_per_image=5, folds=5)


def test_map_module_matches_hfncl():
    rng = np.random.default_rng(3)
    images, texts = rng.normal(size=(30, 8)).astype(np.float32), rng.normal(size=(30, 8)).astype(np.float32)
    image_labels, text_labels = rng.integers(0, 4, 30), rng.integers(0, 4, 30)
    metric = evaluate.load(hfncl.metrics_path("map"))
    result = metric.compute(image_embeds=images, image_labels=image_labels, text_embeds=texts, text_labels=text_labels)
    assert result == cross_modal_map(images, image_labels, texts, text_labels)


def test_unknown_metric_names_the_choices():
    with pytest.raises(ValueError, match=r"metric must be one of \('retrieval', 'map'\), got 'recall'"):
        hfncl.metrics_path("recall")
