"""Ruff passes on the package ``hfncl``, the recipe scripts, the built-in methods (``plugins/``), the
benchmark scripts (``benchmarks/``) and the tests (``tests/``), mypy on ``hfncl``, with the settings of
pyproject.toml (``[tool.ruff]``, ``[tool.mypy]``). mypy keeps its cache in ``.mypy_cache``, so only the first run
on a checkout is slow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    result = _run("ruff", "check", "hfncl", "recipes", "plugins", "benchmarks", "tests")
    assert result.returncode == 0, (
        f"ruff check hfncl recipes plugins benchmarks tests:\n{result.stdout}\n{result.stderr}"
    )


def test_mypy_finds_nothing():
    result = _run("mypy", "hfncl")
    assert result.returncode == 0, f"mypy hfncl:\n{result.stdout}\n{result.stderr}"
