"""benchmarks/import_circles.py: the strongly connected import groups of a package, type-only imports included."""

from __future__ import annotations

from conftest import benchmark_module


def _package(root, files):
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_circles_follow_absolute_relative_and_type_only_imports(tmp_path):
    circles = benchmark_module("import_circles").circles
    package = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.c import X\n",
        "sub/__init__.py": "",
        "sub/c.py": "import pkg.a\nfrom .. import d\n",
        "d.py": "import os\n",
        "e.py": "from pkg.sub import c\nfrom pkg import f\n",
        "f.py": "from . import e\n",
    })
    assert circles(package) == [["pkg.a", "pkg.b", "pkg.sub.c"], ["pkg.e", "pkg.f"]]


def test_a_package_without_circles_has_none(tmp_path):
    circles = benchmark_module("import_circles").circles
    assert (
        circles(_package(tmp_path, {"__init__.py": "", "a.py": "from pkg import b\n", "b.py": "import json\n"})) == []
    )
