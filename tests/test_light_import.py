"""A light library (issue 42): importing hfncl, loading a model and retrieving with it load neither Accelerate (from
hfncl) nor the training engine; the command checks its arguments before it imports torch (issue 43.4).

Each check runs a fresh interpreter and reads what it imported (``sys.modules``), not a clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from hfncl.data import Vocabulary
from hfncl.models import NCLConfig, NCLModel

CAPTIONS = ["a dog runs on the beach", "two men play chess"]


def imported_after(code: str, *argv: str) -> tuple[set[str], str]:
    """The modules a fresh interpreter holds after running ``code`` (with ``sys.argv[1:] = argv``), and its stdout."""
    report = "\nimport json as _json, sys as _sys\nprint(_json.dumps(sorted(_sys.modules)), file=_sys.stderr)"
    done = subprocess.run(
        [sys.executable, "-c", code + report, *argv], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stderr.strip().splitlines()[-1])), done.stdout


def engine(modules: set[str]) -> set[str]:
    return {name for name in modules if name.startswith(("hfncl.engine", "hfncl.tasks", "hfncl.experiment"))}


def test_import_hfncl_loads_no_framework() -> None:
    modules, _ = imported_after("import hfncl")
    assert not {"accelerate", "torch", "transformers"} & modules
    assert {name for name in modules if name.startswith("hfncl.")} == set()


def test_a_model_and_a_retriever_load_without_the_engine(tmp_path: Path) -> None:
    torch.manual_seed(0)
    vocab = Vocabulary.build(CAPTIONS, min_count=1)
    NCLModel(NCLConfig(image_dim=8, embed_dim=16, word_dim=6, vocab_size=len(vocab))).save_pretrained(tmp_path)
    vocab.save_json(tmp_path / "vocab.json")
    code = (
        "import sys, hfncl\n"
        "from transformers import AutoModel\n"
        "model = AutoModel.from_pretrained(sys.argv[1])\n"
        "retriever = hfncl.Retriever.from_pretrained(sys.argv[1])\n"
        f"print(type(model).__name__, tuple(retriever.encode_texts({CAPTIONS!r}).shape))\n"
    )
    modules, out = imported_after(code, str(tmp_path))
    assert out.split() == ["NCLModel", "(1,", "2,", "16)"]
    assert engine(modules) == set()
    # Accelerate comes only from transformers' own model code, which imports it wherever it is installed
    assert not {name for name in modules if name.startswith("hfncl.") and "accelerate" in name}


def test_the_card_texts_come_from_the_tasks_on_first_use(tmp_path: Path) -> None:
    code = (
        "from hfncl.hub.card import card_texts\n"
        "from hfncl.models import NCLConfig\n"
        "print(card_texts(NCLConfig(plugins=['vsepp']), 'user/model').selection_metric)\n"
    )
    modules, out = imported_after(code)
    assert out.strip() == "rSum" and "hfncl.tasks" in modules
