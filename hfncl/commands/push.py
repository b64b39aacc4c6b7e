"""``hfncl push``: a checkpoint published to a Hub model repository."""

from __future__ import annotations

import argparse

from hfncl.commands.common import reports_errors


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``hfncl push``."""
    help = "Publish a checkpoint (weights, config, vocabulary, record, card) to a Hub model repository."
    parser = subparsers.add_parser("push", help=help, description=help)
    parser.add_argument("checkpoint", help="A saved checkpoint directory.")
    parser.add_argument("repo_id", help="Hub model repository, user/name or org/name (created if missing).")
    parser.add_argument("--private", action="store_true", help="Create the repository as private.")
    parser.add_argument("--commit-message", help="Message of the upload commit.")
    parser.add_argument("--license", help="Hub license identifier for the card's metadata.")
    parser.add_argument("--keep-card", action="store_true", help="Upload README.md as it is, not regenerated.")
    parser.set_defaults(func=run)


@reports_errors
def run(args: argparse.Namespace) -> int:
    """Check and upload ``args.checkpoint`` to ``args.repo_id``; print the commit URL.

    No token, no network or a refusal of the Hub is one line saying what to do
    (:class:`hfncl.hub.publish.HubUploadError`), and leaves the checkpoint as it was.
    """
    from hfncl.hub import push_checkpoint

    commit = push_checkpoint(
        args.checkpoint,
        args.repo_id,
        private=args.private or None,
        commit_message=args.commit_message,
        keep_card=args.keep_card,
        license=args.license,
    )
    print(commit.commit_url)
    return 0
