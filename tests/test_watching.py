"""The per-epoch line's format (a run's lines are checked in test_engine_training)."""

from __future__ import annotations

from hfncl.engine.callbacks import format_epoch_details, format_epoch_line


def test_the_epoch_lines_show_named_sets_and_other_metrics():
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
    assert format_epoch_details(record, 10, 3.25) == (
        "epoch 5/10 | loss ce 0.5000 | val mean_map 0.7100 | "
        "division AUC 0.900 P 0.800 R 0.700 clean 40% hard 10% | 3.2s"
    )
    assert format_epoch_line(record, 10, 3.25) == (
        "epoch 5/10 | loss 0.500 | val mean_map 0.7100 | division AUC 0.900, clean 40% hard 10% | 3.2s"
    )


def test_the_console_line_fits_120_columns_dropping_details_in_order():
    """Lines of 250-330 characters wrapped over three lines; the details go to epochs.log and the trackers."""
    record = {"epoch": 12, "warmup": False, "val/rsum": 412.3, "val/i2t_r1": 70.1, "val/t2i_r1": 52.4}
    for net in range(2):
        record |= {f"train/soft_margin_triplet/net{net}": 1.25, f"train/soft_margin_triplet/net{net}/noisy": 0.5}
        record |= {f"division/net{net}/{name}": 0.9 for name in ("auc", "precision", "recall")}
        record[f"division/net{net}/predicted_clean_ratio"] = 0.55
    assert format_epoch_line(record, 40, 95.0) == (
        "epoch 12/40 | loss 1.750/1.750 | val rSum 412.3, R@1 i2t 70.1 t2i 52.4 | division AUC 0.900/0.900, "
        "clean 55%/55% | 95.0s"
    )
    assert len(format_epoch_details(record, 40, 95.0)) > 200
    assert format_epoch_line(record, 40, 95.0, width=100) == (
        "epoch 12/40 | loss 1.750/1.750 | val rSum 412.3 | division AUC 0.900/0.900, clean 55%/55% | 95.0s"
    )
    assert format_epoch_line(record, 40, 95.0, width=85) == (
        "epoch 12/40 | loss 1.750/1.750 | val rSum 412.3 | division AUC 0.900/0.900 | 95.0s"
    )
    assert len(format_epoch_line(record, 40, 95.0, width=40)) == 40
