"""A two-component Beta Mixture Model for dividing samples by their loss.

The small-loss criterion says clean samples are the low-loss mode of the per-sample
loss distribution. Losses are bounded (after scaling into (0, 1)) and skewed, so a
mixture of two Beta distributions fits them better than a Gaussian mixture (Arazo et
al., ICML 2019, "Unsupervised label noise modeling and loss correction", Sec. 3).
Used for noisy category labels (the label-noise paper in ``shared/papers``: Sec. 2.3,
Eq. 4-5; Sec. 3.2 for the "(1 - r) most likely clean" rule). No maintained library
fits a Beta mixture, so the EM is written here:

* E-step: responsibilities gamma_nk = pi_k Beta(x_n; a_k, b_k) / sum_j pi_j Beta(x_n; a_j, b_j),
  computed in log space (``scipy.special.betaln``).
* M-step: pi_k = mean_n gamma_nk, and a weighted method of moments instead of the
  (closed-form-less) maximum likelihood: with the responsibility-weighted mean m_k and
  variance v_k, a_k = m_k (m_k (1 - m_k) / v_k - 1) and b_k = a_k (1 - m_k) / m_k,
  as in Arazo et al.

The initialisation is fixed (Beta(1, 2) and Beta(2, 1) with equal weights, one
component leaning low and one high), so a fit is deterministic without a seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.special import betaln, logsumexp

DEFAULT_EPS = 1e-4


def scale_to_unit_interval(values: torch.Tensor | np.ndarray, eps: float = DEFAULT_EPS) -> np.ndarray:
    """Min-max scale ``values`` into [0, 1], then clamp into [eps, 1 - eps] (float64).

    A Beta density is zero or infinite at 0 and 1, so the extremes are pulled inside
    the open interval. A constant vector maps to 0.5 everywhere.
    """
    if not 0.0 < eps < 0.5:
        raise ValueError(f"eps must be in (0, 0.5), got {eps}")
    array = np.asarray(torch.as_tensor(values).detach().cpu().double()).reshape(-1)
    if array.size == 0:
        raise ValueError("cannot scale an empty vector of values")
    if not np.isfinite(array).all():
        raise ValueError("values contain NaN or infinite entries")
    span = array.max() - array.min()
    scaled = (array - array.min()) / span if span > 0 else np.full_like(array, 0.5)
    return np.clip(scaled, eps, 1.0 - eps)


@dataclass(frozen=True)
class BetaMixture:
    """Two Beta components: ``weights[k] * Beta(alphas[k], betas[k])``, fitted by :meth:`fit`.

    ``iterations`` is the number of EM steps run and ``converged`` whether the largest
    parameter change of the last step fell below the tolerance.
    """

    alphas: np.ndarray
    betas: np.ndarray
    weights: np.ndarray
    iterations: int = 0
    converged: bool = False

    @property
    def means(self) -> np.ndarray:
        """Component means a / (a + b)."""
        return self.alphas / (self.alphas + self.betas)

    @property
    def low_component(self) -> int:
        """Index of the component with the smaller mean (the clean, small-loss one)."""
        return int(np.argmin(self.means))

    def log_likelihoods(self, x: np.ndarray) -> np.ndarray:
        """(N, 2): log(pi_k) + log Beta(x_n; a_k, b_k) for ``x`` strictly inside (0, 1)."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, 1)
        log_pdf = (self.alphas - 1) * np.log(x) + (self.betas - 1) * np.log1p(-x) - betaln(self.alphas, self.betas)
        return np.log(self.weights) + log_pdf

    def posterior(self, x: np.ndarray) -> np.ndarray:
        """(N, 2): responsibilities p(k | x_n) of both components."""
        joint = self.log_likelihoods(x)
        return np.exp(joint - logsumexp(joint, axis=1, keepdims=True))

    def turning_point(self) -> float | None:
        """Where the low component's posterior turns back, or None if it is monotone in x.

        The log posterior odds of the low against the high component are
        r(x) = const + A log x + B log(1 - x) with A = a_low - a_high, B = b_low - b_high, so
        r'(x) = (A - (A + B) x) / (x (1 - x)) changes sign at most once, at x* = A / (A + B).
        With A < 0 and B < 0 the posterior falls to a minimum at x* and rises again in the
        right tail (the low component has the heavier right tail); with A > 0 and B > 0 it
        rises to a maximum at x* (the heavier left tail belongs to the high component).
        """
        low, high = self.low_component, 1 - self.low_component
        a = self.alphas[low] - self.alphas[high]
        b = self.betas[low] - self.betas[high]
        return float(a / (a + b)) if (a < 0 and b < 0) or (a > 0 and b > 0) else None

    def clean_probability(self, x: np.ndarray, *, monotone: bool = True) -> np.ndarray:
        """(N,): posterior of the low-mean component, p(g | l_n) (Eq. 4-5's w).

        With ``monotone`` (the default) the posterior is held constant beyond its
        :meth:`turning_point`, so the clean probability never increases with the loss, as
        the small-loss criterion of Sec. 2.3 assumes. Without it, a low component with a
        heavy right tail (e.g. Beta(0.14, 1.2) against Beta(22, 13)) calls the very largest
        losses clean, and the "(1 - r) most likely clean" rule would keep them first.
        Below the turning point (or everywhere, if there is none) it is the plain posterior.
        """
        values = np.asarray(x, dtype=np.float64).reshape(-1)
        turn = self.turning_point() if monotone else None
        if turn is not None:
            a = self.alphas[self.low_component] - self.alphas[1 - self.low_component]
            values = np.minimum(values, turn) if a < 0 else np.maximum(values, turn)
        return self.posterior(values)[:, self.low_component]

    @classmethod
    def fit(
        cls,
        x: np.ndarray,
        *,
        max_iter: int = 100,
        tol: float = 1e-6,
        eps: float = DEFAULT_EPS,
    ) -> BetaMixture:
        """Fit both components to ``x`` (values already in (0, 1); see :func:`scale_to_unit_interval`).

        Values are clamped into [eps, 1 - eps]. EM stops after ``max_iter`` steps or when no
        parameter (a, b or pi of either component) changed by more than ``tol``. A
        component's responsibilities are floored at ``eps`` in the M-step so that neither
        component can collapse to zero mass (Arazo et al. floor them the same way).
        """
        if max_iter < 1:
            raise ValueError(f"max_iter must be >= 1, got {max_iter}")
        values = np.clip(np.asarray(x, dtype=np.float64).reshape(-1), eps, 1.0 - eps)
        if values.size < 2:
            raise ValueError(f"a two-component mixture needs at least 2 values, got {values.size}")
        if not np.isfinite(values).all():
            raise ValueError("values contain NaN entries")
        mixture = cls(np.array([1.0, 2.0]), np.array([2.0, 1.0]), np.array([0.5, 0.5]))
        for step in range(1, max_iter + 1):
            responsibilities = np.maximum(mixture.posterior(values), eps)
            updated = _moment_step(values, responsibilities, step)
            change = max(
                np.abs(updated.alphas - mixture.alphas).max(),
                np.abs(updated.betas - mixture.betas).max(),
                np.abs(updated.weights - mixture.weights).max(),
            )
            mixture = updated
            if change <= tol:
                return cls(mixture.alphas, mixture.betas, mixture.weights, step, True)
        return mixture


def _moment_step(values: np.ndarray, responsibilities: np.ndarray, step: int) -> BetaMixture:
    """M-step: mixture weights and the weighted method-of-moments Beta parameters."""
    totals = responsibilities.sum(axis=0)
    means = (responsibilities * values[:, None]).sum(axis=0) / totals
    variances = (responsibilities * (values[:, None] - means) ** 2).sum(axis=0) / totals
    # A Beta variance is below m (1 - m); the floor keeps a_k, b_k positive on degenerate data.
    variances = np.clip(variances, 1e-12, means * (1 - means) * (1 - 1e-6))
    common = means * (1 - means) / variances - 1
    alphas = means * common
    betas = (1 - means) * common
    return BetaMixture(alphas, betas, totals / totals.sum(), step, False)


def bmm_clean_probability(
    losses: torch.Tensor | np.ndarray, *, max_iter: int = 100, tol: float = 1e-6, eps: float = DEFAULT_EPS
) -> tuple[torch.Tensor, BetaMixture]:
    """Clean probability of every sample from its loss, and the fitted mixture.

    The losses are min-max scaled into (0, 1) (:func:`scale_to_unit_interval`), a
    two-component :class:`BetaMixture` is fitted to them, and each sample's clean
    probability is the posterior of the low-mean component (Sec. 2.3), made
    non-increasing in the loss (:meth:`BetaMixture.clean_probability`).
    """
    scaled = scale_to_unit_interval(losses, eps)
    mixture = BetaMixture.fit(scaled, max_iter=max_iter, tol=tol, eps=eps)
    return torch.as_tensor(mixture.clean_probability(scaled), dtype=torch.float32), mixture


def most_likely_clean(clean_prob: torch.Tensor | np.ndarray, noise_rate: float) -> torch.Tensor:
    """Bool mask of the ``round((1 - noise_rate) * N)`` samples with the highest clean probability.

    The rule for a known noise rate r (Sec. 3.2: "we select the ratio of (1 - r) samples
    with a higher probability of being clean ... as clean samples"). Ties are broken by
    sample index (the earlier sample is taken first), so the result is deterministic.
    """
    if not 0.0 <= noise_rate <= 1.0:
        raise ValueError(f"noise_rate must be in [0, 1], got {noise_rate}")
    prob = torch.as_tensor(clean_prob).detach().cpu().double().reshape(-1)
    keep = round((1.0 - noise_rate) * prob.numel())
    order = torch.sort(-prob, stable=True).indices
    mask = torch.zeros(prob.numel(), dtype=torch.bool)
    mask[order[:keep]] = True
    return mask
