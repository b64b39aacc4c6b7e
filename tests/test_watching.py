"""The per-epoch line's format (a run's lines are checked in test_engine_training)."""

from __future__ import annotations

from hfncl.engine.callbacks import format_epoch_line


def test_the_epoch_line_shows_named_sets_and_other_metrics():
    record = {
        "epoch": 5,  # records count epochs from 1
        "warmup": False,
        "train/ce": 0.5,
        "val/mean_map": 0.71,
        "division/auc": 0.9,
        "division/precision": 0.8,
        "division/recall": 0.7,
        "division/predicted_clean_ratio": 0.5,
        "division/clean_share": 0.4,
        "division/hard_share": 0.1,
    }
    assert format_epoch_line(record, 10, 3.25) == (
        "epoch 5/10 | loss ce 0.5000 | val mean_map 0.7100 | "
        "division AUC 0.900 P 0.800 R 0.700 clean 40% hard 10% | 3.2s"
    )
