"""Two-component Beta Mixture Model: parameter recovery, posteriors against scipy, the (1 - r) clean rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from hfncl.equations.beta_mixture import BetaMixture, bmm_clean_probability, most_likely_clean, scale_to_unit_interval

# Clean (low-loss) component Beta(2, 8) with weight 0.7, noisy component Beta(8, 2) with weight 0.3.
TRUE_ALPHAS, TRUE_BETAS, TRUE_WEIGHTS = np.array([2.0, 8.0]), np.array([8.0, 2.0]), np.array([0.7, 0.3])


def _samples(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    low = rng.random(n) < TRUE_WEIGHTS[0]
    x = np.where(
        low,
        stats.beta.rvs(TRUE_ALPHAS[0], TRUE_BETAS[0], size=n, random_state=rng),
        stats.beta.rvs(TRUE_ALPHAS[1], TRUE_BETAS[1], size=n, random_state=rng),
    )
    return x, low


def test_recovers_known_beta_parameters_from_samples():
    # Tolerance: over 200 seeds of n = 20000 (measured while writing this test), the
    # weighted method-of-moments EM had a relative bias <= 1.2% and a relative standard
    # deviation <= 2.8% on every a and b (worst case 6.8%), and a standard deviation of
    # 0.0032 on the weights. 12% is bias + 4 standard deviations of the worst parameter;
    # 0.02 is 6 standard deviations of a weight.
    x, _ = _samples(20000, seed=7)
    mixture = BetaMixture.fit(x)
    order = np.argsort(mixture.means)
    assert mixture.converged and mixture.low_component == order[0]
    np.testing.assert_allclose(mixture.alphas[order], TRUE_ALPHAS, rtol=0.12)
    np.testing.assert_allclose(mixture.betas[order], TRUE_BETAS, rtol=0.12)
    np.testing.assert_allclose(mixture.weights[order], TRUE_WEIGHTS, atol=0.02)


def test_posteriors_match_scipy_beta_pdf():
    mixture = BetaMixture(np.array([1.5, 6.0]), np.array([5.0, 2.5]), np.array([0.6, 0.4]))
    x = np.linspace(0.01, 0.99, 37)
    joint = np.stack(
        [w * stats.beta.pdf(x, a, b) for a, b, w in zip(mixture.alphas, mixture.betas, mixture.weights, strict=True)], 1
    )
    expected = joint / joint.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(mixture.posterior(x), expected, rtol=1e-10)
    np.testing.assert_allclose(mixture.clean_probability(x), expected[:, 0], rtol=1e-10)
    np.testing.assert_allclose(mixture.log_likelihoods(x), np.log(joint), rtol=1e-10)


def test_fitted_clean_probability_matches_scipy_and_separates_the_components():
    x, low = _samples(4000, seed=1)
    mixture = BetaMixture.fit(x)
    k = mixture.low_component
    joint = [
        w * stats.beta.pdf(x, a, b) for a, b, w in zip(mixture.alphas, mixture.betas, mixture.weights, strict=True)
    ]
    np.testing.assert_allclose(mixture.clean_probability(x), joint[k] / (joint[0] + joint[1]), rtol=1e-8)
    # Bayes-optimal accuracy of the true mixture on these samples is about 99.5%.
    assert ((mixture.clean_probability(x) > 0.5) == low).mean() > 0.98


def test_fit_is_deterministic_and_rejects_bad_input():
    x, _ = _samples(500, seed=3)
    first, second = BetaMixture.fit(x), BetaMixture.fit(x)
    np.testing.assert_array_equal(first.alphas, second.alphas)
    assert BetaMixture.fit(x, max_iter=2).iterations == 2
    with pytest.raises(ValueError, match="at least 2 values"):
        BetaMixture.fit(np.array([0.5]))
    with pytest.raises(ValueError, match="max_iter"):
        BetaMixture.fit(x, max_iter=0)


def test_scale_to_unit_interval():
    np.testing.assert_allclose(scale_to_unit_interval(np.array([2.0, 4.0, 3.0]), eps=1e-3), [1e-3, 1 - 1e-3, 0.5])
    np.testing.assert_allclose(scale_to_unit_interval(torch.tensor([5.0, 5.0])), [0.5, 0.5])
    with pytest.raises(ValueError, match="NaN"):
        scale_to_unit_interval(np.array([1.0, np.nan]))


def test_bmm_clean_probability_on_separated_losses_despite_a_heavy_tailed_low_component():
    # Gamma-shaped losses: the fitted low component is about Beta(0.14, 1.2), whose right
    # tail outweighs the high component's Beta(22, 13) near 1, so the plain posterior calls
    # about 4% of the largest (noisy) losses clean; the monotone clean probability does not.
    rng = np.random.default_rng(0)
    clean_losses, noisy_losses = rng.gamma(2.0, 0.1, size=600), 2.0 + rng.gamma(4.0, 0.2, size=400)
    losses = torch.tensor(np.concatenate([clean_losses, noisy_losses]))
    clean_prob, mixture = bmm_clean_probability(losses)
    assert clean_prob.dtype == torch.float32 and clean_prob.shape == (1000,)
    assert (clean_prob[:600] > 0.5).all() and (clean_prob[600:] < 0.5).all()
    plain = mixture.clean_probability(scale_to_unit_interval(losses), monotone=False)
    assert (plain[600:] > 0.5).sum() > 10
    assert most_likely_clean(clean_prob, 0.4)[:600].all()


def test_clean_probability_never_increases_with_the_loss():
    heavy_right = BetaMixture(np.array([0.2, 20.0]), np.array([1.2, 10.0]), np.array([0.6, 0.4]))
    heavy_left = BetaMixture(np.array([8.0, 0.5]), np.array([30.0, 0.4]), np.array([0.5, 0.5]))
    grid = np.linspace(1e-4, 1 - 1e-4, 2001)
    for mixture in (heavy_right, heavy_left):
        turn = mixture.turning_point()
        plain = mixture.clean_probability(grid, monotone=False)
        corrected = mixture.clean_probability(grid)
        assert not np.all(np.diff(plain) <= 1e-12)  # the plain posterior turns back
        assert np.all(np.diff(corrected) <= 1e-12)
        # a'/x - b'/(1 - x) = 0 at the turning point: the plain posterior is flat there
        a = mixture.alphas[mixture.low_component] - mixture.alphas[1 - mixture.low_component]
        b = mixture.betas[mixture.low_component] - mixture.betas[1 - mixture.low_component]
        assert a / turn - b / (1 - turn) == pytest.approx(0.0, abs=1e-9)
        untouched = grid <= turn if a < 0 else grid >= turn
        np.testing.assert_allclose(corrected[untouched], plain[untouched])
    assert BetaMixture(np.array([2.0, 8.0]), np.array([8.0, 2.0]), np.array([0.5, 0.5])).turning_point() is None


def test_most_likely_clean_keeps_one_minus_r():
    prob = torch.tensor([0.9, 0.1, 0.5, 0.5, 0.7, 0.2])
    np.testing.assert_array_equal(most_likely_clean(prob, 0.5), [True, False, True, False, True, False])
    assert most_likely_clean(prob, 0.0).all() and not most_likely_clean(prob, 1.0).any()
    assert most_likely_clean(torch.rand(1000, generator=torch.Generator().manual_seed(0)), 0.2).sum() == 800
    with pytest.raises(ValueError, match="noise_rate"):
        most_likely_clean(prob, 1.2)
