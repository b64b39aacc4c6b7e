"""The trainer on category-labelled data with noisy labels: generated benchmark, resume, data kinds, DMCM vs CE."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import Interrupted, tiny_config
from safetensors.torch import load_file
from transformers import AutoModel

from hfncl.data import load_labelled_dataset
from hfncl.data.synthetic_labels import LabelledSyntheticConfig, generate_labelled, generate_labelled_arrays
from hfncl.engine.trainer import Trainer
from hfncl.experiment import run_experiment
from hfncl.hub import checkpoint_files
from hfncl.models import CategoryConfig, CategoryModel
from hfncl.plugin_setup import run_plugins
from hfncl.plugins import PluginError
from hfncl.tasks.labels import LABELS, CategoryModelArguments, LabelDataArguments, prepare_labelled_data

TINY = LabelledSyntheticConfig(train_per_class=12, valid_per_class=4, test_per_class=4, seed=2)
TINY_MODEL = CategoryModelArguments(embed_dim=16, hidden_dim=32)


@pytest.fixture(scope="module")
def tiny_labelled(tmp_path_factory):
    return generate_labelled(tmp_path_factory.mktemp("labelled"), TINY)


def _trainer(data_dir, config, ratio: float = 0.4) -> Trainer:
    arguments = LabelDataArguments(data_path=str(data_dir), noise_ratio=ratio)
    data = prepare_labelled_data(arguments, config.output_dir)
    split = data.dataset.train
    model_config = CategoryConfig(
        image_dim=split.feature_dim("image"), text_dim=split.feature_dim("text"), num_classes=10, embed_dim=16,
        hidden_dim=32,
    )
    return Trainer(
        config, model_config, data.train, data.val, task=LABELS.for_run(arguments, data), plugins=run_plugins(config)
    )


def test_generated_benchmark_is_seeded_and_read_by_the_per_file_reader(tiny_labelled):
    first, second = generate_labelled_arrays(TINY), generate_labelled_arrays(TINY)
    assert all(np.array_equal(first["train"][k], second["train"][k]) for k in first["train"])
    other = generate_labelled_arrays(LabelledSyntheticConfig(train_per_class=12, valid_per_class=4, test_per_class=4))
    assert not np.array_equal(first["train"]["img"], other["train"]["img"])
    dataset = load_labelled_dataset(tiny_labelled)
    assert dataset.layout == "per_file" and dataset.num_classes == 10
    assert (dataset.train.num_samples, dataset.valid.num_samples, dataset.test.num_samples) == (120, 40, 40)
    assert dataset.train.feature_dim("image") == 64 and dataset.train.feature_dim("text") == 48
    assert np.bincount(dataset.train.labels("image")).tolist() == [12] * 10


def test_killed_mid_epoch_resumes_to_the_same_result(tiny_labelled, tmp_path, monkeypatch):
    settings = dict(batch_size=20, save_steps=4, lr_decay_epochs=[], learning_rate=1e-3)
    expected = _trainer(tiny_labelled, tiny_config(tmp_path / "ref", ["dmcm"], **settings)).train()
    assert "division/image/auc" in expected["history"][-1] and expected["best_metric"] == "mean_map"

    original_step = Trainer._step
    calls = {"n": 0}

    def dying_step(self, batch, networks):
        calls["n"] += 1
        if calls["n"] == 9:  # epoch 1 (after the division), between checkpoints
            raise Interrupted
        return original_step(self, batch, networks)

    monkeypatch.setattr(Trainer, "_step", dying_step)
    with pytest.raises(Interrupted):
        _trainer(tiny_labelled, tiny_config(tmp_path / "run", ["dmcm"], **settings)).train()
    monkeypatch.setattr(Trainer, "_step", original_step)
    resumed = _trainer(tiny_labelled, tiny_config(tmp_path / "run", ["dmcm"], resume=True, **settings))
    result = resumed.train()
    assert json.dumps(result["history"], sort_keys=True) == json.dumps(expected["history"], sort_keys=True)
    ref = load_file(str(tmp_path / "ref" / "best" / "model.safetensors"))
    run = load_file(str(tmp_path / "run" / "best" / "model.safetensors"))
    assert all(torch.equal(ref[k], run[k]) for k in ref)


def test_plugins_of_the_other_data_kind_are_refused(tiny_labelled, tiny_data_dir, tmp_path):
    with pytest.raises(PluginError, match="do not train on 'labels' data"):
        _trainer(tiny_labelled, tiny_config(tmp_path, ["ncr"]))
    from conftest import noisy_trainer

    with pytest.raises(PluginError, match=r"\['dmcm'\] do not train on 'pairs' data"):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["dmcm"]))


def test_run_writes_results_checkpoint_and_card_with_map(tiny_labelled, tmp_path):
    config = tiny_config(tmp_path, ["prototype_ce"], epochs=2, batch_size=20, lr_decay_epochs=[])
    result = run_experiment(LabelDataArguments(data_path=str(tiny_labelled), noise_ratio=0.2), config, TINY_MODEL)
    assert set(result["test"]) == {"i2t_map", "t2i_map", "mean_map"}
    assert result["true_noise_ratio"] == {"image": 0.2, "text": 0.2}
    assert (tmp_path / "label_noise.json").exists() and (tmp_path / "results.json").exists()
    model = AutoModel.from_pretrained(str(tmp_path / "best"))
    assert isinstance(model, CategoryModel) and model.config.plugins == ["prototype_ce"]
    card = (tmp_path / "best" / "README.md").read_text()
    assert "noisy category labels by the plugin(s) `prototype_ce`" in card
    assert "the best on the validation split by mean mAP" in card and "rSum" not in card
    assert "| split | I2T mAP | T2I mAP | mean mAP |" in card
    assert "load_vocabulary" not in card and "image-caption" not in card
    names = {path.name for path in checkpoint_files(tmp_path / "best")}
    assert names == {"config.json", "model.safetensors", "README.md", "hfncl_run.json"}


@pytest.mark.slow
def test_dmcm_beats_the_cross_entropy_baseline_under_60_percent_noise(tmp_path):
    """The paper's finding (Table 2) at small scale: 400 samples, 10 classes, 60% symmetric noise."""
    data_dir = generate_labelled(tmp_path / "data", LabelledSyntheticConfig())
    scores = {}
    for plugin in ("dmcm", "prototype_ce"):
        config = tiny_config(
            tmp_path / plugin, [plugin], epochs=20, warmup_epochs=5, batch_size=100, learning_rate=1e-4,
            lr_decay_epochs=[], eval_batch_size=256,
        )
        result = run_experiment(
            LabelDataArguments(data_path=str(data_dir), noise_ratio=0.6), config, CategoryModelArguments(64, 128)
        )
        scores[plugin] = result["test"]["mean_map"]
    assert scores["dmcm"] > scores["prototype_ce"] + 0.1, scores


def test_a_truncated_category_checkpoint_is_named_as_such(tmp_path):
    CategoryModel(CategoryConfig(image_dim=6, text_dim=5, num_classes=3, embed_dim=4, hidden_dim=8)).save_pretrained(
        tmp_path
    )
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-40])
    with pytest.raises(OSError, match="corrupted or truncated"):
        AutoModel.from_pretrained(str(tmp_path))
