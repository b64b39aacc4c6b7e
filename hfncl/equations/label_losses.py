"""Losses for cross-modal retrieval with noisy category labels (shared/papers' label-noise paper, Sec. 2).

Each modality i maps its samples into a common space, z_j^i = f_i(x_j^i) (Eq. 1), and
K class prototypes c_k, shared by the modalities, turn an embedding into class
probabilities (Eq. 2). The robust clustering loss mixes an "active" and a "passive"
robust loss on these probabilities (NGCE + MAE, Eq. 3; Ma et al., ICML 2020,
"Normalized loss functions for deep learning with noisy labels"); noisy samples are
mixed with clean ones (Eq. 6); a multimodal contrastive loss pulls the embeddings of
one sample's modalities together (Eq. 7).

Per-sample functions take probabilities and targets of one modality, shapes (N, K),
and return (N,) losses, so a method can record them for its division; the loss of
Eq. 3 sums over modalities the mean over samples (:func:`robust_clustering_loss`).
Targets may be one-hot or soft (mixed, Eq. 6) rows.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import torch
import torch.nn.functional as F


def prototype_probabilities(embeddings: torch.Tensor, prototypes: torch.Tensor, tau1: float = 1.0) -> torch.Tensor:
    """p(k | x_j) = softmax_k(c_k^T z_j / tau1) (Eq. 2), shape (N, K).

    ``embeddings`` (N, c), ``prototypes`` (K, c). The dot product is taken as written;
    pass L2-normalised embeddings and prototypes for cosine logits.
    """
    if tau1 <= 0:
        raise ValueError(f"tau1 must be > 0, got {tau1}")
    if embeddings.dim() != 2 or prototypes.dim() != 2 or embeddings.size(1) != prototypes.size(1):
        raise ValueError(
            f"embeddings (N, c) and prototypes (K, c) must share c, got {tuple(embeddings.shape)} "
            f"and {tuple(prototypes.shape)}"
        )
    return torch.softmax(embeddings @ prototypes.t() / tau1, dim=1)


def ngce(probabilities: torch.Tensor, targets: torch.Tensor, rho: float) -> torch.Tensor:
    """Normalized generalized cross entropy per sample (Eq. 3, NGCE term), shape (N,).

    NGCE_j = sum_k y_j(k) (1 - p_jk^rho) / rho  /  sum_c y_j(c) sum_k (1 - p_jk^rho) / rho;
    with a one-hot y this is (1 - p_jy^rho) / (K - sum_k p_jk^rho) (Ma et al., Eq. 8).
    Reading of Eq. 3: its sums over j stand in front of both the numerator and the
    denominator, which together with the 1/N in front would make the loss a ratio of
    batch totals scaled by 1/N; we read it, as in the normalized-loss paper it cites, as
    a per-sample ratio averaged over samples (the averaging is done by the caller). The
    two minus signs cancel. ``rho`` in (0, 1]; the value is in [0, 1] for one-hot targets.
    """
    _check_pair(probabilities, targets)
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"rho must be in (0, 1], got {rho}")
    generalized = (1.0 - probabilities.pow(rho)) / rho
    numerator = (targets * generalized).sum(dim=1)
    denominator = targets.sum(dim=1) * generalized.sum(dim=1)
    return numerator / denominator.clamp_min(torch.finfo(probabilities.dtype).tiny)


def mae(probabilities: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean absolute error per sample, sum_k |p_jk - y_j(k)| (Eq. 3, MAE term), shape (N,).

    For a one-hot y this is 2 (1 - p_jy), in [0, 2].
    """
    _check_pair(probabilities, targets)
    return (probabilities - targets).abs().sum(dim=1)


ROBUST_TERMS = ("ngce+mae", "ngce", "mae")
"""Which robust losses a per-sample loss sums: both (Eq. 3), NGCE alone or MAE alone (ablations)."""


def ngce_mae(probabilities: torch.Tensor, targets: torch.Tensor, rho: float, terms: str = "ngce+mae") -> torch.Tensor:
    """NGCE + MAE per sample (the per-sample loss of Eq. 3 a division is fitted on), shape (N,).

    ``terms`` (one of :data:`ROBUST_TERMS`) keeps only NGCE ("ngce") or only MAE ("mae").
    """
    if terms not in ROBUST_TERMS:
        raise ValueError(f"terms must be one of {ROBUST_TERMS}, got {terms!r}")
    parts = terms.split("+")
    loss = probabilities.new_zeros(len(probabilities))
    if "ngce" in parts:
        loss = loss + ngce(probabilities, targets, rho)
    if "mae" in parts:
        loss = loss + mae(probabilities, targets)
    return loss


def robust_clustering_loss(
    probabilities: Sequence[torch.Tensor], targets: Sequence[torch.Tensor], rho: float, terms: str = "ngce+mae"
) -> torch.Tensor:
    """L_m of Eq. 3: the sum over modalities of the mean over samples of NGCE + MAE (``terms`` as in
    :func:`ngce_mae`).

    ``probabilities[i]`` and ``targets[i]`` are modality i's (N_i, K) tensors.
    """
    if len(probabilities) != len(targets) or not probabilities:
        raise ValueError(
            f"need one target tensor per modality, got {len(probabilities)} probability "
            f"and {len(targets)} target tensors"
        )
    means = (ngce_mae(p, y, rho, terms).mean() for p, y in zip(probabilities, targets, strict=True))
    return functools.reduce(operator.add, means)


def mix_with_clean(
    inputs: torch.Tensor,
    targets: torch.Tensor,
    clean: torch.Tensor,
    lam: float,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mix every noisy sample of a batch with a random clean one of the same batch (Eq. 6).

    x' = lam x_1 + (1 - lam) x_2 and q' = lam q_1 + (1 - lam) q_2, where (x_1, q_1) is a
    noisy sample (``clean`` False) and (x_2, q_2) a clean sample drawn uniformly, with
    replacement, from the batch's clean samples (the mini-batch division, Eq. 4-5).
    Clean samples are returned unchanged. ``lam`` is the fixed trade-off parameter of
    the paper (lam = 1: no mixing; lam = 0: noisy samples are replaced by clean ones).

    Partners are drawn with ``generator`` (torch's global generator if None), so a
    seeded generator gives the same mixing. Returns the mixed inputs, the mixed targets
    and, per sample, the index of its clean partner (-1 for clean samples). A batch without a
    clean sample has nothing to mix with and is returned unchanged (all partners -1).
    """
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    n = inputs.size(0)
    if targets.size(0) != n or clean.shape != (n,):
        raise ValueError(
            f"inputs {tuple(inputs.shape)}, targets {tuple(targets.shape)} and clean {tuple(clean.shape)} "
            "must describe the same batch (clean is a (B,) mask)"
        )
    clean = clean.bool()
    partner = torch.full((n,), -1, dtype=torch.long, device=inputs.device)
    clean_index = torch.nonzero(clean).flatten()
    noisy_index = torch.nonzero(~clean).flatten()
    if clean_index.numel() == 0 or noisy_index.numel() == 0:
        return inputs.clone(), targets.clone(), partner
    draw = torch.randint(clean_index.numel(), (noisy_index.numel(),), generator=generator, device="cpu")
    partner[noisy_index] = clean_index[draw.to(clean_index.device)]
    mixed_inputs, mixed_targets = inputs.clone(), targets.clone()
    mixed_inputs[noisy_index] = lam * inputs[noisy_index] + (1 - lam) * inputs[partner[noisy_index]]
    mixed_targets[noisy_index] = lam * targets[noisy_index] + (1 - lam) * targets[partner[noisy_index]]
    return mixed_inputs, mixed_targets, partner


def one_hot_targets(labels: torch.Tensor, num_classes: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Float one-hot rows q_j of integer labels (Eq. 4-5's "one-hot vectors with floating-point values")."""
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"labels must be in 0..{num_classes - 1}, got values in {int(labels.min())}..{int(labels.max())}"
        )
    return F.one_hot(labels.long(), num_classes).to(dtype)


def multimodal_contrastive_loss(embeddings: Sequence[torch.Tensor], tau2: float = 1.0) -> torch.Tensor:
    """L_c of Eq. 7 for the m modalities' embeddings of the same N samples.

    L_c = -(1/N) sum_i sum_j log( sum_l exp(z_j^l . z_j^i / tau2) / sum_l sum_t exp(z_t^l . z_j^i / tau2) ):
    for each anchor z_j^i the positives are sample j in every modality and the
    candidates every sample in every modality. As written in Eq. 7 both sums include
    the anchor itself (l = i, t = j). ``embeddings[i]`` is modality i's (N, c) tensor;
    the dot product is taken as written (pass L2-normalised embeddings for cosines).
    """
    if tau2 <= 0:
        raise ValueError(f"tau2 must be > 0, got {tau2}")
    if len(embeddings) < 1 or len({tuple(z.shape) for z in embeddings}) != 1 or embeddings[0].dim() != 2:
        raise ValueError(
            f"need m >= 1 embedding tensors of one shape (N, c), got {[tuple(z.shape) for z in embeddings]}"
        )
    m, n = len(embeddings), embeddings[0].size(0)
    stacked = torch.cat(list(embeddings), dim=0)
    logits = stacked @ stacked.t() / tau2
    sample = torch.arange(m * n, device=stacked.device) % n
    positive = sample[:, None] == sample[None, :]
    log_positive = torch.logsumexp(logits.masked_fill(~positive, float("-inf")), dim=1)
    return -(log_positive - torch.logsumexp(logits, dim=1)).sum() / n


def _check_pair(probabilities: torch.Tensor, targets: torch.Tensor) -> None:
    if probabilities.dim() != 2 or probabilities.shape != targets.shape:
        raise ValueError(
            f"probabilities and targets must both be (N, K), got {tuple(probabilities.shape)} "
            f"and {tuple(targets.shape)}"
        )
