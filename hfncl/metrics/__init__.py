"""hfncl's metrics as ``evaluate`` modules shipped with the package: ``evaluate.load(metrics_path(name))``.

The modules are thin wrappers over :mod:`hfncl.evaluation` (the numbers are identical);
loading one by path needs no network.
"""

from __future__ import annotations

from pathlib import Path

METRICS = ("retrieval", "map")


def metrics_path(name: str) -> str:
    """Path of the ``evaluate`` metric module ``name`` (one of :data:`METRICS`), for ``evaluate.load``."""
    if name not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {name!r}")
    return str(Path(__file__).with_name(f"{name}.py"))
