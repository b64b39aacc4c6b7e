"""Subjective logic on Dirichlet evidence, shared by evidential methods.

A query classified over K candidates with non-negative evidence e has the Dirichlet
alpha = e + 1 of strength S = sum_k alpha_k, beliefs b_k = e_k / S and uncertainty
mass u = K / S, so that sum_k b_k + u = 1 (Sensoy et al. 2018; Josang's subjective logic).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

EVIDENCE_FUNCTIONS = ("exp", "relu")


def opinion(evidence: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Beliefs b = e / S (..., K) and uncertainty u = K / S (...), with S = sum_k (e_k + 1) over the last dim."""
    strength = (evidence + 1).sum(dim=-1, keepdim=True)
    return evidence / strength, evidence.size(-1) / strength.squeeze(-1)


def kl_to_uniform(alpha: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """KL[Dir(alpha~) || Dir(1)] per row, with alpha~ = y + (1 - y) * alpha (the target's evidence removed).

    KL = log Gamma(S~) - log Gamma(K) - sum_k log Gamma(alpha~_k) + sum_k (alpha~_k - 1)(psi(alpha~_k) - psi(S~)).
    """
    adjusted = target + (1 - target) * alpha
    total = adjusted.sum(dim=-1)
    log_norm = torch.lgamma(total) - math.lgamma(alpha.size(-1)) - torch.lgamma(adjusted).sum(dim=-1)
    return log_norm + ((adjusted - 1) * (torch.digamma(adjusted) - torch.digamma(total).unsqueeze(-1))).sum(dim=-1)


SOFTPLUS_EVIDENCE_CAP = 700.0
"""Largest exponent softplus(S) / tau that :func:`softplus_evidence` takes (exp(700) ~ 1e304, finite in float64)."""


def softplus_evidence(score: torch.Tensor, tau: float, excess: bool = False) -> torch.Tensor:
    """e = exp(softplus(S) / tau) (UGNCL Eq. 3), or its excess over the floor, exp(softplus(S) / tau) - 1, elementwise.

    Eq. 3's evidence is at least exp(0) = 1 for any S, so a query over K candidates never has
    u = K / S above 1/2, and with Eq. 4's two directions never above 1/3. The excess is 0 where
    S -> -inf (a candidate with no support, as evidence means in Sensoy et al. 2018), so u spans
    (0, 1) on an unbounded score. The exponent is capped at :data:`SOFTPLUS_EVIDENCE_CAP`.
    """
    exponent = (F.softplus(score) / tau).clamp(max=SOFTPLUS_EVIDENCE_CAP)
    return torch.expm1(exponent) if excess else torch.exp(exponent)


def bidirectional_evidence(evidence: torch.Tensor) -> torch.Tensor:
    """Row i of a square (..., K, K) evidence matrix plus column i: e_i^{i2t} + e_i^{t2i} (UGNCL Eq. 4)."""
    return evidence + evidence.transpose(-1, -2)


def uncertainty_scaled_margin(
    margins: torch.Tensor, uncertainty: torch.Tensor, confident: torch.Tensor, delta: float
) -> torch.Tensor:
    """Margins scaled by 1 / (1 + ((1 - u) / u)^-Delta) where ``confident``, else 1 / (1 + (u / (1 - u))^-Delta).

    UGNCL Eq. 17 with the base of its first line read as 1 / u - 1 (as its authors' code writes
    it): sigmoids of -Delta logit(u) and Delta logit(u), in (0, 1), large for low u where
    ``confident`` (hard-clean pairs) and for high u elsewhere (hard-noisy pairs).
    """
    u = uncertainty.clamp(1e-6, 1 - 1e-6)
    logit = torch.log(u) - torch.log1p(-u)
    return torch.where(confident, torch.sigmoid(-delta * logit), torch.sigmoid(delta * logit)) * margins


def scaled_evidence(similarity: torch.Tensor, tau: float, function: str = "exp") -> torch.Tensor:
    """e = exp(s / tau) or ReLU(s / tau), elementwise, in float64 (TcVSE Eq. 2).

    With cosine s <= 1, float64 keeps exp(s / tau) finite down to tau = 1/709 (float32
    would overflow below tau = 1/88, inside the paper's range 0 < tau < 1).
    """
    if function not in EVIDENCE_FUNCTIONS:
        raise ValueError(f"evidence function must be one of {EVIDENCE_FUNCTIONS}, got {function!r}")
    scaled = similarity.double() / tau
    return scaled.exp() if function == "exp" else scaled.relu()


def combine_opinions(
    belief_a: torch.Tensor, uncertainty_a: torch.Tensor, belief_b: torch.Tensor, uncertainty_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dempster's rule for two subjective opinions (TMC's reduced form).

    With conflict C = sum_{i != j} b^a_i b^b_j: b_k = (b^a_k b^b_k + b^a_k u^b + b^b_k u^a) / (1 - C)
    and u = u^a u^b / (1 - C).
    """
    conflict = belief_a.sum(-1) * belief_b.sum(-1) - (belief_a * belief_b).sum(-1)
    scale = (1 - conflict).unsqueeze(-1)
    belief = (belief_a * belief_b + belief_a * uncertainty_b.unsqueeze(-1) + belief_b * uncertainty_a.unsqueeze(-1))
    return belief / scale, uncertainty_a * uncertainty_b / scale.squeeze(-1)


def fused_opinion(view_evidence: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The joint opinion of W views' evidence (W, ..., K), fused one view after the other.

    Each view's opinion is :func:`opinion` (UGNCL Eq. 5-6), combined by :func:`combine_opinions`.
    """
    belief, uncertainty = opinion(view_evidence[0])
    for view in view_evidence[1:]:
        belief, uncertainty = combine_opinions(belief, uncertainty, *opinion(view))
    return belief, uncertainty


def joint_alpha(belief: torch.Tensor, uncertainty: torch.Tensor) -> torch.Tensor:
    """The Dirichlet of an opinion: L = K / u, e_k = b_k L, alpha_k = e_k + 1 (UGNCL Eq. 7)."""
    return belief * (belief.size(-1) / uncertainty).unsqueeze(-1) + 1


def least_squares_risk(alpha: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The expected squared error of a Dirichlet against a target, per row (Sensoy et al. 2018; UGNCL Eq. 12).

    sum_j (y_j - alpha_j / L)^2 + alpha_j (L - alpha_j) / (L^2 (L + 1)) with L = sum_j alpha_j.
    """
    strength = alpha.sum(dim=-1, keepdim=True)
    mean = alpha / strength
    variance = alpha * (strength - alpha) / (strength**2 * (strength + 1))
    return ((target - mean) ** 2 + variance).sum(dim=-1)
