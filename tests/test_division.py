"""GMM division against an independent evaluation of the fitted mixture with scipy."""

import numpy as np
import torch
from scipy.stats import norm
from sklearn.mixture import GaussianMixture

from hfncl.division import gmm_clean_probability, min_max_normalise, threshold_division


def _bimodal(seed=0):
    rng = np.random.default_rng(seed)
    clean = rng.normal(1.0, 0.2, 300)
    noisy = rng.normal(4.0, 0.5, 200)
    return np.concatenate([clean, noisy]), np.r_[np.ones(300, bool), np.zeros(200, bool)]


def test_min_max_normalise():
    np.testing.assert_allclose(min_max_normalise(torch.tensor([2.0, 4.0, 3.0])), [0.0, 1.0, 0.5])
    np.testing.assert_allclose(min_max_normalise(np.ones(3)), np.zeros(3))


def test_posterior_of_low_mean_component_matches_scipy_density():
    losses, truth = _bimodal()
    w = gmm_clean_probability(losses, max_iter=100, tol=1e-6, seed=0).numpy()
    x = min_max_normalise(losses)
    mixture = GaussianMixture(2, max_iter=100, tol=1e-6, reg_covar=5e-4, random_state=0).fit(x[:, None])
    low = int(np.argmin(mixture.means_.ravel()))
    densities = np.stack(
        [
            mixture.weights_[k] * norm.pdf(x, mixture.means_[k, 0], np.sqrt(mixture.covariances_[k].ravel()[0]))
            for k in range(2)
        ]
    )
    np.testing.assert_allclose(w, densities[low] / densities.sum(0), rtol=1e-4, atol=1e-6)
    assert (w[truth] > 0.5).mean() > 0.98 and (w[~truth] < 0.5).mean() > 0.98


def test_same_seed_same_division():
    losses, _ = _bimodal(1)
    assert torch.equal(gmm_clean_probability(losses, seed=3), gmm_clean_probability(losses, seed=3))


def test_threshold_division():
    division = threshold_division(torch.tensor([0.1, 0.5, 0.9]), 0.5, extra=torch.zeros(3))
    assert division.clean.tolist() == [False, True, True] and "extra" in division.extras
