"""benchmarks/leaderboard.py: which runs it plans under each protocol, how it labels and tabulates them, and a quick
end-to-end call (resumed: finished runs are reused)."""

from __future__ import annotations

import concurrent.futures
import json
import math
import statistics
import subprocess
import sys
import threading
from importlib.metadata import entry_points

import numpy as np
import pytest
import scipy.stats
import yaml
from conftest import BENCHMARKS, MICRO_DATA, benchmark_module

from hfncl.data.noise import make_noise
from hfncl.data.precomp import read_captions
from hfncl.data.synthetic import generate_precomp


@pytest.fixture(scope="module")
def leaderboard():
    return benchmark_module("leaderboard")


@pytest.fixture(scope="module")
def runs(leaderboard):
    """``benchmarks/leaderboard_runs.py``, the module the leaderboard imports."""
    return sys.modules["leaderboard_runs"]


@pytest.fixture(scope="module")
def board_notes(leaderboard):
    """``benchmarks/leaderboard_notes.py``, the module the leaderboard imports."""
    return sys.modules["leaderboard_notes"]


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
    args = leaderboard.parse_args(
        ["--methods", "ncr", "--seeds", "0", "--protocols", "decl-image", "--decl-ratios", "0.4"]
    )
    (run,), _ = leaderboard.plan(args, data_dir)
    settings = run.job.run.settings  # ncr's demo: 10 epochs at least; the rate decays when the validation stalls
    assert (settings["epochs"], settings["lr_decay_epochs"], settings["lr_decay_patience"]) == (70, [], 3)
    assert settings["early_stopping_patience"] == 3 and settings["early_stopping_min_epochs"] == 10
    assert settings["warmup_epochs"] == 4
    fixed = leaderboard.parse_args(["--methods", "ncr", "--seeds", "0", "--protocols", "decl-image", "--decl-ratios",
                                    "0.4", "--schedule", "fixed"])  # the demo's epochs, then a tenth for at most 10
    settings = leaderboard.plan(fixed, data_dir)[0][0].job.run.settings
    assert (settings["epochs"], settings["lr_decay_epochs"], settings["early_stopping_patience"]) == (20, [10], 3)
    assert settings["early_stopping_min_epochs"] == 13 and "lr_decay_patience" not in settings
    plain = leaderboard.parse_args(["--methods", "ncr", "--seeds", "0", "--protocols", "decl-image", "--patience", "0"])
    assert leaderboard.plan(plain, data_dir)[0][0].job.run.settings["epochs"] == 10


def test_tables_name_protocol_and_mode_and_share_of_the_oracle(leaderboard, runs):
    rows = [
        _row("ncr", "decl-image", 0.4, 0, 300.0, "mean of 2 networks"),
        _row("ncr", "decl-image", 0.4, 1, 320.0, "mean of 2 networks"),
        _row("ncr", "decl-image", 0.4, 0, 290.0, runs.NETWORK_A),
        _row("ncr", "decl-image", 0.4, 1, 300.0, runs.NETWORK_A),
        _row("oracle", "decl-image", 0.4, 0, 400.0, "one network"),
        _row("oracle", "decl-image", 0.4, 1, 400.0, "one network"),
    ]
    lines = leaderboard.protocol_table(rows, "decl-image", [0.4])
    assert lines[0] == "| method | evaluation | oracle | 40% rSum | 40% share of oracle | epochs (best / trained) |"
    assert "| ncr | mean of 2 networks | oracle | 310.0 ± 14.1 | 77.5 ± 3.5% | 10 / 12 |" in lines
    assert "| ncr | network A alone | oracle | 295.0 ± 7.1 | 73.8 ± 1.8% | 10 / 12 |" in lines
    assert lines[-1] == "| oracle | one network | oracle | 400.0 ± 0.0 | 100.0 ± 0.0% | 10 / 12 |"


def test_a_method_trained_by_another_rule_than_the_oracles_has_its_own_oracle(leaderboard, board_notes, tmp_path):
    # TcVSE trains with AdamW at 5e-4 and max pooling, UGNCL with two image views, DECL at 5e-4: each its own oracle
    # Co-teaching's fresh heads for pretrained towers leave region features and a biGRU as they are: VSE++'s oracle
    args = leaderboard.parse_args(["--methods", "vsepp", "ncr", "tcvse", "decl", "ugncl", "coteaching", "--seeds", "0"])
    oracles = leaderboard.own_oracles(args)
    assert oracles == {"vsepp": "oracle", "ncr": "oracle", "tcvse": "oracle (tcvse)", "decl": "oracle (decl)",
                       "ugncl": "oracle (ugncl)", "coteaching": "oracle"}
    # --own-oracles: a method of the oracle method's rule whose loss learns better than it gets its own too
    named = leaderboard.parse_args(["--methods", "vsepp", "ncr", "rcl", "--own-oracles", "rcl", "--seeds", "0"])
    assert leaderboard.own_oracles(named) == {"vsepp": "oracle", "ncr": "oracle", "rcl": "oracle (rcl)"}
    every = leaderboard.parse_args(["--methods", "vsepp", "ncr", "--own-oracles", "all", "--seeds", "0"])
    assert leaderboard.own_oracles(every) == {"vsepp": "oracle", "ncr": "oracle (ncr)"}
    planned = leaderboard.parse_args(
        ["--methods", "vsepp", "rcl", "--own-oracles", "rcl", "--seeds", "0", "--protocols", "ncr-caption",
         "--ncr-ratios", "0.2"]
    )
    _, references = leaderboard.plan(planned, generate_precomp(tmp_path / "micro", MICRO_DATA))
    assert {r.job.row: r.job.run.plugin for r in references} == {"oracle": "vsepp", "oracle (rcl)": "rcl"}
    rule = leaderboard.training_rule(leaderboard.method_runs(["tcvse"], 0.2)[0])
    assert rule == {"optimizer": "adamw", "learning_rate": 5e-4, "weight_decay": 1e-4, "lr_decay_factor": 0.9,
                    "image_pooling": "max", "text_pooling": "max"}
    data_dir = generate_precomp(tmp_path / "data", MICRO_DATA)
    own = leaderboard.parse_args(["--methods", "vsepp", "tcvse", "--seeds", "0", "--protocols", "ncr-caption",
                                  "--ncr-ratios", "0.2"])
    _, references = leaderboard.plan(own, data_dir)
    by_row = {r.job.row: r.job for r in references}
    assert set(by_row) == {"oracle", "oracle (tcvse)"}  # tcvse itself on exactly the clean pairs, under its own rule
    assert by_row["oracle (tcvse)"].run.plugin == "tcvse" and by_row["oracle"].run.plugin == "vsepp"
    assert by_row["oracle (tcvse)"].data.train_split == by_row["oracle"].data.train_split == "train_oracle_20_seed0"
    # a method's share is over its own oracle, named in the table; VSE++'s oracle row stays
    rows = [
        _row("tcvse", "ncr-caption", 0.2, 0, 500.0, "one network"),
        _row("vsepp", "ncr-caption", 0.2, 0, 250.0, "one network"),
        _row("oracle", "ncr-caption", 0.2, 0, 350.0, "one network", plugin="vsepp"),
        _row("oracle (tcvse)", "ncr-caption", 0.2, 0, 520.0, "one network", plugin="tcvse"),
    ]
    lines = leaderboard.protocol_table(rows, "ncr-caption", [0.2], {"tcvse": "oracle (tcvse)", "vsepp": "oracle"})
    assert "| tcvse | one network | oracle (tcvse) | 500.0 | 96.2% | 10 / 12 |" in lines
    assert "| vsepp | one network | oracle | 250.0 | 71.4% | 10 / 12 |" in lines
    assert lines[-2:] == ["| oracle | one network | oracle | 350.0 | 100.0% | 10 / 12 |",
                          "| oracle (tcvse) | one network | oracle (tcvse) | 520.0 | 100.0% | 10 / 12 |"]
    # above the VSE++ oracle is no note, above its own is one
    assert not [n for n in board_notes.notes(rows, {"tcvse": "oracle (tcvse)"}) if "above its oracle" in n]
    above = [{**rows[0], "test": {"rsum": 530.0}}] + rows[1:]
    head = (
        "above its oracle, a defect of the measurement until shown otherwise (test rSum minus the oracle's, mean ± sd "
        "over the seeds): "
    )
    assert head + "tcvse over oracle (tcvse) (ncr-caption 20%: +10.0 over seed 0)" in board_notes.notes(
        above, {"tcvse": "oracle (tcvse)"})
    # over seeds: the mean difference and its sd, over the seeds the oracle ran; below it on average, no note
    seeds = above + [
        _row("tcvse", "ncr-caption", 0.2, 1, 490.0, "one network"),
        _row("tcvse", "ncr-caption", 0.2, 2, 1.0, "one network"),
        _row("oracle (tcvse)", "ncr-caption", 0.2, 1, 470.0, "one network", plugin="tcvse"),
    ]
    assert head + (
        "tcvse over oracle (tcvse) (ncr-caption 20%: within the seed spread, no difference measured: +15.0 ± "
        "7.1 over seeds 0, 1 (paired t-test p = 0.20))"
    ) in board_notes.notes(seeds, {"tcvse": "oracle (tcvse)"})
    resolved = [r for r in seeds[:-1] if r["seed"] != 2] + [
        _row("oracle (tcvse)", "ncr-caption", 0.2, 1, 479.0, "one network", plugin="tcvse"),
        _row("tcvse", "ncr-caption", 0.2, 2, 540.0, "one network"),
        _row("oracle (tcvse)", "ncr-caption", 0.2, 2, 529.5, "one network", plugin="tcvse"),
    ]
    assert head + "tcvse over oracle (tcvse) (ncr-caption 20%: +10.5 ± 0.5 over seeds 0, 1, 2)" in board_notes.notes(
        resolved, {"tcvse": "oracle (tcvse)"})
    seeds[-1] = _row("oracle (tcvse)", "ncr-caption", 0.2, 1, 510.0, "one network", plugin="tcvse")
    assert not [n for n in board_notes.notes(seeds, {"tcvse": "oracle (tcvse)"}) if "above its oracle" in n]


def test_a_flag_above_the_oracle_names_where_the_method_was_trained_on_the_clean_pairs_itself(
    leaderboard, board_notes, tmp_path
):
    rows = [_row("gsc", "ncr-caption", 0.2, 0, 260.0, "mean of 2 networks"),
            _row("oracle", "ncr-caption", 0.2, 0, 240.0, "one network", plugin="vsepp")]
    (tmp_path / "methods").mkdir()
    (tmp_path / "leaderboard.md").write_text(
        "# How\n\n## The real-text proxy\n\n| cell | method | under noise | own oracle |\n|---|---|---|---|\n"
        "| `decl-image` 40% | gsc (mean of 2 networks) | 226.7 | 240.9 |\n"
        "| `ncr-caption` 20% | gsc (mean of 2 networks) | 260.0 | 270.0 |\n\n## Changing one thing\n\n"
        "| `ncr-caption` 20% | gsc | 1 | 2 |\n")

    def flag(benchmark, method="gsc", ratio=0.2):
        cell = [{**r, "method": method if r["method"] == "gsc" else r["method"], "noise_ratio": ratio} for r in rows]
        return [n for n in board_notes.notes(cell, docs=tmp_path / "methods", benchmark=benchmark)
                if n.startswith("above its oracle")]

    measured = "; its own oracle, measured: docs/leaderboard.md, \"The real-text proxy\")"
    assert flag("proxy")[0].endswith(f"{method_cell('gsc', '20%')}{measured}")
    assert flag("generated")[0].endswith(method_cell("gsc", "20%") + ")")  # the section names another benchmark
    assert flag("proxy", ratio=0.5)[0].endswith(method_cell("gsc", "50%") + ")")  # no row for the cell
    assert flag("proxy", method="gsc_intra")[0].endswith(method_cell("gsc_intra", "20%") + ")")  # another method


def method_cell(method, ratio):
    return f"{method} over oracle (ncr-caption {ratio}: +20.0 over seed 0"


def test_a_run_trained_otherwise_than_the_plan_is_named_and_trained_again(
    leaderboard, board_notes, runs, tmp_path, monkeypatch
):
    data_dir = generate_precomp(tmp_path / "data", MICRO_DATA)
    args = leaderboard.parse_args(
        ["--methods", "ncr", "--seeds", "0", "--protocols", "decl-image", "--decl-ratios", "0.4", "--batch-size", "16"]
    )
    (run,), _ = leaderboard.plan(args, data_dir)
    root = tmp_path / "runs"
    assert runs.stale_fields(run, root, False, {}) == []  # not started
    run_dir = run.directory(root) / run.job.name
    run_dir.mkdir(parents=True)
    config = runs.train_config(run.job, run_dir, False)
    saved = {field: getattr(config, field) for field in runs.TRAINING_FIELDS}
    saved.update(options=dict(config.options), train_split="train", embed_dim=256)
    (run_dir / "run_config.yaml").write_text(runs.yaml.safe_dump(saved))
    assert runs.stale_fields(run, root, False, {}) == []
    assert runs.stale_fields(run, root, False, {"embed_dim": 64}) == ["embed_dim was 256, plan 64"]
    (run_dir / "run_config.yaml").write_text(runs.yaml.safe_dump({**saved, "warmup_epochs": 2, "options": {}}))
    stale = runs.stale_fields(run, root, False, {})
    assert stale == ["options was {}, plan {'ncr.noisy_batch': 'split'}", "warmup_epochs was 2, plan 4"]
    # its finished row: shown with --report-only (the notes name it), trained again from the start otherwise
    (run_dir / "row.json").write_text(json.dumps(_row("ncr", "decl-image", 0.4, 0, 100.0)))
    (run_dir / "modes.json").write_text("{}")
    shown = runs.train_run(run, root, False, None, True)
    assert shown["stale"] == stale and shown["batch_size"] == 16  # a row without its batch size: the run's config's
    note = [n for n in board_notes.notes([{**shown, "mode": "one network"}]) if n.startswith("trained otherwise")]
    assert note == [
        "trained otherwise than the plan, shown until trained again (a call without --report-only): "
        "ncr (decl-image 40% seed 0: options was {}, plan {'ncr.noisy_batch': 'split'}; warmup_epochs was 2, "
        "plan 4)"
    ]
    calls = []
    monkeypatch.setattr(runs, "train", lambda job, directory, quick, progress, resume, report_only, model:
                        calls.append((resume, (directory / job.name / "row.json").exists())))
    runs.train_run(run, root, False, None, False)
    assert calls == [(False, False)] and not (run_dir / "modes.json").exists()  # no resume; the old results gone


def test_options_reach_the_runs_of_the_plugin_they_name_and_bad_ones_are_refused(leaderboard, tmp_path, capsys):
    data_dir = generate_precomp(tmp_path / "data", MICRO_DATA)
    args = leaderboard.parse_args(["--methods", "npc", "rcl", "--oracle-method", "vsepp", "npc", "--seeds", "0",
                                   "--protocols", "ncr-caption", "--ncr-ratios", "0.2",
                                   "--options", '{"npc.temperature": 0.1}'])
    methods, references = leaderboard.plan(args, data_dir)
    options = {run.job.row: run.job.run.settings.get("options", {}) for run in methods + references}
    assert options["npc"]["npc.temperature"] == options["oracle (npc)"]["npc.temperature"] == 0.1
    assert "npc.temperature" not in options["rcl"] and "npc.temperature" not in options["oracle"]
    for bad in ('{"temperature": 0.1}', "[1]"):
        with pytest.raises(SystemExit):
            leaderboard.parse_args(["--options", bad])
        assert "--options: expected a JSON object of 'plugin.option' keys" in capsys.readouterr().err
    # a key that no plugin of the call declares would reach no run: refused before any work
    for unclaimed in ('{"npc.temprature": 0.1}', '{"gsc.tau": 0.1, "npc.temperature": 0.1}'):
        with pytest.raises(SystemExit):
            leaderboard.parse_args(["--methods", "npc", "rcl", "--options", unclaimed])
        key = next(iter(leaderboard.json.loads(unclaimed)))
        assert f"--options: {key} declared by no plugin this call trains (npc, rcl, vsepp)" in capsys.readouterr().err


def test_notes_flag_a_method_below_vsepp_and_runs_still_improving(leaderboard, board_notes, tmp_path):
    rows = [
        _row("vsepp", "ncr-caption", 0.5, 0, 300.0, "one network"),
        _row("gsc", "ncr-caption", 0.5, 0, 280.0, "mean of 2 networks",
             division={"auc": 0.55, "precision": 0.5, "recall": 0.1}),
        _row("ncr", "ncr-caption", 0.5, 0, 310.0, "mean of 2 networks", epochs=20, best_epoch=20),
    ]
    notes = board_notes.notes(rows)
    assert notes[0].startswith("gsc is below VSE++ under ncr-caption at 50% (280.0 vs 300.0); its division (network A, "
                               "last epoch): auc 0.55, precision 0.50, recall 0.10;")
    assert notes[1].endswith("ncr (ncr-caption 50% seed 0)") and len(notes) == 2
    # the cause: the method's docs page where it has a section "On the leaderboard"
    docs = tmp_path / "methods"
    docs.mkdir()
    (docs / "gsc.md").write_text("# GSC\n\n## Measurements\n")
    assert board_notes.notes(rows, docs=docs)[0].endswith("; the cause is not measured yet")
    (docs / "gsc.md").write_text("# GSC\n\n## On the leaderboard\n\nWhy.\n")  # a section on no place
    assert board_notes.notes(rows, docs=docs)[0].endswith("; the cause is not measured yet")
    (docs / "gsc.md").write_text("# GSC\n\n## On the leaderboard: below NCR\n\nAt `ncr-caption` 50%.\n\n"
                                 "## On the leaderboard: below VSE++\n\nAt `ncr-caption` 50%.\n")
    assert board_notes.notes(rows, docs=docs)[0].endswith(
        '; the cause, measured: docs/methods/gsc.md, "On the leaderboard: below VSE++"')
    (docs / "gsc.md").write_text("# GSC\n\n## On the leaderboard: why GSC falls below VSE++\n\n| `ncr-caption` 50% |\n")
    assert board_notes.notes(rows, docs=docs)[0].endswith(
        'docs/methods/gsc.md, "On the leaderboard: why GSC falls below VSE++"'
    )
    # a section that measured other cells only (its text names the cell as `protocol` R%) does not answer this one
    elsewhere = "## On the leaderboard: below VSE++ (i)\n\nAt `ncr-caption` 20% and `decl-image` 50%.\n"
    (docs / "gsc.md").write_text("# GSC\n\n" + elsewhere)
    assert board_notes.notes(rows, docs=docs)[0].endswith(
        '; the cause is measured at other cells (docs/methods/gsc.md, "On the leaderboard: below VSE++ (i)"), '
        "not at this one yet")
    # the section that names the cell answers it, wherever it stands; a heading in a code block starts no section
    (docs / "gsc.md").write_text("# GSC\n\n" + elsewhere + "\n## On the leaderboard: below VSE++ (ii)\n\n```\n"
                                 "# a comment\n```\nAt `ncr-caption` 50%.\n")
    assert board_notes.notes(rows, docs=docs)[0].endswith(
        '; the cause, measured: docs/methods/gsc.md, "On the leaderboard: below VSE++ (ii)"')


def test_seed_spread_is_a_paired_t_test_over_the_seeds_both_ran(leaderboard, board_notes):
    lower, upper = {0: 280.0, 1: 300.0, 2: 310.0, 5: 1.0}, {0: 300.0, 1: 290.0, 2: 320.0}
    differences = [-20.0, 10.0, -10.0]
    sd = statistics.stdev(differences)
    t = statistics.mean(differences) / (sd / math.sqrt(3))
    p = 2 * scipy.stats.t.sf(abs(t), df=2)  # the paired t-test's two-sided p, written out
    assert board_notes.seed_spread(lower, upper) == (
        f"within the seed spread, no difference measured: -6.7 ± {sd:.1f} over seeds 0, 1, 2 "
        f"(paired t-test p = {p:.2f})"
    )
    assert board_notes.seed_spread({0: 280.0, 1: 290.0, 2: 301.0}, {0: 300.0, 1: 310.0, 2: 320.0}) is None  # resolved
    assert board_notes.seed_spread({0: 280.0}, {0: 300.0}) is None  # one seed cannot tell
    assert board_notes.seed_spread({0: 280.0, 1: 290.0}, {0: 300.0, 1: 310.0}) is None  # no spread at all


def test_notes_say_where_the_seeds_leave_a_place_unresolved(leaderboard, board_notes, tmp_path):
    papers = _papers(tmp_path / "papers.yaml", _table("GSC Table 1, Flickr30K", "ncr-caption", [0.5],
                                                      {"gsc": [480.0], "ncr": [470.0]}))
    rows = [_row(m, "ncr-caption", 0.5, seed, rsum, "one network")
            for m, values in (("vsepp", (300.0, 290.0, 320.0)), ("gsc", (280.0, 300.0, 310.0)),
                              ("ncr", (301.0, 301.0, 311.0)))
            for seed, rsum in enumerate(values)]
    spread = board_notes.seed_spread({0: 280.0, 1: 300.0, 2: 310.0}, {0: 300.0, 1: 290.0, 2: 320.0})
    versus_ncr = board_notes.seed_spread({0: 280.0, 1: 300.0, 2: 310.0}, {0: 301.0, 1: 301.0, 2: 311.0})
    assert spread and versus_ncr
    assert board_notes.notes(rows, docs=tmp_path, papers=papers) == [
        f"gsc is below VSE++ under ncr-caption at 50% (296.7 vs 303.3); {spread}",
        f"gsc below ncr under ncr-caption at 50% (296.7 vs 304.3), against GSC Table 1, Flickr30K (480.0 vs 470.0); "
        f"{versus_ncr}"]
    # the seeds' verdict before a cause measured at other cells only
    (tmp_path / "gsc.md").write_text("# GSC\n\n## On the leaderboard: below NCR\n\nAt `ncr-caption` 20%.\n")
    assert board_notes.notes(rows, docs=tmp_path, papers=papers)[1].endswith(versus_ncr)
    # a cause measured at the cell is named first, the seeds' verdict where there is none
    (tmp_path / "gsc.md").write_text("# GSC\n\n## On the leaderboard: below NCR\n\nAt `ncr-caption` 50%.\n")
    assert board_notes.notes(rows, docs=tmp_path, papers=papers) == [
        f"gsc is below VSE++ under ncr-caption at 50% (296.7 vs 303.3); {spread}",
        "gsc below ncr under ncr-caption at 50% (296.7 vs 304.3), against GSC Table 1, Flickr30K (480.0 vs 470.0); "
        'the cause, measured: docs/methods/gsc.md, "On the leaderboard: below NCR"']


def _table(source, protocol, ratios, rsums, paper="gsc"):
    return {"source": source, "paper": paper, "protocol": protocol, "ratios": ratios,
            "rows": {method: {"model": method, "rsum": values} for method, values in rsums.items()}}


def _papers(path, *tables):
    path.write_text(yaml.safe_dump({"tables": list(tables)}))
    return path


def test_notes_name_a_measured_order_that_inverts_a_papers_table(leaderboard, board_notes, runs, tmp_path):
    papers = _papers(tmp_path / "papers.yaml", _table("GSC Table 1, Flickr30K", "ncr-caption", [0.2, 0.5],
                                                      {"gsc": [505.8, 480.0], "ncr": [491.1, 470.0]}))
    docs = tmp_path / "methods"
    docs.mkdir()
    rows = [_row("gsc", "ncr-caption", 0.5, 0, 280.0, "mean of 2 networks"),
            _row("gsc", "ncr-caption", 0.5, 1, 300.0, "mean of 2 networks"),
            _row("gsc", "ncr-caption", 0.5, 0, 330.0, runs.NETWORK_A),  # not the mode GSC ranks by
            _row("ncr", "ncr-caption", 0.5, 0, 310.0, "mean of 2 networks")]
    assert board_notes.notes(rows, docs=docs, papers=papers) == [
        "gsc below ncr under ncr-caption at 50% (290.0 vs 310.0), against GSC Table 1, Flickr30K (480.0 vs 470.0); "
        "the cause is not measured yet"]
    cell = "\n\nAt `ncr-caption` 50%.\n\n"
    (docs / "gsc.md").write_text("# GSC\n\n## On the leaderboard: below VSE++" + cell)  # a section on another place
    assert board_notes.notes(rows, docs=docs, papers=papers)[0].endswith("; the cause is not measured yet")
    (docs / "gsc.md").write_text("# GSC\n\n## On the leaderboard: below VSE++" + cell
                                 + "## On the leaderboard: below NCR" + cell)
    assert board_notes.notes(rows, docs=docs, papers=papers)[0].endswith(
        '; the cause, measured: docs/methods/gsc.md, "On the leaderboard: below NCR"')
    # below VSE++ there, with that cause measured, and the other method not: that cause
    under = rows + [_row("vsepp", "ncr-caption", 0.5, 0, 300.0, "one network")]
    assert board_notes.notes(under, docs=docs, papers=papers)[1] == (
        "gsc below ncr under ncr-caption at 50% (290.0 vs 310.0), against GSC Table 1, Flickr30K (480.0 vs 470.0); "
        'below VSE++ there, the cause, measured: docs/methods/gsc.md, "On the leaderboard: below VSE++"')
    # ... measured at this cell: a below-VSE++ section of other cells gives way to the one on the other method here
    (docs / "gsc.md").write_text("# GSC\n\n## On the leaderboard: below VSE++\n\nAt `ncr-caption` 20%.\n\n"
                                 "## On the leaderboard: below NCR" + cell)
    assert board_notes.notes(under, docs=docs, papers=papers)[1].endswith(
        '; the cause, measured: docs/methods/gsc.md, "On the leaderboard: below NCR"')
    # a section measured on another benchmark than the note's does not count for it
    assert board_notes.notes(rows, docs=docs, papers=papers, benchmark="proxy")[0].endswith("not measured yet")
    (docs / "gsc.md").write_text("# GSC\n\n## On the leaderboard: below NCR on the real-text proxy" + cell)
    assert board_notes.notes(rows, docs=docs, papers=papers, benchmark="proxy")[0].endswith(
        '; the cause, measured: docs/methods/gsc.md, "On the leaderboard: below NCR on the real-text proxy"')
    assert board_notes.notes(rows, docs=docs, papers=papers, benchmark="generated")[0].endswith("not measured yet")
    # the paper's order measured: no note
    same = [_row("gsc", "ncr-caption", 0.5, 0, 320.0, "mean of 2 networks"),
            _row("ncr", "ncr-caption", 0.5, 0, 310.0, "mean of 2 networks")]
    assert board_notes.notes(same, docs=docs, papers=papers) == []
    # a table at another ratio, or under the other protocol, says nothing of this cell
    elsewhere = _papers(tmp_path / "elsewhere.yaml",
                        _table("T1, Flickr30K", "ncr-caption", [0.2], {"gsc": [505.8], "ncr": [491.1]}),
                        _table("T2, Flickr30K", "decl-image", [0.5], {"gsc": [505.8], "ncr": [491.1]}))
    assert board_notes.notes(rows, docs=docs, papers=elsewhere) == []
    # several tables ranking the pair so: one note naming them all
    two = _papers(tmp_path / "two.yaml",
                  _table("GSC Table 1, Flickr30K", "ncr-caption", [0.5], {"gsc": [480.0], "ncr": [470.0]}),
                  _table("GSC Table 1, MS-COCO 1K", "ncr-caption", [0.5], {"gsc": [510.0], "ncr": [500.0]}))
    assert board_notes.notes(rows, docs=docs, papers=two) == [
        "gsc below ncr under ncr-caption at 50% (290.0 vs 310.0), against GSC Table 1, Flickr30K (480.0 vs 470.0) and "
        'GSC Table 1, MS-COCO 1K (510.0 vs 500.0); the cause, measured: docs/methods/gsc.md, "On the leaderboard: '
        'below NCR on the real-text proxy"']


def test_a_paper_ranking_a_pair_both_ways_claims_no_order_for_it(leaderboard, board_notes, tmp_path):
    flickr = _table("UGNCL Table 1, Flickr30K", "ncr-caption", [0.5], {"bicro": [481.9], "ncr": [482.8]}, "ugncl")
    coco = _table("UGNCL Table 1, MS-COCO 1K", "ncr-caption", [0.5], {"bicro": [516.5], "ncr": [508.5]}, "ugncl")
    assert board_notes.paper_orderings([flickr, coco]) == {}
    other = _table("X Table 2, Flickr30K", "ncr-caption", [0.5], {"bicro": [490.0], "ncr": [480.0], "gsc": [480.0]},
                   "x")
    assert board_notes.paper_orderings([flickr, coco, other]) == {  # ties claim nothing
        ("ncr-caption", 0.5, "bicro", "ncr"): ["X Table 2, Flickr30K (490.0 vs 480.0)"],
        ("ncr-caption", 0.5, "bicro", "gsc"): ["X Table 2, Flickr30K (490.0 vs 480.0)"]}


def test_a_damaged_papers_table_is_refused_naming_the_field(leaderboard, board_notes, tmp_path):
    path = _papers(tmp_path / "papers.yaml", _table("T1, Flickr30K", "ncr-caption", [0.2, 0.5], {"gsc": [505.8]}))
    with pytest.raises(ValueError, match=r"papers.yaml: tables\[0\] \(T1, Flickr30K\): field 'rows.gsc.rsum': "
                                         r"expected 2 rSum values, one per ratio, got \[505.8\]"):
        board_notes.comparison_tables(path)
    _papers(path, _table("T1, Flickr30K", "caption", [0.2], {"gsc": [505.8]}))
    with pytest.raises(ValueError, match=r"tables\[0\] \(T1, Flickr30K\): field 'protocol': expected one of"):
        board_notes.comparison_tables(path)


def test_the_papers_tables_name_installed_methods_and_agree_with_each_other_and_the_reproduction_page(
    leaderboard, board_notes
):
    tables = board_notes.comparison_tables()
    by_source = {table["source"]: table for table in tables}
    assert len(by_source) == len(tables)
    named = {m for t in tables for m in [t["paper"], *t["rows"], *(r["method"] for r in t.get("other_rows", []))]}
    assert named and named <= {entry.name for entry in entry_points(group="hfncl")} | {"vsepp"}

    def at(table, values, ratio):
        return values[table["ratios"].index(ratio)]

    # a row quoted from an earlier table: that table's numbers at every ratio both have
    for table in tables:
        for method, row in table["rows"].items():
            if "same_as" in row:
                quoted = by_source[row["same_as"]]
                shared = set(table["ratios"]) & set(quoted["ratios"])
                assert shared and all(at(table, row["rsum"], r) == at(quoted, quoted["rows"][method]["rsum"], r)
                                      for r in shared), (table["source"], method)
    # where docs/reproduction.md transcribes a row of the same table: one of the table's rows of that method
    numbers, sources = leaderboard.paper_numbers(), leaderboard.reported_sources()
    suffix = {dataset: key for key, dataset in leaderboard.REPORTED_DATASETS.items()}
    checked = set()
    for table in tables:
        rows = [(m, r) for m, r in table["rows"].items()] + [(r["method"], r) for r in table.get("other_rows", [])]
        for method in {m for m, _ in rows}:
            recipe = f"{method}_{suffix[table['dataset']]}"
            if table["source"].split(",")[0] in sources.get(recipe, ""):
                shared = set(table["ratios"]) & set(numbers[recipe])
                assert shared and any(all(at(table, row["rsum"], r) == numbers[recipe][r] for r in shared)
                                      for m, row in rows if m == method), (table["source"], recipe)
                checked.add(recipe)
    assert checked >= {"decl_f30k", "decl_coco", "gsc_f30k", "gsc_coco", "ugncl_f30k", "ugncl_coco", "bicro_f30k"}


def test_readme_excerpt_ranks_methods_by_their_mean_share_of_the_oracle(leaderboard, tmp_path):
    rows = [_row("oracle", "ncr-caption", 0.2, 0, 400.0, mode="one network"),
            _row("oracle", "decl-image", 0.4, 0, 200.0, mode="one network"),
            _row("vsepp", "ncr-caption", 0.2, 0, 300.0, mode="one network"),
            _row("vsepp", "decl-image", 0.4, 0, 100.0, mode="one network"),
            _row("ncr", "ncr-caption", 0.2, 0, 320.0, mode="mean of 2 networks"),
            _row("ncr", "ncr-caption", 0.2, 0, 200.0, mode="network A alone"),
            _row("ncr", "decl-image", 0.4, 0, 160.0, mode="mean of 2 networks")]
    lines = leaderboard.readme_excerpt({"rows": rows, "description": "a benchmark"},
                                       [("ncr-caption", 0.2), ("decl-image", 0.4)], [0])
    table = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    # ncr: (80% + 80%) / 2 = 80% ahead of vsepp: (75% + 50%) / 2 = 62.5%; network A alone is not a row
    assert table == ["| ncr, mean of 2 networks | 320.0 (80%) | 160.0 (80%) |",
                     "| vsepp | 300.0 (75%) | 100.0 (50%) |", "| oracle | 400.0 | 200.0 |"]
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- leaderboard:start -->\nold\n<!-- leaderboard:end -->\nafter\n")
    leaderboard.write_readme_excerpt(readme, ["new"])
    assert readme.read_text() == "# x\n<!-- leaderboard:start -->\nnew\n<!-- leaderboard:end -->\nafter\n"
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="README.md: expected the lines <!-- leaderboard:start -->"):
        leaderboard.write_readme_excerpt(readme, ["new"])


def test_the_readmes_table_is_the_committed_leaderboards(leaderboard):
    committed = json.loads((BENCHMARKS / "leaderboard.json").read_text())
    args = leaderboard.parse_args(committed["argv"])
    expected = leaderboard.readme_excerpt(committed["benchmarks"][args.readme_benchmark],
                                          leaderboard.table_columns(args), args.seeds)
    readme = (BENCHMARKS.parent / "README.md").read_text()
    start, end = (readme.index(marker) for marker in leaderboard.README_MARKERS)
    assert readme[start:end].splitlines()[1:] == expected, "README's leaderboard excerpt differs from its JSON: " \
        "python benchmarks/leaderboard.py --report-only --readme README.md ..."


def test_cost_counts_cpu_time_of_every_run(leaderboard, board_notes):
    rows = [_row("a", "ncr-caption", 0.5, 0, 1.0, cpu_seconds=1800.0, untimed_epochs=0),
            _row("b", "ncr-caption", 0.5, 0, 1.0, cpu_seconds=1800.0, untimed_epochs=0)]
    line = board_notes.cost_line(rows, 120.0)
    assert line.startswith("cost: 2 runs in 1.000 core-hours of training (2.0 runs per core-hour; devices: cpu)")
    assert line.endswith("0.03 h of wall time in all, this call's 2.0 min")
    # a run resumed from a checkpoint without its time, or a row from before rows kept it: the rate is a bound
    rows[0]["untimed_epochs"] = 3
    del rows[1]["untimed_epochs"]
    assert board_notes.cost_line(rows, 120.0).endswith(
        "this call's 2.0 min; 2 of the runs may lack an earlier process's time (resumed from a checkpoint that kept "
        "none, or recorded before rows kept it): the rate is an upper bound")


def test_reported_numbers_keep_their_source_and_protocol(leaderboard):
    lines = leaderboard.reported_table()
    assert (
        "| ncr_f30k | Flickr30K | ncr-caption | 0%: 502.7, 20%: 496.7, 50%: 482.8 | NCR Table 1, Flickr30K |" in lines
    )
    assert "| gsc_cc152k | CC152K | real (CC152K) | real: 375.1 | GSC Table 3 (GSC-SGR), CC152K |" in lines
    assert all("dmcm" not in line for line in lines)  # mAP, not rSum


def test_bad_arguments_are_refused(leaderboard, capsys):
    for argv, message in (
        (["--jobs", "0"], "--jobs and --threads must be >= 1"),
        (["--decl-ratios", "1.0"], "--decl-ratios must lie in"),
        (["--methods", "ncr", "--own-oracles", "rcl"], "--own-oracles: rcl not among the methods this call trains"),
    ):
        with pytest.raises(SystemExit):
            leaderboard.parse_args(argv)
        assert message in capsys.readouterr().err


def test_a_free_worker_takes_the_next_cells_runs_while_a_cells_references_wait_for_its_methods(leaderboard, tmp_path):
    data_dir = generate_precomp(tmp_path / "data", MICRO_DATA)
    args = leaderboard.parse_args(["--methods", "vsepp", "ncr", "--seeds", "0", "--protocols", "ncr-caption",
                                   "--ncr-ratios", "0.2", "0.5"])
    ordered = leaderboard.groups(*leaderboard.plan(args, data_dir))
    assert [[run.job.row for run in group] for group in ordered] == [["vsepp", "ncr"], ["oracle"]] * 2
    started, order = threading.Event(), []

    def train(run):  # NCR at 20% trains until the next cell's first run has started
        order.append(run.key)
        if "noise50" in run.key:
            started.set()
        if run.key.startswith("ncr-caption/ncr_noise20") and not started.wait(timeout=10):
            raise AssertionError("the next cell waited for this cell's last method")
        return {"protocol": run.protocol, "test": {"rsum": 1.0}, "epochs": 1, "seconds": 0.0}

    rows: list = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        leaderboard.schedule(ordered, 2, lambda run: pool.submit(train, run), lambda run: run, rows)
    assert len(rows) == 6 and (
        order.index("ncr-caption/oracle_noise20_seed0") > order.index("ncr-caption/vsepp_noise50_seed0")
    )
    # a cell's references start only once its methods have all finished
    assert order.index("ncr-caption/oracle_noise50_seed0") > max(
        order.index(f"ncr-caption/{m}_noise50_seed0") for m in ("ncr", "vsepp")
    )


def test_the_proxy_trains_its_own_seeds(leaderboard, tmp_path, monkeypatch):
    data_dir = generate_precomp(tmp_path / "data", MICRO_DATA)
    monkeypatch.setattr(leaderboard, "prepare_benchmark", lambda name, *rest: (data_dir, f"the {name} data"))
    planned: dict[str, set[int]] = {}
    monkeypatch.setattr(
        leaderboard,
        "run_groups",
        lambda ordered, args, root, rows: planned.setdefault(root.name, set()).update(
            run.job.seed for group in ordered for run in group
        ),
    )
    argv = ["--benchmark", "generated", "proxy", "--methods", "vsepp", "--no-references", "--protocols", "ncr-caption",
            "--ncr-ratios", "0.2", "--seeds", "0", "1", "--output-dir", str(tmp_path / "runs"),
            "--report", str(tmp_path / "lb")]
    assert leaderboard.parse_args(argv).proxy_seeds == [0, 1]  # by default the --seeds
    leaderboard.main(argv + ["--proxy-seeds", "0"])
    assert planned == {"generated": {0, 1}, "proxy": {0}}
    text = (tmp_path / "lb.md").read_text()
    assert "## Measured: the generated data, seeds 0, 1, protocol `ncr-caption`" in text
    assert "## Measured: the proxy data, seeds 0, protocol `ncr-caption`" in text


@pytest.mark.slow
def test_quick_run_writes_the_tables_and_reuses_finished_runs(tmp_path):
    command = [sys.executable, str(BENCHMARKS / "leaderboard.py"), "--quick", "--benchmark", "generated",
               "--methods", "vsepp", "ncr", "--jobs", "2", "--output-dir", str(tmp_path)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    text = (tmp_path / "leaderboard.md").read_text()
    assert "protocol `ncr-caption`" in text and "protocol `decl-image`" in text
    assert (
        "| ncr | mean of 2 networks |" in text
        and "| ncr | network A alone |" in text
        and "| vsepp | one network |" in text
    )
    assert "## Reported by the papers (not measured here" in text and (tmp_path / "leaderboard.png").is_file()
    report = json.loads((tmp_path / "leaderboard.json").read_text())
    rows = report["benchmarks"]["generated"]["rows"]
    assert {(r["protocol"], r["method"]) for r in rows} >= {("decl-image", "ncr"), ("ncr-caption", "oracle")}
    again = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    assert (
        "cost: 6 runs" in again and (tmp_path / "generated" / "decl-image" / "ncr_noise40_seed0" / "row.json").is_file()
    )


def test_a_run_built_otherwise_than_its_plugins_model_defaults_is_stale(leaderboard, runs, tmp_path):
    """A plugin's ``model_defaults`` changed after its run was trained (the run's config left the field to it, null):
    the resolved model the run saved tells, so the run trains again; an explicit field in the run's config wins."""
    data_dir = generate_precomp(tmp_path / "data", MICRO_DATA)
    args = leaderboard.parse_args(["--methods", "coteaching", "--seeds", "0", "--protocols", "decl-image",
                                   "--decl-ratios", "0.4", "--batch-size", "16", "--no-references"])
    (run,), _ = leaderboard.plan(args, data_dir)
    root = tmp_path / "runs"
    run_dir = run.directory(root) / run.job.name
    (run_dir / "best").mkdir(parents=True)
    config = runs.train_config(run.job, run_dir, False)
    saved = {field: getattr(config, field) for field in runs.TRAINING_FIELDS}
    saved.update(options=dict(config.options), train_split="train", pretrained_heads=None)
    (run_dir / "run_config.yaml").write_text(runs.yaml.safe_dump(saved))
    assert runs.stale_fields(run, root, False, {}) == []  # no best model yet
    (run_dir / "best" / "config.json").write_text(json.dumps({"pretrained_heads": True, "embed_dim": 256}))
    assert runs.stale_fields(run, root, False, {}) == [
        "pretrained_heads (the plugin's model default) was True, plan False"]
    (run_dir / "best" / "config.json").write_text(json.dumps({"pretrained_heads": False}))
    assert runs.stale_fields(run, root, False, {}) == []
    (run_dir / "run_config.yaml").write_text(runs.yaml.safe_dump({**saved, "pretrained_heads": True}))
    (run_dir / "best" / "config.json").write_text(json.dumps({"pretrained_heads": True}))
    assert runs.stale_fields(run, root, False, {}) == []  # asked for by the run itself
