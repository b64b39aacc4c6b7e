"""The work of SGRAF's similarity heads that is done per image-caption pair, made fast.

Two pieces, both exact rewrites of the formulas in :mod:`hfncl.models.sgraf`:

- :func:`plan_blocks`: the image-caption pairs of a similarity matrix cut into blocks
  whose largest tensor, (rows, captions, L, d), fits a memory budget. Captions are
  grouped by length, so a block holds captions of one length and padding does no work,
  as in SGRAF's per-caption loop.
- :func:`local_similarity`: the local node s(a_j, y_j; W) = W |a_j / ||a_j|| - y_j|^2 + b
  (SGRAF Eq. 4, before its L2 normalisation) as one autograd function that keeps only
  the attended vectors a_j for backward and recomputes the element-wise work there,
  instead of the four (pairs, L, d) tensors autograd would keep.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

DEFAULT_BLOCK_BYTES = 32 * 2**20
"""Memory budget of one pair block's largest tensor (pairs x caption length x d floats).

32 MiB is glibc's largest dynamic mmap threshold: larger tensors are mapped and unmapped
at every allocation, and an SGR 1024/256 step of 128 pairs then spends a fifth of its
time in page faults (5.5 of 26 s with 256 MiB blocks, 0.4 of 23 s with 32 MiB).
"""

CAPTION_GROUP = 16
"""Captions per block at most; a block's captions all have the same length, so no padding is scored."""

_EPS = 1e-8


@dataclass(frozen=True)
class PairBlock:
    """Images ``rows`` against the captions ``captions`` (indices) of caption group ``group``,
    trimmed to ``length`` positions."""

    rows: slice
    captions: torch.Tensor
    length: int
    group: int


def plan_blocks(
    num_images: int, caption_lengths: torch.Tensor, embed_dim: int, itemsize: int, block_bytes: int
) -> tuple[list[PairBlock], torch.Tensor]:
    """Blocks covering every image-caption pair, and the caption order they follow.

    Captions are visited longest first in groups of equal length, at most
    :data:`CAPTION_GROUP` each; each group takes as many image rows at once as keep rows x captions x length x
    ``embed_dim`` x ``itemsize`` within ``block_bytes`` (at least one row). The second
    value is the caption order: block columns concatenated group after group are the
    similarity matrix's columns in that order.
    """
    if isinstance(block_bytes, bool) or not isinstance(block_bytes, int) or block_bytes < 1:
        raise ValueError(f"block_bytes must be a positive integer, got {block_bytes!r}")
    order = torch.argsort(caption_lengths.cpu(), descending=True, stable=True)
    lengths = caption_lengths.cpu()[order].tolist()
    starts = _group_starts(lengths)
    blocks = []
    for index, (start, stop) in enumerate(zip(starts, starts[1:] + [len(lengths)], strict=True)):
        captions, length = order[start:stop], int(lengths[start])
        rows = max(1, block_bytes // (len(captions) * length * embed_dim * itemsize))
        blocks += [
            PairBlock(slice(r, min(r + rows, num_images)), captions, length, index) for r in range(0, num_images, rows)
        ]
    return blocks, order


def _group_starts(lengths: list[int]) -> list[int]:
    """Starts of the caption groups in length-sorted order: runs of equal length, cut every CAPTION_GROUP."""
    starts: list[int] = []
    for position, length in enumerate(lengths):
        if not starts or length != lengths[starts[-1]] or position - starts[-1] == CAPTION_GROUP:
            starts.append(position)
    return starts


class _LocalSimilarity(torch.autograd.Function):
    """h = (a / max(||a||, eps) - y)^2 W^T + b for attended vectors a (n, m, L, d) and words y (m, L, d)."""

    @staticmethod
    def forward(ctx, attended: torch.Tensor, words: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
        norm = attended.norm(dim=-1, keepdim=True).clamp_min(_EPS)
        squared = (attended / norm).sub_(words).square_()
        ctx.save_for_backward(attended, words, weight)
        return F.linear(squared, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        attended, words, weight = ctx.saved_tensors
        raw_norm = attended.norm(dim=-1, keepdim=True)
        norm = raw_norm.clamp_min(_EPS)
        unit = attended / norm
        diff = unit - words
        grad_weight = grad.flatten(0, -2).t() @ diff.square().flatten(0, -2)
        grad_bias = grad.flatten(0, -2).sum(dim=0)
        grad_unit = (grad @ weight).mul_(diff).mul_(2.0)
        del diff
        grad_words = -grad_unit.sum(dim=0)
        radial = (grad_unit * unit).sum(dim=-1, keepdim=True) * (raw_norm > _EPS).to(unit.dtype)
        grad_attended = grad_unit.sub_(unit.mul_(radial)).div_(norm)
        return grad_attended, grad_words, grad_weight, grad_bias


def local_similarity(
    attended: torch.Tensor, words: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """W |l2norm(a) - y|^2 + b for (n, m, L, d) attended vectors and (m, L, d) unit words -> (n, m, L, s).

    The un-normalised node of SGRAF Eq. 4 with a_j normalised first; same values and
    gradients as the plain expression, a quarter of its saved memory.
    """
    return _LocalSimilarity.apply(attended, words, weight, bias)
