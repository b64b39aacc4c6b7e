"""``hfncl plugins``: the installed method plugins, each with its hooks and options."""

from __future__ import annotations

import argparse
import json


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``hfncl plugins``."""
    help = "List the installed method plugins, the hooks each implements and its options with their defaults."
    parser = subparsers.add_parser("plugins", help=help, description=help)
    parser.add_argument("--json", action="store_true", help="Print a JSON list instead of text.")
    parser.add_argument(
        "--refresh", action="store_true", help="Import every plugin again instead of reading the cached listing."
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print every plugin of the ``hfncl`` entry-point group (its summary, data kind, hooks and options, each with
    its default and what it takes); a broken one shows its error."""
    import textwrap

    from hfncl.plugin_listing import listed_plugins, plugin_record

    plugins = listed_plugins(refresh=args.refresh)
    if args.json:
        print(json.dumps([plugin_record(info) for info in plugins], indent=2, default=str))
        return 0
    if not plugins:
        print("No hfncl plugins installed.")
        return 0
    for info in plugins:
        print(f"{info.name}  {info.distribution}=={info.version}  ({info.value})")
        if info.error is not None:
            print(f"    error: {info.error}")
            continue
        if info.summary:
            print(f"    {info.summary}")
        print(f"    data: {info.data_kind}    hooks: {', '.join(info.hooks) or '(none)'}")
        if info.options:
            print("    options, set with --options '{\"NAME\": VALUE}' (default, what it takes):")
        if info.options and info.options_doc:
            print(textwrap.fill(info.options_doc, 110, initial_indent=" " * 6, subsequent_indent=" " * 6))
        for option, default in info.options.items():
            described = info.option_help.get(option)
            print(f"        {option} = {json.dumps(default, default=str)}" + (f"  ({described})" if described else ""))
    return 0
