"""Timing a training run stage by stage through its hook calls.

The trainer calls every stage of a method through a plugin hook: ``epoch_start`` opens an
epoch, ``divide`` makes the division, ``train_step`` is asked once per optimiser step,
``epoch_end`` closes the epoch. It reports each such call to its callbacks
(``on_hook_begin`` / ``on_hook_end``, :mod:`hfncl.engine.callbacks`), and :class:`HookTimer`
is a callback that records when the named hooks started and ended, so a benchmark can read
the time of an epoch, of its division stage and of its steps::

    timer = HookTimer(["epoch_start", "divide", "epoch_end"])
    Trainer(..., callbacks=[timer]).train()
    timer.seconds("divide")

``limits`` stops a run after a number of calls of a hook (``{"train_step": 50}``: train
50 steps, then raise :class:`HookLimitReached` before the 51st).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from hfncl.engine.callbacks import TRAINING_HOOKS, CallbackTrainer, TrainerCallback


class HookLimitReached(RuntimeError):
    """A hook was called more often than its limit allows."""


class HookTimer(TrainerCallback):
    """Records the (start, end) ``time.perf_counter()`` of each call of the hooks ``names`` (of ``TRAINING_HOOKS``).

    ``calls[name]`` lists the intervals in call order; ``limits[name]`` (optional) is the
    number of calls allowed.
    """

    def __init__(self, names: Iterable[str], limits: Mapping[str, int] | None = None) -> None:
        self.calls: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        self.limits = dict(limits or {})
        self._open: dict[str, list[float]] = {name: [] for name in self.calls}
        unknown = sorted(set(self.calls) - set(TRAINING_HOOKS))
        if unknown:
            raise ValueError(f"HookTimer: {unknown} are not hooks the trainer reports; choose from {TRAINING_HOOKS}")
        unknown = sorted(set(self.limits) - set(self.calls))
        if unknown:
            raise ValueError(f"HookTimer: limits name hooks that are not timed: {unknown}")

    def on_hook_begin(self, trainer: CallbackTrainer, name: str) -> None:
        if name not in self.calls:
            return
        limit = self.limits.get(name)
        if limit is not None and len(self.calls[name]) + len(self._open[name]) >= limit:
            raise HookLimitReached(f"hook {name!r} called more than its limit of {limit} times")
        self._open[name].append(time.perf_counter())

    def on_hook_end(self, trainer: CallbackTrainer, name: str) -> None:
        if name in self.calls:
            self.calls[name].append((self._open[name].pop(), time.perf_counter()))

    def seconds(self, name: str) -> list[float]:
        """The duration of each call of hook ``name``."""
        return [end - start for start, end in self.calls[name]]

    def between(self, first: str, last: str) -> list[float]:
        """Seconds from the start of each call of ``first`` to the end of the matching call of ``last``.

        ``between("epoch_start", "epoch_end")`` is the time of each completed epoch.
        """
        starts, ends = self.calls[first], self.calls[last]
        # an unfinished call has no end
        return [end - start for (start, _), (_, end) in zip(starts, ends, strict=False)]
