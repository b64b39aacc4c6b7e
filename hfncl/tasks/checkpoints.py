"""Scoring saved checkpoints on a split, in each evaluation mode the field reports.

Noisy-correspondence papers report three kinds of numbers, and each must be labelled:

* **one network**: a single network's similarity;
* **the mean of a co-trained method's networks** (NCR, GSC, ...: the K networks a model holds,
  :meth:`hfncl.models.NCLModel.similarity`, or the plugin's own ``inference_similarity``);
* **SGRAF**: two models trained with the SGR and the SAF similarity head, their similarities averaged
  (:func:`hfncl.engine.encoding.evaluate_ensemble`).

:func:`evaluate_checkpoints` gives all three: several checkpoints are averaged, and ``network=k`` scores
network k of each alone (its own similarity, no plugin ranking).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from hfncl.data import load_precomp_split
from hfncl.data.pixels import load_pixel_splits
from hfncl.engine.encoding import RetrievalSplit, evaluate_ensemble
from hfncl.evaluation import check_split_size
from hfncl.hub import load_text_vocabulary
from hfncl.hub.checkpoint import load_image_processor
from hfncl.models import NCLModel
from hfncl.plugins import build_plugin_manager
from hfncl.tasks.pair_data import data_format


def evaluate_checkpoints(
    checkpoints: list[str | Path],
    data_dir: str | Path,
    split: str = "test",
    *,
    network: int | None = None,
    batch_size: int = 256,
    device: str = "cpu",
    folds: int = 1,
    folds_name: str = "folds",
    mixed_precision: str = "no",
    progress: bool = False,
) -> dict[str, float]:
    """Retrieval metrics on ``split`` of ``data_dir`` of the mean similarity of ``checkpoints`` (one: that model as
    its plugins rank; an SGR and a SAF checkpoint: SGRAF). ``network`` scores network ``network`` of each checkpoint
    alone, by its own similarity.

    Raises:
        ValueError: ``network`` outside a checkpoint's networks, or a split too small for ``folds`` (named
            ``folds_name`` in the message: the caller's spelling, e.g. a flag).
        DataFormatError, IncompatibleCheckpointError, OSError: unreadable data or checkpoints.
    """
    names = [str(c) for c in checkpoints]
    models = [NCLModel.from_pretrained(name).to(device) for name in names]
    splits = [
        RetrievalSplit.from_precomp(
            evaluation_split(data_dir, split, name, model.config), load_text_vocabulary(name, model.config)
        )
        for name, model in zip(names, models, strict=True)
    ]
    check_split_size(splits[0].num_images, f"split {split!r} of {data_dir}", folds, folds_name)
    if network is None:
        hooks = [build_plugin_manager(m.config.plugins).hook if m.config.plugins else None for m in models]
    else:
        models, hooks = [m.single_network(network) for m in models], [None] * len(models)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mixed_precision)
    with torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype is not None):
        return evaluate_ensemble(
            models, splits, batch_size=batch_size, device=device, folds=folds, hooks=hooks, progress=progress
        )


def evaluation_split(data_dir: str | Path, split: str, checkpoint: str, config: Any) -> Any:
    """The split a checkpoint reads: raw images of an imagefolder through the checkpoint's own
    image processor for a pixel image tower, precomputed regions of its feature size otherwise
    (:func:`hfncl.tasks.pair_data.data_format` checks that the data fit the tower)."""
    processor = load_image_processor(checkpoint, config)
    tower_name = None if processor is None else config.image_tower_name or checkpoint
    if data_format("auto", Path(data_dir), split, tower_name) == "precomp":
        return load_precomp_split(data_dir, split, expected_feature_dim=config.image_dim)
    return load_pixel_splits(data_dir, [split], processor)[split]
