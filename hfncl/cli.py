"""The ``hfncl`` command line.

Every subcommand is a :class:`Command` in :data:`COMMANDS`, added with the
:func:`command` decorator: a function that declares the subcommand's arguments and
the function that runs it. :func:`main` builds the parser from that registry, so a
new subcommand needs no change here beyond its own definition.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any

from hfncl.commands import data
from hfncl.plugins import PluginError

COMMAND_MODULES = (data,)
"""The subcommands of :mod:`hfncl.commands`: each module's ``add_parser`` adds its parser and sets ``func``."""


@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, its arguments and what it runs."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    passthrough: Callable[[list[str]], int] | None = None


COMMANDS: dict[str, Command] = {}


def command(
    name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register the decorated function as subcommand ``name``; it returns the exit status."""

    def register(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = Command(help=help, add_arguments=add_arguments, run=run)
        return run

    return register


class BothSpellingsParser(argparse.ArgumentParser):
    """A subcommand's parser that takes every ``--multi-word`` flag also as ``--multi_word``, as ``hfncl train``
    does (its dataclass fields take both)."""

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        underscored = ["--" + name[2:].replace("-", "_") for name in names if name.startswith("--") and "-" in name[2:]]
        return super().add_argument(*names, *[name for name in underscored if name not in names], **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per registered command."""
    parser = argparse.ArgumentParser(
        prog="hfncl", description="Learning image-text retrieval from noisy pairs, one plugin per method."
    )
    parser.add_argument("--version", action="version", version=f"hfncl {version('hfncl')}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=BothSpellingsParser
    )
    for name, cmd in COMMANDS.items():
        sub = subparsers.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(sub)
    for module in COMMAND_MODULES:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (argparse exits on its own errors)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        handler = COMMANDS[argv[0]].passthrough if argv and argv[0] in COMMANDS else None
        if handler is not None:
            return handler(argv[1:])
        args = build_parser().parse_args(argv)
        return args.func(args) if "func" in args else COMMANDS[args.command].run(args)
    except PluginError as error:
        print(f"hfncl: error: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader stopped early (hfncl plugins | head): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0


LOADING_FAILURES = ("allocate", "out of memory", "Error(s) in loading state_dict", "ignore_mismatched_sizes")
"""What the runtime errors of a model too large to allocate, or of transformers refusing a checkpoint's tensors, say."""


def loading_failure(error: BaseException) -> bool:
    """Whether ``error`` is a failure to allocate a model (``MemoryError``, torch's out of memory) or transformers'
    refusal of a checkpoint's tensors: reported in one line, where any other runtime error stays a traceback."""
    return isinstance(error, MemoryError) or any(said in str(error) for said in LOADING_FAILURES)


def _plugins_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``hfncl plugins``."""
    parser.add_argument("--json", action="store_true", help="Print a JSON list instead of text.")
    parser.add_argument(
        "--refresh", action="store_true", help="Import every plugin again instead of reading the cached listing."
    )


@command(
    "plugins",
    help="List the installed method plugins, the hooks each implements and its options with their defaults.",
    add_arguments=_plugins_arguments,
)
def plugins_command(args: argparse.Namespace) -> int:
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


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``hfncl demo``."""
    parser.add_argument("--output-dir", default="runs/demo", help="Where the data, checkpoints and table go.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the data, the noise and the training.")
    parser.add_argument("--no-progress", action="store_true", help="Hide the progress bars.")
    parser.add_argument(
        "--noise-ratios", type=float, nargs="+", default=[0.5], help="Noise ratios to train at (0 adds a clean run)."
    )
    parser.add_argument("--plugins", nargs="+", help="Only these plugins (default: every plugin with demo settings).")
    parser.add_argument(
        "--full",
        action="store_true",
        help="The full comparison of benchmarks/README.md: every method on 3000 training images with its own demo "
        "settings (about 17 minutes on 2 CPU cores) instead of the quick demo (600 images, at most 3 epochs at 5x "
        "the learning rate).",
    )
    parser.add_argument(
        "--size",
        choices=("tiny", "quick", "small", "full"),
        help="Generated benchmark: tiny (200 training images), quick (600, the default), small (800), full (3000, "
        "the default of --full).",
    )
    parser.add_argument("--epochs", type=int, help="Train every method this many epochs (default: the demo's plan).")


@command(
    "demo",
    help="Train the installed methods on a generated benchmark with noise and print the comparison (a few minutes; "
    "--full: the full comparison of benchmarks/README.md).",
    add_arguments=_demo_arguments,
)
def demo_command(args: argparse.Namespace) -> int:
    """The README's main job (see :mod:`hfncl.demo`)."""
    print("hfncl demo: loading torch, transformers, datasets and the methods", flush=True)
    from hfncl.demo import main as demo_main

    return demo_main(
        args.output_dir,
        seed=args.seed,
        progress=not args.no_progress,
        noise_ratios=tuple(args.noise_ratios),
        plugins=args.plugins,
        size=args.size,
        epochs=args.epochs,
        full=args.full,
    )


def _card_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``hfncl card``."""
    parser.add_argument("checkpoint", help="A saved checkpoint directory (config.json, weights, hfncl_run.json).")
    parser.add_argument("--repo-id", help="Hub id the card's usage example and metadata name (default: the path).")
    parser.add_argument("--license", help="Hub license identifier for the card's metadata (e.g. apache-2.0).")
    parser.add_argument("--model-cards-dir", help="Also write the card to DIR/NAME.md (e.g. model_cards).")


@command(
    "card",
    help="Regenerate a checkpoint's model card (README.md) from the results its run recorded.",
    add_arguments=_card_arguments,
)
def card_command(args: argparse.Namespace) -> int:
    """Write the card of ``args.checkpoint``; print the files written."""
    from hfncl.hub import CheckpointError, IncompatibleCheckpointError, write_model_card

    try:
        written = write_model_card(
            args.checkpoint, repo_id=args.repo_id, license=args.license, model_cards_dir=args.model_cards_dir
        )
    except (CheckpointError, IncompatibleCheckpointError, OSError) as error:
        print(f"hfncl: error: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


def _push_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``hfncl push``."""
    parser.add_argument("checkpoint", help="A saved checkpoint directory.")
    parser.add_argument("repo_id", help="Hub model repository, user/name or org/name (created if missing).")
    parser.add_argument("--private", action="store_true", help="Create the repository as private.")
    parser.add_argument("--commit-message", help="Message of the upload commit.")
    parser.add_argument("--license", help="Hub license identifier for the card's metadata.")
    parser.add_argument("--keep-card", action="store_true", help="Upload README.md as it is, not regenerated.")


@command(
    "push",
    help="Publish a checkpoint (weights, config, vocabulary, record, card) to a Hub model repository.",
    add_arguments=_push_arguments,
)
def push_command(args: argparse.Namespace) -> int:
    """Check and upload ``args.checkpoint`` to ``args.repo_id``; print the commit URL.

    No token, no network or a refusal of the Hub is one line saying what to do
    (:class:`hfncl.hub.publish.HubUploadError`), and leaves the checkpoint as it was.
    """
    from hfncl.hub import CheckpointError, IncompatibleCheckpointError, push_checkpoint

    try:
        commit = push_checkpoint(
            args.checkpoint,
            args.repo_id,
            private=args.private or None,
            commit_message=args.commit_message,
            keep_card=args.keep_card,
            license=args.license,
        )
    except (CheckpointError, IncompatibleCheckpointError, OSError) as error:
        print(f"hfncl: error: {error}", file=sys.stderr)
        return 1
    print(commit.commit_url)
    return 0


def _evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``hfncl evaluate``."""
    parser.add_argument("checkpoints", nargs="+", help="Checkpoint directories or Hub ids; several are averaged.")
    parser.add_argument("--data-dir", required=True, help="SCAN precomp directory holding the split.")
    parser.add_argument("--split", default="test", help="Split to evaluate (default: test).")
    parser.add_argument("--folds", type=int, default=1, help="Also average over this many folds (MS-COCO: 5 x 1K).")
    parser.add_argument("--batch-size", type=int, default=256, help="Encoding batch size.")
    parser.add_argument("--device", default="cpu", help="Where to run the models (default: cpu).")
    parser.add_argument(
        "--mixed-precision", choices=("no", "bf16", "fp16"), default="no",
        help="Encode and score under autocast in this dtype (scores stay float32; bf16 also on CPUs).",
    )
    parser.add_argument(
        "--network", type=int, default=None,
        help="Score network K (0: A) of each checkpoint alone, by its own similarity (default: the model as its "
        "plugins rank, the mean over its networks).",
    )
    parser.add_argument("--no-progress", action="store_true", help="Hide the progress bars.")


@command(
    "evaluate",
    help="Retrieval metrics of one checkpoint, or of the mean similarity of several (SGRAF: an SGR and a SAF model).",
    add_arguments=_evaluate_arguments,
)
def evaluate_command(args: argparse.Namespace) -> int:
    """Print the metrics of ``args.checkpoints`` on ``args.split`` as JSON."""
    from hfncl.config import one_line
    from hfncl.data import DataFormatError
    from hfncl.hub import IncompatibleCheckpointError
    from hfncl.tasks.checkpoints import evaluate_checkpoints

    try:
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
    except (DataFormatError, IncompatibleCheckpointError, OSError, ValueError) as error:
        print(f"hfncl: error: {error}", file=sys.stderr)
        return 1
    except (MemoryError, RuntimeError) as error:
        if not loading_failure(error):
            raise
        print(f"hfncl: error: {one_line(error)}", file=sys.stderr)
        return 1
    mode = "mean of the checkpoints" if args.network is None else f"network {args.network} of each checkpoint alone"
    report = {"checkpoints": args.checkpoints, "split": args.split, "mode": mode, "metrics": metrics}
    print(json.dumps(report, indent=1))
    return 0


def _extract_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``hfncl extract``."""
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
    parser.add_argument("--device", default="cpu", help="Where the model runs (default: cpu).")
    parser.add_argument(
        "--cache-dir", help="Cache of the loaded dataset and mapped shards (default: $HFNCL_CACHE/extract)."
    )
    parser.add_argument("--revision", help="Branch, tag or commit of a Hub model (default: its default branch).")


@command(
    "extract",
    help="Extract image features from raw images and captions into a precomp directory (cached, resumable).",
    add_arguments=_extract_arguments,
)
def extract_command(args: argparse.Namespace) -> int:
    """Run :func:`hfncl.data.extract.extract_features`; print each split's feature shape."""
    from hfncl.data import DataFormatError
    from hfncl.data.extract import extract_features

    if (args.feature == "regions") != (args.detector is not None):
        print("hfncl: error: --feature regions takes --detector; pooled and patches take --model", file=sys.stderr)
        return 1
    try:
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
    except (DataFormatError, OSError, ValueError) as error:
        print(f"hfncl: error: {error}", file=sys.stderr)
        return 1
    for split, shape in shapes.items():
        print(f"{split}: {shape[0]} images x {shape[1]} x {shape[2]} features")
    return 0


TRAIN_DESCRIPTION = """hfncl train: train the named plugin(s) on a data directory; the run ends with one line saying
where the best model and results.json are.

installed plugins: {plugins} (`hfncl plugins` describes each, with its options)

examples (NAME: an installed plugin):
  hfncl train --plugins NAME --data-dir /data/f30k_precomp --noise-ratio 0.5 --output-dir runs/NAME_50
  hfncl train --plugins NAME --data-dir DIR --options '{{"NAME.OPTION": 0.3}}' --epochs 10 --print-config
  hfncl train --config runs/NAME_50/run_config.yaml --output-dir runs/NAME_50_again
  ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 -m hfncl.cli train --plugins NAME ..."""


def train(arguments: list[str]) -> int:
    """``hfncl train``: like a recipe, with the plugins named on the command line (``--help`` lists the installed
    ones, with examples)."""
    from hfncl.plugins import installed_entry_points
    from hfncl.recipe import run_recipe

    plugins = ", ".join(sorted(installed_entry_points())) or "none"
    return run_recipe(
        TRAIN_DESCRIPTION.format(plugins=plugins), plugins=[], defaults={}, argv=arguments, prog="hfncl train"
    )


COMMANDS["train"] = Command(
    help="Train installed plugin(s) by name on a precomp data directory: hfncl train --plugins NAME --data-dir DIR",
    add_arguments=lambda parser: None,
    run=lambda args: train([]),
    passthrough=train,
)


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``hfncl audit``."""
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


@command(
    "audit",
    help="Find the wrong pairs in your own image-text data: train a dividing method, list the suspicious pairs.",
    add_arguments=_audit_arguments,
)
def audit_command(args: argparse.Namespace) -> int:
    """Run :func:`hfncl.audit.run_audit` and print its summary; bad input is one line."""
    from hfncl.audit import audit_summary, run_audit
    from hfncl.config import one_line
    from hfncl.tasks.pairs import ModelArguments

    training: dict[str, Any] = {"resume_ignore_mismatch": True} if args.resume_ignore_mismatch else {}
    if args.batch_size is not None:
        training["batch_size"] = args.batch_size
    try:
        model_args = ModelArguments(image_tower=args.image_tower, embed_dim=args.embed_dim, word_dim=args.word_dim)
        result = run_audit(
            args.data_dir, args.plugins, args.output_dir, args.epochs, split=args.split, data_format=args.data_format,
            write_clean=args.write_clean, model=args.model, model_args=model_args, training=training or None,
            seed=args.seed, folds=args.folds, resume=args.resume, overwrite=args.overwrite_output_dir,
            allow_output_in_data_dir=args.allow_output_in_data_dir,
            refit=False if args.refit is None else (args.refit or True), refit_epochs=args.refit_epochs,
        )
    except (OSError, ValueError) as error:  # AuditError and DataFormatError are ValueErrors
        print(f"hfncl: error: {one_line(error)}", file=sys.stderr)
        return 1
    except (MemoryError, RuntimeError) as error:
        if not loading_failure(error):
            raise
        print(f"hfncl: error: {one_line(error)}", file=sys.stderr)
        return 1
    print("\n".join(audit_summary(result.table, args.output_dir, result.clean_files)))
    return 0


def _check_plugin_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``hfncl check-plugin``."""
    parser.add_argument("name", help="An installed plugin (an entry point of the hfncl group).")
    parser.add_argument(
        "--train", action="store_true", help="Also train it for two epochs on a generated micro benchmark (seconds)."
    )


@command(
    "check-plugin",
    help="Run the plugin contract's checks on an installed plugin: hooks, trainer view, options, settings, training.",
    add_arguments=_check_plugin_arguments,
)
def check_plugin_command(args: argparse.Namespace) -> int:
    """Print one line per check of :func:`hfncl.plugin_check.check_plugin`; exit 1 if one fails."""
    from hfncl.plugin_check import check_plugin

    checks = check_plugin(args.name, train=args.train)
    for check in checks:
        print(check.line())
    return 1 if any(check.problem is not None for check in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
