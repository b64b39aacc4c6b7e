"""What every subcommand shares: one line for a user's error, and the arguments several take."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

from hfncl.config import one_line

Handler = Callable[[argparse.Namespace], int]


LOADING_FAILURES = ("allocate", "out of memory", "Error(s) in loading state_dict", "ignore_mismatched_sizes")
"""What the runtime errors of a model too large to allocate, or of transformers refusing a checkpoint's tensors, say."""


def loading_failure(error: BaseException) -> bool:
    """Whether ``error`` is a failure to allocate a model (``MemoryError``, torch's out of memory) or transformers'
    refusal of a checkpoint's tensors: reported in one line, where any other runtime error stays a traceback."""
    return isinstance(error, MemoryError) or any(said in str(error) for said in LOADING_FAILURES)


def reports_errors(handler: Handler) -> Handler:
    """``handler`` with bad input (an ``OSError`` or ``ValueError``: a missing file, damaged data, a refused
    checkpoint, a wrong setting) and a model that cannot be loaded (:func:`loading_failure`) printed as one line,
    ``hfncl: error: ...``, and exit status 1."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (OSError, ValueError) as error:
            return fail(one_line(error))
        except (MemoryError, RuntimeError) as error:
            if not loading_failure(error):
                raise
            return fail(one_line(error))

    return run


class BothSpellingsParser(argparse.ArgumentParser):
    """A subcommand's parser that takes every ``--multi-word`` flag also as ``--multi_word``, as ``hfncl train``
    does (its dataclass fields take both)."""

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        underscored = ["--" + name[2:].replace("-", "_") for name in names if name.startswith("--") and "-" in name[2:]]
        return super().add_argument(*names, *[name for name in underscored if name not in names], **kwargs)


def fail(message: str) -> int:
    """Print ``hfncl: error: MESSAGE`` on standard error; the exit status 1."""
    print(f"hfncl: error: {message}", file=sys.stderr)
    return 1


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``: hide the progress bars."""
    parser.add_argument("--no-progress", action="store_true", help="Hide the progress bars.")


def add_device_argument(parser: argparse.ArgumentParser, where: str) -> None:
    """``--device`` (default cpu): where ``where`` run."""
    parser.add_argument("--device", default="cpu", help=f"Where {where} (default: cpu).")
