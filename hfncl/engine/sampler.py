"""Deterministic global batches, split across processes, resumable at any batch."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from hfncl.engine.randomness import derived_seed


def local_slice(batch: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """The contiguous part of a global batch that process ``rank`` handles."""
    return np.array_split(batch, world_size)[rank]


def shuffled_batches(
    samples: np.ndarray, batch_size: int, seed: int | None, drop_last: bool, min_size: int = 1
) -> list[np.ndarray]:
    """``samples`` in a permutation drawn from ``seed`` (in order when ``None``), cut into global batches; the last
    one is dropped when it is partial and ``drop_last``, or when it has fewer than ``min_size`` samples."""
    order = samples if seed is None else samples[np.random.default_rng(seed).permutation(len(samples))]
    batches = [order[i : i + batch_size] for i in range(0, len(samples), batch_size)]
    if batches and len(batches[-1]) < (batch_size if drop_last else min_size):
        batches.pop()
    return batches


def batch_count(num_samples: int, batch_size: int, drop_last: bool, min_size: int = 1) -> int:
    """How many batches :func:`shuffled_batches` cuts ``num_samples`` samples into."""
    full, rest = divmod(num_samples, batch_size)
    return full + int(0 < rest and rest >= (batch_size if drop_last else min_size))


class GlobalBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Yields this process's slice of each global batch of a seeded permutation.

    The order depends only on (seed, length, batch size), never on the number of
    processes, so one process and several see the same global batches; ``start_batch``
    skips batches already trained before a resume. ``subset`` (dataset positions) draws
    from those samples only (default: all ``num_samples``).
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        seed: int | None,
        drop_last: bool,
        rank: int = 0,
        world_size: int = 1,
        start_batch: int = 0,
        subset: np.ndarray | None = None,
        min_size: int = 1,
    ) -> None:
        if batch_size % world_size and subset is None:
            raise ValueError(f"batch_size {batch_size} must be divisible by the number of processes {world_size}")
        self.samples = np.arange(num_samples) if subset is None else np.asarray(subset)
        self.batch_size, self.seed, self.min_size = batch_size, seed, min_size
        self.drop_last, self.rank, self.world_size, self.start_batch = drop_last, rank, world_size, start_batch

    def global_batches(self) -> list[np.ndarray]:
        return shuffled_batches(self.samples, self.batch_size, self.seed, self.drop_last, self.min_size)

    def __len__(self) -> int:
        total = batch_count(len(self.samples), self.batch_size, self.drop_last, self.min_size)
        return max(total - self.start_batch, 0)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.global_batches()[self.start_batch :]:
            yield local_slice(batch, self.rank, self.world_size).tolist()


class CyclingBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Yields this process's slice of ``num_batches`` global batches of ``subset``, reshuffled each time it runs out.

    Cycle ``c`` is the permutation drawn from ``(seed, c)``, cut into full batches (and, with
    ``keep_last``, its last partial batch of at least ``min_size`` samples); batch ``s`` of the
    sequence is batch ``s mod k`` of cycle ``s div k`` (``k`` batches per cycle), so the sequence
    depends only on the seed and the subset, and ``start_batch`` resumes it anywhere.
    """

    def __init__(
        self,
        subset: np.ndarray,
        batch_size: int,
        *,
        seed: int,
        num_batches: int,
        rank: int = 0,
        world_size: int = 1,
        start_batch: int = 0,
        keep_last: bool = False,
        min_size: int = 1,
    ) -> None:
        if not 0 < batch_size <= len(subset):
            raise ValueError(f"batch_size {batch_size} must be in 1..{len(subset)}, the size of the subset")
        self.samples, self.batch_size, self.seed = np.asarray(subset), batch_size, seed
        self.num_batches, self.rank, self.world_size, self.start_batch = num_batches, rank, world_size, start_batch
        self.drop_last, self.min_size = not keep_last, min_size

    def global_batches(self) -> Iterator[np.ndarray]:
        """The global batches from ``start_batch`` on."""
        per_cycle = batch_count(len(self.samples), self.batch_size, self.drop_last, self.min_size)
        cycle, batches = -1, []
        for step in range(self.start_batch, self.num_batches):
            if step // per_cycle != cycle:
                cycle = step // per_cycle
                seed = derived_seed(self.seed, cycle)
                batches = shuffled_batches(self.samples, self.batch_size, seed, self.drop_last, self.min_size)
            yield batches[step % per_cycle]

    def __len__(self) -> int:
        return max(self.num_batches - self.start_batch, 0)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.global_batches():
            yield local_slice(batch, self.rank, self.world_size).tolist()
