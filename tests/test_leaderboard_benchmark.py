"""benchmarks/leaderboard.py: which runs it plans under each protocol, how it labels and tabulates them, and a quick
end-to-end call (resumed: finished runs are reused)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import BENCHMARKS, MICRO_DATA, benchmark_module

from hfncl.data.noise import make_noise
from hfncl.data.precomp import read_captions
from hfncl.data.synthetic import generate_precomp


@pytest.fixture(scope="module")
def leaderboard():
    return benchmark_module("leaderboard")


def _row(method, protocol, ratio, seed, rsum, mode=None, **extra):
    row = {"method": method, "plugin": method, "protocol": protocol, "noise_ratio": ratio, "seed": seed,
           "test": {"rsum": rsum}, "epochs": 12, "planned_epochs": 20, "best_epoch": 10, "seconds": 60.0}
    return {**row, **({"mode": mode} if mode else {}), **extra}


def test_every_method_runs_under_both_protocols_with_the_noise_of_its_protocol(leaderboard, tmp_path):
    data_dir = generate_precomp(tmp_path / "data", MICRO_DATA)
    args = leaderboard.parse_args(["--methods", "vsepp", "ncr", "--seeds", "0", "1", "--sgraf", "ncr"])
    methods, references = leaderboard.plan(args, data_dir)
    kinds = {"ncr-caption": "caption", "decl-image": "image"}
    planned = {(r.protocol, r.job.row, r.job.run.noise_ratio, r.job.seed) for r in methods}
    assert planned == {(p, m, ratio, seed) for p, ratios in (("ncr-caption", (0.2, 0.5)), ("decl-image", (0.4, 0.8)))
                       for m in ("vsepp", "ncr", "ncr [sgr]", "ncr [saf]") for ratio in ratios for seed in (0, 1)}
    assert all(r.job.data.noise_kind == kinds[r.protocol] for r in methods)
    assert {r.model["similarity"] for r in methods if r.model} == {"sgr", "saf"}
    assert {(r.protocol, r.job.row, r.job.run.noise_ratio, r.job.seed) for r in references} == {
        (p, "oracle", ratio, seed) for p, ratios in (("ncr-caption", (0.2, 0.5)), ("decl-image", (0.4, 0.8)))
        for ratio in ratios for seed in (0, 1)}
    # the oracle of each protocol trains on exactly the pairs its protocol's noise leaves clean
    for run in references:
        kind, ratio, seed = kinds[run.protocol], run.job.run.noise_ratio, run.job.seed
        pairing = make_noise(kind, MICRO_DATA.num_train, 5, ratio, seed)
        kept = np.flatnonzero(pairing == np.arange(len(pairing)) // 5)
        captions = list(read_captions(data_dir / "train_caps.txt"))
        assert list(read_captions(data_dir / f"{run.job.data.train_split}_caps.txt")) == [captions[c] for c in kept]
    # each protocol and ratio: its methods, then its oracle
    groups = leaderboard.groups(methods, references)
    assert [(g[0].protocol, g[0].job.run.noise_ratio, leaderboard.is_reference(g[0].job.row)) for g in groups] == [
        (p, r, ref) for p, r in (("ncr-caption", 0.2), ("decl-image", 0.4), ("ncr-caption", 0.5), ("decl-image", 0.8))
        for ref in (False, True)]


def test_a_method_trains_on_the_converged_oracles_rule(leaderboard, tmp_path):
    data_dir = generate_precomp(tmp_path / "data", MICRO_DATA)  # 16 images x 5 captions: 80 pairs
    args = leaderboard.parse_args(["--methods", "ncr", "--seeds", "0", "--protocols", "decl-image", "--decl-ratios", "0.4"])
    (run,), _ = leaderboard.plan(args, data_dir)
    settings = run.job.run.settings  # ncr's demo: 10 epochs; then a tenth of the rate for at most 10 more
    assert (settings["epochs"], settings["lr_decay_epochs"], settings["early_stopping_patience"]) == (20, [10], 2)
    assert settings["early_stopping_min_epochs"] == 12 and settings["warmup_epochs"] == 4
    plain = leaderboard.parse_args(["--methods", "ncr", "--seeds", "0", "--protocols", "decl-image", "--patience", "0"])
    assert leaderboard.plan(plain, data_dir)[0][0].job.run.settings["epochs"] == 10


def test_tables_name_protocol_and_mode_and_share_of_the_oracle(leaderboard):
    rows = [
        _row("ncr", "decl-image", 0.4, 0, 300.0, "mean of 2 networks"), _row("ncr", "decl-image", 0.4, 1, 320.0, "mean of 2 networks"),
        _row("ncr", "decl-image", 0.4, 0, 290.0, leaderboard.NETWORK_A), _row("ncr", "decl-image", 0.4, 1, 300.0, leaderboard.NETWORK_A),
        _row("oracle", "decl-image", 0.4, 0, 400.0, "one network"), _row("oracle", "decl-image", 0.4, 1, 400.0, "one network"),
    ]
    lines = leaderboard.protocol_table(rows, "decl-image", [0.4])
    assert lines[0] == "| method | evaluation | 40% rSum | 40% share of oracle | epochs (best / trained) |"
    assert "| ncr | mean of 2 networks | 310.0 ± 14.1 | 77.5 ± 3.5% | 10 / 12 |" in lines
    assert "| ncr | network A alone | 295.0 ± 7.1 | 73.8 ± 1.8% | 10 / 12 |" in lines
    assert lines[-1] == "| oracle | one network | 400.0 ± 0.0 | 100.0 ± 0.0% | 10 / 12 |"


def test_notes_flag_a_method_below_vsepp_and_runs_still_improving(leaderboard):
    rows = [_row("vsepp", "ncr-caption", 0.5, 0, 300.0, "one network"), _row("gsc", "ncr-caption", 0.5, 0, 280.0, "mean of 2 networks",
                 division={"auc": 0.55, "precision": 0.5, "recall": 0.1}),
            _row("ncr", "ncr-caption", 0.5, 0, 310.0, "mean of 2 networks", epochs=20, best_epoch=20)]
    notes = leaderboard.notes(rows)
    assert notes[0].startswith("gsc is below VSE++ under ncr-caption at 50% (280.0 vs 300.0); its division (network A, "
                               "last epoch): auc 0.55, precision 0.50, recall 0.10;")
    assert notes[1].endswith("ncr (ncr-caption 50% seed 0)") and len(notes) == 2


def test_cost_counts_cpu_time_of_every_run(leaderboard):
    rows = [_row("a", "ncr-caption", 0.5, 0, 1.0, cpu_seconds=1800.0), _row("b", "ncr-caption", 0.5, 0, 1.0, cpu_seconds=1800.0)]
    line = leaderboard.cost_line(rows, 120.0)
    assert line.startswith("cost: 2 runs in 1.000 core-hours of training (2.0 runs per core-hour; devices: cpu)")
    assert line.endswith("0.03 h of wall time in all, this call's 2.0 min")


def test_reported_numbers_keep_their_source_and_protocol(leaderboard):
    lines = leaderboard.reported_table()
    assert "| ncr_f30k | Flickr30K | ncr-caption | 0%: 502.7, 20%: 496.7, 50%: 482.8 | NCR Table 1, Flickr30K |" in lines
    assert "| gsc_cc152k | CC152K | real (CC152K) | real: 375.1 | GSC Table 3 (GSC-SGR), CC152K |" in lines
    assert all("dmcm" not in line for line in lines)  # mAP, not rSum


def test_bad_arguments_are_refused(leaderboard, capsys):
    for argv, message in ((["--jobs", "0"], "--jobs and --threads must be >= 1"), (["--decl-ratios", "1.0"], "--decl-ratios must lie in")):
        with pytest.raises(SystemExit):
            leaderboard.parse_args(argv)
        assert message in capsys.readouterr().err


@pytest.mark.slow
def test_quick_run_writes_the_tables_and_reuses_finished_runs(tmp_path):
    command = [sys.executable, str(BENCHMARKS / "leaderboard.py"), "--quick", "--benchmark", "generated",
               "--methods", "vsepp", "ncr", "--jobs", "2", "--output-dir", str(tmp_path)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    text = (tmp_path / "leaderboard.md").read_text()
    assert "protocol `ncr-caption`" in text and "protocol `decl-image`" in text
    assert "| ncr | mean of 2 networks |" in text and "| ncr | network A alone |" in text and "| vsepp | one network |" in text
    assert "## Reported by the papers (not measured here" in text and (tmp_path / "leaderboard.png").is_file()
    report = json.loads((tmp_path / "leaderboard.json").read_text())
    rows = report["benchmarks"]["generated"]["rows"]
    assert {(r["protocol"], r["method"]) for r in rows} >= {("decl-image", "ncr"), ("ncr-caption", "oracle")}
    again = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    assert "cost: 6 runs" in again and (tmp_path / "generated" / "decl-image" / "ncr_noise40_seed0" / "row.json").is_file()
