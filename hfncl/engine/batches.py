"""The batches of a training run: one loader per pass, or one per part of a plugin's batch plan, over the global
batches of every process (:mod:`hfncl.engine.sampler`), from any step of a pass on (a resume in mid-pass)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from hfncl.engine.randomness import derived_seed
from hfncl.engine.sampler import CyclingBatchSampler, GlobalBatchSampler, batch_count
from hfncl.registry import PluginError
from hfncl.types import Batch, BatchPlan


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
