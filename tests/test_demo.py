"""``hfncl demo``: sizes, a shorter schedule, and a failing method that becomes a row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hfncl.demo import (
    DEMO_SIZES,
    FULL,
    QUICK,
    DemoRun,
    _division_of_network_a,
    _plan_line,
    demo_runs,
    format_table,
    planned_runs,
    run_demo,
    shortened_settings,
)

HFNCL = Path(sys.executable).with_name("hfncl")


def test_a_failing_method_becomes_a_row_and_the_others_still_train(tmp_path, capsys):
    broken = DemoRun("vsepp", 0.5, {"epochs": 1, "options": {"vsepp.no_such_option": 1}})
    runs = (broken, DemoRun("vsepp", 0.5, {"epochs": 1}))
    results = run_demo(tmp_path, runs, DEMO_SIZES["tiny"], progress=False, keep_going=True)
    assert "no_such_option" in results[0]["error"] and "\n" not in results[0]["error"]
    assert "test" in results[1] and results[1]["test"]["rsum"] > 0
    assert "Traceback" in (tmp_path / broken.label / "error.txt").read_text()
    captured = capsys.readouterr()
    assert "vsepp failed:" in captured.err
    assert f"vsepp at 50% noise (2/2): 1 epochs in {tmp_path / 'vsepp_noise50'}" in captured.out  # each run named
    table = format_table(results).splitlines()
    assert "| vsepp | 50% | failed: " in table[2] and table[2].count("|") == table[0].count("|")


def test_shortened_settings_keep_an_epoch_after_warmup_and_drop_late_decays():
    settings = {"epochs": 10, "warmup_epochs": 4, "lr_decay_epochs": [2, 8], "options": {"x": 1}}
    assert shortened_settings(settings, 3) == {
        "epochs": 3,
        "warmup_epochs": 2,
        "lr_decay_epochs": [2],
        "options": {"x": 1},
    }
    assert shortened_settings(settings, 1)["warmup_epochs"] == 0
    assert shortened_settings({"epochs": 5}, 2) == {"epochs": 2}


def test_demo_command_trains_the_tiny_benchmark_for_the_given_epochs(tmp_path):
    command = [sys.executable, "-m", "hfncl.cli", "demo", "--size", "tiny", "--epochs", "1", "--plugins", "vsepp"]
    command += ["--no-progress", "--output-dir", str(tmp_path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "| vsepp | 50% |" in completed.stdout
    (row,) = json.loads((tmp_path / "comparison.json").read_text())
    assert row["label"] == "vsepp" and "error" not in row
    record = json.loads((tmp_path / "vsepp_noise50" / "results.json").read_text())
    assert len(record["history"]) == 1
    refused = subprocess.run(command[:4] + ["--size", "huge"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "invalid choice: 'huge'" in refused.stderr


def test_the_quick_plan_shortens_and_speeds_up_each_kind_by_its_schedule():
    runs = {run.plugin: run for run in planned_runs(demo_runs(plugins=["ncr", "tcvse", "dmcm", "prototype_ce"]), QUICK)}
    assert runs["ncr"].settings["epochs"] == 3 and runs["ncr"].settings["warmup_epochs"] == 2
    assert runs["ncr"].settings["learning_rate"] == pytest.approx(1e-3)  # 5 x the demo's 2e-4
    assert runs["ncr"].settings["batch_size"] == 64
    assert runs["tcvse"].settings["epochs"] == 2  # never lengthened
    assert runs["tcvse"].settings["learning_rate"] == pytest.approx(2.5e-3)  # 5 x its own 5e-4
    declared = demo_runs(plugins=["dmcm"])[0].settings  # category labels: 30 epochs, 5 of warmup, Adam 1e-4
    assert runs["dmcm"].settings == dict(declared, epochs=10, warmup_epochs=5, learning_rate=pytest.approx(5e-4))
    assert "batch_size" not in runs["dmcm"].settings  # the label task's batch of 100 stays
    assert runs["prototype_ce"].settings["epochs"] == 10
    assert runs["prototype_ce"].settings["learning_rate"] == pytest.approx(5e-4)


def test_the_full_plan_trains_every_method_as_declared():
    runs = demo_runs(plugins=["ncr", "dmcm"])
    assert planned_runs(runs, FULL) == runs


def test_the_plan_line_names_each_kinds_schedule_and_the_full_comparison():
    runs = planned_runs(demo_runs(plugins=["ncr", "dmcm"]), QUICK)
    line = _plan_line(QUICK, "quick", None, runs)
    assert line == (
        "hfncl demo: 2 runs; pairs: 600 generated training images, at most 3 epochs each, 5x the learning rate, "
        "batches of 64; labels: at most 10 epochs each, 5x the learning rate; "
        "hfncl demo --full trains the full comparison of benchmarks/README.md (about 17 minutes)"
    )
    assert _plan_line(FULL, "full", None, planned_runs(runs, FULL)).endswith("labels: each method's demo settings")
    assert _plan_line(FULL, "full", 2, planned_runs(runs, FULL)).endswith("labels: 2 epochs each")  # --full --epochs 2


@pytest.mark.slow
def test_the_readme_first_command_divides_far_better_than_chance(tmp_path):
    """``bash scripts/run.sh demo`` runs ``hfncl demo``: its default, the quick demo, trains every method with demo
    settings, and each one that divides the pairs ranks them far better than chance (ROC-AUC 0.5)."""
    command = [str(HFNCL), "demo", "--no-progress", "--output-dir", str(tmp_path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "hfncl demo --full trains the full comparison of benchmarks/README.md" in completed.stdout
    rows = json.loads((tmp_path / "comparison.json").read_text())
    assert {row["label"] for row in rows} == {run.plugin for run in demo_runs()}
    divisions = {row["label"]: _division_of_network_a(row["division"]) for row in rows}
    aucs = {label: division["auc"] for label, division in divisions.items() if "auc" in division}
    assert {"ncr", "coteaching", "dmcm"} <= set(aucs)  # methods that divide, of both kinds of data
    assert all(value >= 0.75 for value in aucs.values()), aucs  # chance is 0.5
