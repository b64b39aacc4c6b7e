"""The leaderboard's CLIP track: noisy-correspondence methods fine-tuning both towers of a CLIP on raw images.

    python benchmarks/leaderboard.py --benchmark clip --seeds 0                    # a tiny CLIP, generated images
    python benchmarks/leaderboard.py --benchmark clip --clip-model openai/clip-vit-base-patch32   # a GPU's track
    python benchmarks/leaderboard.py --benchmark clip --quick                      # checks the track in a minute

Data: generated images (:func:`write_shapes_imagefolder`): each picture holds two shapes, left and right, each
of a colour, a kind and a size, on a background colour; its five captions name them in five wordings, some
leaving an attribute out (``--size`` picks the split sizes of the generated benchmark of the same name; tiny:
200 training images x 5 captions, 50 dev, 100 test). Towers: both towers of ``--clip-model`` (a Hub id or a
directory of a dual CLIP with its tokenizer and image processor), or, without it, a tiny CLIP built from a
config (:func:`save_tiny_clip`: 2 layers of width 64 in each tower, 32 px images in 8 px patches, a word-level
tokenizer over the captions' words, random weights drawn with seed 0, the same for every run). The heads start
from CLIP's own projections (:mod:`hfncl.models.towers`), pooled (EOS / class) outputs.

Methods (``--clip-methods``; default all four): ``infonce``, the baseline with no noise handling: CLIP's
symmetric InfoNCE loss at temperature 0.01 on every pair (NPC's warmup loss, :func:`hfncl_plugins.npc.
pair_cross_entropy`, for all epochs); ``npc``; ``rcl`` (its complementary contrastive loss); ``coteaching``
(small-loss selection by two networks). Any other installed pair method may be named; one that cannot train
on pixel towers is skipped with its error in one line in the report. Each trains its demo settings under the
leaderboard's protocols, ratios, seeds, batch size (default 32 here), ``--options`` (by plugin: ``npc.*`` also
sets the baseline's, NPC's plugin) and converged schedule (``--patience``),
on the same towers; rows are resumable ``row.json`` files under ``OUTPUT_DIR/clip[_<size>]/<protocol>/``.
The oracles (``--no-references`` leaves them out) train on exactly the clean pairs of their ratio and seed
(:func:`oracle_folder`), to convergence after at least a method's demo steps (``--oracle-patience``): ``oracle``
the baseline, the bound of its share, and ``oracle (M)`` each other method M itself, the bound of M's (its own
loss, selection or co-trained mean may rank above InfoNCE's one network on the same clean pairs).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import itertools
import json
import multiprocessing
import re
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import leaderboard_notes
import leaderboard_runs
import numpy as np
import torch
from accuracy import Job, plateau_rule
from common import method_runs
from PIL import Image, ImageDraw

from hfncl.config import one_line
from hfncl.data.noise import make_noise
from hfncl.demo import DemoRun
from hfncl.experiment import DataArguments
from hfncl.models.towers import TowerLoadError, resolve_tower_config
from hfncl.plugins import PluginError

BASELINE = "infonce"
"""The row of CLIP fine-tuning with no noise handling: NPC's plugin in its warmup (CLIP's InfoNCE) for every epoch."""
DEFAULT_METHODS = (BASELINE, "npc", "rcl", "coteaching")
DEFAULT_BATCH = 32
QUICK_EPOCHS = 2
SPLITS = ("train", "dev", "test")

COLOURS = {"red": (220, 40, 40), "green": (40, 190, 60), "blue": (50, 80, 230), "yellow": (235, 220, 50),
           "purple": (150, 60, 200), "orange": (245, 140, 30)}
BACKGROUNDS = {"black": (20, 20, 20), "grey": (128, 128, 128), "white": (240, 240, 240)}
SHAPES = ("circle", "square", "triangle", "diamond")
SCALES = {"small": 0.3, "large": 0.45}
WORDINGS = (
    "a {s1} {c1} {h1} left of a {s2} {c2} {h2} on {bg}",
    "a {c2} {h2} to the right of a {c1} {h1}",
    "{bg} background with a {c1} {h1} and a {c2} {h2}",
    "a {s2} {c2} {h2} right of a {s1} {c1} {h1}",
    "on the left a {c1} {h1} and on the right a {s2} {c2} {h2}",
)
"""The five captions of a picture: shape 1 on the left, shape 2 on the right (``s`` size, ``c`` colour, ``h`` kind)."""


@dataclass(frozen=True)
class ShapesConfig:
    """Split sizes, image side in pixels and seed of the generated shape pictures."""

    num_train: int = 200
    num_dev: int = 50
    num_test: int = 100
    image_size: int = 32
    seed: int = 0


TRACK_SIZES = {"tiny": ShapesConfig(), "quick": ShapesConfig(600, 100, 200), "small": ShapesConfig(800, 200, 500),
               "full": ShapesConfig(3000, 300, 500)}
"""The generated benchmark's split sizes of :data:`hfncl.demo.DEMO_SIZES`, by the same names."""
QUICK_SHAPES = ShapesConfig(24, 12, 12)


@dataclass(frozen=True)
class TinyClip:
    """The tiny CLIP the track builds without ``--clip-model``: both towers this wide and deep."""

    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    intermediate_size: int = 128
    projection_dim: int = 64
    patch_size: int = 8
    max_words: int = 24


# --- data -----------------------------------------------------------------------------------------------------------


def draw_picture(rng: np.random.Generator, size: int) -> tuple[Image.Image, list[str]]:
    """One picture of two shapes (left, right) and its five captions (:data:`WORDINGS`)."""
    background = str(rng.choice(list(BACKGROUNDS)))
    image = Image.new("RGB", (size, size), BACKGROUNDS[background])
    draw = ImageDraw.Draw(image)
    words: dict[str, str] = {"bg": background}
    for index, left in ((1, 0), (2, size // 2)):
        colour, shape, scale = str(rng.choice(list(COLOURS))), str(rng.choice(SHAPES)), str(rng.choice(list(SCALES)))
        words.update({f"c{index}": colour, f"h{index}": shape, f"s{index}": scale})
        radius = SCALES[scale] * size / 2
        x = left + size / 4 + rng.uniform(-0.1, 0.1) * size
        y = size / 2 + rng.uniform(-0.2, 0.2) * size
        box = (x - radius, y - radius, x + radius, y + radius)
        fill = COLOURS[colour]
        if shape == "circle":
            draw.ellipse(box, fill=fill)
        elif shape == "square":
            draw.rectangle(box, fill=fill)
        elif shape == "triangle":
            draw.polygon([(x, y - radius), (x + radius, y + radius), (x - radius, y + radius)], fill=fill)
        else:
            draw.polygon([(x, y - radius), (x + radius, y), (x, y + radius), (x - radius, y)], fill=fill)
    return image, [re.sub(r"\ba (?=orange)", "an ", wording.format(**words)) for wording in WORDINGS]


def write_shapes_imagefolder(directory: str | Path, config: ShapesConfig = ShapesConfig()) -> Path:
    """An imagefolder (``train`` / ``dev`` / ``test``, PNGs and a ``metadata.jsonl`` of 5 captions each) of
    :func:`draw_picture`'s pictures, the same for the same ``config``; kept when a finished one is there."""
    root = Path(directory)
    done = root / "config.json"
    spec = {**dataclasses.asdict(config), "wordings": list(WORDINGS)}
    if done.is_file() and json.loads(done.read_text()) == spec:
        return root
    rng = np.random.default_rng(config.seed)
    for split, count in zip(SPLITS, (config.num_train, config.num_dev, config.num_test), strict=True):
        folder = root / split
        folder.mkdir(parents=True, exist_ok=True)
        rows = []
        for i in range(count):
            image, captions = draw_picture(rng, config.image_size)
            image.save(folder / f"{i:05d}.png")
            rows.append({"file_name": f"{i:05d}.png", "captions": captions})
        (folder / "metadata.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    done.write_text(json.dumps(spec))
    return root


def caption_words(directory: str | Path) -> list[str]:
    """Every word of every caption of the imagefolder at ``directory``, sorted."""
    words: set[str] = set()
    for split in SPLITS:
        for line in (Path(directory) / split / "metadata.jsonl").read_text().splitlines():
            words.update(word for caption in json.loads(line)["captions"] for word in caption.split())
    return sorted(words)


def training_pairs(directory: str | Path) -> int:
    """The training pairs (captions) of the imagefolder at ``directory``."""
    lines = (Path(directory) / "train" / "metadata.jsonl").read_text().splitlines()
    return sum(len(json.loads(line)["captions"]) for line in lines)


# --- towers ---------------------------------------------------------------------------------------------------------

SPECIALS = ("[PAD]", "[UNK]", "<|startoftext|>", "<|endoftext|>")


def save_tiny_clip(directory: str | Path, words: list[str], image_size: int, tiny: TinyClip = TinyClip()) -> Path:
    """A dual CLIP built from a config (random weights, seed 0), a word-level tokenizer over ``words`` (``<|
    startoftext|>`` ... ``<|endoftext|>``, CLIP's pooled EOS token) and a CLIP image processor of ``image_size``
    pixels, saved to ``directory``; kept when one is there for the same words and sizes."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, PreTrainedTokenizerFast

    root = Path(directory)
    spec = {"words": words, "image_size": image_size, **dataclasses.asdict(tiny)}
    done = root / "tiny_clip.json"
    if done.is_file() and json.loads(done.read_text()) == spec:
        return root
    vocab = {token: i for i, token in enumerate([*SPECIALS, *words])}
    bos, eos = vocab["<|startoftext|>"], vocab["<|endoftext|>"]
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="<|startoftext|> $A <|endoftext|>", special_tokens=[("<|startoftext|>", bos), ("<|endoftext|>", eos)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", bos_token="<|startoftext|>",
        eos_token="<|endoftext|>", model_max_length=tiny.max_words,
    )
    layers = dict(hidden_size=tiny.hidden_size, intermediate_size=tiny.intermediate_size,
                  num_hidden_layers=tiny.layers, num_attention_heads=tiny.heads)
    text = dict(layers, vocab_size=len(vocab), max_position_embeddings=tiny.max_words, bos_token_id=bos,
                eos_token_id=eos, pad_token_id=vocab["[PAD]"])
    vision = dict(layers, image_size=image_size, patch_size=tiny.patch_size)
    torch.manual_seed(0)
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=tiny.projection_dim)
    CLIPModel(config).save_pretrained(root)
    tokenizer.save_pretrained(root)
    side = {"height": image_size, "width": image_size}
    CLIPImageProcessor(size={"shortest_edge": image_size}, crop_size=side).save_pretrained(root)
    done.write_text(json.dumps(spec))
    return root


def clip_towers(source: str) -> dict[str, Any]:
    """The ModelArguments fields of both towers of the CLIP at ``source``, pooled, in its projection's space.

    Raises:
        SystemExit: one line, ``source`` cannot be read (offline and not cached, or not a CLIP).
    """
    try:
        from transformers import AutoConfig

        resolve_tower_config(source, "vision")
        projection = getattr(AutoConfig.from_pretrained(source), "projection_dim", None)
    except (TowerLoadError, OSError, ValueError) as error:
        raise SystemExit(f"--clip-model {source!r}: {one_line(str(error))}") from None
    if projection is None:
        raise SystemExit(f"--clip-model {source!r}: not a dual CLIP (its config has no projection_dim)")
    return {"image_tower": source, "text_tower": source, "image_pooling": "pooler", "text_pooling": "pooler",
            "embed_dim": int(projection)}


# --- runs -----------------------------------------------------------------------------------------------------------


def plugin_of(method: str) -> str:
    """The plugin that trains ``method`` on the track: the baseline is NPC's plugin (every epoch a warmup epoch)."""
    return "npc" if method == BASELINE else method


def method_settings(method: str, quick: bool, pretrained: bool) -> tuple[str, dict[str, Any]]:
    """The plugin and demo settings of ``method``; the baseline is NPC's plugin, warm for every epoch. NPC on a
    pretrained CLIP starts without a warmup epoch (its memory bank from CLIP itself, as its recipe)."""
    plugin = plugin_of(method)
    settings = dict(method_runs([plugin], 0.0)[0].settings)
    if quick:
        settings = {**settings, "epochs": QUICK_EPOCHS, "warmup_epochs": min(settings.get("warmup_epochs", 0), 1)}
    if method == "npc" and pretrained:
        settings["warmup_epochs"] = 0
    return plugin, settings


def converged(settings: dict[str, Any], method: str, pairs: int, patience: int, plateau: bool) -> dict[str, Any]:
    """``settings`` on the leaderboard's converged rule (:func:`accuracy.converged_settings`); the baseline's warmup
    then covers every epoch."""
    from accuracy import converged_settings

    if patience:
        settings = converged_settings(settings, 0.0, pairs // int(settings["batch_size"]), patience, plateau)
    if method == BASELINE:
        settings = {**settings, "warmup_epochs": int(settings["epochs"])}
    return settings


def plan(
    args: argparse.Namespace, data_dir: Path, pretrained: bool
) -> tuple[list[leaderboard_runs.Run], dict[str, str]]:
    """Every run of the track: per protocol and ratio (the protocols taking turns, so that a call stopped early
    leaves whole columns of both) and seed, each method, then the oracle; and the methods that cannot be planned
    (e.g. no demo settings, or not a pair method), each with its reason."""
    runs = []
    skipped: dict[str, str] = {}
    pairs = training_pairs(data_dir)
    batch = args.batch_size or DEFAULT_BATCH
    cells = leaderboard_runs.cells_in_turn(leaderboard_runs.protocol_ratios(args))
    for (protocol, ratio), seed in itertools.product(cells, args.seeds):
        data = DataArguments(data_dir=str(data_dir), noise_ratio=ratio, noise_seed=seed,
                             noise_kind=leaderboard_runs.PROTOCOL_KINDS[protocol])
        for method in args.clip_methods:
            try:
                plugin, settings = method_settings(method, args.quick, pretrained)
            except (PluginError, ValueError) as error:
                skipped[method] = one_line(str(error))
                continue
            patience = 0 if args.quick else args.patience
            settings = converged({**settings, "batch_size": batch}, method, pairs, patience, plateau_rule(args))
            job = leaderboard_runs.with_options(Job(method, DemoRun(plugin, ratio, settings), seed, data), args.options)
            runs.append(leaderboard_runs.Run(protocol, job))
        if not args.no_references:
            runs += [oracle_run(args, data_dir, protocol, ratio, seed, pretrained, method)
                     for method in args.clip_methods if method not in skipped]
    return runs, skipped


def track_oracles(args: argparse.Namespace) -> dict[str, str]:
    """The oracle row each method's share is over: ``oracle`` for the baseline, ``oracle (M)`` for method M."""
    from accuracy import oracle_row

    return {} if args.no_references else {method: oracle_row(method, BASELINE) for method in args.clip_methods}


def oracle_folder(data_dir: Path, ratio: float, seed: int, kind: str) -> Path:
    """Write (once) the imagefolder of exactly the training pairs that the noise of ``kind`` at ``ratio`` and
    ``seed`` leaves clean, one row per pair (its image copied, one caption: the precomp oracle's k = 1), beside
    ``data_dir`` (whose split folders would take in any folder named like them), with copies of its ``dev`` and
    ``test``. Returns its directory."""
    root = data_dir.parent / f"{data_dir.name}_oracles" / f"{kind}_{round(ratio * 100)}_seed{seed}"
    folder = root / "train"
    if (folder / "metadata.jsonl").is_file():
        return root
    rows = [json.loads(line) for line in (data_dir / "train" / "metadata.jsonl").read_text().splitlines()]
    per_image = len(rows[0]["captions"])
    clean = make_noise(kind, len(rows), per_image, ratio, seed) == np.arange(len(rows) * per_image) // per_image
    folder.mkdir(parents=True, exist_ok=True)
    for split in SPLITS[1:]:  # the imagefolder reader follows no linked folder
        shutil.copytree(data_dir / split, root / split, dirs_exist_ok=True)
    kept = []
    for position, caption in enumerate(np.flatnonzero(clean).tolist()):
        row = rows[caption // per_image]
        shutil.copyfile(data_dir / "train" / row["file_name"], folder / f"{position:05d}.png")
        kept.append({"file_name": f"{position:05d}.png", "captions": [row["captions"][caption % per_image]]})
    partial = folder / "metadata.partial"
    partial.write_text("".join(json.dumps(row) + "\n" for row in kept))
    partial.replace(folder / "metadata.jsonl")
    return root


def oracle_run(args: argparse.Namespace, data_dir: Path, protocol: str, ratio: float, seed: int,
               pretrained: bool, method: str = BASELINE) -> leaderboard_runs.Run:
    """The oracle of ``method``: the method (by default the baseline) trained on exactly the clean pairs, with its
    settings at ``ratio``, to convergence after at least as many optimiser steps as its demo epochs over every pair
    (:func:`accuracy.converged_settings`)."""
    from accuracy import converged_settings, oracle_row

    kind = leaderboard_runs.PROTOCOL_KINDS[protocol]
    clean_dir = oracle_folder(data_dir, ratio, seed, kind)
    batch = args.batch_size or DEFAULT_BATCH
    plugin, settings = method_settings(method, args.quick, pretrained)
    settings = {**settings, "batch_size": batch}
    if not args.quick and args.oracle_patience:
        steps = int(settings["epochs"]) * (training_pairs(data_dir) // batch)
        clean = training_pairs(clean_dir)
        settings = converged_settings(settings, steps, clean // batch, args.oracle_patience, plateau_rule(args))
    if method == BASELINE:
        settings["warmup_epochs"] = int(settings["epochs"])
    data = DataArguments(data_dir=str(clean_dir), noise_seed=seed)
    job = Job(oracle_row(method, BASELINE), DemoRun(plugin, ratio, settings), seed, data)
    return leaderboard_runs.Run(protocol, leaderboard_runs.with_options(job, args.options))


def attempt(run: leaderboard_runs.Run, root: Path, model: dict[str, Any], report_only: bool) -> dict[str, Any] | None:
    """:func:`leaderboard_runs.train_run` of ``run``; a run that fails gives ``{"failed": <one line>}``."""
    try:
        return leaderboard_runs.train_run(run, root, False, model, report_only)
    except Exception as error:  # noqa: BLE001 - a method that cannot train on pixel towers is reported, not fatal
        return {"failed": f"{type(error).__name__}: {one_line(str(error))}"}


def run_runs(
    runs: list[leaderboard_runs.Run], args: argparse.Namespace, root: Path, model: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Train ``runs`` in ``--jobs`` processes: the finished rows, and each failed method's first error."""
    rows: list[dict[str, Any]] = []
    failed: dict[str, str] = {}

    def collect(run: leaderboard_runs.Run, row: dict[str, Any] | None) -> None:
        if row is None:
            return
        if "failed" in row:
            failed.setdefault(run.job.row, row["failed"])
            print(f"clip/{run.key}: failed: {row['failed']}", flush=True)
            return
        rows.append(row)
        print(f"clip/{run.key}: rSum {row['test']['rsum']:.1f} after {row['epochs']} epochs ({row['seconds']:.0f}s)",
              flush=True)

    if args.jobs == 1 or args.report_only:
        torch.set_num_threads(args.threads)
        for run in runs:
            collect(run, attempt(run, root, model, args.report_only))
        return rows, failed
    context = multiprocessing.get_context("spawn")
    setup = leaderboard_runs.worker_setup
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context, initializer=setup,
                                                initargs=(None, args.threads)) as pool:
        futures = {pool.submit(attempt, run, root, model, False): run for run in runs}
        for future in concurrent.futures.as_completed(futures):
            collect(futures[future], future.result())
    return rows, failed


def baseline_notes(rows: list[dict[str, Any]], failed: dict[str, str]) -> list[str]:
    """The methods whose runs failed (e.g. one that cannot train on pixel towers: its first error), and where a
    method's mean rSum falls below the baseline's, with its division's quality against the hidden noise (network
    A, last epoch: NPC's memory bank, Co-teaching's kept pairs) where it has one, and whether the seeds resolve
    that place (:func:`leaderboard_notes.seed_spread`)."""
    out = [f"{method} not shown: its runs failed on this track ({error})" for method, error in sorted(failed.items())]
    cells = leaderboard_notes.seed_cells(rows)
    divisions = leaderboard_notes.division_quality(rows, digits=3)
    for (protocol, method, ratio), by_seed in sorted(cells.items()):
        base = cells.get((protocol, BASELINE, ratio))
        value = statistics.mean(by_seed.values())
        if method == BASELINE or base is None or value >= statistics.mean(base.values()):
            continue
        quality = divisions.get((protocol, method, ratio))
        spread = leaderboard_notes.seed_spread(by_seed, base)
        out.append(f"{method} is below the baseline ({BASELINE}) under {protocol} at {ratio:.0%} ({value:.1f} vs "
                   f"{statistics.mean(base.values()):.1f})" + (f"; its division (network A, last epoch): {quality}"
                                                               if quality else "") + (f"; {spread}" if spread else ""))
    return out


def identical_networks(best: Path) -> bool:
    """Whether every network of the checkpoint ``best`` holds the same weights as network 0."""
    from safetensors import safe_open

    with safe_open(str(best / "model.safetensors"), "pt") as weights:
        names = [name for name in weights.keys() if name.startswith("networks.")]
        first = {name.split(".", 2)[2]: weights.get_tensor(name) for name in names if name.startswith("networks.0.")}
        others = [name for name in names if not name.startswith("networks.0.")]
        same = (torch.equal(weights.get_tensor(name), first[name.split(".", 2)[2]]) for name in others)
        return bool(others) and all(same)


def twin_notes(rows: list[dict[str, Any]], root: Path) -> list[str]:
    """The co-trained methods whose networks ended identical in every run: started from the same pretrained towers
    and CLIP projection, trained on the same batches without dropout, they never part, and co-training reduces to
    one network selecting for itself."""
    runs: dict[str, list[bool]] = {}
    for row in rows:
        best = root / row["protocol"] / leaderboard_runs.run_name(row) / "best"
        if row["mode"].startswith("mean of") and (best / "model.safetensors").is_file():
            runs.setdefault(row["method"], []).append(identical_networks(best))
    return [f"{method}: its networks are identical in all {len(same)} runs (the same pretrained towers and CLIP "
            "projection, the same batches, no dropout), so its peers select for themselves"
            for method, same in sorted(runs.items()) if all(same)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The CLIP track's own flags on the leaderboard's parser."""
    parser.add_argument("--clip-model", default=None,
                        help="CLIP track: Hub id or directory of a dual CLIP (with its tokenizer and image processor) "
                        "whose towers are fine-tuned (default: a tiny CLIP built from a config).")
    parser.add_argument("--clip-methods", nargs="+", default=list(DEFAULT_METHODS),
                        help=f"CLIP track's methods (default: {' '.join(DEFAULT_METHODS)}; {BASELINE}: CLIP's InfoNCE "
                        "without noise handling).")


def run_track(args: argparse.Namespace, output_dir: Path) -> dict[str, Any]:
    """The CLIP track: its data, towers and runs; the leaderboard's result of one benchmark (description, rows
    labelled with their evaluation mode, notes, cost)."""
    model = clip_towers(args.clip_model) if args.clip_model else None  # a bad --clip-model fails before any work
    config = QUICK_SHAPES if args.quick else TRACK_SIZES[args.size]
    suffix = "" if config in (TRACK_SIZES["tiny"], QUICK_SHAPES) else f"_{config.num_train}"
    data_dir = write_shapes_imagefolder(output_dir / f"data_clip_shapes{suffix}", config)
    if model is None:
        tiny = save_tiny_clip(output_dir / f"tiny_clip{suffix}", caption_words(data_dir), config.image_size)
        model = clip_towers(str(tiny))
        towers = f"a tiny CLIP from a config ({TinyClip().layers} layers of width {TinyClip().hidden_size}, random)"
    else:
        towers = f"CLIP {args.clip_model}"
    name = "clip" if args.clip_model is None else "clip_" + re.sub(r"[^A-Za-z0-9.-]+", "_", args.clip_model)
    root = output_dir / (name if args.size == "tiny" else f"{name}_{args.size}")
    runs, skipped = plan(args, data_dir, args.clip_model is not None)
    began = time.perf_counter()
    rows, failed = run_runs(runs, args, root, model)
    failed.update(skipped)
    labelled = leaderboard_runs.mode_rows(rows, root, data_dir)
    cost = leaderboard_notes.cost_line(rows, time.perf_counter() - began)
    unfinished = len(runs) - len(rows) - sum(1 for r in runs if r.job.row in failed)
    if unfinished > 0:
        cost += f"; {unfinished} of {len(runs)} planned runs not finished (not shown)"
    print(f"clip: {cost}")
    description = (f"CLIP track, {towers} fine-tuned (both towers) on generated shape pictures ({config.num_train} "
                   f"train images x 5 captions, {config.num_test} test; batch {args.batch_size or DEFAULT_BATCH}); "
                   f"{BASELINE}: CLIP's InfoNCE with no noise handling; oracle: {BASELINE} on exactly the clean pairs, "
                   "oracle (M): method M itself on them")
    oracles = {method: row for method, row in track_oracles(args).items() if method not in failed}
    notes = (baseline_notes(labelled, failed) + twin_notes(labelled, root)
             + leaderboard_notes.measurement_notes(labelled, oracles))
    return {"description": description, "seeds": args.seeds, "rows": labelled, "notes": notes, "cost": cost,
            "oracles": oracles, "data_dir": str(data_dir)}
