"""Which in-batch negatives a trained pair model's hardest-negative loss would meet, on its own noisy training pairs.

    python benchmarks/hardest_negatives.py RUN_DIR                       # RUN_DIR/best, 20 batches of 128
    python benchmarks/hardest_negatives.py RUN_DIR --checkpoint RUN_DIR/checkpoints/step-...-epoch-0010

For NCR's co-training collapse on the real-text proxy (``docs/methods/ncr.md``, "The wrong positives, not the same-image
negatives"): the clean part trains the hardest negative of the batch with soft margins (NCR Eq. 6), so two candidates
could feed it bad gradients, and this script measures both on the model the co-training starts from. A *same-image
negative* is another caption of the row's image in the batch (a proxy of 4 captions per image holds one for about a
tenth of the rows); a *wrong positive* is a pair the noise re-paired. Per row i of a batch of training pairs (image
shown with caption i, against every caption of the batch): whether a same-image caption is among its negatives, whether
it is the hardest one, and the hinge [margin - S_ii + max_j S_ij]_+, for right and wrong pairs.

Reads the run's ``run_config.yaml`` (data folder, training split) and ``noise_index.npy`` (the image each caption
was shown with); the similarity is the checkpoint's inference similarity (both networks' mean for two networks).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from hfncl.data import load_noise_index, read_captions
from hfncl.retrieval import Retriever


@dataclass
class BatchNegatives:
    """Per row of a batch: a same-image caption among its negatives, the hardest negative being one, its hinge."""

    same_image_present: np.ndarray
    hardest_is_same_image: np.ndarray
    hinge: np.ndarray


def batch_negatives(
    similarity: torch.Tensor, shown: np.ndarray, described: np.ndarray, margin: float
) -> BatchNegatives:
    """Rows: the images shown with the batch's captions (``shown``); columns: the captions, each describing the image
    ``described``. Column j is a same-image negative of row i (j != i) when caption j describes row i's image."""
    n = similarity.size(0)
    own = np.eye(n, dtype=bool)
    same_image = (described[None, :] == shown[:, None]) & ~own
    negatives = similarity.masked_fill(torch.from_numpy(own), float("-inf"))
    hardest = negatives.argmax(dim=1).numpy()
    hinge = (margin - similarity.diagonal() + negatives.max(dim=1).values).clamp(min=0)
    return BatchNegatives(same_image.any(axis=1), same_image[np.arange(n), hardest], hinge.numpy())


def measure(run_dir: Path, checkpoint: Path, batches: int, batch_size: int, margin: float, seed: int) -> str:
    """The report's lines for ``batches`` random batches of the run's training pairs."""
    config = yaml.safe_load((run_dir / "run_config.yaml").read_text())
    data_dir = Path(config["data_dir"])
    split = config.get("train_split", "train")
    images = np.load(data_dir / f"{split}_ims.npy")
    captions = list(read_captions(data_dir / f"{split}_caps.txt"))
    per_image = len(captions) // len(images)
    shown = load_noise_index(run_dir / "noise_index.npy", len(images), per_image)
    described = np.arange(len(captions)) // per_image
    retriever = Retriever.from_pretrained(checkpoint)
    with torch.no_grad():
        image_embeds = retriever.encode_images(torch.from_numpy(images))
        text_embeds = retriever.encode_texts(captions)
    rng = np.random.default_rng(seed)
    parts: list[tuple[BatchNegatives, np.ndarray]] = []
    for _ in range(batches):
        rows = rng.choice(len(captions), batch_size, replace=False)
        with torch.no_grad():
            similarity = retriever.similarity(image_embeds[:, shown[rows]], text_embeds[:, rows], "i2t").float()
        parts.append(
            (batch_negatives(similarity, shown[rows], described[rows], margin), shown[rows] == described[rows])
        )
    present = np.concatenate([p.same_image_present for p, _ in parts])
    hardest = np.concatenate([p.hardest_is_same_image for p, _ in parts])
    hinge = np.concatenate([p.hinge for p, _ in parts])
    right = np.concatenate([r for _, r in parts])
    lines = [
        f"{checkpoint}: {batches} batches of {batch_size} training pairs ({right.mean():.1%} right), margin {margin}",
        f"rows with a same-image caption among their negatives: {present.mean():.3f}",
        f"rows whose hardest negative is one: {hardest.mean():.3f} (right pairs: {hardest[right].mean():.3f})",
    ]
    for name, rows in (
        ("right pairs, hardest negative a same-image caption", right & hardest),
        ("right pairs, hardest negative another", right & ~hardest),
        ("wrong pairs", ~right),
    ):
        lines.append(f"{name}: {rows.sum()} rows, mean hinge {hinge[rows].mean():.3f}, sum {hinge[rows].sum():.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="A finished pair run's output folder.")
    parser.add_argument("--checkpoint", type=Path, help="The model to measure (default RUN_DIR/best).")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--margin", type=float, default=0.2, help="The triplet margin (NCR's 0.2).")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for needed in ("run_config.yaml", "noise_index.npy"):
        if not (args.run_dir / needed).is_file():
            parser.error(f"{args.run_dir / needed}: not there; give the output folder of a run with injected noise")
    print(
        measure(
            args.run_dir,
            args.checkpoint or args.run_dir / "best",
            args.batches,
            args.batch_size,
            args.margin,
            args.seed,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
