"""``hfncl card``: a checkpoint's model card, regenerated from the results its run recorded."""

from __future__ import annotations

import argparse

from hfncl.commands.common import reports_errors


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``hfncl card``."""
    help = "Regenerate a checkpoint's model card (README.md) from the results its run recorded."
    parser = subparsers.add_parser("card", help=help, description=help)
    parser.add_argument("checkpoint", help="A saved checkpoint directory (config.json, weights, hfncl_run.json).")
    parser.add_argument("--repo-id", help="Hub id the card's usage example and metadata name (default: the path).")
    parser.add_argument("--license", help="Hub license identifier for the card's metadata (e.g. apache-2.0).")
    parser.add_argument("--model-cards-dir", help="Also write the card to DIR/NAME.md (e.g. model_cards).")
    parser.set_defaults(func=run)


@reports_errors
def run(args: argparse.Namespace) -> int:
    """Write the card of ``args.checkpoint``; print the files written."""
    from hfncl.hub import write_model_card

    written = write_model_card(
        args.checkpoint, repo_id=args.repo_id, license=args.license, model_cards_dir=args.model_cards_dir
    )
    for path in written:
        print(path)
    return 0
