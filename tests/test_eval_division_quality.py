"""Quality of a clean / noisy division against the hidden clean mask."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hfncl.evaluation import division_quality, partition_report


def pairwise_auc(scores: np.ndarray, truth: np.ndarray) -> float:
    """Share of (clean, noisy) pairs where the clean one scores higher; ties count 1/2."""
    clean, noisy = scores[truth], scores[~truth]
    wins = (clean[:, None] > noisy[None, :]).sum() + 0.5 * (clean[:, None] == noisy[None, :]).sum()
    return wins / (len(clean) * len(noisy))


def test_hand_computed_six_pairs() -> None:
    clean_prob = [0.9, 0.8, 0.6, 0.6, 0.3, 0.7]
    predicted = [True, True, False, True, False, True]
    truth = [True, True, True, False, False, False]
    got = division_quality(clean_prob, predicted, truth)
    assert got["precision"] == pytest.approx(2 / 4)  # pairs 0, 1 of the 4 predicted clean
    assert got["recall"] == pytest.approx(2 / 3)  # pairs 0, 1 of the 3 truly clean
    assert got["accuracy"] == pytest.approx(3 / 6)  # pairs 0, 1, 4 right
    # (clean, noisy) pairs won: 0.9 -> 3, 0.8 -> 3, 0.6 -> 1 (vs 0.3) + 0.5 (tie with 0.6).
    assert got["auc"] == pytest.approx(7.5 / 9)
    assert got["predicted_clean_ratio"] == pytest.approx(4 / 6)
    assert got["true_noise_ratio"] == pytest.approx(0.5)


def test_auc_matches_pairwise_definition_with_torch_inputs() -> None:
    generator = torch.Generator().manual_seed(0)
    truth = torch.rand(200, generator=generator) < 0.6
    scores = (torch.rand(200, generator=generator) + 0.3 * truth).round(decimals=1)  # ties included
    got = division_quality(scores, scores > 0.6, truth)
    assert got["auc"] == pytest.approx(pairwise_auc(scores.numpy(), truth.numpy()))
    predicted, clean = (scores > 0.6).numpy(), truth.numpy()
    assert got["precision"] == pytest.approx((predicted & clean).sum() / predicted.sum())
    assert got["recall"] == pytest.approx((predicted & clean).sum() / clean.sum())


def test_no_predicted_clean_gives_nan_precision() -> None:
    got = division_quality(np.array([0.1, 0.2, 0.3]), np.zeros(3, dtype=bool), np.array([1, 0, 1]))
    assert math.isnan(got["precision"])
    assert got["recall"] == 0.0
    assert got["predicted_clean_ratio"] == 0.0


def test_single_class_gives_nan_auc() -> None:
    got = division_quality([0.2, 0.9], [True, True], [True, True])
    assert math.isnan(got["auc"])
    assert got["precision"] == got["recall"] == got["accuracy"] == 1.0
    assert got["true_noise_ratio"] == 0.0
    all_noisy = division_quality([0.2, 0.9], [False, True], [False, False])
    assert math.isnan(all_noisy["auc"]) and math.isnan(all_noisy["recall"])


def test_mismatched_lengths_name_the_lengths() -> None:
    with pytest.raises(ValueError, match="3, 2 and 3"):
        division_quality([0.1, 0.2, 0.3], [True, False], [True, False, True])


def test_non_boolean_mask_and_empty_input_raise() -> None:
    with pytest.raises(ValueError, match="predicted_clean must be boolean"):
        division_quality([0.1, 0.7], [0.1, 0.7], [True, False])
    with pytest.raises(ValueError, match="at least one"):
        division_quality([], [], [])


def test_partition_report_gives_share_and_purity_of_named_sets() -> None:
    truth = torch.tensor([True, True, False, False, True, False])
    extras = {
        "set/hard": torch.tensor([1, 0, 1, 0, 0, 0], dtype=torch.uint8),
        "set/clean": torch.tensor([False, True, False, False, True, False]),
        "set/empty": torch.zeros(6, dtype=torch.bool),
        "statistic": torch.arange(6.0),
    }
    report = {name: (share, purity) for name, share, purity in partition_report(extras, truth)}
    assert set(report) == {"hard", "clean", "empty"}
    assert report["hard"] == (pytest.approx(2 / 6), pytest.approx(0.5))
    assert report["clean"] == (pytest.approx(2 / 6), pytest.approx(1.0))
    assert report["empty"][0] == 0.0 and math.isnan(report["empty"][1])
    with pytest.raises(ValueError, match="set/short"):
        partition_report({"set/short": torch.ones(3, dtype=torch.bool)}, truth)
