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


def test_the_model_class_loads_at_most_15_hfncl_modules_and_no_datasets() -> None:
    """Issue 59: ``from hfncl import NCLModel`` reads the models and the checkpoint record, not the data package."""
    modules, _ = imported_after("from hfncl import NCLModel")
    own = {name for name in modules if name.split(".")[0] == "hfncl"}
    assert len(own) <= 15, sorted(own)
    assert "datasets" not in modules and not {name for name in own if name.startswith("hfncl.data")}


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


TRAIN_ERRORS = {
    "unknown flag": (["--plugins", "vsepp", "--data_dir", "d", "--epochz", "3"], "not used by the argument parser"),
    "bad --options JSON": (
        ["--plugins", "vsepp", "--data_dir", "d", "--options", "{bad"],
        "TrainConfig.options must be a JSON object",
    ),
    "bad value": (["--plugins", "vsepp", "--data_dir", "d", "--epochs", "0"], "TrainConfig.epochs must be >= 1"),
    "missing config file": (["--config", "missing.yaml"], "--config missing.yaml: no such file"),
    "bad config field": (["--config", "CONFIG"], "unknown field(s) 'epochz' (did you mean 'epochs'?)"),
    "unknown plugin": (["--plugins", "nosuchplugin", "--data_dir", "d"], "Unknown plugin 'nosuchplugin'"),
}


def test_every_help_and_the_argument_errors_of_train_come_before_any_framework(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("epochz: 3\n")
    calls = [[str(config) if token == "CONFIG" else token for token in argv] for argv, _ in TRAIN_ERRORS.values()]
    code = (
        "import contextlib, io, json, sys\n"
        "from hfncl.cli import COMMANDS, main\n"
        "helps = {}\n"
        "for argv in (['--help'], *([name, '--help'] for name in COMMANDS)):\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as text:\n"
        "        try:\n"
        "            main(argv)\n"
        "        except SystemExit as stop:\n"
        "            assert stop.code == 0, (argv, stop.code)\n"
        "    helps[' '.join(argv)] = text.getvalue()\n"
        "errors = []\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    with contextlib.redirect_stderr(io.StringIO()) as said:\n"
        "        errors.append([main(['train', *argv]), said.getvalue()])\n"
        "print(json.dumps({'helps': helps, 'errors': errors}))\n"
    )
    modules, out = imported_after(code, json.dumps(calls))
    answers = json.loads(out)
    assert not {"accelerate", "torch", "transformers", "datasets"} & modules
    assert not {name for name in modules if name.startswith("hfncl_plugins")}  # plugin names from entry points
    train_help = " ".join(answers["helps"]["train --help"].split())
    assert train_help.startswith("usage: hfncl train ") and "--num_train_epochs" in train_help
    assert "installed plugins: bicro, coteaching, crcl, decl, dmcm, " in train_help
    assert "examples (NAME: an installed plugin):" in train_help
    assert all(text.startswith("usage: hfncl") for text in answers["helps"].values())
    for (name, (_, message)), (status, said) in zip(TRAIN_ERRORS.items(), answers["errors"], strict=True):
        assert status == 2 and said.startswith("error: ") and message in said, (name, said)
