"""Global batches under data parallelism.

Every process holds a contiguous slice of each global batch. Embeddings are gathered
(with gradients) so that batch-level losses -- hardest negatives, soft labels from the
batch's similarity margins -- see the same global batch as a single process would.
Each process then computes the same loss; the gather's backward sums the gradient of
every copy (world_size x the single-process gradient of the local slice) and data
parallel averaging divides it back, so one and several processes take the same step.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.state import AcceleratorState


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
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        rank, size = world()
        parts = [torch.empty_like(tensor) for _ in range(size)]
        dist.all_gather(parts, tensor.contiguous())
        ctx.rank, ctx.rows = rank, tensor.shape[0]
        return torch.cat(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows]


def gather(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` from every process along dim 0, in rank order, with autograd.

    Slices may differ in their first dimension (a final partial batch); they are padded
    for the collective and trimmed after. They may also differ in their other dimensions
    (packed local features of captions whose longest caption differs between processes):
    those are zero-padded to the largest size of any process and stay padded, which
    packed local features read as padding positions (:func:`hfncl.models.heads.pack_local`).
    """
    _, size = world()
    if size == 1:
        return tensor
    shape = torch.tensor(tensor.shape, device=tensor.device)
    all_shapes = [torch.zeros_like(shape) for _ in range(size)]
    dist.all_gather(all_shapes, shape)
    counts = [int(s[0].item()) for s in all_shapes]
    largest = torch.stack(all_shapes).amax(dim=0).tolist()
    longest = largest[0]
    if largest != list(tensor.shape):
        padding = [p for d in reversed(range(tensor.dim())) for p in (0, largest[d] - tensor.shape[d])]
        tensor = F.pad(tensor, padding)
    gathered = _AllGather.apply(tensor)
    if all(c == longest for c in counts):
        return gathered
    keep = torch.cat([torch.arange(r * longest, r * longest + c, device=tensor.device) for r, c in enumerate(counts)])
    return gathered.index_select(0, keep)


def fewer_processes_warning(num_processes: int, environ: Mapping[str, str] = os.environ) -> str | None:
    """What to say when Accelerate runs fewer processes than the launch asked for; ``None`` when it does not.

    ``WORLD_SIZE`` (torchrun, ``accelerate launch --multi_gpu``) above ``num_processes`` is one case. The other is
    ``accelerate launch --num_processes N`` without ``--multi_gpu`` (as with ``ACCELERATE_USE_CPU=true``): its simple
    launcher starts one process and sets ``MASTER_ADDR`` / ``MASTER_PORT`` for N, but no ``WORLD_SIZE``.
    """
    size = environ.get("WORLD_SIZE", "")
    if size.isdigit() and int(size) > num_processes:
        return f"WORLD_SIZE is {size} but Accelerate runs {num_processes} process(es): check the launch settings"
    if num_processes == 1 and not size and ("MASTER_ADDR" in environ or "MASTER_PORT" in environ):
        return (
            "the launch set MASTER_ADDR / MASTER_PORT for several processes, but Accelerate runs 1 (accelerate launch "
            "--num_processes N without --multi_gpu starts one; on CPUs too, with ACCELERATE_USE_CPU=true): add "
            "--multi_gpu for N processes, or give --num_processes 1"
        )
    return None


def run_accelerator(mixed_precision: str, log_with: list[str], project_dir: str) -> Accelerator:
    """The run's accelerator, in ``mixed_precision``, logging to the trackers ``log_with`` names (none when empty) with
    ``project_dir`` as its project directory; a warning when it runs fewer processes than the launch asked for
    (:func:`hfncl.engine.distributed.fewer_processes_warning`).

    Accelerate keeps one precision per process; a run after one in another precision in the same
    process (a benchmark comparing them, a test suite) resets that shared state first, as
    transformers' ``TrainingArguments`` does, keeping the process group.
    """
    shared = AcceleratorState._shared_state
    if shared and shared.get("_mixed_precision", mixed_precision) != mixed_precision:
        AcceleratorState._reset_state()
    accelerator = Accelerator(mixed_precision=mixed_precision, log_with=log_with or None, project_dir=project_dir)
    fewer = fewer_processes_warning(accelerator.num_processes)
    if fewer is not None and accelerator.is_main_process:
        warnings.warn(fewer, stacklevel=3)
    return accelerator
