"""The leaderboard's CLIP track (benchmarks/clip_track.py): its generated pictures, its plan and a quick run offline."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import torch
from conftest import benchmark_module

from hfncl.data.noise import make_noise


@pytest.fixture(scope="module")
def leaderboard():
    return benchmark_module("leaderboard")


@pytest.fixture(scope="module")
def board_notes(leaderboard):
    """``benchmarks/leaderboard_notes.py``, the module the leaderboard imports."""
    return sys.modules["leaderboard_notes"]


@pytest.fixture(scope="module")
def track(leaderboard):
    return leaderboard.clip_track


def test_a_picture_shows_the_colours_its_captions_name_left_and_right(track):
    rng = np.random.default_rng(3)
    for _ in range(20):
        image, captions = track.draw_picture(rng, 32)
        words = captions[0].split()  # "a {s1} {c1} {h1} left of a {s2} {c2} {h2} on {bg}"
        left, right, background = words[2], words[8], words[-1]
        assert {words[3], words[9]} <= set(track.SHAPES) and len(captions) == 5
        pixels = np.asarray(image).reshape(-1, 3)
        drawn = {tuple(p) for p in pixels} - {track.BACKGROUNDS[background]}
        assert drawn == {track.COLOURS[left], track.COLOURS[right]}
        if left != right:
            columns = np.arange(32)[None, :].repeat(32, 0).reshape(-1)
            mean_x = {c: columns[(pixels == track.COLOURS[c]).all(axis=1)].mean() for c in (left, right)}
            assert mean_x[left] < mean_x[right]


def test_the_baseline_warms_for_every_epoch_and_npc_on_a_pretrained_clip_for_none(leaderboard, track, tmp_path):
    data_dir = track.write_shapes_imagefolder(tmp_path / "data", track.QUICK_SHAPES)
    assert track.training_pairs(data_dir) == 24 * 5
    args = leaderboard.parse_args(["--benchmark", "clip", "--seeds", "0", "--protocols", "decl-image",
                                   "--decl-ratios", "0.4"])
    planned, skipped = track.plan(args, data_dir, pretrained=True)
    assert skipped == {} and args.report.endswith("benchmarks/leaderboard_clip")
    runs = {run.job.row: run for run in planned}
    methods = ("npc", "rcl", "coteaching")
    assert set(runs) == {"infonce", *methods, "oracle", *(f"oracle ({m})" for m in methods)}
    oracle = runs.pop("oracle").job
    assert oracle.run.plugin == "npc" and oracle.run.settings["warmup_epochs"] == oracle.run.settings["epochs"]
    assert oracle.data.noise_ratio == 0 and oracle.data.data_dir == str(tmp_path / "data_oracles" / "image_40_seed0")
    own = {m: runs.pop(f"oracle ({m})").job for m in methods}  # each method itself on the same clean pairs
    assert all(job.run.plugin == m and job.data.data_dir == oracle.data.data_dir and job.run.noise_ratio == 0.4
               for m, job in own.items())
    assert own["npc"].run.settings["warmup_epochs"] == 0 and own["npc"].run.settings["epochs"] > 0
    assert track.track_oracles(args) == {"infonce": "oracle", **{m: f"oracle ({m})" for m in methods}}
    base = runs["infonce"].job.run
    assert base.plugin == "npc" and base.settings["warmup_epochs"] == base.settings["epochs"] == 70
    assert runs["npc"].job.run.settings["warmup_epochs"] == 0
    assert all(run.job.run.settings["batch_size"] == 32 and run.job.data.noise_kind == "image" for run in runs.values())


def test_options_reach_the_track_runs_of_the_plugin_they_name(leaderboard, track, tmp_path, capsys):
    data_dir = track.write_shapes_imagefolder(tmp_path / "data", track.QUICK_SHAPES)
    args = leaderboard.parse_args(["--benchmark", "clip", "--seeds", "0", "--protocols", "ncr-caption", "--ncr-ratios",
                                   "0.2", "--options", '{"rcl.tau": 0.2, "npc.temperature": 0.05}'])
    planned, _ = track.plan(args, data_dir, pretrained=False)
    options = {run.job.row: run.job.run.settings.get("options", {}) for run in planned}
    assert options["rcl"]["rcl.tau"] == options["oracle (rcl)"]["rcl.tau"] == 0.2
    # the baseline is NPC's plugin in its warmup: NPC's options reach it and its oracle too
    assert all(options[row]["npc.temperature"] == 0.05 for row in ("npc", "infonce", "oracle", "oracle (npc)"))
    assert not any(key.startswith("rcl.") for key in options["coteaching"] | options["npc"])
    # an option of a plugin the track does not train (and the generated benchmark is not run) is refused
    with pytest.raises(SystemExit):
        leaderboard.parse_args(["--benchmark", "clip", "--clip-methods", "infonce", "--options", '{"rcl.tau": 0.2}'])
    assert "--options: rcl.tau declared by no plugin this call trains (npc)" in capsys.readouterr().err


def test_the_quick_track_trains_the_baseline_offline_and_writes_its_row(leaderboard, tmp_path, offline):
    out = tmp_path / "runs"
    argv = ["--benchmark", "clip", "--quick", "--clip-methods", "infonce", "--protocols", "ncr-caption",
            "--output-dir", str(out), "--report", str(out / "board")]
    assert leaderboard.main(argv) == 0
    run = out / "clip" / "ncr-caption" / "infonce_noise50_seed0"
    row = json.loads((run / "row.json").read_text())
    assert (row["method"], row["plugin"], row["protocol"], row["epochs"]) == ("infonce", "npc", "ncr-caption", 2)
    assert math.isfinite(row["test"]["rsum"]) and row["test"]["rsum"] > 0
    history = json.loads((run / "results.json").read_text())["history"]
    assert [h["warmup"] for h in history] == [True, True]  # no noise handling: NPC's InfoNCE warmup throughout
    oracle = json.loads((out / "clip" / "ncr-caption" / "oracle_noise50_seed0" / "row.json").read_text())
    assert oracle["noise_ratio"] == 0.5 and oracle["epochs"] == 2
    share = 100 * row["test"]["rsum"] / oracle["test"]["rsum"]
    table = (out / "board.md").read_text()
    assert "## Measured: CLIP track" in table
    assert f"| infonce | one network | oracle | {row['test']['rsum']:.1f} | {share:.1f}% |" in table
    assert leaderboard.main(argv + ["--report-only"]) == 0  # the row is read back, nothing trains


def test_a_clip_model_that_cannot_be_read_offline_fails_in_one_line(leaderboard, tmp_path, offline):
    argv = ["--benchmark", "clip", "--quick", "--clip-model", "nobody/no-such-clip", "--output-dir", str(tmp_path)]
    with pytest.raises(SystemExit, match=r"^--clip-model 'nobody/no-such-clip': .*HF_HUB_OFFLINE") as error:
        leaderboard.main(argv)
    assert "\n" not in str(error.value) and not any(tmp_path.iterdir())


@pytest.mark.parametrize("kind", ["caption", "image"])
def test_the_oracle_folder_holds_exactly_the_pairs_the_noise_leaves_clean(track, tmp_path, kind):
    data_dir = track.write_shapes_imagefolder(tmp_path / "data", track.QUICK_SHAPES)
    clean_dir = track.oracle_folder(data_dir, 0.4, 1, kind)
    train = [json.loads(line) for line in (data_dir / "train" / "metadata.jsonl").read_text().splitlines()]
    pixels = {row["file_name"]: (data_dir / "train" / row["file_name"]).read_bytes() for row in train}
    true_pairs = {(pixels[row["file_name"]], text) for row in train for text in row["captions"]}
    kept = [json.loads(line) for line in (clean_dir / "train" / "metadata.jsonl").read_text().splitlines()]
    pairs = [((clean_dir / "train" / row["file_name"]).read_bytes(), row["captions"][0]) for row in kept]
    assert all(pair in true_pairs for pair in pairs)
    assert (clean_dir / "test" / "metadata.jsonl").read_text() == (data_dir / "test" / "metadata.jsonl").read_text()
    pairing = make_noise(kind, len(train), 5, 0.4, 1)
    assert len(kept) == int((pairing == np.arange(len(pairing)) // 5).sum()) < len(train) * 5


def test_the_notes_name_a_failed_method_one_below_the_baseline_and_one_above_the_oracle(
    board_notes, track, leaderboard
):
    def row(method, rsum, seed, **extra):
        return {"protocol": "ncr-caption", "method": method, "noise_ratio": 0.2, "seed": seed, "mode": "one network",
                "test": {"rsum": rsum}, **extra}

    division = {"auc": 0.9, "precision": 0.8, "recall": 0.7}
    rows = [row("infonce", 400.0, 0), row("infonce", 410.0, 1), row("npc", 390.0, 0, division=division),
            row("npc", 400.0, 1, division={**division, "auc": 0.8}), row("rcl", 420.0, 0), row("oracle", 300.0, 0)]
    notes = track.baseline_notes(rows, {"tcvse": "ValueError: no regions"})
    assert notes == [
        "tcvse not shown: its runs failed on this track (ValueError: no regions)",
        "npc is below the baseline (infonce) under ncr-caption at 20% (395.0 vs 405.0); its division (network A, "
        "last epoch): auc 0.850, precision 0.800, recall 0.700",
    ]
    shares = [{**r, "planned_epochs": 10, "epochs": 8, "best_epoch": 6} for r in rows]  # the track's notes of its runs
    head = ("above its oracle, a defect of the measurement until shown otherwise (test rSum minus the oracle's, mean ± "
            "sd over the seeds): ")
    assert board_notes.measurement_notes(shares) == [
        head + "infonce over oracle (ncr-caption 20%: +100.0 over seed 0), npc over oracle (ncr-caption 20%: "
        "+90.0 over seed 0), rcl over oracle (ncr-caption 20%: +120.0 over seed 0)"]
    # each method over its own oracle; the baseline, whose plugin is NPC's, over the baseline's
    own = shares + [
        {**row("oracle (rcl)", 440.0, 0), "plugin": "rcl"},
        {**row("oracle (npc)", 380.0, 0), "plugin": "npc"},
    ]
    oracles = {"infonce": "oracle", "npc": "oracle (npc)", "rcl": "oracle (rcl)"}
    base = {**row("infonce", 400.0, 0), "plugin": "npc"}
    assert [board_notes.oracle_of(r, oracles) for r in (base, own[2], own[-1], own[5])] == [
        "oracle", "oracle (npc)", "oracle (npc)", "oracle"]
    assert board_notes.share_of_oracle(own[4], board_notes.oracle_rsums(own), oracles) == 100 * 420.0 / 440.0
    assert board_notes.measurement_notes(own, oracles) == [
        head + "infonce over oracle (ncr-caption 20%: +100.0 over seed 0), npc over oracle (npc) (ncr-caption 20%: "
        "+10.0 over seed 0)"]


def test_identical_networks_compares_every_network_with_network_0(track, tmp_path):
    from safetensors.torch import save_file

    weight = torch.arange(6.0).reshape(2, 3)
    cases = {"twins": [weight, weight.clone(), weight.clone()], "apart": [weight, weight.clone(), weight + 1e-6],
             "one": [weight]}
    for name, tensors in cases.items():
        (tmp_path / name).mkdir()
        weights = {f"networks.{k}.head.weight": t for k, t in enumerate(tensors)}
        save_file(weights, tmp_path / name / "model.safetensors")
    assert [track.identical_networks(tmp_path / name) for name in cases] == [True, False, False]
