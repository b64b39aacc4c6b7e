"""Subjective logic on Dirichlet evidence, shared by evidential methods.

A query classified over K candidates with non-negative evidence e has the Dirichlet
alpha = e + 1 of strength S = sum_k alpha_k, beliefs b_k = e_k / S and uncertainty
mass u = K / S, so that sum_k b_k + u = 1 (Sensoy et al. 2018; Josang's subjective logic).
"""

from __future__ import annotations

import math

import torch


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
