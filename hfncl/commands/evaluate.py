"""``hfncl evaluate``: retrieval metrics of a checkpoint, or of the mean similarity of several."""

from __future__ import annotations

import argparse
import json

from hfncl.commands.common import add_device_argument, add_progress_argument, reports_errors


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``hfncl evaluate``."""
    help = "Retrieval metrics of one checkpoint, or of the mean similarity of several (SGRAF: an SGR and a SAF model)."
    parser = subparsers.add_parser("evaluate", help=help, description=help)
    parser.add_argument("checkpoints", nargs="+", help="Checkpoint directories or Hub ids; several are averaged.")
    parser.add_argument("--data-dir", required=True, help="SCAN precomp directory holding the split.")
    parser.add_argument("--split", default="test", help="Split to evaluate (default: test).")
    parser.add_argument("--folds", type=int, default=1, help="Also average over this many folds (MS-COCO: 5 x 1K).")
    parser.add_argument("--batch-size", type=int, default=256, help="Encoding batch size.")
    add_device_argument(parser, "the models run")
    parser.add_argument(
        "--mixed-precision", choices=("no", "bf16", "fp16"), default="no",
        help="Encode and score under autocast in this dtype (scores stay float32; bf16 also on CPUs).",
    )
    parser.add_argument(
        "--network", type=int, default=None,
        help="Score network K (0: A) of each checkpoint alone, by its own similarity (default: the model as its "
        "plugins rank, the mean over its networks).",
    )
    add_progress_argument(parser)
    parser.set_defaults(func=run)


@reports_errors
def run(args: argparse.Namespace) -> int:
    """Print the metrics of ``args.checkpoints`` on ``args.split`` as JSON."""
    from hfncl.tasks.checkpoints import evaluate_checkpoints

    metrics = evaluate_checkpoints(
        args.checkpoints,
        args.data_dir,
        args.split,
        network=args.network,
        batch_size=args.batch_size,
        device=args.device,
        folds=args.folds,
        folds_name="--folds",
        mixed_precision=args.mixed_precision,
        progress=not args.no_progress,
    )
    mode = "mean of the checkpoints" if args.network is None else f"network {args.network} of each checkpoint alone"
    report = {"checkpoints": args.checkpoints, "split": args.split, "mode": mode, "metrics": metrics}
    print(json.dumps(report, indent=1))
    return 0
