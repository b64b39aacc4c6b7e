"""Broken models, settings, plugin combinations, output directories and checkpoints are refused or caught."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from conftest import noisy_trainer, tiny_config
from hfncl import plugins
from hfncl.cli import main
from hfncl.config import TrainConfig
from hfncl.engine import ownership
from hfncl.plugins import PluginError, _fits, build_plugin_manager, check_division_fields


def test_nan_weights_are_an_error_and_zero_weights_score_no_better_than_chance(tiny_data_dir, tmp_path):
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"]))
    with torch.no_grad():
        for parameter in trainer.model.parameters():
            parameter.zero_()
    zero = trainer.evaluate(trainer.val_split)  # every similarity ties: 40 images, 5 captions each
    assert zero["i2t_r10"] == zero["t2i_r10"] == 0.0 and zero["rsum"] == 0.0
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(float("nan"))
    with pytest.raises(ValueError, match="non-finite .* the model's weights or the features are broken"):
        trainer.evaluate(trainer.val_split)


def train_cli(capsys, *arguments: str) -> tuple[int, str]:
    """``hfncl train ARGUMENTS`` in this process: its exit status and what it wrote to stderr."""
    status = main(["train", *arguments])
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--epochs", "0"], "TrainConfig.epochs must be >= 1, got 0"),
        (["--save_steps", "-1"], "TrainConfig.save_steps must be >= 0, got -1"),
        (["--feature_dtype", "int8"], "feature_dtype must be one of ('float32', 'float16'), got 'int8'"),
        (["--noise_ratio", "2"], "noise_ratio must be in [0, 1), got 2.0"),
        (
            ["--plugins", "ncr", "--options", '{"ncr.alpha": "abc"}'],
            "Option 'ncr.alpha' must be a finite number like its default 0.2, got 'abc' (str)",
        ),
        (["--options", '{"vsepp.margin": true}'], "Option 'vsepp.margin' must be a finite number"),
        (["--batch_size", "1000"], "TrainConfig.batch_size 1000 exceeds the 800 training samples"),
    ],
)
def test_configuration_errors_are_one_line(tiny_data_dir, tmp_path, capsys, arguments, message):
    base = ["--plugins", "vsepp", "--data_dir", str(tiny_data_dir), "--output_dir", str(tmp_path), "--progress", "false"]
    status, err = train_cli(capsys, *base, *arguments)
    assert status != 0
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "checkpoints").exists()


def test_cli_configuration_error_in_a_subprocess_is_one_line_without_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "hfncl.cli", "train", "--plugins", "vsepp", "--data_dir", str(tmp_path), "--epochs", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert done.stderr.strip() == "error: TrainConfig.epochs must be >= 1, got 0"
    assert "Traceback" not in done.stdout + done.stderr


def test_option_types_follow_their_defaults():
    assert _fits(3, 0.2) and not _fits(float("nan"), 0.2) and not _fits(True, 0.2)
    assert _fits(False, True) and not _fits(1, True)
    assert _fits(5, 5) and not _fits(5.0, 5) and _fits("x", None) and _fits([1], (0,))


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["ncr", "ugncl"], "ugncl's loss reads targets field(s) ['sets', 'soft_label', 'uncertainty'], which the active rectify (ncr's)"),
        (["ugncl", "ncr"], "ncr's loss reads targets field(s) ['clean', 'clean_prob'], which the active rectify (ugncl's)"),
        (["gsc", "ugncl"], "ugncl's rectify reads division field(s) ['sets', 'soft_label', 'uncertainty'], which the active divide (gsc's)"),
    ],
)
def test_incompatible_plugin_combinations_are_refused_by_name(names, message):
    with pytest.raises(PluginError, match=re.escape(message)):
        check_division_fields(build_plugin_manager(names), names, TrainConfig(plugins=names))


@pytest.mark.parametrize(
    ("names", "options"),
    [
        (["ncr"], {}),
        (["ncr"], {"ncr.co_rectify": False}),
        (["ugncl"], {}),
        (["vsepp", "ugncl"], {}),  # ugncl still divides and rectifies for its own loss
        (["ncr", "vsepp"], {}),
        (["gsc", "gsc_intra"], {}),
        (["dmcm"], {}),
    ],
)
def test_compatible_plugin_combinations_pass(names, options):
    check_division_fields(build_plugin_manager(names), names, TrainConfig(plugins=names, options=options))


def test_trainer_refuses_an_incompatible_combination_before_building_anything(tiny_data_dir, tmp_path):
    with pytest.raises(PluginError, match="Plugins ncr \\+ ugncl do not fit"):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["ncr", "ugncl"]))
    assert not (tmp_path / "checkpoints").exists()


def test_two_packages_registering_one_plugin_name_is_an_error_naming_both(monkeypatch):
    def point(value: str, package: str) -> SimpleNamespace:
        return SimpleNamespace(name="vsepp", value=value, dist=SimpleNamespace(name=package, version="1.0"))

    found = [point("plugins.vsepp", "hfncl"), point("evil.vsepp", "evil-vsepp")]
    monkeypatch.setattr(plugins, "entry_points", lambda group: found)
    with pytest.raises(PluginError, match=r"'vsepp' is registered by two packages, hfncl 1.0 \(plugins.vsepp\) and evil-vsepp 1.0"):
        plugins.installed_entry_points()
    found[1] = point("plugins.vsepp", "hfncl")  # one package seen twice on the path is no conflict
    assert list(plugins.installed_entry_points()) == ["vsepp"]


def dead_pid() -> int:
    finished = subprocess.Popen([sys.executable, "-c", ""])
    finished.wait()
    return finished.pid


def test_a_live_run_s_lock_refuses_a_second_run_and_a_stale_lock_is_taken_over(tmp_path):
    lock = tmp_path / ownership.LOCK_FILE
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    with pytest.raises(ownership.OutputDirError, match=f"in use by the run of process {os.getppid()} on this host"):
        with ownership.owned_output_dir(tmp_path):
            pass
    lock.write_text(json.dumps({"pid": 1, "host": "elsewhere"}))
    with pytest.raises(ownership.OutputDirError, match="locked by process 1 on host elsewhere .* delete the lock file"):
        with ownership.owned_output_dir(tmp_path):
            pass
    stale = dead_pid()
    lock.write_text(json.dumps({"pid": stale, "host": socket.gethostname()}))
    with pytest.warns(UserWarning, match=f"taking over the lock of process {stale}, which no longer runs"):
        with ownership.owned_output_dir(tmp_path):
            assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()


def test_another_run_s_results_are_refused_unless_overwritten_or_resumed(tmp_path):
    (tmp_path / "best").mkdir()
    (tmp_path / "results.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ownership.OutputDirError, match="holds another run's results \\(best, results.json\\): pass --overwrite_output_dir"):
        with ownership.owned_output_dir(tmp_path):
            pass
    with ownership.owned_output_dir(tmp_path, resume=True):
        assert (tmp_path / "best").exists()
    with ownership.owned_output_dir(tmp_path, overwrite=True):
        assert sorted(p.name for p in tmp_path.iterdir()) == [ownership.LOCK_FILE, "notes.txt"]
    assert not (tmp_path / ownership.LOCK_FILE).exists()


def test_cli_refuses_a_directory_holding_another_run_before_writing(tiny_data_dir, tmp_path, capsys):
    (tmp_path / "results.json").write_text("{}")
    status, err = train_cli(
        capsys, "--plugins", "vsepp", "--data_dir", str(tiny_data_dir), "--output_dir", str(tmp_path), "--noise_ratio", "0.2"
    )
    assert status != 0 and err.count("\n") == 1 and "holds another run's results (results.json)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no noise index, no lock left


def test_latest_is_followed_only_inside_the_output_directory(tiny_data_dir, tmp_path):
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"], resume_from_checkpoint="latest"))
    (tmp_path / "outside").mkdir()
    (tmp_path / "checkpoints").mkdir()
    for target in ("../outside", "", "step-00000001-epoch-0000"):  # escaping, empty, dangling
        (tmp_path / "checkpoints" / "latest").write_text(target)
        with pytest.raises(ValueError, match=f"names '{re.escape(target)}', not a checkpoint directory of"):
            trainer.resume()
