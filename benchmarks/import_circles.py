"""The import circles of a package: sets of modules that import each other, type-only imports included.

    python benchmarks/import_circles.py [hfncl] [--json]

Reads every ``.py`` file of the package with :mod:`ast` (nothing is imported or run), draws an arrow from a
module to each module of the package it imports, at any depth and under ``if TYPE_CHECKING:`` too, and prints
the strongly connected components of more than one module, largest first (scipy's
:func:`scipy.sparse.csgraph.connected_components`). ``from package import name`` points at ``package.name``
where that is a module, else at ``package``.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]


def module_names(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (a package by its ``__init__.py``)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that module ``name`` (its file ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets.update(
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            )
    return {target for target in targets if target in modules and target != name}


def circles(package: Path) -> list[list[str]]:
    """The import circles of ``package``, largest first, each sorted by name."""
    modules = module_names(package)
    order = sorted(modules)
    index = {name: i for i, name in enumerate(order)}
    edges = [(index[name], index[target]) for name in order for target in imported(name, modules[name], modules)]
    rows, cols = zip(*edges, strict=True) if edges else ((), ())
    graph = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(order), len(order)))
    _, labels = connected_components(graph, directed=True, connection="strong")
    groups = [sorted(order[i] for i in np.flatnonzero(labels == label)) for label in np.unique(labels)]
    return sorted((group for group in groups if len(group) > 1), key=lambda group: (-len(group), group))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("package", nargs="?", default="hfncl", help="A package directory under the repository root.")
    parser.add_argument("--json", action="store_true", help="Print the circles as JSON.")
    args = parser.parse_args(argv)
    found = circles(ROOT / args.package)
    if args.json:
        print(json.dumps(found))
    else:
        print(
            f"{len(found)} import circle(s) in {args.package}; the largest has {len(found[0]) if found else 0} modules"
        )
        for group in found:
            print(f"  {len(group)}: " + ", ".join(group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
