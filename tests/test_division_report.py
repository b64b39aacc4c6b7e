"""The epoch's division report: each division's quality over all units, per part of the units, and per named set,
against values counted by hand."""

import numpy as np
import pytest
import torch

from hfncl.engine.reports import division_report, part_units
from hfncl.types import Division

MASKS = {"image": np.array([True, True, False, False]), "text": np.array([True, False])}
TRUE_CLEAN = np.concatenate(list(MASKS.values()))
DIVISION = Division(
    clean_prob=torch.tensor([0.9, 0.2, 0.6, 0.1, 0.8, 0.7]),
    clean=torch.tensor([True, False, True, False, True, True]),
    extras={"set/hard": torch.tensor([True, True, False, False, False, False])},
)


def test_the_parts_lie_end_to_end_in_their_order():
    assert part_units(MASKS) == {"image": slice(0, 4), "text": slice(4, 6)}


def test_each_part_is_scored_on_its_own_units_and_the_sets_on_all():
    report = division_report([DIVISION], MASKS, TRUE_CLEAN)
    # all: 2 of 4 predicted clean are clean, 2 of 3 clean found, 3 of 6 right; 7 of 9 clean-noisy pairs ordered
    # image: 1 of 2, 1 of 2, 2 of 4; 3 of 4 ordered. text: 1 of 2, 1 of 1, 1 of 2; 1 of 1 ordered
    expected = {
        "division/precision": 0.5, "division/recall": 2 / 3, "division/auc": 7 / 9, "division/accuracy": 0.5,
        "division/predicted_clean_ratio": 4 / 6, "division/true_noise_ratio": 0.5,
        "division/image/precision": 0.5, "division/image/recall": 0.5, "division/image/auc": 0.75,
        "division/image/accuracy": 0.5, "division/image/predicted_clean_ratio": 0.5,
        "division/image/true_noise_ratio": 0.5,
        "division/text/precision": 0.5, "division/text/recall": 1.0, "division/text/auc": 1.0,
        "division/text/accuracy": 0.5, "division/text/predicted_clean_ratio": 1.0,
        "division/text/true_noise_ratio": 0.5,
        "division/hard_share": 2 / 6, "division/hard_purity": 1.0,
    }
    assert list(report) == list(expected)
    assert report == pytest.approx(expected)


def test_several_networks_are_reported_each_under_its_own_name():
    report = division_report([None, DIVISION], {"pairs": TRUE_CLEAN}, TRUE_CLEAN)
    assert report["division/net1/precision"] == 0.5 and report["division/net1/hard_purity"] == 1.0
    assert not any(key.startswith("division/net0") for key in report)
    assert not any("/pairs/" in key for key in report)
