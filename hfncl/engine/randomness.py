"""Per-sample random draws that do not depend on how the data are split or ordered.

A draw made from a process's global generator depends on the number of processes, the
order of the batch and where a resumed run restarted. Drawing each sample's numbers
from a generator seeded with the sample's dataset index (and the run's seed, epoch and
purpose) gives every sample the same numbers in a 1-process and a 2-process run, and
after a resume in mid-epoch.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import torch


def purpose_key(purpose: str) -> int:
    """A stable integer for a purpose name (CRC-32: the same in every process and Python run)."""
    return zlib.crc32(purpose.encode("utf-8"))


def derived_seed(*keys: int) -> int:
    """A 32-bit seed of its own for the stream named by ``keys`` (the run's seed, epoch, pass, ...)."""
    return int(np.random.SeedSequence(list(keys)).generate_state(1)[0])


def sample_seed(stream: Sequence[int], index: int) -> int:
    """A 63-bit seed for one sample from the stream (seed, epoch, ...) and its dataset index."""
    words = np.random.SeedSequence([*stream, index]).generate_state(2, dtype=np.uint32)
    return int((int(words[0]) << 31) ^ int(words[1]))


def per_sample_uniform(index: torch.Tensor, shape: Sequence[int], stream: Sequence[int]) -> torch.Tensor:
    """Uniform draws in [0, 1) of shape (len(index), *shape); row b depends only on ``stream`` and ``index[b]``.

    ``stream`` holds non-negative integers (e.g. the run's seed, the epoch, a purpose key).
    The result is on ``index``'s device.
    """
    if any(int(value) < 0 for value in stream):
        raise ValueError(f"stream values must be non-negative integers, got {list(stream)}")
    shape = tuple(int(size) for size in shape)
    rows = [
        torch.rand(shape, generator=torch.Generator().manual_seed(sample_seed(stream, int(i))))
        for i in index.reshape(-1).tolist()
    ]
    draws = torch.stack(rows) if rows else torch.empty((0, *shape))
    return draws.to(index.device)
