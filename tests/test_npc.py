"""NPC (plugins/npc.py): the confidence weight, the negative-impact ratio after one siamese step, the memory bank,
and training end to end, on region features with a GRU and on a tiny CLIP (both towers) over raw images."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
from conftest import noisy_trainer, tiny_config

from hfncl.experiment import DataArguments, ModelArguments, run_experiment
from hfncl_plugins.npc import (
    confidence_weight,
    loss_ratio,
    memory_bank,
    nearest_entries,
    npc_objective,
    pair_cross_entropy,
    siamese_update,
)


def test_pair_cross_entropy_by_hand():
    similarity = torch.tensor([[0.5, 0.1], [0.3, 0.2]])
    tau = 0.5
    logits = [[1.0, 0.2], [0.6, 0.4]]
    row0 = -logits[0][0] + math.log(math.exp(1.0) + math.exp(0.2))
    col0 = -logits[0][0] + math.log(math.exp(1.0) + math.exp(0.6))
    row1 = -logits[1][1] + math.log(math.exp(0.6) + math.exp(0.4))
    col1 = -logits[1][1] + math.log(math.exp(0.2) + math.exp(0.4))
    expected = torch.tensor([(row0 + col0) / 2, (row1 + col1) / 2])
    assert torch.allclose(pair_cross_entropy(similarity, tau), expected, atol=1e-6)


def test_confidence_weight_is_tanh_below_one_and_one_above():
    ratio = torch.tensor([0.2, 0.999, 1.0, 3.0])
    expected = torch.tensor([math.tanh(0.2), math.tanh(0.999), 1.0, 1.0])
    assert torch.allclose(confidence_weight(ratio), expected)


def test_loss_ratio_averages_the_image_and_the_caption_entry():
    ratio = loss_ratio(
        torch.tensor([1.0, 2.0]), torch.tensor([2.0, 1.0]), torch.tensor([3.0, 1.0]), torch.tensor([1.0, 4.0])
    )
    assert torch.allclose(ratio, torch.tensor([(0.5 + 3.0) / 2, (2.0 + 0.25) / 2]))


def test_objective_per_pair_and_as_the_authors_code_by_hand():
    weights, losses = torch.tensor([1.0, 0.5]), torch.tensor([2.0, 4.0])
    assert float(npc_objective(weights, losses, "per_pair")) == pytest.approx((2.0 + 2.0) / 2)
    assert float(npc_objective(weights, losses, "batch_mean")) == pytest.approx(0.75 * 3.0)
    with pytest.raises(ValueError, match="npc.weighting"):
        npc_objective(weights, losses, "other")


def _linear_model_losses(w: torch.Tensor, images: torch.Tensor, texts: torch.Tensor, tau: float) -> torch.Tensor:
    """A linear image tower W (texts as they are): S = (X W)(T)^T, no normalisation."""
    return pair_cross_entropy(images @ w @ texts.t(), tau)


@pytest.mark.parametrize("step", ["sgd", "adam"])
def test_negative_impact_of_one_siamese_step_on_a_linear_model_by_hand(step):
    """The ratio r after A' steps on a batch equals the one computed from a hand-written step on W."""
    torch.manual_seed(0)
    w0 = torch.randn(3, 3)
    batch_images, batch_texts = torch.randn(4, 3), torch.randn(4, 3)
    bank_images, bank_texts = torch.randn(4, 3), torch.randn(4, 3)
    tau, lr = 0.5, 0.1
    # hand: the gradient of the batch's mean L in W, by finite differences, then the step
    grad = torch.zeros_like(w0)
    eps = 1e-3
    for i in range(3):
        for j in range(3):
            plus, minus = w0.clone().double(), w0.clone().double()
            plus[i, j] += eps
            minus[i, j] -= eps
            grad[i, j] = float(
                (
                    _linear_model_losses(plus, batch_images.double(), batch_texts.double(), tau).mean()
                    - _linear_model_losses(minus, batch_images.double(), batch_texts.double(), tau).mean()
                )
                / (2 * eps)
            )
    w1 = w0 - lr * (grad if step == "sgd" else torch.sign(grad))
    before = _linear_model_losses(w0, bank_images, bank_texts, tau)
    after = _linear_model_losses(w1, bank_images, bank_texts, tau)
    expected = confidence_weight(loss_ratio(before, after, before, after))
    # the plugin's step on a copy of W
    parameter = w0.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad(
        _linear_model_losses(parameter, batch_images, batch_texts, tau).mean(), [parameter]
    )
    siamese_update([parameter], [gradient], lr, step)
    moved = _linear_model_losses(parameter.detach(), bank_images, bank_texts, tau)
    got = confidence_weight(loss_ratio(before, moved, before, moved))
    assert torch.allclose(parameter.detach(), w1, atol=1e-3)
    assert torch.allclose(got, expected, atol=1e-3)


def test_memory_bank_keeps_the_pairs_above_the_threshold_and_is_never_empty():
    assert memory_bank(torch.tensor([0.95, 0.2, 0.91, 0.9]), 0.9).tolist() == [0, 2]
    assert memory_bank(torch.tensor([0.1, 0.3, 0.2]), 0.9).tolist() == [1]


def test_nearest_entries_are_the_most_similar_bank_pairs_by_cosine():
    embeds = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.1], [5.0, 0.5], [-1.0, 3.0]])
    bank = torch.tensor([0, 1])
    # pair 2 (45.3 degrees) is nearer to 1 (90) than to 0 (0)? cos to 0: 0.673, to 1: 0.740 -> 1
    assert nearest_entries(embeds, embeds, bank).tolist() == [0, 1, 1, 0, 1]


@pytest.mark.slow
def test_npc_trains_region_features_and_stays_finite(micro_data_dir, tmp_path):
    config = tiny_config(
        tmp_path / "run", ["npc"], epochs=2, warmup_epochs=1, batch_size=16, lr_decay_epochs=[], learning_rate=2e-4
    )
    trainer = noisy_trainer(micro_data_dir, config)
    summary = trainer.train()
    record = summary["history"][-1]
    assert all(math.isfinite(record[k]) for k in ("train/npc_batch", "train/npc_bank"))
    division = trainer.divisions[0]
    assert bool(division.clean[division.extras["bank_image"]].all()) and bool(
        division.clean[division.extras["bank_text"]].all()
    )
    weights = trainer.ledger.get("npc_weight")
    assert torch.isfinite(weights).all() and bool(((weights > 0) & (weights <= 1)).all())


@pytest.mark.slow
def test_the_clip_recipe_trains_npc_end_to_end_on_a_tiny_clip_offline(raw_dir, tower_dir, tmp_path, offline):
    """recipes/npc_f30k_clip.py's settings (both CLIP towers, AdamW, no warmup epoch) on a tiny CLIP over raw images."""
    source = shutil.copytree(tower_dir, tmp_path / "source")
    config = tiny_config(
        tmp_path / "run",
        ["npc"],
        epochs=1,
        warmup_epochs=0,
        batch_size=4,
        lr_decay_epochs=[],
        learning_rate=1e-3,
        optimizer="adamw",
        weight_decay=0.2,
    )
    model_args = ModelArguments(
        embed_dim=8, image_tower=str(source), image_pooling="pooler", text_tower=str(source), text_pooling="pooler"
    )
    result = run_experiment(DataArguments(data_dir=str(raw_dir), noise_ratio=0.3), config, model_args)
    assert all(math.isfinite(v) for v in result["test"].values())
    assert all(math.isfinite(h["train/npc_batch"]) and math.isfinite(h["train/npc_bank"]) for h in result["history"])
