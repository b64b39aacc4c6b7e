"""Progress bars: a run's own (tqdm, off where nobody watches) and the libraries' (transformers, datasets), which
a run hides where they would break its lines."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm


def progress_bar(iterable: Iterable, description: str, enabled: bool, **options: Any) -> tqdm:
    """A tqdm bar over ``iterable`` that vanishes when done; a silent pass-through when not ``enabled``, or when its
    stream (stderr) is not a terminal (tqdm's ``disable=None``): a log file gets no bars."""
    disable = None if enabled else True
    return tqdm(iterable, desc=description, disable=disable, leave=False, dynamic_ncols=True, **options)


@contextmanager
def library_progress_bars(enabled: bool) -> Iterator[None]:
    """Inside the block, hide transformers' bars (``Loading weights``, ``Writing model shards``: a checkpoint read or
    written in a second, whose bars would stay between the epoch lines), and unless ``enabled`` also those of
    datasets; their previous setting is restored after it."""
    import datasets
    from transformers.utils import logging as transformers_logging

    before = transformers_logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    if not enabled:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if before[0]:
            transformers_logging.enable_progress_bar()
        if before[1]:
            datasets.enable_progress_bars()
