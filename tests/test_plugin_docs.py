"""docs/plugins.md: its trainer API exists, and its recording example trains and divides."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import noisy_trainer, tiny_config
from test_plugins import FakePlugins

from hfncl.engine.ledger import Ledger
from hfncl.engine.trainer import Trainer

DOCS = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()


def test_every_trainer_and_ledger_name_the_docs_offer_exists(tiny_data_dir, tmp_path):
    section = re.search(r"^## What a plugin may use of the trainer$(.*?)^## ", DOCS, re.M | re.S).group(1)
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"], epochs=1, warmup_epochs=0))
    for name in sorted(set(re.findall(r"`trainer\.(\w+)", section))):
        assert hasattr(trainer, name), f"docs/plugins.md offers trainer.{name}"
    for name in sorted(set(re.findall(r"`trainer\.ledger\.(\w+)", section))):
        assert hasattr(Ledger, name), f"docs/plugins.md offers trainer.ledger.{name}"
    assert hasattr(trainer.task, "kind") and callable(Trainer.collect)


def test_the_docs_recording_example_trains_and_divides(tiny_data_dir, tmp_path, monkeypatch):
    example = next(block for block in re.findall(r"```python\n(.*?)```", DOCS, re.S) if "def divide" in block)
    fake = FakePlugins(tmp_path / "plugins", monkeypatch)
    (tmp_path / "plugins").mkdir()
    fake.add("recording", example)
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "run", ["recording"], epochs=2))
    history = trainer.train()["history"]
    assert 0.0 <= history[-1]["division/auc"] <= 1.0 and "train/my_triplet" in history[-1]
    assert (tmp_path / "run" / "divisions" / "epoch-001-net-0.png").exists()
