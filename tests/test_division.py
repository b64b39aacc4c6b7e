"""GMM division against an independent evaluation of the fitted mixture with scipy."""

import numpy as np
import pytest
import torch
from scipy.stats import norm
from sklearn.mixture import GaussianMixture

from hfncl.equations.division import fit_loss_mixture, gmm_clean_probability, min_max_normalise, threshold_division


def _bimodal(seed=0):
    rng = np.random.default_rng(seed)
    clean = rng.normal(1.0, 0.2, 300)
    noisy = rng.normal(4.0, 0.5, 200)
    return np.concatenate([clean, noisy]), np.r_[np.ones(300, bool), np.zeros(200, bool)]


def test_min_max_normalise():
    np.testing.assert_allclose(min_max_normalise(torch.tensor([2.0, 4.0, 3.0])), [0.0, 1.0, 0.5])
    np.testing.assert_allclose(min_max_normalise(np.ones(3)), np.zeros(3))


def test_quantile_clipped_scaling_maps_the_quantiles_to_0_and_1():
    values = np.arange(101.0)  # numpy's linear quantiles of 0..100: the 10% and 90% quantiles are 10 and 90
    np.testing.assert_allclose(
        min_max_normalise(values, clip_quantile=0.1)[[0, 10, 50, 90, 100]], [0.0, 0.0, 0.5, 1.0, 1.0]
    )
    with pytest.raises(ValueError, match=r"clip_quantile must lie in \[0, 0.5\), got 0.5"):
        min_max_normalise(values, clip_quantile=0.5)


def test_a_few_outlying_losses_break_the_plain_scaling_and_not_the_clipped_one():
    """Five losses 20x beyond the bulk squeeze it into 2% of [0, 1], where reg_covar (SD 0.022) swamps both
    components; clipping at the 1% quantiles restores the two modes (NCR on real text: docs/methods/ncr.md)."""
    rng = np.random.default_rng(0)
    losses = np.concatenate([rng.normal(1.0, 0.1, 500), rng.normal(2.0, 0.1, 500), [40.0, 41.0, 42.0, 43.0, 44.0]])
    truth = np.arange(len(losses)) < 500
    plain = fit_loss_mixture(losses, seed=0)[0].numpy() > 0.5
    clipped, mixture = fit_loss_mixture(losses, seed=0, clip_quantile=0.01)
    assert ((clipped.numpy() > 0.5) == truth).mean() == 1.0 and (plain == truth).mean() < 0.6
    # the mixture is reported on the plain min-max axis: the clean mode's mean near (1 - min) / (max - min)
    low, high = losses.min(), losses.max()
    np.testing.assert_allclose(
        mixture[:, 1].numpy(), [(1.0 - low) / (high - low), (2.0 - low) / (high - low)], atol=2e-3
    )
    np.testing.assert_allclose(mixture[:, 2].numpy(), [0.1 / (high - low)] * 2, rtol=0.15)


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


def test_a_threshold_division_with_a_forced_noisy_share_makes_the_lowest_pairs_noisy_only_when_none_is():
    from hfncl.equations.division import threshold_division

    clean_prob = torch.tensor([0.9, 0.7, 0.8, 0.95, 0.6, 0.85, 0.75, 0.65, 0.99, 0.55])
    assert threshold_division(clean_prob, 0.5).clean.all(), "without the share, every pair is clean"
    forced = threshold_division(clean_prob, 0.5, forced_noisy_share=0.2, statistic=clean_prob)
    # rank 10 * 0.2 = 2 from the lowest is 0.65: it and the two below are noisy
    assert (~forced.clean).nonzero().squeeze(1).tolist() == [4, 7, 9] and "statistic" in forced.extras
    mixed = clean_prob.clone()
    mixed[0] = 0.1
    assert (~threshold_division(mixed, 0.5, forced_noisy_share=0.2).clean).nonzero().squeeze(1).tolist() == [0]
