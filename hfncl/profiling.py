"""Timing a training run stage by stage through its hook calls.

The trainer calls every stage of a method through its hook relay (``trainer.hook``):
``epoch_start`` opens an epoch, ``divide`` makes the division, ``train_step`` is asked
once per optimiser step, ``epoch_end`` closes the epoch. :class:`HookTimer` stands in
for that relay, forwards every call and records when the named hooks started and
ended, so a benchmark can read the time of an epoch, of its division stage and of its
steps without touching the trainer::

    trainer.hook = HookTimer(trainer.hook, ["epoch_start", "divide", "epoch_end"])
    trainer.train()
    trainer.hook.seconds("divide")

``limits`` stops a run after a number of calls of a hook (``{"train_step": 50}``: train
50 steps, then raise :class:`HookLimitReached` from the 51st).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any


class HookLimitReached(RuntimeError):
    """A hook was called more often than its limit allows."""


class _TimedCaller:
    """One hook caller whose calls are timed (other attributes, e.g. ``get_hookimpls``, are the caller's)."""

    def __init__(self, caller: Any, name: str, timer: "HookTimer") -> None:
        self._caller, self._name, self._timer = caller, name, timer

    def __call__(self, **kwargs: Any) -> Any:
        calls = self._timer.calls[self._name]
        limit = self._timer.limits.get(self._name)
        if limit is not None and len(calls) >= limit:
            raise HookLimitReached(f"hook {self._name!r} called more than its limit of {limit} times")
        start = time.perf_counter()
        try:
            return self._caller(**kwargs)
        finally:
            calls.append((start, time.perf_counter()))

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._caller, attribute)


class HookTimer:
    """A hook relay that records the (start, end) ``time.perf_counter()`` of each call of the hooks ``names``.

    Hooks not named are the wrapped relay's own callers. ``calls[name]`` lists the
    intervals in call order; ``limits[name]`` (optional) is the number of calls allowed.
    """

    def __init__(self, relay: Any, names: Iterable[str], limits: Mapping[str, int] | None = None) -> None:
        self._relay = relay
        self.calls: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        self.limits = dict(limits or {})
        unknown = sorted(set(self.limits) - set(self.calls))
        if unknown:
            raise ValueError(f"HookTimer: limits name hooks that are not timed: {unknown}")
        for name in self.calls:
            getattr(relay, name)  # an unknown hook name fails here, not in the middle of a run

    def __getattr__(self, name: str) -> Any:
        caller = getattr(self._relay, name)
        if name in self.calls:
            return _TimedCaller(caller, name, self)
        return caller

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
