"""Label-noise losses (Eq. 2, 3, 6, 7 of the label-noise paper) on inputs worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from hfncl.equations.label_losses import (
    mae,
    mix_with_clean,
    multimodal_contrastive_loss,
    ngce,
    ngce_mae,
    one_hot_targets,
    prototype_probabilities,
    robust_clustering_loss,
)

P = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], dtype=torch.float64)
Y = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)


def test_prototype_probabilities_by_hand():
    z = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    prototypes = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    e = math.e
    # logits [1, 0] and [0.5, 0.5]; with tau1 = 0.5 they double to [2, 0] and [1, 1]
    expected = torch.tensor([[e / (e + 1), 1 / (e + 1)], [0.5, 0.5]])
    torch.testing.assert_close(prototype_probabilities(z, prototypes), expected)
    expected_half = torch.tensor([[e**2 / (e**2 + 1), 1 / (e**2 + 1)], [0.5, 0.5]])
    torch.testing.assert_close(prototype_probabilities(z, prototypes, tau1=0.5), expected_half)
    with pytest.raises(ValueError, match="share c"):
        prototype_probabilities(z, torch.zeros(3, 3))


def test_ngce_by_hand():
    # rho = 1: sample 0: (1 - 0.5) / (3 - 1) = 0.25; sample 1: (1 - 0.1) / (3 - 1) = 0.45
    torch.testing.assert_close(ngce(P, Y, rho=1.0), torch.tensor([0.25, 0.45], dtype=torch.float64))
    # rho = 0.5, sample 0: p^0.5 = 0.70711, 0.54772, 0.44721;
    # (1 - 0.70711) / (3 - 1.70204) = 0.29289 / 1.29796 = 0.225657
    assert ngce(P[:1], Y[:1], rho=0.5).item() == pytest.approx(0.225657, abs=1e-6)
    # a soft target [0.5, 0.5, 0], rho = 1: (0.5 * 0.5 + 0.5 * 0.7) / (1 * 2) = 0.3
    soft = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    assert ngce(P[:1], soft, rho=1.0).item() == pytest.approx(0.3)
    with pytest.raises(ValueError, match="rho"):
        ngce(P, Y, rho=0.0)


def test_mae_by_hand():
    # |0.5 - 1| + 0.3 + 0.2 = 1.0 = 2 (1 - 0.5); |0.1 - 1| + 0.1 + 0.8 = 1.8
    torch.testing.assert_close(mae(P, Y), torch.tensor([1.0, 1.8], dtype=torch.float64))
    soft = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    assert mae(P[:1], soft).item() == pytest.approx(0.0 + 0.2 + 0.2)
    with pytest.raises(ValueError, match=r"both be \(N, K\)"):
        mae(P, Y[:, :2])


def test_robust_clustering_loss_sums_modalities_and_averages_samples():
    # modality 1: (0.25 + 1.0 + 0.45 + 1.8) / 2 = 1.75; modality 2 (sample 0 only): 0.25 + 1.0 = 1.25
    torch.testing.assert_close(ngce_mae(P, Y, 1.0), torch.tensor([1.25, 2.25], dtype=torch.float64))
    loss = robust_clustering_loss([P, P[:1]], [Y, Y[:1]], rho=1.0)
    assert loss.item() == pytest.approx(1.75 + 1.25)
    with pytest.raises(ValueError, match="one target tensor per modality"):
        robust_clustering_loss([P], [Y, Y], rho=1.0)


def test_terms_keep_ngce_or_mae_alone():
    # the per-sample values above: NGCE (0.25, 0.45), MAE (1.0, 1.8)
    torch.testing.assert_close(ngce_mae(P, Y, 1.0, "ngce"), torch.tensor([0.25, 0.45], dtype=torch.float64))
    torch.testing.assert_close(ngce_mae(P, Y, 1.0, "mae"), torch.tensor([1.0, 1.8], dtype=torch.float64))
    assert robust_clustering_loss([P, P[:1]], [Y, Y[:1]], 1.0, "mae").item() == pytest.approx(1.4 + 1.0)
    with pytest.raises(ValueError, match=r"terms must be one of \('ngce\+mae', 'ngce', 'mae'\), got 'gce'"):
        ngce_mae(P, Y, 1.0, "gce")


def test_losses_have_finite_gradients_through_the_prototypes():
    z = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)
    prototypes = torch.randn(5, 3, generator=torch.Generator().manual_seed(1), requires_grad=True)
    targets = one_hot_targets(torch.tensor([0, 1, 4, 2]), 5)
    robust_clustering_loss([prototype_probabilities(z, prototypes)], [targets], rho=0.7).backward()
    assert torch.isfinite(z.grad).all() and torch.isfinite(prototypes.grad).all() and z.grad.abs().sum() > 0


def test_one_hot_targets():
    torch.testing.assert_close(one_hot_targets(torch.tensor([2, 0]), 3), torch.tensor([[0.0, 0, 1], [1, 0, 0]]))
    with pytest.raises(ValueError, match=r"labels must be in 0..2"):
        one_hot_targets(torch.tensor([3]), 3)


def test_mix_with_clean_mixes_noisy_rows_with_a_clean_partner():
    inputs = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    targets = one_hot_targets(torch.tensor([0, 1, 2, 0, 1, 2]), 3)
    clean = torch.tensor([True, False, True, False, False, True])
    mixed_x, mixed_q, partner = mix_with_clean(inputs, targets, clean, 0.25, torch.Generator().manual_seed(0))
    assert (partner[clean] == -1).all() and clean[partner[~clean]].all()
    torch.testing.assert_close(mixed_x[clean], inputs[clean])
    torch.testing.assert_close(mixed_q[clean], targets[clean])
    for row in torch.nonzero(~clean).flatten().tolist():
        other = partner[row]
        torch.testing.assert_close(mixed_x[row], 0.25 * inputs[row] + 0.75 * inputs[other])
        torch.testing.assert_close(mixed_q[row], 0.25 * targets[row] + 0.75 * targets[other])
    again = mix_with_clean(inputs, targets, clean, 0.25, torch.Generator().manual_seed(0))[2]
    torch.testing.assert_close(partner, again)
    assert mixed_q.sum(dim=1).allclose(torch.ones(6))


def test_mix_with_clean_edge_cases():
    inputs, targets = torch.ones(3, 2), one_hot_targets(torch.tensor([0, 1, 0]), 2)
    x, q, partner = mix_with_clean(inputs, targets, torch.zeros(3, dtype=torch.bool), 0.5)
    torch.testing.assert_close(x, inputs)
    torch.testing.assert_close(q, targets)
    assert (partner == -1).all()
    with pytest.raises(ValueError, match="lam"):
        mix_with_clean(inputs, targets, torch.ones(3, dtype=torch.bool), 1.5)
    with pytest.raises(ValueError, match="same batch"):
        mix_with_clean(inputs, targets, torch.ones(2, dtype=torch.bool), 0.5)


def test_multimodal_contrastive_loss_by_hand():
    eye = torch.eye(2)
    # identical modalities: every anchor sees exp(1) twice among exp(1), exp(0), exp(1), exp(0):
    # -(1/2) * 4 * log(2e / (2e + 2)) = 2 log(1 + 1/e)
    assert multimodal_contrastive_loss([eye, eye]).item() == pytest.approx(2 * math.log(1 + 1 / math.e))
    # swapped modalities, tau2 = 0.5: anchor z_0^1 scores 2 (itself), 0 (z_0^2) against 0 and 2:
    # positives e^2 + 1 out of 2 e^2 + 2, so every anchor contributes log 2: 4 log 2 / 2
    swapped = eye.flip(0)
    assert multimodal_contrastive_loss([eye, swapped], tau2=0.5).item() == pytest.approx(2 * math.log(2))


def test_multimodal_contrastive_loss_matches_the_sum_of_eq7_term_by_term():
    generator = torch.Generator().manual_seed(3)
    z = [torch.nn.functional.normalize(torch.randn(5, 4, generator=generator), dim=1) for _ in range(3)]
    tau2 = 0.7
    total = 0.0
    for i in range(3):
        for j in range(5):
            positive = sum(math.exp(float(z[m][j] @ z[i][j]) / tau2) for m in range(3))
            candidates = sum(math.exp(float(z[m][t] @ z[i][j]) / tau2) for m in range(3) for t in range(5))
            total -= math.log(positive / candidates)
    assert multimodal_contrastive_loss(z, tau2).item() == pytest.approx(total / 5, rel=1e-5)
    with pytest.raises(ValueError, match="one shape"):
        multimodal_contrastive_loss([z[0], z[1][:3]])
