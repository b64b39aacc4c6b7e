"""Broken models, settings, plugin combinations, output directories and checkpoints are refused or caught."""

from __future__ import annotations

import pytest
import torch

from conftest import noisy_trainer, tiny_config


def test_nan_weights_are_an_error_and_zero_weights_score_no_better_than_chance(tiny_data_dir, tmp_path):
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"]))
    with torch.no_grad():
        for parameter in trainer.model.parameters():
            parameter.zero_()
    zero = trainer.evaluate(trainer.val_split)  # every similarity ties: 40 images, 5 captions each
    assert zero["i2t_r10"] == zero["t2i_r10"] == 0.0 and zero["rsum"] == 0.0
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(float("nan"))
    with pytest.raises(ValueError, match="non-finite .* the model's weights or the features are broken"):
        trainer.evaluate(trainer.val_split)
