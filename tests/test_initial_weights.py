"""``TrainConfig.init_weights``: a run starts from a saved model's weights, refused in one line when they do not fit."""

from __future__ import annotations

import pytest
import torch
from conftest import noisy_trainer, tiny_config

from hfncl.models import NCLConfig, NCLModel


def _saved_model(trainer, directory, seed: int = 7):
    """A model of the trainer's config with other weights (another seed), saved to ``directory``."""
    torch.manual_seed(seed)
    model = NCLModel(trainer.model.config)
    for buffer in model.buffers():
        if buffer.is_floating_point():
            buffer.fill_(0.5)
    model.save_pretrained(str(directory))
    return model


def test_a_run_starts_from_the_saved_weights_and_the_seed_s_stream(tiny_data_dir, tmp_path):
    fresh = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "fresh", ["vsepp"]))
    saved = _saved_model(fresh, tmp_path / "saved")
    config = tiny_config(tmp_path / "started", ["vsepp"], init_weights=str(tmp_path / "saved"))
    started = noisy_trainer(tiny_data_dir, config)
    theirs, ours = saved.state_dict(), started.model.state_dict()
    assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], ours[k]) for k in theirs)
    assert not torch.equal(fresh.model.state_dict()["networks.0.image_encoder.fc.weight"],
                           ours["networks.0.image_encoder.fc.weight"])
    # the run's random stream after set-up is the fresh run's: loading the weights drew nothing from it
    after_started = torch.rand(3)
    noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "fresh_again", ["vsepp"]))
    assert torch.equal(after_started, torch.rand(3))


def test_weights_of_another_model_are_refused_with_the_field_and_the_differences(tiny_data_dir, tmp_path):
    fresh = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "fresh", ["vsepp"]))
    config = NCLConfig(**{**fresh.model.config.to_dict(), "embed_dim": 16})
    NCLModel(config).save_pretrained(str(tmp_path / "narrow"))
    with pytest.raises(ValueError, match=r"TrainConfig.init_weights .*narrow.*: its tensors are not the run's model's: "
                                         r".* is \(16, .*\), the run's \(32, "):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "a", ["vsepp"], init_weights=str(tmp_path / "narrow")))
    with pytest.raises(ValueError, match=r"TrainConfig.init_weights .*nowhere.*: no saved NCLModel there") as refused:
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "b", ["vsepp"], init_weights=str(tmp_path / "nowhere")))
    assert "\n" not in str(refused.value)
