"""mAP over the full ranking, against a hand example and scikit-learn's average precision per query."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score

from hfncl.evaluation import MAP_KEYS, average_precisions, cross_modal_map, mean_average_precision


def test_average_precision_by_hand():
    # one query along x; gallery cosines 1.0, 0.8, 0.6, 0.0, -1.0 with labels 0, 1, 0, 0, 1.
    query = torch.tensor([[1.0, 0.0]])
    gallery = torch.tensor([[2.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 3.0], [-1.0, 0.0]])
    labels = torch.tensor([0, 1, 0, 0, 1])
    # relevant at ranks 1, 3, 4: AP = (1/1 + 2/3 + 3/4) / 3
    expected = (1 + 2 / 3 + 3 / 4) / 3
    assert mean_average_precision(query, [0], gallery, labels) == pytest.approx(expected)
    # label 1 is relevant at ranks 2 and 5: (1/2 + 2/5) / 2
    assert mean_average_precision(query, [1], gallery, labels) == pytest.approx((1 / 2 + 2 / 5) / 2)


def test_matches_sklearn_average_precision_per_query():
    rng = np.random.default_rng(0)
    queries, gallery = rng.normal(size=(37, 8)), rng.normal(size=(53, 8))
    q_labels, g_labels = rng.integers(0, 4, 37), rng.integers(0, 4, 53)
    normalised = gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
    cosine = queries / np.linalg.norm(queries, axis=1, keepdims=True) @ normalised.T
    expected = [average_precision_score(g_labels == q_labels[i], cosine[i]) for i in range(37)]
    got = average_precisions(queries, q_labels, gallery, g_labels, chunk_size=5)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    whole = average_precisions(queries, q_labels, gallery, g_labels, chunk_size=1000)
    np.testing.assert_array_equal(got, whole)


def test_ties_match_sklearn_and_do_not_depend_on_gallery_order():
    rng = np.random.default_rng(2)
    # 3-dimensional embeddings with entries in {0, 1}: many exactly tied cosines
    queries, gallery = rng.integers(0, 2, (30, 3)) + 0.0, rng.integers(0, 2, (80, 3)) + 0.0
    queries[queries.sum(axis=1) == 0, 0] = 1.0
    gallery[gallery.sum(axis=1) == 0, 1] = 1.0
    q_labels, g_labels = rng.integers(0, 3, 30), rng.integers(0, 3, 80)
    cosine = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ (
        gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
    ).T
    expected = [average_precision_score(g_labels == q_labels[i], cosine[i]) for i in range(30)]
    got = average_precisions(queries, q_labels, gallery, g_labels, chunk_size=7)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    order = rng.permutation(80)
    np.testing.assert_allclose(average_precisions(queries, q_labels, gallery[order], g_labels[order]), got, rtol=1e-12)


def test_query_without_relevant_items_scores_zero_and_counts():
    gallery, labels = torch.eye(3), torch.tensor([0, 0, 1])
    aps = average_precisions(torch.eye(3), torch.tensor([0, 1, 2]), gallery, labels)
    assert aps[2] == 0.0
    assert mean_average_precision(torch.eye(3), torch.tensor([0, 1, 2]), gallery, labels) == pytest.approx(aps.mean())


def test_tied_items_share_one_cut_off():
    # both gallery items tie at cosine 1; the relevant one's precision is 1/2 whichever comes first
    query, gallery = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 0.0], [2.0, 0.0]])
    assert mean_average_precision(query, [0], gallery, [1, 0]) == pytest.approx(0.5)
    assert mean_average_precision(query, [0], gallery, [0, 1]) == pytest.approx(0.5)


def test_cross_modal_map_both_directions():
    rng = np.random.default_rng(1)
    images, texts = rng.normal(size=(20, 6)), rng.normal(size=(20, 6))
    image_labels, text_labels = rng.integers(0, 3, 20), rng.integers(0, 3, 20)
    result = cross_modal_map(images, image_labels, texts, text_labels, chunk_size=7)
    assert tuple(result) == MAP_KEYS
    assert result["i2t_map"] == pytest.approx(mean_average_precision(images, image_labels, texts, text_labels))
    assert result["t2i_map"] == pytest.approx(mean_average_precision(texts, text_labels, images, image_labels))
    assert result["mean_map"] == pytest.approx((result["i2t_map"] + result["t2i_map"]) / 2)
    perfect = cross_modal_map(np.eye(3)[[0, 1, 2, 0]], [0, 1, 2, 0], np.eye(3)[[0, 1, 2]], [0, 1, 2])
    assert perfect == {"i2t_map": 1.0, "t2i_map": 1.0, "mean_map": 1.0}


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="query_labels has 2 labels for 3 embeddings"):
        mean_average_precision(torch.ones(3, 2), [0, 1], torch.ones(2, 2), [0, 1])
    with pytest.raises(ValueError, match="dimension"):
        mean_average_precision(torch.ones(3, 2), [0, 1, 1], torch.ones(2, 4), [0, 1])
    with pytest.raises(ValueError, match="integer class indices"):
        mean_average_precision(torch.ones(1, 2), [0.5], torch.ones(1, 2), [0])


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_embeddings_are_refused(bad):
    images = torch.eye(3)
    images[1, 2] = bad
    with pytest.raises(ValueError, match=r"query_embeds hold non-finite values .* rows \[1\].* broken"):
        cross_modal_map(images, [0, 1, 2], torch.eye(3), [0, 1, 2])


def test_constant_embeddings_score_chance_not_perfect():
    labels = torch.tensor([0, 1, 2, 3])
    # every cosine is 0: each query's single relevant item shares the cut-off of all 4, AP = 1/4
    got = cross_modal_map(torch.zeros(4, 3), labels, torch.zeros(4, 3), labels)
    assert got == {"i2t_map": 0.25, "t2i_map": 0.25, "mean_map": 0.25}
