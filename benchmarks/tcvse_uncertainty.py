"""TcVSE's Fig. 3 trend: mean predicted uncertainty of test queries rises with input corruption.

    python benchmarks/tcvse_uncertainty.py --output-dir runs/tcvse_uncertainty

Trains TcVSE on clean pairs of the generated benchmark (:mod:`hfncl.data.synthetic`,
the demo's size, model and settings), then encodes the test split corrupted at each
rate r (default 0.0, 0.3, 0.6; the paper's augmentation rates, Sec. 3.4) and asks the
plugin's ``query_uncertainty`` for every query's u = K / S over the whole corrupted
gallery: images querying all captions (i2t) and captions querying all images (t2i).

Corruption at rate r, both modalities at once (queries and gallery), seeded by ``--seed``:
- each region feature is, with probability r, replaced by Gaussian noise with the
  per-dimension mean and standard deviation of the test split's region features
  (same scale as real regions, so only its content is lost);
- each word between ``<start>`` and ``<end>`` is, with probability r, masked to ``<unk>``.

Writes ``uncertainty.md`` (mean u per rate and direction, with the rSum retrieval reaches
on the corrupted split), ``uncertainty.json`` and ``uncertainty.png`` (mean u against the
rate, and the distribution of u per rate and direction, as in Fig. 3) to the output dir.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import datasets
import numpy as np
import torch
import transformers
from common import with_option

from hfncl.data import collate_captions, collate_images
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.demo import DemoRun, demo_runs, demo_train_config
from hfncl.engine.encoding import RetrievalSplit
from hfncl.evaluation.recall import retrieval_metrics_from_matrix
from hfncl.experiment import DataArguments, run_experiment
from hfncl.models import NCLModel
from hfncl.plugins import build_plugin_manager
from hfncl.tasks.pair_data import prepare_data
from hfncl.tasks.pairs import DEMO_MODEL
from hfncl_plugins.tcvse import BRANCHES, DIRECTIONS, perturb_words


def region_statistics(split: RetrievalSplit, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension mean and standard deviation (D,) of every region feature of the split."""
    loader = torch.utils.data.DataLoader(split.images, batch_size=batch_size, collate_fn=collate_images)
    regions = torch.cat([batch["images"].flatten(0, 1) for batch in loader])
    return regions.mean(dim=0), regions.std(dim=0)


def corrupt_regions(
    images: torch.Tensor, rate: float, mean: torch.Tensor, std: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Replace each region of (B, R, D) ``images`` with probability ``rate`` by N(mean, std^2) noise."""
    replaced = torch.rand(images.shape[:2], generator=generator) < rate
    noise = mean + std * torch.randn(images.shape, generator=generator)
    return torch.where(replaced[..., None], noise, images)


@torch.no_grad()
def encode_corrupted(
    model: NCLModel, split: RetrievalSplit, rate: float, seed: int, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(K, N, d) image and (K, N * k, d) caption embeddings of the split corrupted at ``rate``."""
    generator = torch.Generator().manual_seed(seed)
    mean, std = region_statistics(split, batch_size)
    images = torch.utils.data.DataLoader(split.images, batch_size=batch_size, collate_fn=collate_images)
    captions = torch.utils.data.DataLoader(split.captions, batch_size=batch_size, collate_fn=collate_captions)
    model.eval()
    image_embeds = torch.cat(
        [model.encode_image(corrupt_regions(b["images"], rate, mean, std, generator)) for b in images], dim=1
    )
    text_embeds = []
    for batch in captions:
        masked, lengths = perturb_words(batch["captions"], batch["lengths"], mask=rate, generator=generator)
        text_embeds.append(model.encode_text(masked, lengths))
    return image_embeds, torch.cat(text_embeds, dim=1)


def measure(model: NCLModel, split: RetrievalSplit, rates: list[float], seed: int, batch_size: int) -> list[dict]:
    """For each rate: every query's uncertainty per direction, its mean, and the rSum on the corrupted split."""
    hook = build_plugin_manager(model.config.plugins).hook
    rows = []
    for position, rate in enumerate(rates):
        image_embeds, text_embeds = encode_corrupted(model, split, rate, seed + position, batch_size)
        row: dict = {"rate": rate}
        for direction in DIRECTIONS:
            u = hook.query_uncertainty(
                model=model, image_embeds=image_embeds, text_embeds=text_embeds, direction=direction
            )
            row[f"u_{direction}"] = u.tolist()
            row[f"mean_u_{direction}"] = float(u.mean())
        similarity = hook.inference_similarity(
            model=model, image_embeds=image_embeds, text_embeds=text_embeds, direction="i2t"
        )
        row["rsum"] = retrieval_metrics_from_matrix(similarity, split.captions_per_image)["rsum"]
        rows.append(row)
    return rows


def markdown_table(rows: list[dict], branch: str) -> str:
    lines = [
        f"| corruption rate | mean u, image queries (i2t) | mean u, caption queries (t2i) | rSum ({branch}) |",
        "|---|---|---|---|",
    ]
    for row in rows:
        lines.append(f"| {row['rate']:.1f} | {row['mean_u_i2t']:.4f} | {row['mean_u_t2i']:.4f} | {row['rsum']:.1f} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, branch: str) -> None:
    """Mean u against the rate, and the distribution of u at each rate per direction (Fig. 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = [row["rate"] for row in rows]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    for direction, marker in zip(DIRECTIONS, "os", strict=True):
        axes[0].plot(rates, [row[f"mean_u_{direction}"] for row in rows], marker=marker, label=direction)
    axes[0].set(
        xlabel="corruption rate", ylabel="mean uncertainty u", title=f"TcVSE ({branch}): mean u on the test split"
    )
    axes[0].legend()
    for axis, direction in zip(axes[1:], DIRECTIONS, strict=True):
        bins = np.linspace(0, max(max(row[f"u_{direction}"]) for row in rows), 40)
        for row in rows:
            axis.hist(row[f"u_{direction}"], bins=bins, alpha=0.5, label=f"rate {row['rate']:.1f}")
        queries = "image" if direction == "i2t" else "caption"
        axis.set(
            xlabel="uncertainty u", ylabel="queries (log scale)", yscale="log", title=f"{direction}: {queries} queries"
        )
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/tcvse_uncertainty", help="Where the data, run and results go.")
    parser.add_argument("--rates", type=float, nargs="+", default=[0.0, 0.3, 0.6], help="Corruption rates in [0, 1].")
    parser.add_argument("--epochs", type=int, default=None, help="Training epochs (default: TcVSE's demo settings).")
    parser.add_argument("--branch", choices=BRANCHES, default="ensemble", help="Branch that ranks and is asked for u.")
    parser.add_argument("--seed", type=int, default=0, help="Seeds the benchmark, the training and the corruption.")
    parser.add_argument("--batch-size", type=int, default=256, help="Batch size of the encoding passes.")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="Hide the epochs' progress bars.")
    args = parser.parse_args(argv)
    if not all(0.0 <= rate <= 1.0 for rate in args.rates):
        parser.error(f"--rates must lie in [0, 1], got {args.rates}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    output_dir = Path(args.output_dir)
    data = DataArguments(data_dir=str(generate_precomp(output_dir / "data", SyntheticConfig(seed=args.seed))))
    run = demo_runs((0.0,), ["tcvse"])[0]
    settings = dict(run.settings)
    if args.epochs is not None:
        settings["epochs"] = args.epochs
    settings = with_option(settings, "tcvse.inference_branch", args.branch)
    config = demo_train_config(DemoRun("tcvse", 0.0, settings), output_dir / "run", args.seed, args.progress)
    run_experiment(data, config, DEMO_MODEL)
    model = NCLModel.from_pretrained(str(output_dir / "run" / "best"))
    rows = measure(model, prepare_data(data, output_dir / "run").test, args.rates, args.seed, args.batch_size)
    table = markdown_table(rows, args.branch)
    print(table)
    (output_dir / "uncertainty.md").write_text(table + "\n")
    (output_dir / "uncertainty.json").write_text(json.dumps(rows))
    plot(rows, output_dir / "uncertainty.png", args.branch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
