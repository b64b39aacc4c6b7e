"""scripts/run.sh, the README's two commands: the demo installs hfncl[plots] only, the test command the developer
tools on top, each once, byte-compiled after the install in one process per core; every set-up step says what it
does. Run here with a stand-in interpreter that records what the script asks of it, so nothing is installed."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RECORDER = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$(dirname "$0")/../calls.txt"
"""


def run_script(venv: Path, command: str, torch: str | None = None) -> tuple[str, list[str]]:
    """stderr of ``bash scripts/run.sh COMMAND`` with ``HFNCL_VENV=venv`` (and ``HFNCL_TORCH=torch``), and the calls it
    made since the last one."""
    calls = venv / "calls.txt"
    calls.write_text("")
    environment = {key: value for key, value in os.environ.items() if key != "HFNCL_TORCH"}
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "run.sh"), command, "--no-progress"],
        capture_output=True,
        text=True,
        env=dict(environment, HFNCL_VENV=str(venv), **({"HFNCL_TORCH": torch} if torch else {})),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr, calls.read_text().splitlines()


def recording_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "hfncl"):
        (venv / "bin" / name).write_text(RECORDER)
        (venv / "bin" / name).chmod(stat.S_IRWXU)
    return venv


def test_the_demo_installs_the_runtime_and_the_tests_add_the_developer_tools(tmp_path: Path) -> None:
    venv = recording_venv(tmp_path)

    setup, calls = run_script(venv, "demo")
    assert calls[-1] == "hfncl demo --no-progress"
    installs = [call for call in calls if " pip install " in call]
    assert any(call.endswith(" torch==2.13.0") for call in installs)
    assert installs[-1].endswith("-e .[plots]")  # no mypy, ruff or MiniLM for the demo
    assert [line.split(":")[0] for line in setup.splitlines()] == ["hfncl setup"] * len(setup.splitlines())
    assert len(setup.splitlines()) == 4  # torch, hfncl, compiling, done: one line per step
    assert all("--no-compile" in call for call in installs)  # pip compiles one file at a time; compileall after it
    compiling = [number for number, call in enumerate(calls) if " -m compileall " in call]
    assert compiling and compiling[0] > calls.index(installs[-1]) and " -j 0 " in calls[compiling[0]]

    assert run_script(venv, "demo") == ("", ["hfncl demo --no-progress"])  # set up once

    setup, calls = run_script(venv, "test")
    assert [call for call in calls if " pip install " in call][-1].endswith("-e .[dev]")
    assert calls[-1] == "python -m pytest --no-progress" and "developer tools" in setup

    assert run_script(venv, "test")[1] == ["python -m pytest --no-progress"]
    assert run_script(venv, "demo")[1] == ["hfncl demo --no-progress"]  # the dev install serves the demo too


def test_hfncl_torch_installs_a_cuda_build_and_a_change_of_build_sets_up_again(tmp_path: Path) -> None:
    venv = recording_venv(tmp_path)
    setup, calls = run_script(venv, "demo", torch="cu128")
    torch = [call for call in calls if " torch==2.13.0" in call]
    assert torch == ["python -m pip install --quiet --quiet --disable-pip-version-check --no-compile torch==2.13.0 "
                     "--index-url https://download.pytorch.org/whl/cu128"]
    assert "installing torch 2.13.0 (cu128 build" in setup
    assert run_script(venv, "demo", torch="cu128")[1] == ["hfncl demo --no-progress"]  # set up once
    _, calls = run_script(venv, "demo")  # back to the default, the CPU build
    assert any(call.endswith(" torch==2.13.0") for call in calls)
    refused = subprocess.run(
        ["bash", str(REPO / "scripts" / "run.sh"), "demo"], capture_output=True, text=True, timeout=60,
        env=dict(os.environ, HFNCL_VENV=str(venv), HFNCL_TORCH="cuda"),
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "HFNCL_TORCH=cuda" in refused.stderr
