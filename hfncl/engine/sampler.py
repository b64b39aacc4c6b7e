"""Deterministic global batches, split across processes, resumable at any batch."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch


def local_slice(batch: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """The contiguous part of a global batch that process ``rank`` handles."""
    return np.array_split(batch, world_size)[rank]


class GlobalBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Yields this process's slice of each global batch of a seeded permutation.

    The order depends only on (seed, length, batch size), never on the number of
    processes, so one process and several see the same global batches; ``start_batch``
    skips batches already trained before a resume.
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
    ) -> None:
        if batch_size % world_size:
            raise ValueError(f"batch_size {batch_size} must be divisible by the number of processes {world_size}")
        self.num_samples, self.batch_size, self.seed = num_samples, batch_size, seed
        self.drop_last, self.rank, self.world_size, self.start_batch = drop_last, rank, world_size, start_batch

    def global_batches(self) -> list[np.ndarray]:
        if self.seed is None:
            order = np.arange(self.num_samples)
        else:
            order = np.random.default_rng(self.seed).permutation(self.num_samples)
        batches = [order[i : i + self.batch_size] for i in range(0, self.num_samples, self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def __len__(self) -> int:
        full, rest = divmod(self.num_samples, self.batch_size)
        total = full if self.drop_last or not rest else full + 1
        return max(total - self.start_batch, 0)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.global_batches()[self.start_batch :]:
            yield local_slice(batch, self.rank, self.world_size).tolist()
