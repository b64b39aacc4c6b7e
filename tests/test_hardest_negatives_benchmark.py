"""benchmarks/hardest_negatives.py: same-image negatives and hinges of a batch, against values worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import benchmark_module


@pytest.fixture(scope="module")
def hardest_negatives():
    return benchmark_module("hardest_negatives")


def test_same_image_negatives_and_hinges_of_a_batch_by_hand(hardest_negatives):
    similarity = torch.tensor([[0.9, 0.1, 0.8], [0.7, 0.5, 0.6], [0.3, 0.2, 0.1]])
    shown = np.array([0, 0, 1])  # the images of the rows
    described = np.array([0, 0, 2])  # caption 2 describes image 2: the third pair is wrong
    found = hardest_negatives.batch_negatives(similarity, shown, described, margin=0.2)
    # row 0: caption 1 (image 0) is a same-image negative, but caption 2 (0.8) is the hardest: [0.2 - 0.9 + 0.8]_+
    # row 1: caption 0 (image 0) is both: [0.2 - 0.5 + 0.7]_+; row 2: no caption of image 1: [0.2 - 0.1 + 0.3]_+
    assert found.same_image_present.tolist() == [True, True, False]
    assert found.hardest_is_same_image.tolist() == [False, True, False]
    assert found.hinge == pytest.approx([0.1, 0.4, 0.4])


def test_a_run_without_injected_noise_is_refused_in_one_line(hardest_negatives, tmp_path, capsys):
    with pytest.raises(SystemExit):
        hardest_negatives.main([str(tmp_path)])
    assert "run_config.yaml: not there" in capsys.readouterr().err
