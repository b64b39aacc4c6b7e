"""The import contracts of ``[tool.importlinter]`` in pyproject.toml hold: hfncl's layers import
only downwards (no cycle, no backward import, function-level imports included) and the core
imports no method plugin. The layers are described in docs/architecture.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    command = (
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"
    )
    result = subprocess.run(
        [sys.executable, "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"import-linter found broken contracts:\n{result.stdout}\n{result.stderr}"


def test_every_package_of_hfncl_is_installed():
    """setuptools installs the packages pyproject.toml lists: a new subpackage left out would be missing from the
    wheel."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "hfncl").rglob("__init__.py")}
    assert found - listed == set(), "add them to [tool.setuptools] packages"


def test_no_module_of_the_library_is_over_400_lines():
    """Issue 59: small modules with one purpose; a module past 400 lines is split by its jobs."""
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in (ROOT / "hfncl").rglob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > 400} == {}
