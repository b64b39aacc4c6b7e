"""Ranking losses shared by many methods, written once for the similarity matrix of a batch.

``similarity[i, j]`` = S(I_i, T_j); pair ``i`` is the diagonal. All functions return
per-sample losses (one value per pair) so that methods can weight, record or divide on
them; sum them for the batch loss, as the reference implementations do.
"""

from __future__ import annotations

import torch


def _margin_matrices(similarity: torch.Tensor, margin: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hinge costs of every negative, for image queries and for text queries.

    ``to_text[i, j]`` = [m_i - S(I_i, T_i) + S(I_i, T_j)]_+ (image i ranks caption j above its own),
    ``to_image[j, i]`` = [m_i - S(I_i, T_i) + S(I_j, T_i)]_+ (caption i ranks image j above its own);
    the diagonal (the positive itself) is zeroed. ``margin`` is one value, one per pair (m_i) or a (B, B)
    matrix: then cell (i, j) takes m_ij in both directions, ``to_text[i, j]`` = [m_ij - S_ii + S_ij]_+ and
    ``to_image[i, j]`` = [m_ij - S_jj + S_ij]_+ (how the authors' NCR code applies its broadcast labels).
    """
    n = similarity.size(0)
    if similarity.dim() != 2 or similarity.size(1) != n:
        raise ValueError(f"similarity must be a square (B, B) matrix, got {tuple(similarity.shape)}")
    positive = similarity.diagonal()
    margin = torch.as_tensor(margin, dtype=similarity.dtype, device=similarity.device)
    if margin.dim() == 0:
        margin = margin.expand(n)
    if margin.dim() == 2 and margin.shape != similarity.shape:
        raise ValueError(f"a margin matrix must be ({n}, {n}) as the similarity, got {tuple(margin.shape)}")
    of_image, of_text = (margin, margin) if margin.dim() == 2 else (margin[:, None], margin[None, :])
    to_text = (of_image - positive[:, None] + similarity).clamp(min=0)
    to_image = (of_text - positive[None, :] + similarity).clamp(min=0)
    off_diagonal = ~torch.eye(n, dtype=torch.bool, device=similarity.device)
    return to_text * off_diagonal, to_image * off_diagonal


def triplet_sum_negatives(similarity: torch.Tensor, margin: float | torch.Tensor = 0.2) -> torch.Tensor:
    """Bidirectional hinge triplet loss summed over all negatives of the batch, per pair.

    L(I_i, T_i) = sum_j [m - S_ii + S_ij]_+ + sum_j [m - S_ii + S_ji]_+ (VSE0; NCR Eq. 2, L_w).
    """
    to_text, to_image = _margin_matrices(similarity, margin)
    return to_text.sum(dim=1) + to_image.sum(dim=0)


def triplet_hardest_negative(similarity: torch.Tensor, margin: float | torch.Tensor = 0.2) -> torch.Tensor:
    """Bidirectional hinge triplet loss on the hardest negative of the batch, per pair.

    L(I_i, T_i) = [m - S_ii + max_{j!=i} S_ij]_+ + [m - S_ii + max_{j!=i} S_ji]_+
    (VSE++ max violation; with a per-pair margin it is NCR Eq. 6). Because the hinge is
    monotone, the max of the hinged costs equals the hinge of the hardest negative; with a (B, B) margin
    matrix (see :func:`_margin_matrices`) the hardest negative is the one of the largest hinged cost.
    """
    to_text, to_image = _margin_matrices(similarity, margin)
    return to_text.max(dim=1).values + to_image.max(dim=0).values


def triplet_hardest_negative_in_parts(
    similarity: torch.Tensor, parts: list[torch.Tensor], margins: torch.Tensor
) -> torch.Tensor:
    """:func:`triplet_hardest_negative` within each part of a batch, summed over parts and pairs.

    ``parts`` are position tensors (a part's hardest negatives come from the part alone, as when each part is a
    batch of its own); ``margins`` are per pair (B,) or per cell (B, B). Zero, in the graph, without parts.
    """
    of_part = (lambda p: margins[p][:, p]) if margins.dim() == 2 else (lambda p: margins[p])
    return sum((triplet_hardest_negative(similarity[p][:, p], of_part(p)).sum() for p in parts), similarity.sum() * 0)


def soft_margin(labels: torch.Tensor, margin: float, curve: float) -> torch.Tensor:
    """A triplet margin that grows with a soft correspondence label y in [0, 1]: (m^y - 1) / (m - 1) * margin.

    NCR Eq. 7 (alpha^ from the rectified label) and UGNCL Sec. 3.1 (gamma^ from y~); ``curve`` is m > 1.
    """
    return (curve**labels - 1) / (curve - 1) * margin


def triplet_top_k_negatives(similarity: torch.Tensor, margins: torch.Tensor, hardest: int) -> torch.Tensor:
    """Per pair: hinge losses with margin m_i averaged over the ``hardest`` largest negatives, both directions.

    UGNCL Eq. 16 with lambda = ``hardest``; with ``hardest = 1`` it is :func:`triplet_hardest_negative` / 2.
    """
    positive = similarity.diagonal()
    own = torch.eye(similarity.size(0), dtype=torch.bool, device=similarity.device)
    negatives = similarity.masked_fill(own, float("-inf"))
    image_side = negatives.topk(hardest, dim=1).values
    text_side = negatives.t().topk(hardest, dim=1).values
    hinge = (margins - positive).unsqueeze(1)
    return ((hinge + image_side).clamp(min=0) + (hinge + text_side).clamp(min=0)).mean(dim=1)
