"""Dividing training pairs into clean and noisy sets from per-sample statistics.

The building blocks methods share; which statistic to divide on, and whose network
computes it, is the method's choice.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.mixture import GaussianMixture

from hfncl.types import Division


def min_max_normalise(values: torch.Tensor | np.ndarray, clip_quantile: float = 0.0) -> np.ndarray:
    """Scale values to [0, 1]; a constant vector maps to zeros.

    With ``clip_quantile`` q > 0 the q- and (1 - q)-quantiles map to 0 and 1 and the values
    beyond them are clipped there, so that a few outlying losses cannot squeeze the bulk of
    them into a sliver of [0, 1] (``docs/methods/ncr.md``, calibration on real text).
    """
    array = np.asarray(torch.as_tensor(values).detach().cpu().double())
    return _scaled(array, *_scale_ends(array, clip_quantile))


def _scaled(array: np.ndarray, low: float, high: float) -> np.ndarray:
    """``array`` with ``low`` and ``high`` mapped to 0 and 1, clipped there (zeros when they coincide)."""
    return np.clip((array - low) / (high - low), 0.0, 1.0) if high > low else np.zeros_like(array)


def _scale_ends(array: np.ndarray, clip_quantile: float) -> tuple[float, float]:
    """The values that :func:`min_max_normalise` maps to 0 and 1."""
    if not 0.0 <= clip_quantile < 0.5:
        raise ValueError(f"clip_quantile must lie in [0, 0.5), got {clip_quantile}")
    if clip_quantile > 0:
        low, high = np.quantile(array, [clip_quantile, 1.0 - clip_quantile])
        return float(low), float(high)
    return float(array.min()), float(array.max())


def gmm_clean_probability(
    losses: torch.Tensor | np.ndarray,
    *,
    max_iter: int = 10,
    tol: float = 1e-2,
    reg_covar: float = 5e-4,
    seed: int = 0,
    clip_quantile: float = 0.0,
) -> torch.Tensor:
    """Posterior of the low-mean component of a two-component 1-D GMM on min-max normalised losses.

    The memorization effect makes clean pairs the low-loss mode (NCR Sec. 3.1, Eq. 3):
    w_i = p(k | l_i) with k the component of smaller mean. Defaults are the reference
    implementation's (max_iter 10, tol 1e-2, reg_covar 5e-4, plain min-max scaling);
    ``clip_quantile`` scales between the losses' quantiles instead (:func:`min_max_normalise`);
    ``seed`` makes the EM initialisation repeatable. Fitted with scikit-learn's GaussianMixture.
    """
    return fit_loss_mixture(
        losses, max_iter=max_iter, tol=tol, reg_covar=reg_covar, seed=seed, clip_quantile=clip_quantile
    )[0]


def fit_loss_mixture(
    losses: torch.Tensor | np.ndarray,
    *,
    max_iter: int = 10,
    tol: float = 1e-2,
    reg_covar: float = 5e-4,
    seed: int = 0,
    clip_quantile: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`gmm_clean_probability` and the mixture it fitted.

    Returns the (N,) clean probabilities and a (2, 3) float tensor with one row per
    component, the low-mean (clean) component first: weight, mean and standard
    deviation, on the plain min-max normalised scale of the losses (``Division.extras["mixture"]``;
    a fit on quantile-clipped losses is mapped back to it, so plots draw it over the same axis).
    """
    array = np.asarray(torch.as_tensor(losses).detach().cpu().double())
    (low, high), (lowest, highest) = _scale_ends(array, clip_quantile), _scale_ends(array, 0.0)
    normalised = _scaled(array, low, high).reshape(-1, 1)
    if normalised.shape[0] < 2:
        raise ValueError(f"A two-component mixture needs at least 2 losses, got {normalised.shape[0]}")
    mixture = GaussianMixture(n_components=2, max_iter=max_iter, tol=tol, reg_covar=reg_covar, random_state=seed)
    mixture.fit(normalised)
    order = np.argsort(mixture.means_.ravel())
    posterior = mixture.predict_proba(normalised)[:, order[0]]
    means, deviations = mixture.means_.ravel()[order], np.sqrt(mixture.covariances_.ravel()[order])
    if highest > lowest:
        stretch = (high - low) / (highest - lowest)
        means, deviations = means * stretch + (low - lowest) / (highest - lowest), deviations * stretch
    parameters = np.stack([mixture.weights_[order], means, deviations], axis=1)
    return torch.as_tensor(posterior, dtype=torch.float32), torch.as_tensor(parameters, dtype=torch.float32)


def threshold_division(
    clean_prob: torch.Tensor, threshold: float = 0.5, forced_noisy_share: float = 0.0, **extras: torch.Tensor
) -> Division:
    """The clean set is every pair whose clean probability reaches ``threshold``.

    When every pair reaches it and ``forced_noisy_share`` is positive, the threshold becomes the
    clean probability of rank ``floor(share * N)`` from the lowest, and the pairs at or below it
    are noisy (``floor(share * N) + 1`` pairs, more on ties), so that a method that trains a noisy
    set beside the clean one always has one.
    """
    clean = clean_prob >= threshold
    if forced_noisy_share > 0 and bool(clean.all()):
        cut = clean_prob.sort().values[min(int(forced_noisy_share * clean_prob.numel() + 1e-9), clean_prob.numel() - 1)]
        clean = clean_prob > cut
    return Division(clean_prob=clean_prob, clean=clean, extras=dict(extras))
