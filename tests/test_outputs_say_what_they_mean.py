"""Outputs that say what they mean (issue 60, point 4): no ``nan`` where there is no ground truth, no progress bars
in a log, the demo names its saved table, help that follows the code, ``hfncl push`` of a missing path, the audit
page's columns."""

from __future__ import annotations

import io
import re

import datasets
import huggingface_hub

from hfncl import cli
from hfncl.audit.report import audit_page
from hfncl.engine.callbacks import format_epoch_details, format_epoch_line
from hfncl.engine.progress import progress_bar

REPO_ID = "hfncl-test/missing"


def test_an_epoch_without_ground_truth_prints_no_nan():
    """An audit of real data has no hidden clean mask: its division AUC, precision and recall are nan."""
    record = {"epoch": 2, "train/loss": 0.5, "val/rsum": 100.0}
    record |= {f"division/{name}": float("nan") for name in ("auc", "precision", "recall")}
    record["division/predicted_clean_ratio"] = 0.8
    line, details = format_epoch_line(record, 3, 1.0), format_epoch_details(record, 3, 1.0)
    assert "nan" not in line and "nan" not in details
    assert line == "epoch 2/3 | loss 0.500 | val rSum 100.0 | division clean 80% | 1.0s"
    assert "division no known noisy pairs clean 80%" in details


def test_progress_bars_are_off_when_their_stream_is_not_a_terminal():
    stream = io.StringIO()  # a log file: not a terminal
    with progress_bar(range(3), "encoding", True, file=stream) as bar:
        assert list(bar) == [0, 1, 2]
    assert bar.disable and stream.getvalue() == ""
    assert progress_bar(range(3), "encoding", False).disable


def test_demo_help_names_the_epochs_and_images_the_quick_demo_trains():
    from hfncl.demo import DEMO_SIZES, QUICK
    from hfncl.tasks import PAIRS

    parser = cli.build_parser()
    demo = parser._subparsers._group_actions[0].choices["demo"]  # type: ignore[union-attr]
    text = " ".join(demo.format_help().split())
    found = re.search(r"quick demo \((\d+) images, at most (\d+) epochs at (\d+)x the learning rate\)", text)
    assert found, text
    schedule = QUICK.schedules[PAIRS.kind]
    assert int(found[1]) == DEMO_SIZES[QUICK.size].num_train
    assert (int(found[2]), float(found[3])) == (schedule.epochs, schedule.learning_rate_scale)


def test_the_demo_ends_naming_its_saved_table(tmp_path, capsys, monkeypatch):
    from hfncl import demo

    monkeypatch.setattr(demo, "run_demo", lambda *args, **kwargs: [])
    assert demo.main(tmp_path / "demo", plugins=["vsepp"], progress=False) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert str(tmp_path / "demo" / "comparison.md") in last and (tmp_path / "demo" / "comparison.md").is_file()


def test_push_of_a_missing_path_says_so_before_asking_for_a_token(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    missing = tmp_path / "no_such_run" / "best"
    assert cli.main(["push", str(missing), REPO_ID]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"hfncl: error: {missing}: no such checkpoint directory"


def test_push_without_a_token_offline_names_hf_hub_offline(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert cli.main(["push", str(tmp_path), REPO_ID]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no Hub token" in err and "HF_HUB_OFFLINE is set (unset it to reach the Hub)" in err


def test_the_audit_page_explains_its_p_value_columns_and_the_estimates_bias():
    table = datasets.Dataset.from_dict(
        {
            "rank": [1, 2],
            "pair": [0, 1],
            "image": [0, 1],
            "image_id": ["0", "1"],
            "caption": ["a dog", "a cat"],
            "p_image": [0.9, 0.01],
            "p_caption": [0.8, 0.02],
            "flagged": [True, False],
            "suggested_caption": [None, None],
        }
    )
    page = " ".join(audit_page(table).split())
    assert "<b>p_image</b>: the rank of the pair's image among all images for its caption" in page
    assert "<b>p_caption</b>: the same for the caption" in page
    assert "a weak model, which cannot match right pairs either, overestimates it" in page
