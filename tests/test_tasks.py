"""The pair task's encoding: each distinct image once in eval mode, every row in training mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_config

from hfncl.data.noise import caption_level_noise, save_noise_index
from hfncl.experiment import DataArguments, run_experiment
from hfncl.models import NCLConfig, NCLModel
from hfncl.tasks.pairs import PairTask, distinct_images


def _batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    image_index = torch.tensor([4, 4, 9, 4, 2, 9])
    table = torch.randn(10, 3, 8, generator=generator)
    captions = torch.randint(3, 20, (6, 5), generator=generator)
    return {
        "images": table[image_index],
        "captions": captions,
        "lengths": torch.tensor([5, 4, 5, 3, 2, 5]),
        "index": torch.arange(6),
        "image_index": image_index,
    }


def test_distinct_images_finds_each_images_first_row():
    batch = _batch()
    first, slot = distinct_images(batch["images"], batch["image_index"])
    assert first.tolist() == [4, 0, 2]  # images 2, 4, 9 first appear at rows 4, 0, 2
    assert slot.tolist() == [1, 1, 2, 1, 0, 2]
    assert torch.equal(batch["images"][first][slot], batch["images"])


def test_rows_of_one_index_with_different_inputs_are_not_merged():
    batch = _batch()
    changed = batch["images"].clone()
    changed[3, 0, 0] += 1.0  # an augmented copy of image 4
    assert distinct_images(changed, batch["image_index"]) is None
    assert distinct_images(batch["images"][:3], torch.tensor([0, 1, 2])) is None


def test_eval_encoding_of_distinct_images_equals_encoding_every_row():
    network = NCLModel(NCLConfig(image_dim=8, vocab_size=20, embed_dim=16, word_dim=8, image_views=2)).networks[0]
    batch, task = _batch(), PairTask()
    network.eval()
    with torch.no_grad():
        image_embeds, text_embeds = task.encode(network, batch)
        every_row = network(batch["images"], batch["captions"], batch["lengths"])
    torch.testing.assert_close(image_embeds, every_row[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(text_embeds, every_row[1], rtol=0, atol=0)


def test_training_mode_encodes_every_row(monkeypatch):
    network = NCLModel(NCLConfig(image_dim=8, vocab_size=20, embed_dim=16, word_dim=8)).networks[0]
    seen = []
    original = network.encode_image
    monkeypatch.setattr(network, "encode_image", lambda images: seen.append(len(images)) or original(images))
    network.train()
    PairTask().encode(network, _batch())
    network.eval()
    PairTask().encode(network, _batch())
    assert seen == [6, 3]


class _Built(Exception):
    """Stops run_experiment once it has built the trainer's task."""


@pytest.mark.parametrize(
    ("noise", "expected"),
    [({"noise_ratio": 0.4}, 0.4), ({"noise_file": "FILE"}, "MEASURED"), ({}, None)],
)
def test_a_pair_run_tells_plugins_the_noise_it_injected(noise, expected, tiny_data_dir, tmp_path, monkeypatch):
    seen = []

    def building(config, model_config, train, val, task, callbacks, **more):
        seen.append(task.noise_rate)
        raise _Built

    pairing = caption_level_noise(160, 5, 0.3, seed=4)
    save_noise_index(tmp_path / "noise.npy", pairing)
    noise = {k: str(tmp_path / "noise.npy") if v == "FILE" else v for k, v in noise.items()}
    monkeypatch.setattr("hfncl.experiment.Trainer", building)
    with pytest.raises(_Built):
        run_experiment(DataArguments(data_dir=str(tiny_data_dir), **noise), tiny_config(tmp_path / "run", ["vsepp"]))
    measured = float(np.mean(pairing != np.arange(800) // 5))
    assert seen == [pytest.approx(measured, abs=1e-12) if expected == "MEASURED" else expected]
    assert 0.25 < measured < 0.3


def test_pair_task_refuses_a_noise_rate_outside_zero_to_one():
    with pytest.raises(ValueError, match="PairTask.noise_rate must be in"):
        PairTask(1.0)


def test_experiment_tasks_are_found_from_arguments_and_plugins(tmp_path):
    from hfncl.hub import CheckpointError
    from hfncl.hub.card import card_texts
    from hfncl.models import CategoryConfig
    from hfncl.tasks import LABELS, PAIRS, task_of_arguments, task_of_plugins
    from hfncl.tasks.labels import CategoryModelArguments, LabelDataArguments

    assert task_of_arguments(DataArguments(data_dir="d")) is PAIRS
    assert task_of_arguments(LabelDataArguments(data_path="f.h5")) is LABELS
    with pytest.raises(TypeError, match="data arguments must be one of DataArguments, LabelDataArguments"):
        task_of_arguments(object())
    assert task_of_plugins([]) is PAIRS and task_of_plugins(["vsepp"]) is PAIRS
    assert task_of_plugins(["dmcm"]) is LABELS
    with pytest.raises(TypeError, match="DataArguments takes ModelArguments, got CategoryModelArguments"):
        run_experiment(DataArguments(data_dir="d"), tiny_config(tmp_path, ["vsepp"]), CategoryModelArguments())
    assert not any(tmp_path.iterdir())  # refused before anything is written
    config = CategoryConfig(plugins=["dmcm"])
    assert card_texts(config, "x").selection_metric == "mean mAP"
    config.model_type = "unregistered"
    with pytest.raises(CheckpointError, match="no card texts are registered for model type 'unregistered'"):
        card_texts(config, "x")
