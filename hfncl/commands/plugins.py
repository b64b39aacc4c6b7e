"""``hfncl plugins``: the installed method plugins, each with its hooks and options (``--heads``: the installed
similarity heads, each with its options)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``hfncl plugins``."""
    help = "List the installed method plugins, the hooks each implements and its options with their defaults."
    parser = subparsers.add_parser("plugins", help=help, description=help)
    parser.add_argument("--json", action="store_true", help="Print a JSON list instead of text.")
    parser.add_argument(
        "--refresh", action="store_true", help="Import every plugin again instead of reading the cached listing."
    )
    parser.add_argument(
        "--heads", action="store_true", help="List the installed similarity heads and their options instead."
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print every plugin of the ``hfncl`` entry-point group (its summary, data kind, hooks and options, each with
    its default and what it takes); a broken one shows its error."""
    import textwrap

    from hfncl.plugin_listing import listed_plugins, plugin_record

    if args.heads:
        return list_heads(args.json)
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


def list_heads(as_json: bool) -> int:
    """Print every head of the ``hfncl.similarity_heads`` entry-point group with its options (default, what it
    takes), which ``--head_options`` sets; imports the heads (and torch)."""
    from hfncl.models.heads import head_plugin, installed_heads
    from hfncl.options import option_help

    heads: dict[str, dict[str, dict[str, Any]]] = {}
    for name in sorted(installed_heads()):
        declaration = head_plugin(name).options
        takes = {} if declaration is None else option_help(declaration)
        defaults = {} if declaration is None else declaration.defaults()
        heads[name] = {option: {"default": value, "takes": takes[option]} for option, value in defaults.items()}
    if as_json:
        print(json.dumps(heads, indent=2, default=str))
        return 0
    for name, listed in heads.items():
        print(f"{name}" + ("  options, set with --head_options '{\"NAME\": VALUE}':" if listed else "  (no options)"))
        for option, declared in listed.items():
            print(f"        {option} = {json.dumps(declared['default'])}  ({declared['takes']})")
    return 0
