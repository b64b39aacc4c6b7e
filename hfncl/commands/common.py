"""What every subcommand shares: one line for a user's error, and the arguments several take."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from hfncl.config import one_line

Handler = Callable[[argparse.Namespace], int]


def reports_errors(handler: Handler) -> Handler:
    """``handler`` with bad input (an ``OSError`` or ``ValueError``: a missing file, damaged data, a refused
    checkpoint, a wrong setting) printed as one line, ``hfncl: error: ...``, and exit status 1."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (OSError, ValueError) as error:
            return fail(one_line(error))

    return run


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
