"""Encoding a test split with every network and scoring retrieval on it."""

from __future__ import annotations

from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass
from typing import cast

import torch

from hfncl.data import CaptionDataset, ImageDataset, collate_captions, collate_images
from hfncl.engine.progress import progress_bar
from hfncl.evaluation import coco_5fold_metrics, retrieval_metrics
from hfncl.retrieval import direction_similarity

SCORE_CACHE_BYTES = 2**30
"""Largest similarity matrix evaluation keeps whole instead of scoring its rows again (1K x 5K: 20 MB)."""


@dataclass
class RetrievalSplit:
    """What evaluation needs of a split: its unique images and all their captions.

    ``images`` yields dicts with ``image``, one image's input (region features (R, D) or
    pixel values (C, H, W)); ``captions`` yields dicts with ``caption`` token ids;
    caption ``c`` describes image ``c // captions_per_image``.
    """

    images: torch.utils.data.Dataset
    captions: torch.utils.data.Dataset
    captions_per_image: int

    @classmethod
    def from_precomp(cls, split, vocab) -> "RetrievalSplit":
        """The evaluation view of a split (:class:`hfncl.data.PairSplit`: a :class:`hfncl.data.PrecompSplit` of
        region features or a :class:`hfncl.data.PixelSplit` of raw images)."""
        return cls(ImageDataset(split), CaptionDataset(split, vocab), split.captions_per_image)

    @property
    def num_images(self) -> int:
        return len(cast(Sized, self.images))

    @property
    def num_captions(self) -> int:
        return len(cast(Sized, self.captions))


@torch.no_grad()
def encode_split(
    model, split: RetrievalSplit, *, batch_size: int, device: torch.device | str = "cpu", progress: bool = False
):
    """(K, N, d) image and (K, N*k, d) caption embeddings of every network of ``model`` (packed local
    features (K, N, R, d + 1) and (K, N*k, T, d + 1) for SGR / SAF / SCAN heads, T the longest caption);
    ``progress`` shows a bar over the batches."""
    was_training = model.training
    model.eval()
    try:
        image_loader = torch.utils.data.DataLoader(split.images, batch_size=batch_size, collate_fn=collate_images)
        caption_loader = torch.utils.data.DataLoader(split.captions, batch_size=batch_size, collate_fn=collate_captions)
        images = progress_bar(image_loader, "encoding images", progress)
        image_embeds = model.join_embeddings([model.encode_image(b["images"].to(device)) for b in images])
        text_embeds = model.join_embeddings(
            [
                model.encode_text(b["captions"].to(device), b["lengths"].to(device))
                for b in progress_bar(caption_loader, "encoding captions", progress)
            ]
        )
    finally:
        model.train(was_training)
    return image_embeds, text_embeds


def evaluate_retrieval(
    model,
    split: RetrievalSplit,
    *,
    batch_size: int = 256,
    device: torch.device | str = "cpu",
    folds: int = 1,
    hook=None,
    progress: bool = False,
) -> dict[str, float]:
    """i2t / t2i R@1/5/10, rSum, medr, meanr of ``model`` on a split.

    The similarity is ``model.similarity`` (averaged over networks and views) unless a
    plugin of ``hook`` (the relay of a plugin manager) answers ``inference_similarity``,
    possibly differently per direction. On the whole split; with ``folds > 1`` also
    averaged over that many consecutive folds, under keys prefixed ``fold_`` (MS-COCO:
    5 folds of 1K test images next to the full 5K). Every process encodes the whole
    split, so every process reports the same metrics. ``progress`` shows bars for encoding and scoring.
    """
    return evaluate_ensemble(
        [model], [split], batch_size=batch_size, device=device, folds=folds, hooks=[hook], progress=progress
    )


def evaluate_ensemble(
    models: Sequence,
    splits: Sequence[RetrievalSplit],
    *,
    batch_size: int = 256,
    device: torch.device | str = "cpu",
    folds: int = 1,
    hooks: Sequence | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """Retrieval metrics (as :func:`evaluate_retrieval`) of the mean similarity of several models.

    SGRAF's evaluation: the similarities of an SGR and a SAF model, averaged. Model ``i``
    encodes ``splits[i]`` (the same images and captions, tokenised with its own
    vocabulary) and scores it as :func:`direction_similarity` with ``hooks[i]`` says; the
    ensemble's score of a pair is the mean of the members' scores, per direction.
    The mean similarity matrix is scored once and kept when it fits
    :data:`SCORE_CACHE_BYTES` (else streamed over blocks of image rows, scored per pass);
    no member's own matrix is ever held.
    """
    hooks = [None] * len(models) if hooks is None else list(hooks)
    if not models or len(splits) != len(models) or len(hooks) != len(models):
        raise ValueError(
            f"evaluate_ensemble needs one split and one hook per model, got {len(models)} models, "
            f"{len(splits)} splits and {len(hooks)} hooks"
        )
    sizes = {(split.num_images, split.num_captions, split.captions_per_image) for split in splits}
    if len(sizes) != 1:
        raise ValueError(
            f"the models' splits must hold the same images and captions, got (images, captions, k) {sizes}"
        )
    was_training = [model.training for model in models]
    for model in models:
        model.eval()  # scoring in eval mode: the heads' chunked path, batch-independent scores
    try:
        return _ensemble_metrics(models, splits, hooks, batch_size, device, folds, progress)
    finally:
        for model, training in zip(models, was_training, strict=True):
            model.train(training)


def _ensemble_metrics(
    models: Sequence,
    splits: Sequence[RetrievalSplit],
    hooks: list,
    batch_size: int,
    device,
    folds: int,
    progress: bool,
) -> dict[str, float]:
    i2t_members, t2i_members = [], []
    for model, split, hook in zip(models, splits, hooks, strict=True):
        image_embeds, text_embeds = encode_split(model, split, batch_size=batch_size, device=device, progress=progress)
        i2t, t2i = direction_similarity(model, hook, "i2t"), direction_similarity(model, hook, "t2i")
        i2t_members.append(_bound_scorer(i2t, image_embeds, text_embeds))
        t2i_members.append(None if t2i == i2t else _bound_scorer(t2i, image_embeds, text_embeds))
    num_images, captions_per_image = splits[0].num_images, splits[0].captions_per_image
    num_captions = splits[0].num_captions
    i2t_rows = _scored_once(_mean_scorer(i2t_members), num_images, num_captions, progress=progress)
    t2i_rows = None
    if any(member is not None for member in t2i_members):  # some member ranks captions differently
        t2i_scorer = _mean_scorer([t or i for t, i in zip(t2i_members, i2t_members, strict=True)])
        t2i_rows = _scored_once(t2i_scorer, num_images, num_captions, progress=progress)
    metrics = retrieval_metrics(i2t_rows, num_images, captions_per_image, t2i_score_rows=t2i_rows)
    if folds > 1:
        averaged = coco_5fold_metrics(
            i2t_rows, num_images, captions_per_image, folds=folds, t2i_score_rows=t2i_rows
        )
        metrics.update({f"fold_{k}": v for k, v in averaged.items()})
    return metrics


def _bound_scorer(
    similarity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
) -> Callable[[slice], torch.Tensor]:
    """Row scorer: the similarity of the images ``rows`` with every caption."""
    return lambda rows: similarity(image_embeds[:, rows], text_embeds)


def _scored_once(
    score_rows: Callable[[slice], torch.Tensor],
    num_images: int,
    num_captions: int,
    chunk_size: int = 1000,
    progress: bool = False,
) -> Callable[[slice], torch.Tensor]:
    """``score_rows`` computing every row once, when the (N, N * k) float32 matrix fits :data:`SCORE_CACHE_BYTES`.

    The metrics visit every row block twice (and once more per fold); an SGR / SAF / SCAN head
    costs far more per pair than the matrix costs to keep, so the matrix is scored on the
    first request, in blocks of ``chunk_size`` rows, and sliced afterwards. A larger
    matrix is streamed as before: every request scores its rows. ``progress`` shows a bar over the blocks.
    """
    if num_images * num_captions * 4 > SCORE_CACHE_BYTES:
        return score_rows
    matrix: list[torch.Tensor] = []

    def rows(requested: slice) -> torch.Tensor:
        if not matrix:
            starts = progress_bar(range(0, num_images, chunk_size), "scoring", progress)
            blocks = [score_rows(slice(a, min(a + chunk_size, num_images))) for a in starts]
            matrix.append(torch.cat(blocks))
        return matrix[0][requested]

    return rows


def _mean_scorer(members: list[Callable[[slice], torch.Tensor]]) -> Callable[[slice], torch.Tensor]:
    """Row scorer averaging the members' row blocks (the member itself when there is one)."""
    if len(members) == 1:
        return members[0]
    return lambda rows: torch.stack([member(rows) for member in members]).mean(dim=0)
