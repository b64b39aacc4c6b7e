"""Streaming retrieval metrics against SCAN's brute-force argsort evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hfncl.evaluation import (
    RANK_KEYS,
    RECALL_KEYS,
    coco_5fold_metrics,
    coco_5fold_per_fold,
    embedding_scorer,
    retrieval_metrics,
    retrieval_metrics_from_matrix,
)


def scan_metrics(sims: np.ndarray, k: int) -> dict[str, float]:
    """SCAN's i2t / t2i evaluation: one argsort per query, independent of hfncl."""
    n = sims.shape[0]
    i2t = np.zeros(n)
    for image in range(n):
        order = np.argsort(sims[image])[::-1]
        i2t[image] = min(np.where(order == c)[0][0] for c in range(k * image, k * image + k))
    t2i = np.zeros(n * k)
    for caption in range(n * k):
        order = np.argsort(sims[:, caption])[::-1]
        t2i[caption] = np.where(order == caption // k)[0][0]
    out = {}
    for prefix, ranks in (("i2t", i2t), ("t2i", t2i)):
        for at in (1, 5, 10):
            out[f"{prefix}_r{at}"] = 100.0 * len(np.where(ranks < at)[0]) / len(ranks)
        out[f"{prefix}_medr"] = np.floor(np.median(ranks)) + 1
        out[f"{prefix}_meanr"] = ranks.mean() + 1
    out["rsum"] = sum(out[key] for key in RECALL_KEYS)
    return out


def assert_metrics_close(got: dict[str, float], expected: dict[str, float]) -> None:
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key


def random_sims(n: int, k: int, seed: int) -> np.ndarray:
    """Random scores with a planted signal so that recalls are neither 0 nor 100."""
    rng = np.random.default_rng(seed)
    sims = rng.standard_normal((n, n * k))
    sims[np.arange(n * k) // k, np.arange(n * k)] += 1.5
    return sims


def matrix_scorer(sims: np.ndarray, max_rows: int):
    matrix = torch.from_numpy(sims)

    def score_rows(rows: slice) -> torch.Tensor:
        assert rows.stop - rows.start <= max_rows
        return matrix[rows]

    return score_rows


@pytest.mark.parametrize("k", [5, 1])
@pytest.mark.parametrize("chunk_size", [1, 3, 23, 1000])
def test_streaming_matches_scan_bruteforce(k: int, chunk_size: int) -> None:
    n = 23
    sims = random_sims(n, k, seed=k)
    got = retrieval_metrics(matrix_scorer(sims, chunk_size), n, k, chunk_size=chunk_size)
    assert_metrics_close(got, scan_metrics(sims, k))
    assert list(got) == [*RECALL_KEYS, "rsum", *RANK_KEYS]
    assert all(type(value) is float for value in got.values())


def test_chunk_sizes_give_identical_results() -> None:
    sims = random_sims(40, 5, seed=7)
    results = [retrieval_metrics_from_matrix(sims, 5, chunk_size=size) for size in (1, 3, 7, 40)]
    assert all(result == results[0] for result in results)


def test_hand_made_three_images_two_captions() -> None:
    sims = torch.tensor(
        [
            [0.9, 0.1, 0.8, 0.2, 0.3, 0.4],
            [0.7, 0.6, 0.5, 0.9, 0.1, 0.2],
            [0.5, 0.9, 0.8, 0.7, 0.6, 0.1],
        ]
    )
    # i2t ranks (best own caption): images 0, 1 -> 0; image 2 -> 3 (0.6 < 0.9, 0.8, 0.7).
    # t2i ranks (own image): captions 0..5 -> 0, 2, 2, 0, 0, 2.
    got = retrieval_metrics_from_matrix(sims, captions_per_image=2, chunk_size=2)
    assert got["i2t_r1"] == pytest.approx(200 / 3)
    assert got["i2t_r5"] == got["i2t_r10"] == 100.0
    assert got["t2i_r1"] == 50.0
    assert got["t2i_r5"] == got["t2i_r10"] == 100.0
    assert got["rsum"] == pytest.approx(200 / 3 + 50 + 400)
    assert got["i2t_medr"] == 1.0 and got["i2t_meanr"] == 2.0
    assert got["t2i_medr"] == 2.0 and got["t2i_meanr"] == 2.0


def test_ties_count_against_the_query() -> None:
    """Replaces the former optimistic rule (a constant matrix scored R@1 = 100, rSum 600).

    10 images x 5 captions, all scores 0: every query ranks behind all its wrong
    candidates, i.e. i2t rank 45 (the other images' captions; own captions never count)
    and t2i rank 9 (the other images). Only t2i R@10 is reached, trivially, as 9 < 10.
    """
    got = retrieval_metrics_from_matrix(torch.zeros(10, 50), captions_per_image=5, chunk_size=3)
    assert [got[key] for key in RECALL_KEYS] == [0.0, 0.0, 0.0, 0.0, 0.0, 100.0]
    assert got["rsum"] == 100.0
    assert got["i2t_medr"] == got["i2t_meanr"] == 46.0
    assert got["t2i_medr"] == got["t2i_meanr"] == 10.0


def test_tied_wrong_candidate_counts_above_the_ground_truth() -> None:
    sims = torch.tensor([[1.0, 0.5, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0]])  # k = 2
    # image 0: best own 1.0 tied with caption 2 -> rank 1; image 1: own 1.0 tied with caption 1 -> rank 1
    # caption 0: image 1 scores 0.0 < 1.0 -> rank 0; caption 1 (gt 0.5): image 1 scores 1.0 -> rank 1
    # caption 2 (gt 0.0): image 0 scores 1.0 -> rank 1; caption 3 (gt 1.0): image 0 scores 0.0 -> rank 0
    got = retrieval_metrics_from_matrix(sims, captions_per_image=2)
    assert got["i2t_r1"] == 0.0 and got["i2t_r5"] == 100.0
    assert got["t2i_r1"] == 50.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_similarities_are_refused(bad: float) -> None:
    sims = random_sims(6, 2, seed=1)
    sims[4, 3] = bad
    with pytest.raises(ValueError, match=r"similarity rows 3:6 hold 1 non-finite .* image rows \[4\].* broken"):
        retrieval_metrics_from_matrix(sims, 2, chunk_size=3)


def test_nan_or_overflowing_embeddings_never_score_perfectly() -> None:
    images = torch.full((4, 3), float("nan"))
    with pytest.raises(ValueError, match="non-finite"):
        retrieval_metrics(embedding_scorer(images, images.repeat_interleave(2, dim=0)), 4, 2)
    huge = torch.full((4, 3), 3e38)  # finite, but every dot product overflows to inf
    with pytest.raises(ValueError, match="non-finite"):
        retrieval_metrics(embedding_scorer(huge, huge.repeat_interleave(2, dim=0)), 4, 2)


def test_scorer_drift_between_passes_does_not_demote_ground_truth() -> None:
    sims = torch.eye(4).repeat_interleave(2, dim=1)  # every caption's own image is its unique best
    calls = []

    def drifting(rows: slice) -> torch.Tensor:
        calls.append(rows)
        return sims[rows] + 1e-6 * len(calls)  # second pass scores slightly higher

    got = retrieval_metrics(drifting, 4, 2, chunk_size=4)
    assert got["t2i_r1"] == got["i2t_r1"] == 100.0


def test_embedding_scorer_averages_networks() -> None:
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(3, 6, 4, generator=generator)
    texts = torch.randn(3, 12, 4, generator=generator)
    expected = sum(images[net] @ texts[net].T for net in range(3)) / 3
    scorer = embedding_scorer(images, texts)
    torch.testing.assert_close(scorer(slice(0, 6)), expected)
    torch.testing.assert_close(scorer(slice(2, 5)), expected[2:5])
    single = embedding_scorer(images[1], texts[1])
    torch.testing.assert_close(single(slice(0, 6)), images[1] @ texts[1].T)
    streamed = retrieval_metrics(scorer, 6, 2, chunk_size=4)
    assert streamed == retrieval_metrics_from_matrix(expected, 2)


def test_embedding_scorer_rejects_mismatched_networks() -> None:
    with pytest.raises(ValueError, match="networks K"):
        embedding_scorer(torch.randn(2, 3, 4), torch.randn(3, 6, 4))
    with pytest.raises(ValueError, match="image_embeds"):
        embedding_scorer(torch.randn(4), torch.randn(6, 4))


def test_bad_scorer_shape_and_arguments_raise() -> None:
    with pytest.raises(ValueError, match="expected"):
        retrieval_metrics(lambda rows: torch.zeros(rows.stop - rows.start, 5), 3, 2)
    with pytest.raises(ValueError, match="positive"):
        retrieval_metrics(lambda rows: torch.zeros(1, 1), 1, 1, chunk_size=0)
    with pytest.raises(ValueError, match="N \\* 5"):
        retrieval_metrics_from_matrix(torch.zeros(3, 10), 5)


def test_coco_5fold_is_mean_of_independent_folds() -> None:
    n, k, folds = 10, 5, 5
    sims = random_sims(n, k, seed=3)
    size = n // folds
    blocks = [
        sims[f * size : (f + 1) * size, f * size * k : (f + 1) * size * k] for f in range(folds)
    ]
    expected_folds = [scan_metrics(block, k) for block in blocks]
    scorer = matrix_scorer(sims, max_rows=1)
    kwargs = {"num_images": n, "captions_per_image": k, "folds": folds, "chunk_size": 1}
    per_fold = coco_5fold_per_fold(scorer, **kwargs)
    for got, expected in zip(per_fold, expected_folds, strict=True):
        assert_metrics_close(got, expected)
    mean = coco_5fold_metrics(scorer, **kwargs)
    expected_mean = {key: np.mean([f[key] for f in expected_folds]) for key in expected_folds[0]}
    assert_metrics_close(mean, expected_mean)
    assert mean["rsum"] == pytest.approx(sum(mean[key] for key in RECALL_KEYS))


def test_coco_5fold_rejects_uneven_folds() -> None:
    with pytest.raises(ValueError, match="equal folds"):
        coco_5fold_metrics(lambda rows: torch.zeros(1, 1), num_images=11, folds=5)


def test_5k_by_25k_streams_in_chunks() -> None:
    n, k, chunk = 5000, 5, 1000
    generator = torch.Generator().manual_seed(0)
    images = torch.nn.functional.normalize(torch.randn(n, 16, generator=generator), dim=1)
    scorer = embedding_scorer(images, images.repeat_interleave(k, dim=0))
    requested: list[int] = []

    def bounded(rows: slice) -> torch.Tensor:
        requested.append(rows.stop - rows.start)
        assert requested[-1] <= chunk
        return scorer(rows)

    got = retrieval_metrics(bounded, n, k, chunk_size=chunk)
    # Each caption equals its image's embedding, so the ground truth is the unique maximum.
    assert all(got[key] == 100.0 for key in RECALL_KEYS)
    assert got["i2t_meanr"] == got["t2i_meanr"] == 1.0
    assert sum(requested) == 2 * n


def test_separate_t2i_scorer_ranks_captions_by_its_own_matrix() -> None:
    """i2t metrics come from the first matrix and t2i metrics from the second, as two one-matrix runs."""
    generator = torch.Generator().manual_seed(4)
    i2t = torch.randn(6, 12, generator=generator)
    t2i = torch.randn(6, 12, generator=generator)
    both = retrieval_metrics(lambda rows: i2t[rows], 6, 2, chunk_size=4, t2i_score_rows=lambda rows: t2i[rows])
    from_i2t, from_t2i = retrieval_metrics_from_matrix(i2t, 2), retrieval_metrics_from_matrix(t2i, 2)
    for key in both:
        if key.startswith("i2t"):
            assert both[key] == from_i2t[key]
        elif key.startswith("t2i"):
            assert both[key] == from_t2i[key]
    assert both["rsum"] == pytest.approx(sum(both[key] for key in RECALL_KEYS))
    folds = coco_5fold_metrics(lambda rows: i2t[rows], 6, 2, folds=2, t2i_score_rows=lambda rows: t2i[rows])
    fold_t2i = coco_5fold_metrics(lambda rows: t2i[rows], 6, 2, folds=2)
    assert folds["t2i_r1"] == fold_t2i["t2i_r1"]
