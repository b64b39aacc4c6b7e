"""The audit never touches the data it audits, and gives no verdict from a broken model (issue 58): every case
here is fast (a saved untrained model scores the pairs; nothing trains), so CI runs them all."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import untrained_model
from safetensors.torch import load_file, save_file

from hfncl import cli
from hfncl.audit import AuditError, run_audit, table
from hfncl.audit.calibration import PairPValues
from hfncl.audit.finite import DivergedError, FiniteTraining, check_finite_p_values
from hfncl.audit.output import AUDIT_RECORD, check_split_name, write_staged_split
from hfncl.data import DataFormatError, load_precomp_split
from hfncl.engine.ownership import LOCK_FILE, OutputDirError


@pytest.fixture()
def user_data(micro_data_dir: Path, tmp_path: Path) -> Path:
    """A user's data: the micro training split alone, in its own folder."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train_ims.npy", "train_caps.txt"):
        shutil.copy(micro_data_dir / name, data / name)
    return data


@pytest.fixture()
def model(user_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An untrained model that reads the user's data; every other pair is flagged (the untrained model would flag
    them all, leaving no cleaned split to write)."""
    verdicts = table.model_verdicts

    def every_other_pair_flagged(*args, **kwargs):
        columns = verdicts(*args, **kwargs)
        return columns | {"flagged": np.arange(len(columns["flagged"])) % 2 == 0}

    monkeypatch.setattr(table, "model_verdicts", every_other_pair_flagged)
    captions = (user_data / "train_caps.txt").read_text().splitlines()
    dim = np.load(user_data / "train_ims.npy", mmap_mode="r").shape[-1]
    return untrained_model(tmp_path / "model", captions, dim)


def data_files(data: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(data.iterdir())}


def one_line_cli(arguments: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert cli.main(["audit", *arguments]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hfncl: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("name", [".", "..", "", "a/b", "..\\x", "x\0"])
def test_a_clean_split_name_that_is_no_file_name_prefix_is_refused(name):
    with pytest.raises(ValueError, match="a split name is a file-name prefix"):
        check_split_name(name)


@pytest.mark.parametrize("name", [".", ".."])
def test_write_clean_dot_names_are_refused_before_anything_is_written(user_data, model, tmp_path, capsys, name):
    before = data_files(user_data)
    output = tmp_path / "data" / "audit" if name == ".." else tmp_path / "out"
    with pytest.raises(ValueError, match="a split name is a file-name prefix"):
        run_audit(user_data, output_dir=output, model=model, write_clean=name, allow_output_in_data_dir=True)
    one_line_cli(["--data-dir", str(user_data), "--output-dir", str(output), "--model", str(model),
                  "--write-clean", name, "--allow-output-in-data-dir"], capsys)
    assert data_files(user_data) == before and not output.exists()


@pytest.mark.parametrize("inside", [False, True])
def test_the_output_directory_may_not_be_the_data_directory_or_inside_it(user_data, model, capsys, inside):
    before = data_files(user_data)
    output = user_data / "audit" if inside else user_data
    said = "lies inside the data directory" if inside else "is the data directory"
    with pytest.raises(AuditError, match=said + r".*--allow-output-in-data-dir on purpose"):
        run_audit(user_data, output_dir=output, model=model, write_clean="train")
    err = one_line_cli(["--data-dir", str(user_data), "--output-dir", str(output), "--model", str(model),
                        "--write-clean", "train"], capsys)
    assert said in err
    assert data_files(user_data) == before


def test_a_link_to_the_data_directory_is_the_data_directory(user_data, model, tmp_path):
    link = tmp_path / "link"
    link.symlink_to(user_data)
    with pytest.raises(AuditError, match="is the data directory"):
        run_audit(user_data, output_dir=link, model=model, write_clean="train")


def test_writing_into_the_data_directory_on_purpose_never_replaces_the_audited_split(user_data, model):
    before = data_files(user_data)
    with pytest.raises(AuditError, match=r"--write-clean train: .* already holds train_caps.txt, train_ims.npy"):
        run_audit(user_data, output_dir=user_data, model=model, write_clean="train", allow_output_in_data_dir=True)
    assert data_files(user_data) == before
    result = run_audit(
        user_data, output_dir=user_data, model=model, write_clean="kept", allow_output_in_data_dir=True, progress=False
    )
    assert {path.name for path in result.clean_files} == {"kept_ims.npy", "kept_caps.txt"}
    assert all(data_files(user_data)[name] == content for name, content in before.items())
    assert load_precomp_split(user_data, "kept").num_images == len(result.table) - int(np.sum(result.table["flagged"]))


def test_a_clean_split_whose_files_exist_is_refused_before_scoring(user_data, model, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    (output / "kept_caps.txt").write_text("mine\n")
    with pytest.raises(AuditError, match=r"--write-clean kept: .* already holds kept_caps.txt"):
        run_audit(user_data, output_dir=output, model=model, write_clean="kept")
    assert (output / "kept_caps.txt").read_text() == "mine\n" and sorted(os.listdir(output)) == ["kept_caps.txt"]


def test_a_format_that_writes_outside_the_output_directory_is_refused_and_nothing_is_moved(tmp_path):
    output = tmp_path / "out"
    output.mkdir()

    def escaping(folder: Path) -> list[Path]:
        (folder / "kept_caps.txt").write_text("a\n")
        (tmp_path / "escaped.txt").write_text("b\n")
        return [folder / "kept_caps.txt", folder / ".." / ".." / "escaped.txt"]

    with pytest.raises(AuditError, match="escaped.txt lies outside the output directory"):
        write_staged_split(output, escaping)
    assert not (output / "kept_caps.txt").exists() and not (output / AUDIT_RECORD).exists()

    def replacing(folder: Path) -> list[Path]:
        (folder / "audit.csv").write_text("x\n")
        return [folder / "audit.csv"]

    (output / "audit.csv").write_text("table\n")
    with pytest.raises(AuditError, match="would replace audit.csv"):
        write_staged_split(output, replacing)
    assert (output / "audit.csv").read_text() == "table\n"


def test_a_second_audit_is_refused_and_with_overwrite_leaves_nothing_of_the_first(user_data, model, tmp_path, capsys):
    output = tmp_path / "out"
    first = run_audit(user_data, output_dir=output, model=model, write_clean="train_clean", progress=False)
    assert {p.name for p in first.clean_files} == {"train_clean_ims.npy", "train_clean_caps.txt"}
    assert json.loads((output / AUDIT_RECORD).read_text()) == {"clean_split": ["train_clean_caps.txt",
                                                                               "train_clean_ims.npy"]}
    with pytest.raises(OutputDirError, match=r"holds another run's results \(audit.parquet, audit.csv, audit.html, "
                                             r"audit_files.json\): pass --overwrite-output-dir"):
        run_audit(user_data, output_dir=output, model=model, progress=False)
    err = one_line_cli(["--data-dir", str(user_data), "--output-dir", str(output), "--model", str(model)], capsys)
    assert "--overwrite_output_dir" not in err and "--resume_from_checkpoint" not in err
    run_audit(user_data, output_dir=output, model=model, progress=False, overwrite=True)
    assert sorted(os.listdir(output)) == ["audit.csv", "audit.html", "audit.parquet"]


def test_a_live_audit_s_lock_refuses_a_second_audit(user_data, model, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    import socket

    (output / LOCK_FILE).write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))
    with pytest.raises(OutputDirError, match=f"in use by the run of process {os.getppid()}.*another --output-dir"):
        run_audit(user_data, output_dir=output, model=model, progress=False)
    assert sorted(os.listdir(output)) == [LOCK_FILE]


def test_a_model_with_nan_weights_gives_no_verdict(user_data, model, tmp_path, capsys):
    weights = load_file(model / "model.safetensors")
    weights = {name: torch.full_like(t, float("nan")) if t.is_floating_point() else t for name, t in weights.items()}
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    output = tmp_path / "out"
    with pytest.raises(DivergedError, match=r"the trained model's similarity t2i of pair 0 is nan .*diverged"):
        run_audit(user_data, output_dir=output, model=model, progress=False)
    err = one_line_cli(["--data-dir", str(user_data), "--output-dir", str(output), "--model", str(model)], capsys)
    assert "diverged" in err
    assert not (output / "audit.parquet").exists()


def test_non_finite_p_values_losses_and_clean_probabilities_are_named():
    finite = np.array([0.1, 0.5])
    with pytest.raises(DivergedError, match=r"refit's p_caption of pair 1 is inf \(1 of 2 pairs\)"):
        check_finite_p_values(PairPValues(finite, np.array([0.2, np.inf]), finite, finite), "refit's")
    check_finite_p_values(PairPValues(finite, finite, finite, finite), "fine")
    with pytest.raises(DivergedError, match=r"epoch 3: the training loss train/loss is nan"):
        FiniteTraining().on_epoch_end(None, {"epoch": 3, "train/loss": float("nan"), "val/rsum": 1.0}, 0.0)
    FiniteTraining().on_epoch_end(None, {"epoch": 3, "train/loss": 0.5}, 0.0)

    class Division:
        clean_prob = torch.tensor([0.5, float("nan")])

    with pytest.raises(DivergedError, match="epoch 2: network 1's division gives a non-finite clean probability"):
        FiniteTraining().on_division(None, 1, [None, Division()], np.ones(2, dtype=bool))


def test_features_whose_products_overflow_float32_are_refused_when_read(user_data, tmp_path, capsys):
    features = np.load(user_data / "train_ims.npy")
    features[3, 0, 0] = 3e38  # finite, but its square is not
    np.save(user_data / "train_ims.npy", features)
    said = r"train_ims.npy: image 3 has features of squared norm 9e\+76, beyond float32's 3.4e\+38"
    with pytest.raises(DataFormatError, match=said):
        load_precomp_split(user_data, "train")
    capsys.readouterr()
    command = ["audit", "--data-dir", str(user_data), "--output-dir", str(tmp_path / "out"), "--plugins", "ncr"]
    assert cli.main(command) == 1
    err = capsys.readouterr().err.splitlines()[-1]  # after the conversion's progress bar
    assert err.startswith("hfncl: error: ") and "image 3 has features of squared norm" in err
    assert not (tmp_path / "out").exists()


def test_every_multi_word_flag_of_every_subcommand_takes_both_spellings():
    parser = cli.build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"audit", "evaluate", "extract"} <= set(subcommands)
    for name, sub in subcommands.items():
        flags = {flag for action in sub._actions for flag in action.option_strings}
        for flag in flags:
            if flag.startswith("--") and "-" in flag[2:]:
                assert "--" + flag[2:].replace("-", "_") in flags, (name, flag)
    assert subcommands["evaluate"].parse_args(["ckpt", "--data_dir", "d"]).data_dir == "d"
    args = subcommands["audit"].parse_args(
        ["--data_dir", "d", "--output_dir", "o", "--batch_size", "8", "--embed_dim", "16", "--resume_ignore_mismatch"]
    )
    assert (args.data_dir, args.output_dir, args.batch_size, args.embed_dim, args.resume_ignore_mismatch) == (
        "d", "o", 8, 16, True
    )


def test_a_batch_larger_than_the_split_is_refused_before_training_advising_its_flag(user_data, tmp_path, capsys):
    output = tmp_path / "out"
    with pytest.raises(AuditError, match=r"batch size 128 exceeds the 80 pairs of split 'train': every epoch would "
                                         r"take no step; give --batch-size at most 80"):
        run_audit(user_data, ["ncr"], output, 6, training={"batch_size": 128, "warmup_epochs": 4}, progress=False)
    assert not output.exists()
    capsys.readouterr()
    command = ["audit", "--data_dir", str(user_data), "--output_dir", str(output), "--plugins", "ncr", "--batch-size",
               "500"]
    assert cli.main(command) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert "batch size 500 exceeds the 80 pairs" in err and "--batch-size at most 80" in err


def test_the_audit_s_training_flags_reach_its_training(user_data, tmp_path, monkeypatch):
    import hfncl.audit as audit_package

    seen = {}

    def recorded(*args, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(audit_package, "run_audit", recorded)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["audit", "--data-dir", str(user_data), "--output-dir", str(tmp_path / "o"), "--batch-size", "16",
                  "--embed-dim", "32", "--word-dim", "16", "--resume", "--resume-ignore-mismatch",
                  "--overwrite-output-dir", "--allow-output-in-data-dir"])
    assert seen["training"] == {"batch_size": 16, "resume_ignore_mismatch": True}
    assert (seen["model_args"].embed_dim, seen["model_args"].word_dim) == (32, 16)
    assert seen["resume"] and seen["overwrite"] and seen["allow_output_in_data_dir"]
