"""Every setting checked before work starts, the same way from flags, configuration files and Python (issue 41).

A run is what its files say it is: ``run_config.yaml`` repeats a run without replacing or resuming anything, a
configuration file's values have their fields' types, nonsensical rates are refused, and a split too small to
score (or that the folds do not divide) is refused before training, in ``hfncl train`` and ``hfncl evaluate``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import MICRO_DATA

from hfncl.cli import main
from hfncl.config import RUN_ONLY_FIELDS, TrainConfig
from hfncl.data import Vocabulary, load_precomp_split
from hfncl.evaluation import check_split_size
from hfncl.experiment import DataArguments, ModelArguments
from hfncl.hub import save_text_vocabulary
from hfncl.models import NCLConfig, NCLModel

MICRO = ["--embed_dim", "8", "--word_dim", "8", "--batch_size", "16", "--progress", "false"]
ONE_EPOCH = ["--epochs", "1", "--warmup_epochs", "0", "--lr_decay_epochs", "1", "--plot_divisions", "false"]


def train_cli(capsys, *arguments: str) -> tuple[int, str]:
    """``hfncl train ARGUMENTS`` in this process: its exit status and what it wrote to stderr."""
    status = main(["train", *arguments])
    return status, capsys.readouterr().err


def refused(capsys, output_dir: Path, *arguments: str) -> str:
    """The one-line error of ``hfncl train ARGUMENTS``, asserting that no training work started in ``output_dir``."""
    status, err = train_cli(capsys, "--plugins", "vsepp", "--output_dir", str(output_dir), *arguments)
    assert status != 0 and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (output_dir / "checkpoints").exists() and not (output_dir / "run_config.yaml").exists()
    return err


def test_run_config_yaml_repeats_a_run_without_replacing_or_resuming_its_directory(micro_data_dir, tmp_path, capsys):
    run = tmp_path / "run"
    arguments = ["--plugins", "vsepp", "--data_dir", str(micro_data_dir), "--output_dir", str(run), *MICRO, *ONE_EPOCH]
    assert main(["train", *arguments, "--overwrite_output_dir"]) == 0
    saved = yaml.safe_load((run / "run_config.yaml").read_text())
    assert not set(RUN_ONLY_FIELDS) & set(saved) and saved["epochs"] == 1
    results = (run / "results.json").read_text()
    status, err = train_cli(capsys, "--config", str(run / "run_config.yaml"))
    assert status != 0 and "holds another run's results" in err and err.count("\n") == 1
    assert (run / "results.json").read_text() == results  # the run is not deleted and trained again
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(saved | {"overwrite_output_dir": True}))
    err = refused(capsys, tmp_path / "other", "--config", str(tmp_path / "old.yaml"))
    assert "overwrite_output_dir is not a setting of the run but of one command" in err
    (tmp_path / "older.yaml").write_text(yaml.safe_dump(saved | {"resume": False, "resume_from_checkpoint": None}))
    status, err = train_cli(capsys, "--config", str(tmp_path / "older.yaml"), "--output_dir", str(tmp_path / "again"))
    assert status == 0, err  # a file written before they were left out holds them at their defaults


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("epochs: [1, 2]\n", "TrainConfig.epochs must be an integer, got [1, 2] (list)"),
        ("epochs: 2.5\n", "TrainConfig.epochs must be an integer, got 2.5 (float)"),
        ("lr_decay_epochs: 0\n", "TrainConfig.lr_decay_epochs must be a list of integers, got 0 (int)"),
        ("lr_decay_epochs: [1.5]\n", "TrainConfig.lr_decay_epochs must be a list of integers, got [1.5] (list)"),
        ("log_with: 3\n", "TrainConfig.log_with must be a list of strings, got 3 (int)"),
        ("progress: 1\n", "TrainConfig.progress must be true or false, got 1 (int)"),
        ("noise_seed: 1.5\n", "DataArguments.noise_seed must be an integer, got 1.5 (float)"),
        ("embed_dim: [8]\n", "ModelArguments.embed_dim must be an integer or null, got [8] (list)"),
        ("options: [1]\n", "TrainConfig.options must be a JSON object"),
        (
            "epochz: 2\nbatchsize: 3\n",
            "unknown field(s) 'batchsize' (did you mean 'batch_size'?), 'epochz' (did you mean",
        ),
    ],
)
def test_a_config_file_s_values_are_checked_like_flags(micro_data_dir, tmp_path, capsys, text, message):
    (tmp_path / "run.yaml").write_text(text)
    err = refused(capsys, tmp_path / "run", "--data_dir", str(micro_data_dir), "--config", str(tmp_path / "run.yaml"))
    assert message in err


def test_python_callers_get_the_same_type_checks():
    with pytest.raises(ValueError, match=r"TrainConfig.epochs must be an integer, got 2.5 \(float\)"):
        TrainConfig(epochs=2.5)
    with pytest.raises(ValueError, match="TrainConfig.plugins must be a list of strings, got 'ncr'"):
        TrainConfig(plugins="ncr")
    with pytest.raises(ValueError, match="DataArguments.noise_ratio must be a number, got '0.5'"):
        DataArguments(data_dir="data", noise_ratio="0.5")
    assert TrainConfig(plugins=("vsepp",), epochs=np.int64(3), learning_rate=1).plugins == ["vsepp"]
    assert ModelArguments(embed_dim=None).embed_dim is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--lr_decay_factor", "-1"], "TrainConfig.lr_decay_factor must be in (0, 1]"),
        (["--lr_decay_factor", "1.5"], "TrainConfig.lr_decay_factor must be in (0, 1]"),
        (["--grad_clip", "-1"], "TrainConfig.grad_clip must be a finite number >= 0 (0 disables clipping), got -1.0"),
        (["--learning_rate", "0"], "TrainConfig.learning_rate must be a finite number > 0, got 0.0"),
        (["--learning_rate", "nan"], "TrainConfig.learning_rate must be a finite number > 0, got nan"),
        (["--weight_decay", "-0.1"], "TrainConfig.weight_decay must be a finite number >= 0, got -0.1"),
        (["--lr_decay_epochs", "5", "-1"], "TrainConfig.lr_decay_epochs must be epochs >= 0"),
        (["--mixed_precision", "fp8"], "TrainConfig.mixed_precision must be one of ['no', 'fp16', 'bf16'], got 'fp8'"),
        (["--epochs", "2.5"], "argument --epochs/--num_train_epochs: invalid int value: '2.5'"),
        (["--options", "{bad"], "argument --options: TrainConfig.options must be a JSON object, got '{bad' (Expecting"),
    ],
)
def test_settings_that_make_no_sense_are_refused_in_one_line(micro_data_dir, tmp_path, capsys, arguments, message):
    err = refused(capsys, tmp_path, "--data_dir", str(micro_data_dir), *arguments)
    assert message in err


def test_the_edges_of_the_rate_settings_are_allowed():
    config = TrainConfig(epochs=3, lr_decay_factor=1.0, grad_clip=0.0, weight_decay=0.0, lr_decay_epochs=[0, 5])
    assert config.lr_decay_epochs == [0, 5]  # a decay epoch past the run (a shortened schedule) is never reached


def test_split_sizes_and_folds_are_checked():
    check_split_size(11, "test split 'test'")
    check_split_size(5000, "test split 'test'", folds=5)
    with pytest.raises(ValueError, match="the test split 'test' has 1 images; retrieval is scored on more than 10"):
        check_split_size(1, "test split 'test'")
    with pytest.raises(ValueError, match="R@10 is 100% for every caption"):
        check_split_size(10, "test split 'test'")
    with pytest.raises(ValueError, match="test_folds 3: the test split 'test' has 10 images, not 3 equal folds"):
        check_split_size(10, "test split 'test'", folds=3, folds_name="test_folds")
    with pytest.raises(ValueError, match=r"has 10 images per fold \(test_folds 4\)"):
        check_split_size(40, "test split 'test'", folds=4, folds_name="test_folds")
    with pytest.raises(ValueError, match="--folds must be >= 1, got 0"):
        check_split_size(40, "split 'test'", folds=0, folds_name="--folds")


def one_test_image(data_dir: Path, directory: Path) -> Path:
    """A copy of the precomp ``data_dir`` whose test split holds its first image and that image's captions."""
    copy = Path(shutil.copytree(data_dir, directory))
    np.save(copy / "test_ims.npy", np.load(copy / "test_ims.npy")[:1])
    captions = (copy / "test_caps.txt").read_text().splitlines()[: MICRO_DATA.captions_per_image]
    (copy / "test_caps.txt").write_text("\n".join(captions) + "\n")
    return copy


@pytest.mark.parametrize(
    ("folds", "message"),
    [
        (3, "test_folds 3: the test split 'test' has 11 images, not 3 equal folds"),
        (1, "the test split 'test' has 1 images; retrieval is scored on more than 10"),
    ],
)
def test_train_refuses_a_test_split_too_small_to_score_before_training(
    micro_data_dir, tmp_path, capsys, folds, message
):
    data_dir = micro_data_dir if folds > 1 else one_test_image(micro_data_dir, tmp_path / "data")
    err = refused(capsys, tmp_path / "run", "--data_dir", str(data_dir), "--test_folds", str(folds), *MICRO)
    assert message in err


def test_evaluate_refuses_a_split_too_small_to_score(micro_data_dir, tmp_path, capsys):
    train = load_precomp_split(micro_data_dir, "train")
    vocab = Vocabulary.build(train.captions)
    checkpoint = tmp_path / "model"
    config = NCLConfig(image_dim=MICRO_DATA.feature_dim, vocab_size=len(vocab), embed_dim=8, word_dim=8)
    NCLModel(config).save_pretrained(checkpoint)
    save_text_vocabulary(vocab, checkpoint)
    command = ["evaluate", str(checkpoint), "--no-progress", "--data-dir"]
    assert main([*command, str(micro_data_dir)]) == 0
    capsys.readouterr()
    assert main([*command, str(micro_data_dir), "--folds", "2"]) == 1
    assert "--folds 2: the split 'test' of" in capsys.readouterr().err
    assert main([*command, str(one_test_image(micro_data_dir, tmp_path / "data"))]) == 1
    error = capsys.readouterr().err.splitlines()[-1]  # after transformers' weight-loading bar
    assert error.startswith("hfncl: error: the split 'test' of") and "has 1 images; retrieval is scored on" in error


def test_report_to_takes_a_name_a_list_all_or_none_as_training_arguments_does():
    """``report_to: tensorboard`` in a config file was read as the trackers 't', 'e', ...; ``--report_to none`` was
    refused."""
    from hfncl.config import TrainConfig

    assert TrainConfig(log_with="none").log_with == [] and TrainConfig(log_with=["none"]).log_with == []
    assert TrainConfig(log_with="all").log_with == ["all"] and TrainConfig(log_with=["all"]).log_with == ["all"]
    with pytest.raises(ValueError, match="unknown tracker 'nonexistent_tracker'"):
        TrainConfig(log_with="nonexistent_tracker")
