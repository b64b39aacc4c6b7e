"""``hfncl check-plugin NAME``: the plugin contract's checks on an installed plugin."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``hfncl check-plugin``."""
    help = "Run the plugin contract's checks on an installed plugin: hooks, trainer view, options, settings, training."
    parser = subparsers.add_parser("check-plugin", help=help, description=help)
    parser.add_argument("name", help="An installed plugin (an entry point of the hfncl group).")
    parser.add_argument(
        "--train", action="store_true", help="Also train it for two epochs on a generated micro benchmark (seconds)."
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print one line per check of :func:`hfncl.plugin_check.check_plugin`; exit 1 if one fails."""
    from hfncl.plugin_check import check_plugin

    checks = check_plugin(args.name, train=args.train)
    for check in checks:
        print(check.line())
    return 1 if any(check.problem is not None for check in checks) else 0
