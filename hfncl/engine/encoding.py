"""Encoding a test split with every network and scoring retrieval on it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from hfncl.data import CaptionDataset, ImageDataset, collate_captions, collate_images
from hfncl.evaluation import coco_5fold_metrics, retrieval_metrics


@dataclass
class RetrievalSplit:
    """What evaluation needs of a split: its unique images and all their captions.

    ``images`` yields dicts with ``images`` (R, D) per image; ``captions`` yields dicts
    with ``caption`` token ids; caption ``c`` describes image ``c // captions_per_image``.
    """

    images: torch.utils.data.Dataset
    captions: torch.utils.data.Dataset
    captions_per_image: int

    @classmethod
    def from_precomp(cls, split, vocab) -> "RetrievalSplit":
        """The evaluation view of a :class:`hfncl.data.PrecompSplit`."""
        return cls(ImageDataset(split), CaptionDataset(split, vocab), split.captions_per_image)

    @property
    def num_images(self) -> int:
        return len(self.images)


@torch.no_grad()
def encode_split(model, split: RetrievalSplit, *, batch_size: int, device: torch.device | str = "cpu"):
    """(K, N, d) image and (K, N*k, d) caption embeddings of every network of ``model``."""
    was_training = model.training
    model.eval()
    try:
        image_loader = torch.utils.data.DataLoader(split.images, batch_size=batch_size, collate_fn=collate_images)
        caption_loader = torch.utils.data.DataLoader(split.captions, batch_size=batch_size, collate_fn=collate_captions)
        image_embeds = torch.cat([model.encode_image(b["images"].to(device)) for b in image_loader], dim=1)
        text_embeds = torch.cat(
            [model.encode_text(b["captions"].to(device), b["lengths"].to(device)) for b in caption_loader], dim=1
        )
    finally:
        model.train(was_training)
    return image_embeds, text_embeds


def direction_similarity(model, hook, direction: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The similarity ``(image_embeds, text_embeds) -> (n, m)`` that ranks in ``direction``.

    A plugin's ``inference_similarity`` answer where one gives it, else ``model.similarity``
    (also when ``hook`` is ``None`` or no active plugin implements the hook).
    """
    if hook is None or not hook.inference_similarity.get_hookimpls():
        return model.similarity

    def similarity(image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        answer = hook.inference_similarity(
            model=model, image_embeds=image_embeds, text_embeds=text_embeds, direction=direction
        )
        return model.similarity(image_embeds, text_embeds) if answer is None else answer

    return similarity


def evaluate_retrieval(
    model,
    split: RetrievalSplit,
    *,
    batch_size: int = 256,
    device: torch.device | str = "cpu",
    folds: int = 1,
    hook=None,
) -> dict[str, float]:
    """i2t / t2i R@1/5/10, rSum, medr, meanr of ``model`` on a split.

    The similarity is ``model.similarity`` (averaged over networks and views) unless a
    plugin of ``hook`` (the relay of a plugin manager) answers ``inference_similarity``,
    possibly differently per direction. On the whole split; with ``folds > 1`` also
    averaged over that many consecutive folds, under keys prefixed ``fold_`` (MS-COCO:
    5 folds of 1K test images next to the full 5K). Every process encodes the whole
    split, so every process reports the same metrics.
    """
    image_embeds, text_embeds = encode_split(model, split, batch_size=batch_size, device=device)
    i2t, t2i = direction_similarity(model, hook, "i2t"), direction_similarity(model, hook, "t2i")
    if t2i == i2t:  # both are model.similarity: score the rows once
        t2i = None

    def scorer(similarity) -> Callable[[slice], torch.Tensor] | None:
        if similarity is None:
            return None
        return lambda rows: similarity(image_embeds[:, rows], text_embeds)

    metrics = retrieval_metrics(
        scorer(i2t), split.num_images, split.captions_per_image, t2i_score_rows=scorer(t2i)
    )
    if folds > 1:
        averaged = coco_5fold_metrics(
            scorer(i2t), split.num_images, split.captions_per_image, folds=folds, t2i_score_rows=scorer(t2i)
        )
        metrics.update({f"fold_{k}": v for k, v in averaged.items()})
    return metrics
