"""Global batches under data parallelism.

Every process holds a contiguous slice of each global batch. Embeddings are gathered
(with gradients) so that batch-level losses -- hardest negatives, soft labels from the
batch's similarity margins -- see the same global batch as a single process would.
Each process then computes the same loss; the gather's backward sums the gradient of
every copy (world_size x the single-process gradient of the local slice) and data
parallel averaging divides it back, so one and several processes take the same step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) without torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _AllGather(torch.autograd.Function):
    """all_gather of equal-sized tensors whose backward all-reduces and keeps the local slice.

    Written on all_reduce because gloo (CPU) has no reduce_scatter.
    """

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        rank, size = world()
        parts = [torch.empty_like(tensor) for _ in range(size)]
        dist.all_gather(parts, tensor.contiguous())
        ctx.rank, ctx.rows = rank, tensor.shape[0]
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows]


def gather(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` from every process along dim 0, in rank order, with autograd.

    Slices may differ in their first dimension (a final partial batch); they are padded
    for the collective and trimmed after.
    """
    _, size = world()
    if size == 1:
        return tensor
    rows = torch.tensor([tensor.shape[0]], device=tensor.device)
    all_rows = [torch.zeros_like(rows) for _ in range(size)]
    dist.all_gather(all_rows, rows)
    counts = [int(r.item()) for r in all_rows]
    longest = max(counts)
    if longest != tensor.shape[0]:
        pad = tensor.new_zeros((longest - tensor.shape[0], *tensor.shape[1:]))
        tensor = torch.cat([tensor, pad])
    gathered = _AllGather.apply(tensor)
    if all(c == longest for c in counts):
        return gathered
    keep = torch.cat([torch.arange(r * longest, r * longest + c, device=tensor.device) for r, c in enumerate(counts)])
    return gathered.index_select(0, keep)
