"""The batches of a training run: deterministic global batches, split across processes and resumable at any batch
(the samplers), and one loader per pass, or one per part of a plugin's batch plan, over them, from any step of a pass
on (a resume in mid-pass)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from hfncl.engine.randomness import derived_seed
from hfncl.registry import PluginError
from hfncl.types import Batch, BatchPlan


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


class PassSteps:
    """The steps of a pass: per step, ``(part, batch)`` for each part's loader, in order (``None``: no plan).

    The first loader leads; the others yield exactly as many batches (the plan's later parts).
    """

    def __init__(self, loaders: dict[str | None, Any]) -> None:
        self.loaders = loaders
        self.lead = next(iter(loaders))

    def __len__(self) -> int:
        return len(self.loaders[self.lead])

    def __iter__(self) -> Iterator[list[tuple[str | None, Batch]]]:
        for batches in zip(*self.loaders.values(), strict=True):
            yield list(zip(self.loaders, batches, strict=True))


class TrainingBatches:
    """Loaders over ``train_data`` (collated by ``collate``) for this process (``rank`` of ``world_size``), batches
    of ``batch_size`` drawn from ``seed`` and the epoch and pass."""

    def __init__(
        self,
        train_data: Any,
        collate: Callable[[list[Any]], Batch],
        *,
        batch_size: int,
        seed: int,
        num_workers: int,
        rank: int,
        world_size: int,
    ) -> None:
        self.train_data, self.collate = train_data, collate
        self.batch_size, self.seed, self.num_workers = batch_size, seed, num_workers
        self.rank, self.world_size = rank, world_size
        self.num_train = len(train_data)

    def pass_steps(self, plan: BatchPlan | None, epoch: int, pass_index: int, start: int) -> PassSteps:
        """A pass's steps from batch ``start`` on: one shuffle of all (``plan`` None), or the plan's parts, the lead
        part's batches leading.

        Raises:
            PluginError: ``plan`` is no :class:`hfncl.types.BatchPlan`, or a part masks another number of samples.
        """
        seed = derived_seed(self.seed, epoch, pass_index)
        if plan is None:
            everything = self.loader(seed=seed, drop_last=True, batch_size=self.batch_size, start_batch=start)
            return PassSteps({None: everything})
        if not isinstance(plan, BatchPlan):
            raise PluginError(f"batch_plan must return a hfncl.types.BatchPlan or None, got {type(plan).__name__}")
        subsets = {}
        for name, mask in plan.parts.items():
            if mask.numel() != self.num_train:
                raise PluginError(f"batch_plan's part {name!r} masks {mask.numel()} samples for {self.num_train}")
            subsets[name] = mask.cpu().nonzero().squeeze(1).numpy()
        lead = subsets.pop(plan.lead)
        if not len(lead):
            return PassSteps({plan.lead: []})
        size, drop_last, min_size = min(self.batch_size, len(lead)), not plan.keep_last, 2 * self.world_size
        num_batches = batch_count(len(lead), size, drop_last, min_size)
        loaders: dict[str | None, Any] = {
            plan.lead: self.loader(
                seed=seed, drop_last=drop_last, batch_size=size, start_batch=start, subset=lead, min_size=min_size
            )
        }
        for position, (name, subset) in enumerate(subsets.items(), start=1):
            if len(subset):
                sampler = CyclingBatchSampler(
                    subset, min(self.batch_size, len(subset)),
                    seed=derived_seed(self.seed, epoch, pass_index, position),
                    num_batches=num_batches, rank=self.rank, world_size=self.world_size, start_batch=start,
                    keep_last=plan.keep_last, min_size=min_size,
                )
                loaders[name] = self._data_loader(sampler)
        return PassSteps(loaders)

    def loader(
        self,
        *,
        seed: int | None,
        drop_last: bool,
        batch_size: int,
        start_batch: int = 0,
        subset: np.ndarray | None = None,
        min_size: int = 1,
    ) -> torch.utils.data.DataLoader:
        """This process's slices of global batches of ``batch_size`` (all samples, or ``subset``), in an order drawn
        from ``seed`` (``None``: dataset order), from batch ``start_batch`` on."""
        sampler = GlobalBatchSampler(
            self.num_train,
            batch_size,
            seed=seed,
            drop_last=drop_last,
            rank=self.rank,
            world_size=self.world_size,
            start_batch=start_batch,
            subset=subset,
            min_size=min_size,
        )
        return self._data_loader(sampler)

    def _data_loader(self, sampler: torch.utils.data.Sampler) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(
            self.train_data, batch_sampler=sampler, collate_fn=self.collate, num_workers=self.num_workers
        )
