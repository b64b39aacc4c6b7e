"""``hfncl audit``: the wrong pairs of a user's own image-text data, found by a method that divides them."""

from __future__ import annotations

import argparse
from typing import Any

from hfncl.commands.common import reports_errors


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``hfncl audit``."""
    help = "Find the wrong pairs in your own image-text data: train a dividing method, list the suspicious pairs."
    parser = subparsers.add_parser("audit", help=help, description=help)
    parser.add_argument(
        "--data-dir", required=True,
        help="The data: a precomp directory ({split}_ims.npy, {split}_caps.txt|tsv), an imagefolder of raw images "
        "({split}/ with metadata.jsonl; give --image-tower), or a format an installed package registers.",
    )
    parser.add_argument(
        "--data-format", default="auto",
        help="precomp, imagefolder, an installed format, or auto (the format that recognises the data).",
    )
    parser.add_argument(
        "--image-tower",
        help="A Hub id or directory of a CLIP vision encoder and its image processor: train on the raw images of an "
        "imagefolder (default: precomputed region features).",
    )
    parser.add_argument("--output-dir", required=True, help="Where audit.parquet, audit.csv and audit.html go.")
    parser.add_argument(
        "--plugins", nargs="+",
        help="A method that divides the pairs (default: the one installed plugin that declares audit_settings).",
    )
    parser.add_argument("--epochs", type=int, help="Epochs (default: the method's demo settings).")
    parser.add_argument(
        "--model", help="Score with this trained model (a run's best/, an audit's model/) instead of training one."
    )
    parser.add_argument("--split", default="train", help="The split to audit (default train).")
    parser.add_argument(
        "--write-clean", metavar="NAME",
        help="Also write the unflagged pairs as split NAME, in the format of the data (an imagefolder: folder NAME).",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seeds training.")
    parser.add_argument(
        "--folds", type=int, default=1,
        help="Cross-fit with K folds of the images: each pair scored by the method trained without its fold, K more "
        "trainings; the noise estimate then holds for wrong pairs the model would memorise (default 1: in-sample).",
    )
    parser.add_argument(
        "--refit", nargs="*", metavar="PLUGIN",
        help="Score every pair with a second model trained on the pairs the audit keeps (no names: the audited "
        "method; or the plugins named, e.g. a plain triplet model's); the pairs it flagged are then held out.",
    )
    parser.add_argument("--refit-epochs", type=int, help="Epochs of the refit (default: its method's demo settings).")
    parser.add_argument(
        "--resume", action="store_true",
        help="Continue a killed audit of the same data and settings from its last checkpoint (OUTPUT_DIR/training).",
    )
    parser.add_argument(
        "--resume-ignore-mismatch", action="store_true",
        help="With --resume, continue across a change of settings or data on purpose (the fields are listed).",
    )
    parser.add_argument(
        "--overwrite-output-dir", action="store_true",
        help="Replace an earlier audit in OUTPUT_DIR: everything it wrote (table, model, cleaned split) goes first.",
    )
    parser.add_argument(
        "--allow-output-in-data-dir", action="store_true",
        help="Let OUTPUT_DIR be the data directory or lie inside it (refused by default: the audit never writes "
        "into the data it audits unless told to).",
    )
    parser.add_argument("--batch-size", type=int, help="Training batch size (default: the method's settings).")
    parser.add_argument("--embed-dim", type=int, help="Joint embedding dimension (default 1024).")
    parser.add_argument("--word-dim", type=int, help="Word embedding dimension (default 300).")
    parser.set_defaults(func=run)


@reports_errors
def run(args: argparse.Namespace) -> int:
    """Run :func:`hfncl.audit.run_audit` and print its summary; bad input is one line."""
    from hfncl.audit import audit_summary, run_audit
    from hfncl.tasks.pairs import ModelArguments

    training: dict[str, Any] = {"resume_ignore_mismatch": True} if args.resume_ignore_mismatch else {}
    if args.batch_size is not None:
        training["batch_size"] = args.batch_size
    model_args = ModelArguments(image_tower=args.image_tower, embed_dim=args.embed_dim, word_dim=args.word_dim)
    result = run_audit(
        args.data_dir, args.plugins, args.output_dir, args.epochs, split=args.split, data_format=args.data_format,
        write_clean=args.write_clean, model=args.model, model_args=model_args, training=training or None,
        seed=args.seed, folds=args.folds, resume=args.resume, overwrite=args.overwrite_output_dir,
        allow_output_in_data_dir=args.allow_output_in_data_dir,
        refit=False if args.refit is None else (args.refit or True), refit_epochs=args.refit_epochs,
    )
    print("\n".join(audit_summary(result.table, args.output_dir, result.clean_files)))
    return 0
