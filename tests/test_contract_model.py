"""The model side of the plugin contract: model_defaults, inference_similarity, optimiser choice."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest
import torch
from conftest import tiny_config

import hfncl.plugins as plugins
from hfncl import registry
from hfncl.engine.encoding import encode_split, evaluate_retrieval
from hfncl.engine.trainer import Trainer
from hfncl.evaluation import retrieval_metrics_from_matrix
from hfncl.experiment import DataArguments, ModelArguments
from hfncl.models import NCLConfig
from hfncl.plugin_setup import run_plugins
from hfncl.tasks.pair_data import prepare_data
from hfncl.tasks.pairs import PAIRS, model_fields


@pytest.fixture
def with_test_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    installed = dict(registry.installed_entry_points())
    installed["reversed_ranking"] = EntryPoint(
        name="reversed_ranking", value="plugins_for_tests.reversed_ranking", group=plugins.ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(registry, "installed_entry_points", lambda: installed)


def test_model_defaults_come_from_plugins_and_explicit_arguments_win(with_test_plugin) -> None:
    assert model_fields(["reversed_ranking"], None) == {"image_views": 3, "text_pooling": "max"}
    explicit = ModelArguments(image_views=2, embed_dim=8)
    assert model_fields(["reversed_ranking"], explicit) == {"image_views": 2, "text_pooling": "max", "embed_dim": 8}
    assert model_fields(["vsepp"], None) == {}


def test_evaluation_ranks_each_direction_as_the_plugin_says(with_test_plugin, tiny_data_dir, tmp_path) -> None:
    config = tiny_config(tmp_path, ["reversed_ranking"], epochs=1, warmup_epochs=0, optimizer="adamw", weight_decay=0.1)
    data = prepare_data(DataArguments(data_dir=str(tiny_data_dir)), config.output_dir)
    fields = model_fields(config.plugins, ModelArguments(embed_dim=16, word_dim=8))
    model_config = NCLConfig(image_dim=data.image_dim, vocab_size=len(data.vocab), **fields)
    trainer = Trainer(config, model_config, data.train, task=PAIRS, plugins=run_plugins(config))
    assert isinstance(trainer.optimizer.optimizer, torch.optim.AdamW)
    assert trainer.optimizer.param_groups[0]["weight_decay"] == 0.1
    assert trainer.model.config.image_views == 3 and trainer.model.config.text_pooling == "max"
    trainer.train()
    metrics = evaluate_retrieval(trainer.model, data.test, hook=trainer.hook)
    image_embeds, text_embeds = encode_split(trainer.model, data.test, batch_size=64)
    similarity = trainer.model.similarity(image_embeds, text_embeds)
    plain, negated = retrieval_metrics_from_matrix(similarity, 5), retrieval_metrics_from_matrix(-similarity, 5)
    assert {k: v for k, v in metrics.items() if k.startswith("i2t")} == {
        k: v for k, v in plain.items() if k.startswith("i2t")
    }
    assert {k: v for k, v in metrics.items() if k.startswith("t2i")} == {
        k: v for k, v in negated.items() if k.startswith("t2i")
    }
    assert metrics["t2i_meanr"] != plain["t2i_meanr"]
    assert trainer.model.config.plugin_options == {}
