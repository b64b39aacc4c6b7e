"""Broken models, settings, plugin combinations, output directories and checkpoints are refused or caught."""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import noisy_trainer, tiny_config

from hfncl import registry
from hfncl.cli import main
from hfncl.config import TrainConfig
from hfncl.engine import ownership
from hfncl.integrity import DiskFullError, IntegrityError, verify_manifest, write_manifest
from hfncl.models import NCLModel
from hfncl.plugin_setup import check_agreement, check_division_fields
from hfncl.plugins import PluginError, _fits, build_plugin_manager


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
    base = [
        "--plugins", "vsepp", "--data_dir", str(tiny_data_dir), "--output_dir", str(tmp_path), "--progress", "false"
    ]
    status, err = train_cli(capsys, *base, *arguments)
    assert status != 0
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "checkpoints").exists()


def test_cli_configuration_error_in_a_subprocess_is_one_line_without_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "hfncl.cli", "train", "--plugins", "vsepp", "--data_dir", str(tmp_path),
         "--epochs", "0"],
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
        (["ncr", "ugncl"], "ugncl's loss reads targets field(s) ['sets', 'soft_label', 'uncertainty'], "
                           "which the active rectify (ncr's)"),
        (["ugncl", "ncr"], "ncr's loss reads targets field(s) ['clean', 'clean_prob'], "
                           "which the active rectify (ugncl's)"),
        (["gsc", "ugncl"], "ugncl's rectify reads division field(s) ['sets', 'soft_label', 'uncertainty'], "
                           "which the active divide (gsc's)"),
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


@pytest.mark.parametrize("names", [["ncr", "tcvse"], ["tcvse", "ncr"], ["gsc", "tcvse"]])
def test_plugins_that_train_networks_differently_are_refused_by_name(names):
    config = TrainConfig(plugins=names)
    with pytest.raises(
        PluginError, match=re.escape(f"Plugins {' + '.join(names)} do not fit: they answer training_passes")
    ):
        check_agreement(build_plugin_manager(names), names, "training_passes", config=config, num_networks=2)


@pytest.mark.parametrize("names", [["ncr", "gsc_intra"], ["gsc", "gsc_intra"], ["ncr", "vsepp"], ["tcvse", "vsepp"]])
def test_plugins_that_agree_on_networks_and_passes_pass(names):
    config = TrainConfig(plugins=names)
    check_agreement(build_plugin_manager(names), names, "num_networks", config=config)
    check_agreement(build_plugin_manager(names), names, "training_passes", config=config, num_networks=2)


def test_ncr_with_tcvse_is_refused_before_the_first_epoch(tiny_data_dir, tmp_path):
    with pytest.raises(PluginError, match=re.escape("ncr [[0], [1]], tcvse [[0, 1]]")):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["ncr", "tcvse"]))
    assert not (tmp_path / "checkpoints").exists()


def test_trainer_refuses_an_incompatible_combination_before_building_anything(tiny_data_dir, tmp_path):
    with pytest.raises(PluginError, match="Plugins ncr \\+ ugncl do not fit"):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["ncr", "ugncl"]))
    assert not (tmp_path / "checkpoints").exists()


def test_two_packages_registering_one_plugin_name_is_an_error_naming_both(monkeypatch):
    def point(value: str, package: str) -> SimpleNamespace:
        return SimpleNamespace(name="vsepp", value=value, dist=SimpleNamespace(name=package, version="1.0"))

    found = [point("plugins.vsepp", "hfncl"), point("evil.vsepp", "evil-vsepp")]
    monkeypatch.setattr(registry, "entry_points", lambda group: found)
    with pytest.raises(
        PluginError, match=r"'vsepp' is registered by two packages, hfncl 1.0 \(plugins.vsepp\) and evil-vsepp 1.0"
    ):
        registry.installed_entry_points()
    found[1] = point("plugins.vsepp", "hfncl")  # one package seen twice on the path is no conflict
    assert list(registry.installed_entry_points()) == ["vsepp"]


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
    with pytest.raises(
        ownership.OutputDirError,
        match="holds another run's results \\(best, results.json\\): pass --overwrite_output_dir",
    ):
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
        capsys, "--plugins", "vsepp", "--data_dir", str(tiny_data_dir), "--output_dir", str(tmp_path),
        "--noise_ratio", "0.2"
    )
    assert status != 0 and err.count("\n") == 1 and "holds another run's results (results.json)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]  # no noise index, no lock left


def test_latest_is_followed_only_inside_the_output_directory(tiny_data_dir, tmp_path):
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"], resume_from_checkpoint="latest"))
    (tmp_path / "outside").mkdir()
    (tmp_path / "checkpoints").mkdir()
    for target in ("../outside", "", "step-00000001-epoch-0000"):  # escaping, empty, dangling
        (tmp_path / "checkpoints" / "latest").write_text(target)
        with pytest.raises(
            IntegrityError, match=f"no complete checkpoint .* names '{re.escape(target)}', not a checkpoint"
        ):
            trainer.resume()
    saved = trainer.save_checkpoint()
    (tmp_path / "checkpoints" / "latest").write_text("../outside")
    with pytest.warns(UserWarning, match=f"resuming from {re.escape(str(saved))} instead: .* names '../outside'"):
        assert trainer.resume()


def saved_twice(tiny_data_dir, output_dir):
    """A trainer and the two checkpoints it saved, at steps 0 and 7 (nothing trained)."""
    trainer = noisy_trainer(tiny_data_dir, tiny_config(output_dir, ["vsepp"]))
    first = trainer.save_checkpoint()
    trainer.state.global_step, trainer.state.epoch = 7, 1
    return trainer, first, trainer.save_checkpoint()


def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(tiny_data_dir, tmp_path):
    _, first, latest = saved_twice(tiny_data_dir, tmp_path)
    assert (tmp_path / "checkpoints" / "latest").read_text() == latest.name
    weights = latest / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # one flipped byte in the tensor data; the header still parses
    weights.write_bytes(bytes(data))
    resumed = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"], resume=True))
    with pytest.warns(
        UserWarning, match=f"resuming from {re.escape(str(first))} instead: {re.escape(str(weights))} is damaged"
    ):
        assert resumed.resume()
    assert resumed.state.global_step == 0
    (first / "trainer_state.json").write_text("")
    with pytest.raises(
        IntegrityError,
        match="no complete checkpoint to resume from: .*model.safetensors is damaged: .*; "
        ".*trainer_state.json is damaged",
    ):
        resumed.resume()


class _RunsCode:
    """A pickle payload: unpickling it calls ``pathlib.Path.touch`` on a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_resume_checkpoint_whose_pickles_would_run_code_is_refused_without_running_it(tiny_data_dir, tmp_path):
    _, _, latest = saved_twice(tiny_data_dir, tmp_path)
    marker = tmp_path / "code_ran"
    pickles = sorted(latest.glob("*.pkl")) + sorted(latest.glob("*.bin"))
    assert pickles, "accelerate's state files"
    for path in pickles:  # every pickle accelerate wrote, replaced, and the manifest rewritten to match
        path.write_bytes(pickle.dumps(_RunsCode(marker)))
    write_manifest(latest)
    resumed = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"], resume=True))
    with pytest.raises(
        IntegrityError, match=f"{re.escape(str(latest))}: accelerate's state files cannot be loaded safely"
    ):
        resumed.resume()
    assert not marker.exists()


def test_only_the_latest_and_the_previous_checkpoint_are_kept_and_an_interrupted_save_leaves_no_final_name(
    tiny_data_dir, tmp_path, monkeypatch
):
    trainer, first, latest = saved_twice(tiny_data_dir, tmp_path)
    trainer.state.global_step = 9
    third = trainer.save_checkpoint()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", latest.name, third.name]

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("hfncl.engine.checkpoints.save_file", full_disk)
    trainer.state.global_step = 11
    root = re.escape(str(tmp_path / "checkpoints"))
    with pytest.raises(
        DiskFullError, match=f"^no space left on the disk of {root} while writing checkpoint step-00000011-epoch-0001: "
    ):
        trainer.save_checkpoint()
    assert not list((tmp_path / "checkpoints").glob("step-00000011-*[!p]"))  # only the .tmp staging directory
    assert (tmp_path / "checkpoints" / "latest").read_text() == third.name
    verify_manifest(third)


def test_loading_verifies_config_and_weights_and_names_a_missing_config(tiny_data_dir, tmp_path):
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"]))
    trainer._save_best({"rsum": 0.0}, {})
    best = tmp_path / "best"
    assert NCLModel.from_pretrained(best).config.plugins == ["vsepp"]
    (best / "README.md").write_text("edited card")  # files loading does not read are not checked
    NCLModel.from_pretrained(best)
    weights = best / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=f"{re.escape(str(weights))} is damaged: its SHA-256 differs"):
        NCLModel.from_pretrained(best)
    (best / "config.json").unlink()
    with pytest.raises(OSError, match=f"{re.escape(str(best))} has no config.json: it is not a saved hfncl checkpoint"):
        NCLModel.from_pretrained(best)


def micro_run(data_dir, output_dir, noise_ratio=0.4, **overrides):
    """``run_experiment`` of VSE++ on ``data_dir`` for one epoch (or ``overrides``) with the tiny model."""
    from conftest import TINY_MODEL

    from hfncl.experiment import DataArguments, run_experiment

    settings = dict(epochs=1, warmup_epochs=0, batch_size=16, lr_decay_epochs=[]) | overrides
    config = tiny_config(output_dir, ["vsepp"], **settings)
    return run_experiment(DataArguments(data_dir=str(data_dir), noise_ratio=noise_ratio), config, TINY_MODEL)


def test_a_resume_with_other_noise_or_data_is_refused_in_one_line_before_the_data_are_read(
    micro_data_dir, tmp_path, tmp_path_factory
):
    from conftest import MICRO_DATA

    from hfncl.data.synthetic import generate_precomp
    from hfncl.engine.fingerprint import FINGERPRINT_FILE, ResumeMismatchError

    micro_run(micro_data_dir, tmp_path)
    checkpoint = next((tmp_path / "checkpoints").glob("step-*"))
    assert json.loads((checkpoint / FINGERPRINT_FILE).read_text())["fields"]["data.noise_ratio"] == 0.4
    noise = (tmp_path / "noise_index.npy").read_bytes()
    with pytest.raises(
        ResumeMismatchError,
        match=r"trained on other data.*: data.noise_ratio \(0.4 -> 0.1\), training.epochs \(1 -> 2\); "
        r".*--resume_ignore_mismatch",
    ) as caught:
        micro_run(micro_data_dir, tmp_path, noise_ratio=0.1, epochs=2, resume=True)
    assert "\n" not in str(caught.value)
    assert (tmp_path / "noise_index.npy").read_bytes() == noise  # refused before the noise was made again
    other = generate_precomp(tmp_path_factory.mktemp("other_micro"), MICRO_DATA)  # the same shapes and captions
    with pytest.raises(ResumeMismatchError, match=f'data.data_dir \\("{re.escape(str(micro_data_dir.resolve()))}" -> '):
        micro_run(other, tmp_path, resume=True)


def test_a_resume_across_a_mismatch_on_purpose_is_recorded_and_an_old_checkpoint_resumes_with_a_warning(
    micro_data_dir, tmp_path
):
    from hfncl.engine.fingerprint import FINGERPRINT_FILE

    micro_run(micro_data_dir, tmp_path)
    with pytest.warns(
        UserWarning, match=r"across a mismatch \(--resume_ignore_mismatch\): data.noise_ratio \(0.4 -> 0.2\)"
    ):
        result = micro_run(
            micro_data_dir, tmp_path, noise_ratio=0.2, epochs=2, resume=True, resume_ignore_mismatch=True
        )
    assert result["resumed_across_mismatch"] == ["data.noise_ratio", "noise_index", "training.epochs"]
    assert (
        json.loads((tmp_path / "results.json").read_text())["resumed_across_mismatch"]
        == result["resumed_across_mismatch"]
    )
    assert [h["epoch"] for h in result["history"]] == [1, 2]
    latest = tmp_path / "checkpoints" / (tmp_path / "checkpoints" / "latest").read_text()
    assert json.loads((latest / FINGERPRINT_FILE).read_text())["continued_across"] == result["resumed_across_mismatch"]
    (latest / FINGERPRINT_FILE).unlink()  # as a checkpoint saved before fingerprints
    write_manifest(latest)
    with pytest.warns(
        UserWarning, match=f"{re.escape(str(latest))} has no readable {FINGERPRINT_FILE} .* without checking"
    ):
        result = micro_run(micro_data_dir, tmp_path, noise_ratio=0.2, epochs=3, resume=True)
    assert "resumed_across_mismatch" not in result and len(result["history"]) == 3


def test_settings_that_do_not_change_training_are_not_in_the_fingerprint(micro_data_dir, tmp_path):
    from hfncl.engine.fingerprint import run_fingerprint
    from hfncl.experiment import DataArguments

    data = DataArguments(data_dir=str(micro_data_dir), dataset_name="shown on the card")
    base = run_fingerprint(TrainConfig(output_dir=str(tmp_path / "a")), data)
    other = TrainConfig(output_dir=str(tmp_path / "b"), progress=False, save_steps=3, num_workers=2, resume=True)
    assert run_fingerprint(other, DataArguments(data_dir=os.path.relpath(micro_data_dir))) == base
    assert base["files.data_dir/train_caps.txt"].startswith("sha256:")
    assert run_fingerprint(TrainConfig(output_dir=str(tmp_path), seed=1), data) != base


def test_a_truncated_feature_cache_is_rebuilt_with_a_warning_naming_it(tmp_path):
    from conftest import MICRO_DATA

    from hfncl.data.precomp import load_precomp_split
    from hfncl.data.synthetic import generate_precomp

    data = generate_precomp(tmp_path / "data", MICRO_DATA)
    first = load_precomp_split(data, "train", cache_dir=tmp_path / "cache").regions([0, 5])
    (arrow,) = (tmp_path / "cache").rglob("*.arrow")
    arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])  # a full disk, a killed copy
    with pytest.warns(
        UserWarning, match=f"rebuilding the damaged dataset cache {re.escape(str(arrow))} .*Expected to be able to read"
    ):
        again = load_precomp_split(data, "train", cache_dir=tmp_path / "cache")
    assert (again.regions([0, 5]) == first).all()
    load_precomp_split(data, "train", cache_dir=tmp_path / "cache")  # rebuilt: read back without a warning


@pytest.mark.parametrize(
    ("name", "text"), [("train_caps.txt", "a dog runs\n{bad}\n"), ("train_caps.tsv", "1\ta dog runs\n2\t{bad}\n")]
)
def test_a_caption_with_control_characters_is_refused_naming_the_file_and_line(tmp_path, name, text):
    from hfncl.data.precomp import DataFormatError, read_captions

    path = tmp_path / name
    path.write_text(text.format(bad="a cat" + "\0" * 40 + " sleeps"))
    with pytest.raises(
        DataFormatError,
        match=f"^{re.escape(str(path))}:2: the caption has a control character \\(U\\+0000 at column 6\\)",
    ):
        read_captions(path)
    path.write_text(text.format(bad="a cat sleeps\x1b[31m"))
    with pytest.raises(DataFormatError, match="U\\+001B at column 13"):
        read_captions(path)
    path.write_text(text.format(bad='a "cat\tsleeps"'))  # a tab is whitespace, not a control character
    assert read_captions(path)[1] == ('a "cat\tsleeps"' if name.endswith(".txt") else 'a "cat')


def test_an_imagefolder_caption_with_control_characters_is_refused_naming_the_row():
    import datasets

    from hfncl.data.extract import split_captions
    from hfncl.data.precomp import DataFormatError

    rows = datasets.Dataset.from_dict({"captions": [["a dog", "a cat"], ["a bird", "x\0\0y"]]})
    with pytest.raises(
        DataFormatError, match=r"split 'train' row 1: a caption has a control character \(U\+0000 at column 2\)"
    ):
        split_captions(rows, "captions", "train")


def test_a_full_disk_while_writing_a_checkpoint_or_the_best_model_is_one_line_naming_it(
    tiny_data_dir, tmp_path, monkeypatch
):
    from collections import namedtuple

    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"]))

    def torch_writer_fails(*args, **kwargs):  # what torch.save raises on a full disk: no errno
        raise RuntimeError(
            "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: "
            "file write failed"
        )

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(trainer.accelerator, "save_state", torch_writer_fails)
    monkeypatch.setattr("shutil.disk_usage", lambda path: usage(100 << 20, 100 << 20, 0))
    with pytest.raises(
        DiskFullError,
        match="no space left on the disk of .*checkpoints while writing checkpoint step-00000000-epoch-0000",
    ) as caught:
        trainer.save_checkpoint()
    assert "\n" not in str(caught.value)
    monkeypatch.setattr("shutil.disk_usage", lambda path: usage(100 << 20, 0, 100 << 20))
    with pytest.raises(RuntimeError, match="PytorchStreamWriter"):  # the disk has room: another failure, unchanged
        trainer.save_checkpoint()

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("hfncl.engine.checkpoints.save_trained_model", full_disk)
    with pytest.raises(
        DiskFullError, match=f"no space left on the disk of {re.escape(str(tmp_path))} while writing best/"
    ):
        trainer._save_best({"rsum": 0.0}, {})
    assert not (tmp_path / "best").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--epochs", "0"], "demo --epochs must be >= 1, got 0"),
        (["--output-dir", "{file}"], "demo --output-dir {file} is an existing file, not a directory"),
        (["--output-dir", "{file}/demo"], "{file}/demo"),
    ],
)
def test_demo_arguments_that_cannot_run_are_one_line(tmp_path, capsys, arguments, message):
    file = tmp_path / "a_file"
    file.write_text("")
    arguments = [a.format(file=file) for a in arguments]
    status = main(["demo", "--size", "tiny", "--plugins", "vsepp", "--no-progress", *arguments])
    err = capsys.readouterr().err
    assert (
        status == 2 and err.count("\n") == 1 and message.format(file=file) in err and err.startswith("hfncl: error: ")
    )


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_resume_whose_rng_state_pickle_would_run_code_is_refused_not_skipped(tiny_data_dir, tmp_path):
    _, _, latest = saved_twice(tiny_data_dir, tmp_path)
    marker = tmp_path / "code_ran"
    (rng,) = latest.glob("random_states_*.pkl")
    rng.write_bytes(pickle.dumps(_RunsCode(marker)))  # the optimizer's and the model's files are intact
    write_manifest(latest)
    resumed = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"], resume=True))
    with pytest.raises(
        IntegrityError,
        match=f"^{re.escape(str(latest))}: accelerate's state files cannot be loaded safely "
        f"\\({rng.name}: UnpicklingError",
    ) as caught:
        resumed.resume()
    assert "\n" not in str(caught.value) and not marker.exists() and resumed.state.global_step == 0


def test_pickle_weights_are_refused_and_a_saved_model_without_its_manifest_loads_with_a_warning(
    tiny_data_dir, tmp_path
):
    from hfncl.integrity import MANIFEST

    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"]))
    trainer._save_best({"rsum": 0.0}, {})
    best = tmp_path / "best"
    (best / MANIFEST).unlink()
    with pytest.warns(
        UserWarning, match=f"{re.escape(str(best))} has no {MANIFEST}: its config and weights are loaded unverified"
    ):
        NCLModel.from_pretrained(best)
    torch.save(trainer.model.state_dict(), best / "pytorch_model.bin")
    (best / "model.safetensors").unlink()
    with pytest.raises(
        OSError, match=f"^{re.escape(str(best))} has only pickle weights \\(pytorch_model.bin\\): safetensors required"
    ):
        NCLModel.from_pretrained(best)


def test_another_split_written_into_the_data_directory_leaves_the_fingerprint_and_a_resume_alone(
    micro_data_dir, tmp_path
):
    from hfncl.engine.fingerprint import run_fingerprint
    from hfncl.experiment import DataArguments
    from hfncl.tasks import PAIRS

    data_dir = tmp_path / "data"
    shutil.copytree(micro_data_dir, data_dir)
    args = DataArguments(data_dir=str(data_dir))

    def fingerprint():
        return run_fingerprint(TrainConfig(output_dir=str(tmp_path / "run")), args, unread=PAIRS.unread_files(args))

    base = fingerprint()
    micro_run(data_dir, tmp_path / "run")  # a checkpoint to resume
    for name in ("oracle_ims.npy", "oracle_caps.txt", "oracle_num_regions.npy", "oracle.partial.npy"):
        shutil.copy(
            data_dir / "train_ims.npy" if name.endswith(".npy") else data_dir / "train_caps.txt", data_dir / name
        )
    assert fingerprint() == base  # another run's split, as a benchmark writes while this run trains
    micro_run(data_dir, tmp_path / "run", resume=True)  # not refused
    (data_dir / "train_vocab.json").write_text("{}")  # a file every split shares
    assert fingerprint()["files.data_dir/train_vocab.json"].startswith("sha256:")
    with (data_dir / "dev_caps.txt").open("a") as captions:
        captions.write("one more caption\n")
    assert fingerprint()["files.data_dir/dev_caps.txt"] != base["files.data_dir/dev_caps.txt"]


def test_formats_name_the_split_a_file_belongs_to(tmp_path):
    from hfncl.data.formats import ImagefolderFormat, PrecompFormat

    precomp = PrecompFormat()
    assert [precomp.split_of(tmp_path, tmp_path / name) for name in (
        "train_oracle_50_seed2_ims.npy", "dev_caps.tsv", "test_num_regions.npy", "a.partial.npy", "train_vocab.json"
    )] == ["train_oracle_50_seed2", "dev", "test", "a", None]
    assert precomp.split_of(tmp_path, tmp_path / "sub" / "train_ims.npy") is None
    for split in ("train", "validation"):
        (tmp_path / split).mkdir()
        (tmp_path / split / "metadata.jsonl").write_text("")
    (tmp_path / "thumbnails").mkdir()
    folder = ImagefolderFormat()
    assert folder.split_of(tmp_path, tmp_path / "train" / "a.jpg") == "train"
    assert folder.split_of(tmp_path, tmp_path / "validation" / "b.jpg") == "dev"  # read as dev, as detect does
    assert folder.split_of(tmp_path, tmp_path / "thumbnails" / "c.jpg") is None
    assert folder.split_of(tmp_path, tmp_path / "notes.txt") is None


# --- bounds on input and errors that name their source (issue 58) -----------------------------------------------


@pytest.mark.parametrize("name", ["train_caps.txt", "train_caps.tsv"])
def test_a_caption_line_past_the_bound_is_refused_naming_file_and_line_before_tokenising(tmp_path, name):
    from hfncl.data.captions import MAX_CAPTION_CHARACTERS
    from hfncl.data.precomp import DataFormatError, read_captions

    path = tmp_path / name
    long = "word " * 300_000  # a 1.5 MB line
    path.write_text("a dog runs\n" + long + "\n" if name.endswith(".txt") else f"1\ta dog runs\n2\t{long}\n")
    said = f"^{re.escape(str(path))}:2: the caption has 1499999 characters, more than the {MAX_CAPTION_CHARACTERS}"
    if name.endswith(".tsv"):  # csv refuses the field first, past its own limit
        said = f"^{re.escape(str(path))}:2: not a row of tab-separated fields \\(field larger than field limit"
    with pytest.raises(DataFormatError, match=said):
        read_captions(path)


def _imagefolder(directory: Path, rows: list[dict], files: dict[str, bytes | None]) -> Path:
    from PIL import Image

    split = directory / "train"
    split.mkdir(parents=True)
    for file, content in files.items():
        if content is None:
            Image.new("RGB", (4, 4), "red").save(split / file)
        else:
            (split / file).write_bytes(content)
    (split / "metadata.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return directory


def test_an_imagefolder_file_that_is_no_image_is_refused_before_training_naming_the_row(tmp_path):
    from hfncl.data import DataFormatError
    from hfncl.data.pixels import load_pixel_splits

    rows = [{"file_name": "a.png", "captions": ["a red square"]}, {"file_name": "b.png", "captions": ["text"]}]
    data = _imagefolder(tmp_path / "data", rows, {"a.png": None, "b.png": b"not an image at all\n"})
    with pytest.raises(DataFormatError, match=r"split 'train' of imagefolder .*metadata.jsonl row 1: .*b.png is not an "
                                              r"image PIL can read"):
        load_pixel_splits(data, ["train"], None, cache_dir=tmp_path / "cache")


def test_an_imagefolder_caption_past_the_bound_is_refused_naming_the_row(tmp_path):
    from hfncl.data import DataFormatError
    from hfncl.data.pixels import load_pixel_splits

    rows = [{"file_name": "a.png", "captions": ["x" * 5000]}]
    data = _imagefolder(tmp_path / "data", rows, {"a.png": None})
    with pytest.raises(DataFormatError, match=r"split 'train' row 0: a caption has 5000 characters, more than the"):
        load_pixel_splits(data, ["train"], None, cache_dir=tmp_path / "cache")


def test_a_file_name_outside_the_split_is_one_line_naming_the_cause_not_a_dataset_generation_traceback(tmp_path):
    from hfncl.data import DataFormatError
    from hfncl.data.pixels import load_pixel_splits

    rows = [{"file_name": "a.png", "captions": ["a"]}, {"file_name": "../outside.png", "captions": ["b"]}]
    data = _imagefolder(tmp_path / "data", rows, {"a.png": None})
    (data / "outside.png").write_bytes((data / "train" / "a.png").read_bytes())
    with pytest.raises(DataFormatError, match=r"the dataset cannot be read: ValueError: Invalid metadata file_name "
                                              r"'\.\./outside\.png'") as caught:
        load_pixel_splits(data, ["train"], None, cache_dir=tmp_path / "cache")
    assert "\n" not in str(caught.value)


def test_a_full_disk_said_as_an_iostream_error_is_a_disk_full_error(tmp_path, monkeypatch):
    from collections import namedtuple

    from hfncl.integrity import writing

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("shutil.disk_usage", lambda path: usage(100 << 20, 100 << 20, 0))
    with pytest.raises(DiskFullError, match=f"no space left on the disk of {re.escape(str(tmp_path))} while writing "
                                            "model.safetensors"), writing(tmp_path, "model.safetensors"):
        raise RuntimeError("basic_ios::clear: iostream error")
    monkeypatch.setattr("shutil.disk_usage", lambda path: usage(100 << 20, 0, 100 << 20))
    with pytest.raises(RuntimeError, match="iostream error"), writing(tmp_path, "model.safetensors"):
        raise RuntimeError("basic_ios::clear: iostream error")  # room on the disk: another failure, unchanged


def test_a_checkpoint_saved_before_a_training_field_existed_resumes_while_the_run_keeps_its_default():
    """A fingerprint lacking a training field added since (``lr_decay_patience``) is no difference at the field's
    default, and a difference at any other value; a field the checkpoint has is compared as always."""
    from hfncl.config import TrainConfig
    from hfncl.engine.fingerprint import differing_fields, run_fingerprint

    current = run_fingerprint(TrainConfig(output_dir="out"))
    old = {k: v for k, v in current.items() if k != "training.lr_decay_patience"}
    assert differing_fields(old, current) == []
    assert differing_fields(old, {**current, "training.lr_decay_patience": 3}) == ["training.lr_decay_patience"]
    assert differing_fields(current, {**current, "training.epochs": 7}) == ["training.epochs"]
    assert differing_fields({**old, "training.unknown": 1}, current) == ["training.unknown"]


def test_a_plugin_whose_model_defaults_changed_does_not_resume_into_another_model(
    micro_data_dir, tmp_path, monkeypatch
):
    """The fingerprint records the model as resolved (``model_used.NAME``: the plugins' ``model_defaults`` under the
    arguments), not only the arguments, which stay the same when a plugin's defaults change; a checkpoint saved
    before those fields were recorded lacks all of them and is compared by its arguments alone."""
    import hfncl.tasks.pairs as pairs
    from hfncl.engine.fingerprint import FINGERPRINT_FILE, ResumeMismatchError, differing_fields

    micro_run(micro_data_dir, tmp_path)
    checkpoint = next((tmp_path / "checkpoints").glob("step-*"))
    saved = json.loads((checkpoint / FINGERPRINT_FILE).read_text())["fields"]
    assert saved["model_used.image_views"] == 1 and saved["model.image_views"] is None
    monkeypatch.setattr(pairs, "plugin_model_defaults", lambda hook: {"image_views": 2})  # the plugin, changed
    with pytest.raises(ResumeMismatchError, match=r"other data, noise or settings than this run asks for: "
                                                  r"model_used.image_views \(1 -> 2\);"):
        micro_run(micro_data_dir, tmp_path, resume=True)
    old = {k: v for k, v in saved.items() if not k.startswith("model_used.")}
    assert differing_fields(old, {**saved, "model_used.image_views": 2}) == []
    assert differing_fields(old, {**saved, "model.embed_dim": 64}) == ["model.embed_dim"]
