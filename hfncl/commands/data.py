"""``hfncl data``: get, check and generate data.

``prepare``    a paper dataset from the Hub (or a local copy) as an imagefolder, optionally its features as precomp
               (:mod:`hfncl.data.hub_datasets`);
``check``      a precomp directory's sizes, shapes and dtypes, against a paper dataset's (:mod:`hfncl.data.check`);
``synthetic``  the generated benchmark of the demo and the tests (:mod:`hfncl.data.synthetic`), with a noise index.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

DATASETS = ("flickr30k", "coco", "cc")
EXPECT = ("f30k", "coco", "cc152k")
FEATURES = ("regions", "clip", "clip-pooled")
SIZES = ("tiny", "quick", "small", "full")


def add_parser(subparsers: Any) -> None:
    """Add ``hfncl data`` and its three commands to ``subparsers``."""
    description = "Get, check and generate data: prepare (from the Hub), check (a precomp directory), synthetic."
    parser = subparsers.add_parser("data", help=description, description=description)
    commands = parser.add_subparsers(dest="data_command", metavar="DATA_COMMAND", required=True)
    _prepare_parser(commands)
    _check_parser(commands)
    _synthetic_parser(commands)


def _prepare_parser(commands: Any) -> None:
    text = (
        "Write Flickr30K, MS-COCO or Conceptual Captions from a Hub dataset (or a local copy of one) as an "
        "imagefolder in its Karpathy split; with --features also its image features as a precomp directory. "
        "Resumable; several GPUs with `accelerate launch -m hfncl.cli data prepare ...`."
    )
    parser = commands.add_parser("prepare", help=text, description=text)
    parser.add_argument("dataset", choices=DATASETS, help="Which dataset: its captions per image and split names.")
    parser.add_argument(
        "--from", dest="source", required=True,
        help="A Hub dataset id (e.g. AnyModal/flickr30k) or a directory holding a copy in the Hub layout (parquet).",
    )
    parser.add_argument("--to", dest="output_dir", required=True, help="The imagefolder to write (a folder per split).")
    parser.add_argument(
        "--features", choices=FEATURES,
        help="Also extract features into a precomp directory: regions (a DETR-family detector's), clip (CLIP's "
        "patch tokens) or clip-pooled (CLIP's image embedding, one per image).",
    )
    parser.add_argument(
        "--model", help="Hub id or directory of the detector or CLIP model (default: PekingU/rtdetr_r50vd for "
        "regions, openai/clip-vit-base-patch32 for clip).",
    )
    parser.add_argument("--precomp-dir", help="Where the features go (default: the --to directory's name + _precomp).")
    parser.add_argument("--batch-size", type=int, default=32, help="Images per model call.")
    parser.add_argument("--num-shards", type=int, default=8, help="Cached shards per split (the unit of resumption).")
    parser.add_argument("--device", help="Where the model runs (default: this process's accelerate device, or cpu).")
    parser.add_argument("--cache-dir", help="Cache of the loaded dataset and features (default: $HFNCL_CACHE/extract).")
    parser.add_argument("--no-progress", action="store_true", help="Hide the progress bars.")
    parser.set_defaults(func=prepare)


def _check_parser(commands: Any) -> None:
    text = "Check a precomp directory: every split's features and captions, and with --expect a paper's sizes."
    parser = commands.add_parser("check", help=text, description=text)
    parser.add_argument("data_dir", help="The precomp directory ({split}_ims.npy, {split}_caps.txt).")
    parser.add_argument(
        "--expect", choices=EXPECT,
        help="The papers' dataset it should be: Flickr30K 29000/1014/1000 images x 5 captions, MS-COCO "
        "113287/5000/5000 (testall) x 5, CC152K 150000/1000/1000 x 1.",
    )
    parser.set_defaults(func=check)


GENERATOR_FLAGS = {
    "num_train": (int, "Training images."),
    "num_dev": (int, "Validation images."),
    "num_test": (int, "Test images."),
    "captions_per_image": (int, "Captions per image (k)."),
    "num_concepts": (int, "Latent concepts that images and captions share."),
    "num_regions": (int, "Region features per image (R)."),
    "feature_dim": (int, "Size of a region feature (D)."),
    "region_noise": (float, "Standard deviation of each region's Gaussian noise."),
    "appearance_shift": (float, "Standard deviation of each image's shift of all its regions."),
    "seed": (int, "Seed of the generator."),
}
"""The fields of :class:`hfncl.data.synthetic.SyntheticConfig` that ``hfncl data synthetic`` sets (declared here:
``--help`` imports no library)."""


def _synthetic_parser(commands: Any) -> None:
    text = (
        "Write the generated benchmark of the demo and the tests as a precomp directory, and with --noise-ratio "
        "the noise index a run reads with --noise-file."
    )
    parser = commands.add_parser("synthetic", help=text, description=text)
    parser.add_argument("output_dir", help="The precomp directory to write.")
    parser.add_argument(
        "--size", choices=SIZES, default="quick",
        help="Sizes of hfncl demo --size (default quick, the demo's: 600/100/200 images); the flags below override.",
    )
    for name, (kind, what) in GENERATOR_FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=kind, help=what)
    parser.add_argument("--noise-ratio", type=float, help="Also write the noise index of this share of the pairs.")
    parser.add_argument("--noise-kind", choices=("caption", "image"), default="caption",
                        help="caption: NCR's protocol (re-paired captions); image: DECL/RCL's (permuted images).")
    parser.add_argument("--noise-seed", type=int, default=0, help="Seed of the noise index.")
    parser.set_defaults(func=synthetic)


def _error(error: BaseException) -> int:
    from hfncl.config import one_line

    print(f"hfncl: error: {one_line(error)}", file=sys.stderr)
    return 1


def prepare(args: argparse.Namespace) -> int:
    """``hfncl data prepare``: print each split's image count, and the features' shapes."""
    from hfncl.data.hub_datasets import prepare_dataset

    try:
        result = prepare_dataset(
            args.dataset, args.source, args.output_dir, features=args.features, model=args.model,
            precomp_dir=args.precomp_dir, batch_size=args.batch_size, num_shards=args.num_shards,
            device=args.device, cache_dir=args.cache_dir, progress=not args.no_progress,
        )
    except (OSError, ValueError) as error:  # DataFormatError is a ValueError
        return _error(error)
    if not result["main"]:  # another process of accelerate launch: the main one reports
        return 0
    if "shapes" in result:
        for split, shape in result["shapes"].items():
            print(f"{split}: {shape[0]} images x {shape[1]} x {shape[2]} features")
        print(f"imagefolder {result['imagefolder']}, precomp {result['precomp']} "
              f"(hfncl data check {result['precomp']} checks it)")
    else:
        print(", ".join(f"{split} {count}" for split, count in result["images"].items()) + " images in "
              f"{result['imagefolder']}")
    return 0


def check(args: argparse.Namespace) -> int:
    """``hfncl data check``: one line per split and the verdict; a problem is one line naming the file."""
    from hfncl.data.check import check_precomp

    try:
        report = check_precomp(args.data_dir, args.expect)
    except (OSError, ValueError) as error:
        return _error(error)
    print("\n".join(report.lines()))
    return 0


def synthetic(args: argparse.Namespace) -> int:
    """``hfncl data synthetic``: write the benchmark (and a noise index); print what a run reads."""
    from pathlib import Path

    from hfncl.data.noise import make_noise, save_noise_index
    from hfncl.data.synthetic import SIZES as PRESETS
    from hfncl.data.synthetic import generate_precomp

    given = {name: getattr(args, name) for name in GENERATOR_FLAGS}
    try:
        small = [name for name, value in given.items() if value is not None and value < (name != "seed")]
        if small:
            flag = small[0].replace("_", "-")
            raise ValueError(f"--{flag} must be >= {int(small[0] != 'seed')}, got {given[small[0]]}")
        config = replace(PRESETS[args.size], **{name: value for name, value in given.items() if value is not None})
        if args.noise_ratio is not None and not 0 <= args.noise_ratio < 1:
            raise ValueError(f"--noise-ratio must be in [0, 1), got {args.noise_ratio}")
        directory = generate_precomp(args.output_dir, config)
        line = (f"{directory}: train {config.num_train}, dev {config.num_dev}, test {config.num_test} images x "
                f"{config.captions_per_image} captions, features {config.num_regions} x {config.feature_dim}")
        if args.noise_ratio is not None:
            index = make_noise(
                args.noise_kind, config.num_train, config.captions_per_image, args.noise_ratio, args.noise_seed
            )
            path = save_noise_index(Path(directory) / f"train_noise_{args.noise_kind}_{args.noise_ratio:g}.npy", index)
            line += f"; noise index {path} (--noise-file {path})"
    except (OSError, ValueError) as error:
        return _error(error)
    print(line)
    return 0
