"""Dividing training pairs into clean and noisy sets from per-sample statistics.

The building blocks methods share; which statistic to divide on, and whose network
computes it, is the method's choice.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.mixture import GaussianMixture

from hfncl.types import Division


def min_max_normalise(values: torch.Tensor | np.ndarray) -> np.ndarray:
    """Scale values to [0, 1]; a constant vector maps to zeros."""
    array = np.asarray(torch.as_tensor(values).detach().cpu().double())
    span = array.max() - array.min()
    return (array - array.min()) / span if span > 0 else np.zeros_like(array)


def gmm_clean_probability(
    losses: torch.Tensor | np.ndarray,
    *,
    max_iter: int = 10,
    tol: float = 1e-2,
    reg_covar: float = 5e-4,
    seed: int = 0,
) -> torch.Tensor:
    """Posterior of the low-mean component of a two-component 1-D GMM on min-max normalised losses.

    The memorization effect makes clean pairs the low-loss mode (NCR Sec. 3.1, Eq. 3):
    w_i = p(k | l_i) with k the component of smaller mean. Defaults are the reference
    implementation's (max_iter 10, tol 1e-2, reg_covar 5e-4); ``seed`` makes the EM
    initialisation repeatable. Fitted with scikit-learn's GaussianMixture.
    """
    return fit_loss_mixture(losses, max_iter=max_iter, tol=tol, reg_covar=reg_covar, seed=seed)[0]


def fit_loss_mixture(
    losses: torch.Tensor | np.ndarray,
    *,
    max_iter: int = 10,
    tol: float = 1e-2,
    reg_covar: float = 5e-4,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gmm_clean_probability` and the mixture it fitted.

    Returns the (N,) clean probabilities and a (2, 3) float tensor with one row per
    component, the low-mean (clean) component first: weight, mean and standard
    deviation, on the min-max normalised scale of the losses (``Division.extras["mixture"]``).
    """
    normalised = min_max_normalise(losses).reshape(-1, 1)
    if normalised.shape[0] < 2:
        raise ValueError(f"A two-component mixture needs at least 2 losses, got {normalised.shape[0]}")
    mixture = GaussianMixture(n_components=2, max_iter=max_iter, tol=tol, reg_covar=reg_covar, random_state=seed)
    mixture.fit(normalised)
    order = np.argsort(mixture.means_.ravel())
    posterior = mixture.predict_proba(normalised)[:, order[0]]
    parameters = np.stack(
        [mixture.weights_[order], mixture.means_.ravel()[order], np.sqrt(mixture.covariances_.ravel()[order])], axis=1
    )
    return torch.as_tensor(posterior, dtype=torch.float32), torch.as_tensor(parameters, dtype=torch.float32)


def threshold_division(clean_prob: torch.Tensor, threshold: float = 0.5, **extras: torch.Tensor) -> Division:
    """The clean set is every pair whose clean probability reaches ``threshold``."""
    return Division(clean_prob=clean_prob, clean=clean_prob >= threshold, extras=dict(extras))
