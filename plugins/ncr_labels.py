"""NCR's co-rectified labels: Eq. 5's prediction and Eq. 4's labels, as printed and as the authors' code has them.

Not a plugin of its own: ``plugins/ncr.py`` takes the printed readings by default, the authors' code's with
``ncr.prediction = "hinge"`` and ``ncr.label_layout = "broadcast"``. What each changes, and what it measured:
``docs/methods/ncr.md``.
"""

from __future__ import annotations

import torch

from hfncl.losses import triplet_sum_negatives


def adaptive_prediction(similarity: torch.Tensor, alpha: float, top_fraction: float = 0.1) -> torch.Tensor:
    """P(I_i, T_i) of Eq. 5 as printed, for every pair of the batch, in [0, 1].

    s_i = S_ii - (mean_{j!=i} S_ij + mean_{j!=i} S_ji) / 2; P = min(Theta(s) / tau, 1)
    with Theta clamping to [0, alpha] and tau the mean of Theta(s) over the top
    ``top_fraction`` of pairs by s.
    """
    b, positive = similarity.size(0), similarity.diagonal()
    negatives_of_image = (similarity.sum(dim=1) - positive) / (b - 1)
    negatives_of_text = (similarity.sum(dim=0) - positive) / (b - 1)
    margin = positive - (negatives_of_image + negatives_of_text) / 2
    clamped = margin.clamp(min=0.0, max=alpha)
    tau = clamped[margin.topk(max(1, int(round(top_fraction * b)))).indices].mean()
    return (clamped / tau).clamp(max=1.0) if tau > 0 else torch.zeros_like(clamped)


def hinge_prediction(similarity: torch.Tensor, alpha: float) -> torch.Tensor:
    """P of the authors' code (``ContrastiveLoss`` in ``predict`` mode), the other reading of Eq. 5, in [0, 1].

    s_i = alpha - (c_i + c'_i) / 2 with c_i, c'_i the means over the b columns (the zero diagonal included) of
    Eq. 2's clamped hinge terms [alpha + S_ij - S_ii]_+ of image i and [alpha + S_ji - S_ii]_+ of caption i;
    Theta clamps s to [0, alpha], tau is the mean of Theta(s) over the top b // 10 + 1 pairs and P = min(Theta(s) / tau, 1).
    A pair whose negatives all stay alpha below it gets s = alpha, however far below they are.
    """
    b = similarity.size(0)
    clamped = (alpha - triplet_sum_negatives(similarity, alpha) / (2 * b)).clamp(min=0.0, max=alpha)
    tau = clamped.topk(min(b, b // 10 + 1)).values.mean()
    return (clamped / tau).clamp(max=1.0) if tau > 0 else torch.zeros_like(clamped)


def predict(similarity: torch.Tensor, reading: str, alpha: float, top_fraction: float) -> torch.Tensor:
    """Eq. 5's P as ``ncr.prediction`` reads it: ``"paper"`` the printed formula, ``"hinge"`` the authors' code."""
    if reading == "hinge":
        return hinge_prediction(similarity, alpha)
    return adaptive_prediction(similarity, alpha, top_fraction)


def rectified_labels(
    clean_prob: torch.Tensor, clean: torch.Tensor, own_prediction: torch.Tensor, peer_prediction: torch.Tensor
) -> torch.Tensor:
    """Eq. 4 as printed: y^ = w y + (1 - w) P^k on the clean set (y = 1), (P^A + P^B) / 2 on the noisy set."""
    clean_label = clean_prob + (1 - clean_prob) * own_prediction
    noisy_label = (own_prediction + peer_prediction) / 2
    return torch.where(clean, clean_label, noisy_label)


def broadcast_labels(
    clean_prob: torch.Tensor, clean: torch.Tensor, own_prediction: torch.Tensor, peer_prediction: torch.Tensor
) -> torch.Tensor:
    """Eq. 4's labels as the authors' code builds them: a (B, B) matrix, cell (image i, caption j).

    Its clean batch holds w and y as (B, 1) columns and P as a (B,) row, so w * y + (1 - w) * P broadcasts to
    y^_ij = w_i + (1 - w_i) P_j; its noisy batch's label (P^A + P^B) / 2 is a (B, 1) column, y^_ij = y^_i. The
    loss then takes cell (i, j)'s margin for image i against caption j and for caption j against image i
    (:func:`hfncl.losses.triplet_hardest_negative` with a margin matrix), so the margins vary along a pair's
    negatives and choose its hardest one, where Eq. 6's per-pair margin only opens or closes its hinge.
    """
    clean_label = clean_prob[:, None] + (1 - clean_prob[:, None]) * own_prediction[None, :]
    noisy_label = ((own_prediction + peer_prediction) / 2)[:, None].expand_as(clean_label)
    return torch.where(clean[:, None], clean_label, noisy_label)


LABELS = {"pair": rectified_labels, "broadcast": broadcast_labels}
"""Eq. 4 by ``ncr.label_layout``: one label per pair as printed, or the authors' code's (B, B) matrix."""
