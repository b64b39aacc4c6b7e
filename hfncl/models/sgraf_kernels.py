"""The work of SGRAF's similarity heads that is done per image-caption pair, made fast.

Two pieces, both exact rewrites of the formulas in :mod:`hfncl.models.sgraf`:

- :func:`plan_blocks`: the image-caption pairs of a similarity matrix cut into blocks
  whose largest tensor, (rows, captions, L, d), fits a memory budget. Captions are
  grouped by length, so a block holds captions of one length and padding does no work,
  as in SGRAF's per-caption loop.
- :func:`local_nodes`: the local node s(a_j, y_j; W) = l2norm(W |a_j / ||a_j|| - y_j|^2 + b)
  (SGRAF Eq. 4) from the attention weights, as one autograd function: the attended
  vectors a_j = sum_i alpha_ij x_i are never kept, their norms come from each image's
  Gram matrix (:func:`region_gram`, formed once per image, not once per block), and
  backward recomputes a_j - y_j once and projects the gradients onto the regions,
  instead of the (pairs, L, d) tensors autograd would keep and traverse.
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

CUDA_BLOCK_BYTES = 2**30
"""Memory budget of one pair block on a CUDA device, where no mmap threshold applies and every block
costs kernel launches: with 1 GiB an SGR 1024/256 training step of 128 pairs holds each caption group
in one block (benchmarks/README.md, "Speed and memory": its CUDA columns ran with it)."""

CAPTION_GROUP = 16
"""Captions per block at most; a block's captions all have the same length, so no padding is scored."""

_EPS = 1e-8


def block_budget(block_bytes: int | None, device: torch.device) -> int:
    """``block_bytes`` when it is set, else the default of ``device``'s kind: :data:`CUDA_BLOCK_BYTES`
    on CUDA, :data:`DEFAULT_BLOCK_BYTES` elsewhere."""
    if block_bytes is not None:
        return block_bytes
    return CUDA_BLOCK_BYTES if device.type == "cuda" else DEFAULT_BLOCK_BYTES


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


def region_gram(regions: torch.Tensor) -> torch.Tensor:
    """The (n, R, R) Gram matrices x_i^T x_k of n images' regions (n, R, d): :func:`local_nodes` normalises the
    attended vectors through them, ||sum_i alpha_ij x_i||^2 = alpha_j^T (X X^T) alpha_j."""
    return regions @ regions.transpose(1, 2)


class _LocalNodes(torch.autograd.Function):
    """l2norm(W (a / max(||a||, eps) - y)^2 + b) with a = alpha x for attention weights alpha (n, m, L, R),
    regions x (n, R, d) with their Gram matrices G = x x^T (n, R, R) and words y (m, L, d).

    ||a||^2 = alpha^T G alpha, so the attended vectors are normalised through the weights before one
    batched product, and backward projects every gradient onto the R regions there as well: it saves
    the weights and the (n, m, L, s) output, not a (n, m, L, d) tensor, and recomputes a - y once. The
    norms' gradient goes to G, which autograd carries to the regions once per image.
    """

    @staticmethod
    def forward(ctx, alpha, regions, gram, words, weight, bias):
        n, m, length, count = alpha.shape
        weights = alpha.reshape(n, m * length, count)
        projected = weights @ gram
        norm = (projected * weights).sum(dim=-1, keepdim=True).clamp_min(0.0).sqrt()
        diff = torch.bmm(weights / norm.clamp_min(_EPS), regions).sub_(words.reshape(1, m * length, -1))
        hidden = F.linear(diff.square_(), weight, bias)
        del diff
        hidden_norm = hidden.norm(dim=-1, keepdim=True)
        nodes = hidden.div_(hidden_norm.clamp_min(_EPS))
        ctx.save_for_backward(weights, regions, words, weight, norm, projected, nodes, hidden_norm)
        return nodes.view(n, m, length, -1)

    @staticmethod
    def backward(ctx, grad):
        weights, regions, words, weight, norm, projected, nodes, hidden_norm = ctx.saved_tensors
        n, pairs_words, count = weights.shape
        grad = grad.reshape(n, pairs_words, -1)
        radial = (grad * nodes).sum(dim=-1, keepdim=True) * (hidden_norm > _EPS).to(grad.dtype)
        grad_hidden = (grad - nodes * radial) / hidden_norm.clamp_min(_EPS)
        clamped = norm.clamp_min(_EPS)
        scaled = weights / clamped
        diff = torch.bmm(scaled, regions).sub_(words.reshape(1, pairs_words, -1))
        grad_unit = (grad_hidden * 2.0) @ weight
        grad_unit.mul_(diff)
        grad_weight = grad_hidden.flatten(0, 1).t() @ diff.square_().flatten(0, 1)
        del diff
        grad_bias = grad_hidden.sum(dim=(0, 1))
        grad_words = -grad_unit.sum(dim=0).view_as(words)
        on_regions = torch.bmm(grad_unit, regions.transpose(1, 2))
        along = (weights * on_regions).sum(dim=-1, keepdim=True) / clamped * (norm > _EPS).to(grad.dtype)
        grad_alpha = (on_regions - along * projected / clamped) / clamped
        grad_gram = torch.bmm((scaled * along / clamped).transpose(1, 2), weights).mul_(-0.5)
        grad_regions = torch.bmm(scaled.transpose(1, 2), grad_unit)
        return grad_alpha.view(n, *words.shape[:2], count), grad_regions, grad_gram, grad_words, grad_weight, grad_bias


def local_nodes(
    alpha: torch.Tensor,
    regions: torch.Tensor,
    gram: torch.Tensor,
    words: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
) -> torch.Tensor:
    """SGRAF's local similarity nodes s_j^l = s(a_j, y_j; W) (Eq. 4) of every pair and word, (n, m, L, s).

    Args:
        alpha: (n, m, L, R) text-to-region attention weights of n images and m captions (Eq. 3).
        regions: (n, R, d) unit-norm region features x_i.
        gram: (n, R, R) their Gram matrices, :func:`region_gram` (formed once per image by the caller,
            whose blocks then share it).
        words: (m, L, d) unit-norm word features y_j.
        weight, bias: the affine map W of Eq. 4, (s, d) and (s,).

    Returns:
        l2norm(W (l2norm(sum_i alpha_ij x_i) - y_j)^2 + b), the square element-wise; same values
        and gradients as the plain expression, with a fraction of its memory and passes.
        Under autocast (``mixed_precision`` bf16 / fp16) the whole function runs in the autocast
        dtype, its products and the element-wise work between them alike; the gradients reach
        the float32 inputs through the casts.
    """
    inputs = (alpha, regions, gram, words, weight, bias)
    device = alpha.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            return _LocalNodes.apply(*(tensor.to(dtype) for tensor in inputs))
    return _LocalNodes.apply(*inputs)
