"""``hfncl evaluate``: retrieval metrics of a checkpoint, or of the mean similarity of several."""

from __future__ import annotations

import argparse
import json
from typing import Any

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
    add_progress_argument(parser)
    parser.set_defaults(func=run)


@reports_errors
def run(args: argparse.Namespace) -> int:
    """Print the metrics of ``args.checkpoints`` on ``args.split`` as JSON."""
    import torch

    from hfncl.engine.encoding import RetrievalSplit, evaluate_ensemble
    from hfncl.evaluation import check_split_size
    from hfncl.hub import load_text_vocabulary
    from hfncl.models import NCLModel
    from hfncl.plugins import build_plugin_manager

    models = [NCLModel.from_pretrained(name).to(args.device) for name in args.checkpoints]
    splits = [
        RetrievalSplit.from_precomp(
            _evaluation_split(args.data_dir, args.split, name, model.config),
            load_text_vocabulary(name, model.config),
        )
        for name, model in zip(args.checkpoints, models, strict=True)
    ]
    check_split_size(splits[0].num_images, f"split {args.split!r} of {args.data_dir}", args.folds, "--folds")
    hooks = [build_plugin_manager(m.config.plugins).hook if m.config.plugins else None for m in models]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.mixed_precision)
    with torch.autocast(torch.device(args.device).type, dtype=dtype, enabled=dtype is not None):
        metrics = evaluate_ensemble(
            models,
            splits,
            batch_size=args.batch_size,
            device=args.device,
            folds=args.folds,
            hooks=hooks,
            progress=not args.no_progress,
        )
    print(json.dumps({"checkpoints": args.checkpoints, "split": args.split, "metrics": metrics}, indent=1))
    return 0


def _evaluation_split(data_dir: str, split: str, checkpoint: str, config: Any) -> Any:
    """The split a checkpoint reads: raw images of an imagefolder through the checkpoint's own
    image processor for a pixel image tower, precomputed regions of its feature size otherwise
    (:func:`hfncl.tasks.pairs.data_format` checks that the data fit the tower)."""
    from pathlib import Path

    from hfncl.data import load_precomp_split
    from hfncl.data.pixels import load_pixel_splits
    from hfncl.hub.checkpoint import load_image_processor
    from hfncl.tasks.pairs import data_format

    processor = load_image_processor(checkpoint, config)
    tower_name = None if processor is None else config.image_tower_name or checkpoint
    if data_format("auto", Path(data_dir), split, tower_name) == "precomp":
        return load_precomp_split(data_dir, split, expected_feature_dim=config.image_dim)
    return load_pixel_splits(data_dir, [split], processor)[split]
