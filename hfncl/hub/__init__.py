"""Publishing trained models: run records, generated model cards, checks, Hub uploads and vocabularies.

A checkpoint directory holds ``config.json`` and the safetensors weights of every
network (``save_pretrained``), ``vocab.json`` (``tokenizer/`` for a transformer text
tower), ``hfncl_run.json`` (what the run measured) and ``README.md`` (the card
generated from it). ``NCLModel.from_pretrained``
and ``AutoModel.from_pretrained`` load it from the directory or from a Hub repository;
:func:`load_vocabulary` reads its vocabulary from either.
"""

from hfncl.hub.card import build_model_card, card_name, write_model_card
from hfncl.hub.checkpoint import (
    add_test_results,
    checkpoint_files,
    load_text_vocabulary,
    load_vocabulary,
    save_text_vocabulary,
    save_trained_model,
)
from hfncl.hub.publish import push_checkpoint
from hfncl.hub.record import (
    RUN_RECORD,
    CheckpointError,
    DataDescription,
    IncompatibleCheckpointError,
    RunRecord,
    read_run_record,
    write_run_record,
)

__all__ = [
    "RUN_RECORD",
    "CheckpointError",
    "DataDescription",
    "IncompatibleCheckpointError",
    "RunRecord",
    "add_test_results",
    "build_model_card",
    "card_name",
    "checkpoint_files",
    "load_text_vocabulary",
    "load_vocabulary",
    "push_checkpoint",
    "read_run_record",
    "save_text_vocabulary",
    "save_trained_model",
    "write_model_card",
    "write_run_record",
]
