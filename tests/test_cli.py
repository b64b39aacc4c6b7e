"""The command line as a user meets it: fast help, the train usage, pipes, push without a login, trackers."""

from __future__ import annotations

import json
import os
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
    (tmp_path / "best").mkdir()  # an empty directory: the token is asked for before any file is read
    assert cli.main(["push", str(tmp_path / "best"), "user/model"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`hf auth login` or set HF_TOKEN" in err and "config.json" not in err


def test_a_network_failure_while_pushing_is_one_line(monkeypatch, tmp_path, capsys):
    from test_hub import make_checkpoint

    def refused(*args, **kwargs):  # what the Hub client raises when the connection is refused
        raise HfHubHTTPError.__mro__[1]("[Errno 111] Connection refused")

    make_checkpoint(tmp_path)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test")
    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", refused)
    capsys.readouterr()
    assert cli.main(["push", str(tmp_path), "user/model"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hfncl: error: Pushing to user/model failed ([Errno 111] Connection refused)")
    assert err.count("\n") == 1
    assert "hf auth login" in err


def test_a_tracker_that_is_not_installed_stops_train_before_it_starts(tmp_path, capsys):
    assert cli.main(["train", "--plugins", "vsepp", "--data_dir", str(tmp_path), "--report_to", "wandb"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: TrainConfig.log_with: tracker 'wandb' is not installed (pip install wandb;")
    assert err.count("\n") == 1


def test_plugins_listing_is_cached_by_what_it_depends_on(tmp_path, monkeypatch):
    from importlib.metadata import EntryPoint

    from hfncl.plugin_listing import listed_plugins, listing_key, plugin_record

    fresh = [plugin_record(info) for info in listed_plugins(cache_root=tmp_path)]
    (cached_file,) = (tmp_path / "plugins").glob("*.json")
    assert json.loads(cached_file.read_text()) == json.loads(json.dumps(fresh, default=str))
    planted = [dict(record, version="from-the-cache") for record in fresh]
    cached_file.write_text(json.dumps(planted))
    assert {info.version for info in listed_plugins(cache_root=tmp_path)} == {"from-the-cache"}
    assert "from-the-cache" not in {info.version for info in listed_plugins(refresh=True, cache_root=tmp_path)}
    cached_file.write_text("{damaged")
    assert [plugin_record(info) for info in listed_plugins(cache_root=tmp_path)] == fresh

    module = tmp_path / "edited_plugin.py"
    module.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    points = {"edited": EntryPoint("edited", "edited_plugin", "hfncl")}
    before = listing_key(points)
    assert listing_key(points) == before
    os.utime(module, ns=(module.stat().st_atime_ns, module.stat().st_mtime_ns + 10**9))
    assert listing_key(points) != before  # an edited plugin is listed afresh


def test_a_cached_plugins_listing_imports_no_framework(tmp_path):
    listing = "import sys; sys.argv = ['hfncl']; import hfncl.cli; hfncl.cli.main(['plugins'])"
    check = listing + "; print(sorted({'torch', 'transformers', 'sklearn'} & set(sys.modules)), file=sys.stderr)"
    environment = dict(os.environ, HFNCL_CACHE=str(tmp_path))
    first = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=environment, timeout=300)
    second = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=environment, timeout=300)
    assert first.returncode == second.returncode == 0 and first.stdout == second.stdout and "ncr" in second.stdout
    assert "torch" in first.stderr and second.stderr.strip() == "[]"


def test_train_takes_the_arguments_of_the_named_plugins_data(tmp_path, capsys):
    """``hfncl train --plugins dmcm`` parsed the image-caption flags (``--data-dir`` required, no ``--data-path``);
    it takes the label task's, also when a ``--config`` file names the plugins."""
    assert cli.main(["train", "--plugins", "dmcm", "--data-path", str(tmp_path / "feats.mat"), "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["data"]["data_path"] == str(tmp_path / "feats.mat") and "data_dir" not in printed["data"]
    config = tmp_path / "run.yaml"
    config.write_text(f"plugins: [prototype_ce]\ndata_path: {tmp_path / 'feats.mat'}\n")
    assert cli.main(["train", "--config", str(config), "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["training"]["plugins"] == ["prototype_ce"]
    assert cli.main(["train", "--plugins", "ncr", "--data-dir", str(tmp_path), "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["data"]["data_dir"] == str(tmp_path)
