"""The ``hfncl`` command line.

Each subcommand is a module of :mod:`hfncl.commands` (as transformers' ``commands/``): its
``add_parser(subparsers)`` declares the subcommand's arguments and sets the handler that runs it
(``set_defaults(func=...)``, returning the exit status). :data:`COMMANDS` lists them in the
order ``hfncl --help`` shows them; a new subcommand is a new module and a name here.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module
from importlib.metadata import version

from hfncl.commands.common import BothSpellingsParser
from hfncl.registry import PluginError

COMMANDS = ("plugins", "demo", "card", "push", "evaluate", "extract", "train", "audit", "check-plugin", "data")
"""The subcommands, each the module of :mod:`hfncl.commands` of its name (``-`` written ``_``)."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per module of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="hfncl", description="Learning image-text retrieval from noisy pairs, one plugin per method."
    )
    parser.add_argument("--version", action="version", version=f"hfncl {version('hfncl')}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=BothSpellingsParser
    )
    for name in COMMANDS:
        import_module(f"hfncl.commands.{name.replace('-', '_')}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (argparse exits on its own errors).

    A subcommand whose parser sets ``takes_rest`` (``hfncl train``) receives every argument after its name as
    ``args.rest``, to parse them itself."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:
        args, rest = parser.parse_known_args(argv)
        if getattr(args, "takes_rest", False):
            args.rest = rest
        elif rest:
            parser.parse_args(argv)  # argparse's own one-line error for the unrecognised arguments
        return int(args.func(args))
    except PluginError as error:
        print(f"hfncl: error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader stopped early (hfncl plugins | head): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0


if __name__ == "__main__":
    sys.exit(main())
