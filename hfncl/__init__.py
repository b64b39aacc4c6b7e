"""hfncl: learning cross-modal retrieval from noisy correspondence, with methods as plugins.

Importing hfncl registers its models with the transformers Auto classes, so
``AutoModel.from_pretrained`` loads an hfncl checkpoint without ``trust_remote_code``, and
the texts of their model cards (:mod:`hfncl.tasks`);
``evaluate.load(hfncl.metrics_path("retrieval"))`` loads its retrieval metrics (and ``"map"``).
The names below are imported on first use. The ``hfncl`` command skips the registration
(its commands import what they use), so that ``hfncl --help`` does not wait for torch.
"""

import sys
from importlib import import_module
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Division": "hfncl.types",
    "MatchingNetwork": "hfncl.models",
    "NCLConfig": "hfncl.models",
    "NCLModel": "hfncl.models",
    "PairOutputs": "hfncl.types",
    "TrainConfig": "hfncl.config",
    "hookimpl": "hfncl.hookspecs",
    "metrics_path": "hfncl.metrics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hfncl' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


if Path((getattr(sys, "argv", None) or [""])[0]).name != "hfncl":
    import_module("hfncl.tasks")  # registers the model types with AutoConfig / AutoModel, and their cards' texts
