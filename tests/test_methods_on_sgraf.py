"""NCR and UGNCL divide and train for an epoch on the paper heads, SGR and SAF, and NCR on SCAN's
head (NCR-SCAN, NCR Sec. 4.5.1) (tiny shapes).

GSC's counterpart is in ``test_gsc.py``. UGNCL runs with its two image views (``image_views = 2``):
the head scores each view's local features, and UGNCL's evidence reads the head's raw score.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from conftest import MICRO_LOCAL_MODELS, tiny_config

from hfncl.experiment import DataArguments, run_experiment


@pytest.mark.parametrize("similarity", ["sgr", "saf"])
@pytest.mark.parametrize(
    ("plugin", "views", "term"),
    [("ncr", None, "soft_margin_triplet/net0"), ("ugncl", 2, "evidential")],
)
def test_method_divides_and_trains_an_epoch_on_the_paper_head(
    micro_data_dir, tmp_path, plugin, views, term, similarity
):
    model = dataclasses.replace(MICRO_LOCAL_MODELS[similarity], image_views=views)
    result = run_experiment(
        DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.4),
        tiny_config(tmp_path, [plugin], epochs=1, warmup_epochs=0, lr_decay_epochs=[], batch_size=16),
        model,
    )
    [trained] = result["history"]
    assert math.isfinite(trained[f"train/{term}"])
    assert any(key.startswith("division") and key.endswith("auc") for key in trained)
    assert 0.0 < result["test"]["rsum"] <= 600.0


def test_ncr_divides_and_trains_an_epoch_on_the_scan_head(micro_data_dir, tmp_path):
    """NCR-SCAN: the soft-margin loss reads SCAN's score as it is; the division and evaluation score pairs in blocks."""
    result = run_experiment(
        DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.4),
        tiny_config(tmp_path, ["ncr"], epochs=1, warmup_epochs=0, lr_decay_epochs=[], batch_size=16),
        MICRO_LOCAL_MODELS["scan"],
    )
    [trained] = result["history"]
    assert math.isfinite(trained["train/soft_margin_triplet/net0"])
    assert any(key.startswith("division") and key.endswith("auc") for key in trained)
    assert 0.0 < result["test"]["rsum"] <= 600.0
