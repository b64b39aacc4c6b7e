"""The plugin contract: documented hooks, discovery, validation, the CLI and a third-party package."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
import subprocess
import sys
import textwrap
import uuid
from importlib.metadata import EntryPoint, version
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import pip_installed

from hfncl import cli, hookspecs, plugins, registry
from hfncl.plugins import PluginError, build_plugin_manager
from hfncl.types import PairOutputs

REPO = Path(__file__).resolve().parents[1]
TOY_PLUGIN = REPO / "tests" / "toy_plugin"


class FakePlugins:
    """Plugins written as modules under a temporary directory and served as the installed entry points."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.directory = directory
        self.points: dict[str, EntryPoint] = {}
        monkeypatch.syspath_prepend(str(directory))
        monkeypatch.setattr(registry, "installed_entry_points", lambda: dict(self.points))

    def add(self, name: str, source: str, attr: str = "") -> None:
        """Install plugin ``name`` as a fresh module with ``source`` (entry point ``module[:attr]``)."""
        module = f"hfncl_fake_{name}_{uuid.uuid4().hex[:8]}"
        (self.directory / f"{module}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        value = f"{module}:{attr}" if attr else module
        self.points[name] = EntryPoint(name=name, value=value, group=plugins.ENTRY_POINT_GROUP)


@pytest.fixture
def fake_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePlugins:
    return FakePlugins(tmp_path, monkeypatch)


def plugin_source(*hooks: str) -> str:
    """A module implementing ``option_defaults`` with each name in ``hooks`` as its only option."""
    lines = ["from hfncl.hookspecs import hookimpl", "", "@hookimpl", "def option_defaults():"]
    lines.append(f"    return {{{', '.join(f'{h!r}: 1' for h in hooks)}}}")
    return "\n".join(lines) + "\n"


# --- the specification is documented -------------------------------------------------------------


def documented_hooks() -> list[str]:
    """The ``### name`` headings of the "Hooks" section of docs/plugins.md."""
    text = (REPO / "docs" / "plugins.md").read_text()
    section = re.search(r"^## Hooks\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert section, "docs/plugins.md has no '## Hooks' section"
    return re.findall(r"^### (\S+)\s*$", section.group(1), re.M)


def test_every_hook_has_a_docstring() -> None:
    names = plugins.hook_names()
    assert names
    for name in names:
        assert (inspect.getdoc(getattr(hookspecs, name)) or "").strip(), f"hook {name!r} has no docstring"


def test_every_hook_is_documented_in_the_guide() -> None:
    documented = documented_hooks()
    missing = sorted(set(plugins.hook_names()) - set(documented))
    stale = sorted(set(documented) - set(plugins.hook_names()))
    assert not missing, f"docs/plugins.md lacks a '### <name>' section for hooks: {missing}"
    assert not stale, f"docs/plugins.md documents hooks that do not exist: {stale}"
    assert len(documented) == len(set(documented)), "a hook is documented twice"


# --- discovery and validation --------------------------------------------------------------------


def test_builtin_plugins_are_installed_entry_points() -> None:
    installed = registry.installed_entry_points()
    assert {"vsepp", "ncr"} <= set(installed)
    assert all(ep.group == plugins.ENTRY_POINT_GROUP for ep in installed.values())


def test_a_run_registers_only_the_named_plugins() -> None:
    manager = build_plugin_manager(["vsepp"])
    assert [name for name, _ in manager.list_name_plugin()] == ["vsepp"]


def test_named_plugins_combine_and_the_first_name_wins_first_result_hooks(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("first", plugin_source("a") + "\n@hookimpl\ndef num_networks(config):\n    return 1\n")
    fake_plugins.add("second", plugin_source("b") + "\n@hookimpl\ndef num_networks(config):\n    return 2\n")
    fake_plugins.add("unused", plugin_source("c"))
    manager = build_plugin_manager(["first", "second"])
    assert sorted(name for name, _ in manager.list_name_plugin()) == ["first", "second"]
    assert sorted(k for answer in manager.hook.option_defaults() for k in answer) == ["a", "b"]
    assert manager.hook.num_networks(config=None) == 1


def test_unknown_plugin_names_it_and_lists_installed() -> None:
    with pytest.raises(PluginError, match="'nope'") as caught:
        build_plugin_manager(["nope"])
    assert "vsepp" in str(caught.value) and "ncr" in str(caught.value)


def test_no_plugins_is_an_error() -> None:
    with pytest.raises(PluginError, match="No plugins"):
        build_plugin_manager([])


def test_duplicate_names_are_an_error() -> None:
    with pytest.raises(PluginError, match="more than once: vsepp"):
        build_plugin_manager(["vsepp", "ncr", "vsepp"])


def test_broken_plugin_error_names_it(fake_plugins: FakePlugins) -> None:
    fake_plugins.add("broken", "raise ImportError('needs a package that is not installed')\n")
    with pytest.raises(PluginError, match="'broken' is installed but failed to import") as caught:
        build_plugin_manager(["broken"])
    assert "needs a package that is not installed" in str(caught.value)


def test_plugin_exporting_a_class_is_rejected(fake_plugins: FakePlugins) -> None:
    source = """
        from hfncl.hookspecs import hookimpl

        class Method:
            @hookimpl
            def num_networks(self, config):
                return 2
    """
    fake_plugins.add("classy", source, attr="Method")
    with pytest.raises(PluginError, match="'classy'.*exports a class; export a module or an instance"):
        build_plugin_manager(["classy"])


def test_plugin_exporting_an_instance_is_accepted(fake_plugins: FakePlugins) -> None:
    source = """
        from hfncl.hookspecs import hookimpl

        class Method:
            @hookimpl
            def num_networks(self, config):
                return 3

        plugin = Method()
    """
    fake_plugins.add("instance", source, attr="plugin")
    assert build_plugin_manager(["instance"]).hook.num_networks(config=None) == 3


def test_unknown_hook_name_is_rejected(fake_plugins: FakePlugins) -> None:
    source = """
        from hfncl.hookspecs import hookimpl

        @hookimpl
        def divde(trainer, epoch):
            return None
    """
    fake_plugins.add("typo", source)
    with pytest.raises(PluginError, match="'typo' implements unknown hook.*divde"):
        build_plugin_manager(["typo"])


def test_hook_argument_outside_the_spec_is_rejected(fake_plugins: FakePlugins) -> None:
    source = """
        from hfncl.hookspecs import hookimpl

        @hookimpl
        def divide(trainer, epoch, dataset):
            return None
    """
    fake_plugins.add("extra_arg", source)
    with pytest.raises(PluginError, match="'extra_arg' does not fit the hook specification"):
        build_plugin_manager(["extra_arg"])


# --- the toy third-party plugin ------------------------------------------------------------------


def test_toy_plugin_loss_is_symmetric_infonce(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TOY_PLUGIN))
    monkeypatch.delitem(sys.modules, "hfncl_toy_plugin", raising=False)
    toy = importlib.import_module("hfncl_toy_plugin")
    entry_point = EntryPoint(name="toy_infonce", value="hfncl_toy_plugin", group=plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "installed_entry_points", lambda: {"toy_infonce": entry_point})
    manager = build_plugin_manager(["toy_infonce"])
    assert manager.hook.option_defaults() == [{"toy_temperature": 0.1}]

    similarity = torch.randn(5, 5, generator=torch.Generator().manual_seed(0))
    outputs = PairOutputs(
        image_embeds=torch.zeros(5, 2), text_embeds=torch.zeros(5, 2), similarity=similarity, index=torch.arange(5)
    )
    trainer = SimpleNamespace(option={"toy_temperature": 0.5}.__getitem__)
    positives = torch.arange(5)
    expected = (F.cross_entropy(similarity / 0.5, positives) + F.cross_entropy(similarity.t() / 0.5, positives)) / 2
    terms = manager.hook.loss(trainer=trainer, batch={}, outputs=outputs, targets=None, net=0)
    warm = manager.hook.warmup_loss(trainer=trainer, batch={}, outputs=outputs, net=0)
    assert [list(answer) for answer in terms + warm] == [["toy_infonce"], ["toy_infonce"]]
    assert torch.allclose(terms[0]["toy_infonce"], expected)
    assert torch.allclose(warm[0]["toy_infonce"], expected)
    assert toy.symmetric_infonce(similarity.t(), 0.5) == pytest.approx(expected.item())


def test_toy_plugin_installs_is_listed_and_trains(tmp_path: Path, tiny_data_dir: Path) -> None:
    env = pip_installed(TOY_PLUGIN, tmp_path)
    listed = subprocess.run(
        [sys.executable, "-m", "hfncl.cli", "plugins", "--json"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    records = {record["name"]: record for record in json.loads(listed.stdout)}
    toy = records["toy_infonce"]
    assert toy["error"] is None
    assert sorted(toy["hooks"]) == ["loss", "option_defaults", "warmup_loss"]
    assert (toy["distribution"], toy["version"], toy["value"]) == ("hfncl-toy-plugin", "0.1.0", "hfncl_toy_plugin")
    assert {"vsepp", "ncr"} <= set(records)
    trained = subprocess.run(
        [sys.executable, "-m", "hfncl.cli", "train", "--plugins", "toy_infonce", "--data-dir", str(tiny_data_dir)]
        + ["--output-dir", str(tmp_path / "run"), "--epochs", "1", "--batch-size", "32", "--embed-dim", "32"]
        + ["--word-dim", "16", "--noise-ratio", "0.2", "--no-progress", "--options", '{"toy_temperature": 0.05}'],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    history = json.loads((tmp_path / "run" / "results.json").read_text())["history"]
    assert history[0]["train/toy_infonce"] > 0 and history[0]["val/rsum"] > 0


# --- the command line ----------------------------------------------------------------------------


def test_cli_lists_builtin_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^vsepp  hfncl==\S+  \(hfncl_plugins\.vsepp\)$", out, re.M)
    assert re.search(r"^ncr  hfncl==\S+  \(hfncl_plugins\.ncr\)$", out, re.M)
    options = re.search(
        r"^ncr .*\n    NCR: .*\n    data: pairs    hooks: .*\n    options, set with --options .*\n(      \S.*\n)+"
        r"((        \S+ = .*\n)+)",
        out,
        re.M,
    )
    assert options and "        ncr.alpha = 0.2  (float >= 0)\n" in options.group(2)


def test_cli_json_lists_builtin_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plugins", "--json"]) == 0
    records = {record["name"]: record for record in json.loads(capsys.readouterr().out)}
    assert records["vsepp"]["distribution"] == "hfncl"
    assert records["ncr"]["value"] == "hfncl_plugins.ncr"


def test_cli_shows_a_broken_plugin_error_instead_of_crashing(
    fake_plugins: FakePlugins, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_plugins.add("fine", plugin_source("x"))
    fake_plugins.add("broken", "raise RuntimeError('boom')\n")
    assert cli.main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^broken .*\n    error: Plugin 'broken' is installed but failed to import .*boom$", out, re.M)
    assert re.search(r"^fine .*\n    data: pairs    hooks: option_defaults$", out, re.M)

    assert cli.main(["plugins", "--json"]) == 0
    records = {record["name"]: record for record in json.loads(capsys.readouterr().out)}
    assert records["broken"]["hooks"] == [] and "boom" in records["broken"]["error"]
    assert records["fine"] == {
        "name": "fine",
        "value": fake_plugins.points["fine"].value,
        "distribution": "?",
        "version": "?",
        "hooks": ["option_defaults"],
        "error": None,
        "options": {"x": 1},
        "summary": "",
        "data_kind": "pairs",
        "options_doc": "",
        "option_help": {},
    }


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"hfncl {version('hfncl')}"


def test_cli_reports_plugin_errors_of_a_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing(args: object) -> int:
        build_plugin_manager(["nope"])
        return 0

    build = cli.build_parser

    def with_failing() -> argparse.ArgumentParser:
        parser = build()
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        subparsers.add_parser("failing").set_defaults(func=failing)
        return parser

    monkeypatch.setattr(cli, "build_parser", with_failing)
    assert cli.main(["failing"]) == 1
    assert "hfncl: error: Unknown plugin 'nope'" in capsys.readouterr().err
