"""Publishing trained models: run records, generated model cards, checks, Hub uploads and vocabularies.

A checkpoint directory holds ``config.json`` and the safetensors weights of every
network (``save_pretrained``), ``vocab.json`` (``tokenizer/`` for a transformer text
tower), ``hfncl_run.json`` (what the run measured) and ``README.md`` (the card
generated from it). ``NCLModel.from_pretrained``
and ``AutoModel.from_pretrained`` load it from the directory or from a Hub repository;
:func:`load_vocabulary` reads its vocabulary from either.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "CheckpointError": "hfncl.hub.record",
    "DataDescription": "hfncl.hub.record",
    "IncompatibleCheckpointError": "hfncl.hub.record",
    "RUN_RECORD": "hfncl.hub.record",
    "RunRecord": "hfncl.hub.record",
    "add_test_results": "hfncl.hub.checkpoint",
    "build_model_card": "hfncl.hub.card",
    "card_name": "hfncl.hub.card",
    "checkpoint_files": "hfncl.hub.checkpoint",
    "load_text_vocabulary": "hfncl.hub.checkpoint",
    "load_vocabulary": "hfncl.hub.checkpoint",
    "push_checkpoint": "hfncl.hub.publish",
    "read_run_record": "hfncl.hub.record",
    "save_text_vocabulary": "hfncl.hub.checkpoint",
    "save_trained_model": "hfncl.hub.checkpoint",
    "write_model_card": "hfncl.hub.card",
    "write_run_record": "hfncl.hub.record",
}
"""Each name and its module, imported on first use (``from hfncl.hub import RunRecord`` loads no card code)."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hfncl.hub' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return __all__
