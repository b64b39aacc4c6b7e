"""The command line as a user meets it: fast help, the train usage, pipes, push without a login, trackers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import huggingface_hub
from huggingface_hub.errors import HfHubHTTPError

from hfncl import cli

HFNCL = Path(sys.executable).with_name("hfncl")


def run(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)


def test_help_imports_no_model_train_help_names_its_command_and_a_closed_pipe_is_quiet():
    imports = "import sys; sys.argv = ['hfncl']; import hfncl.cli; print({'torch', 'transformers'} & set(sys.modules))"
    lazy = subprocess.run([sys.executable, "-c", imports], capture_output=True, text=True, check=True)
    assert lazy.stdout.strip() == "set()"  # hfncl --help waits for no framework
    train_help = run(f"{HFNCL} train --help")
    assert train_help.returncode == 0 and train_help.stdout.startswith("usage: hfncl train ")
    assert "--config CONFIG" in train_help.stdout and "--num_train_epochs" in train_help.stdout
    options = " ".join(train_help.stdout.split())  # help texts wrapped over lines, joined
    assert "(default: None)" not in options and "captions. (default:" not in options  # each default said once
    assert "(default: 0.0)" in options  # a default the help text does not state is still shown
    piped = run(f"{HFNCL} plugins | head -1")
    assert piped.stdout.count("\n") == 1 and piped.stderr == ""


def test_push_without_a_token_says_how_to_log_in_before_reading_anything(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    assert cli.main(["push", str(tmp_path / "missing"), "user/model"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`hf auth login` or set HF_TOKEN" in err and "missing" not in err


def test_a_network_failure_while_pushing_is_one_line(monkeypatch, tmp_path, capsys):
    import hfncl.hub

    def refused(*args, **kwargs):  # what the Hub client raises when the connection is refused
        raise HfHubHTTPError.__mro__[1]("[Errno 111] Connection refused")

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test")
    monkeypatch.setattr(hfncl.hub, "push_checkpoint", refused)
    assert cli.main(["push", str(tmp_path), "user/model"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hfncl: error: pushing to user/model failed ([Errno 111] Connection refused)")
    assert err.count("\n") == 1
    assert "hf auth login" in err


def test_a_tracker_that_is_not_installed_stops_train_before_it_starts(tmp_path, capsys):
    assert cli.main(["train", "--plugins", "vsepp", "--data_dir", str(tmp_path), "--report_to", "wandb"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: TrainConfig.log_with: tracker 'wandb' is not installed (pip install wandb;")
    assert err.count("\n") == 1
