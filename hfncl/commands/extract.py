"""``hfncl extract``: image features of raw images and captions, written as a precomp directory."""

from __future__ import annotations

import argparse

from hfncl.commands.common import add_device_argument, fail, reports_errors


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``hfncl extract``."""
    help = "Extract image features from raw images and captions into a precomp directory (cached, resumable)."
    parser = subparsers.add_parser("extract", help=help, description=help)
    parser.add_argument(
        "source", help="An imagefolder directory (split folders with metadata.jsonl) or a Hub dataset id."
    )
    parser.add_argument("output_dir", help="Precomp directory to write ({split}_ims.npy, {split}_caps.txt).")
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument(
        "--model", help="Hub id or directory of the image model and its image processor (pooled, patches)."
    )
    model.add_argument(
        "--detector", help="Hub id or directory of a DETR-family object detector and its image processor (regions)."
    )
    parser.add_argument(
        "--feature", choices=("pooled", "patches", "regions"), default="pooled",
        help="pooled: one vector per image (R = 1); patches: the vision encoder's token states; "
        "regions: the detector's top --num-regions boxes, each a pooled backbone feature.",
    )
    parser.add_argument(
        "--num-regions", type=int, default=36, help="Regions per image for --feature regions (default: 36)."
    )
    parser.add_argument(
        "--box-geometry", action="store_true", help="Append each region's normalised x1, y1, x2, y2, area."
    )
    parser.add_argument(
        "--score-threshold", type=float, default=0.0, help="Drop regions scoring at most this (default: 0)."
    )
    parser.add_argument("--image-column", default="image", help="Column holding the images (default: image).")
    parser.add_argument("--caption-column", default="captions", help="Column holding a caption or a list of captions.")
    parser.add_argument("--batch-size", type=int, default=32, help="Images per model call.")
    parser.add_argument("--num-shards", type=int, default=8, help="Cached shards per split (the unit of resumption).")
    add_device_argument(parser, "the model runs")
    parser.add_argument(
        "--cache-dir", help="Cache of the loaded dataset and mapped shards (default: $HFNCL_CACHE/extract)."
    )
    parser.add_argument("--revision", help="Branch, tag or commit of a Hub model (default: its default branch).")
    parser.set_defaults(func=run)


@reports_errors
def run(args: argparse.Namespace) -> int:
    """Run :func:`hfncl.data.extract.extract_features`; print each split's feature shape."""
    from hfncl.data.extract import extract_features

    if (args.feature == "regions") != (args.detector is not None):
        return fail("--feature regions takes --detector; pooled and patches take --model")
    shapes = extract_features(
        args.source,
        args.output_dir,
        args.model or args.detector,
        feature=args.feature,
        image_column=args.image_column,
        caption_column=args.caption_column,
        batch_size=args.batch_size,
        num_shards=args.num_shards,
        device=args.device,
        cache_dir=args.cache_dir,
        revision=args.revision,
        num_regions=args.num_regions,
        box_geometry=args.box_geometry,
        score_threshold=args.score_threshold,
    )
    for split, shape in shapes.items():
        print(f"{split}: {shape[0]} images x {shape[1]} x {shape[2]} features")
    return 0
