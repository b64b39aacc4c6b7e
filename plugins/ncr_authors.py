"""NCR's Eq. 4 and Eq. 5 as the authors' code computes them, where it departs from the printed equations.

Not a plugin of its own: ``plugins/ncr.py`` takes these readings with ``ncr.prediction = "hinge"`` and
``ncr.label_layout = "broadcast"``. What each changes, and what it measured: ``docs/methods/ncr.md``.
"""

from __future__ import annotations

import torch

from hfncl.losses import triplet_sum_negatives


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
