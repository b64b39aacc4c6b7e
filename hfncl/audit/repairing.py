"""Suggested re-pairings of suspicious pairs under the trained model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hfncl.retrieval import Retriever

CHUNK = 1024
"""Images or captions scored against the whole gallery at a time."""


@dataclass(frozen=True)
class Repairings:
    """For each pair asked about, by position in the query: its image's best other caption and its caption's best
    other image, with the model's similarity of each."""

    caption: np.ndarray
    caption_similarity: np.ndarray
    image: np.ndarray
    image_similarity: np.ndarray


def suggest_repairings(
    retriever: Retriever, image_embeds: torch.Tensor, text_embeds: torch.Tensor, pairs: np.ndarray, images: np.ndarray
) -> Repairings:
    """For pair ``pairs[j]`` (its caption's position) shown with image ``images[j]``: the caption other than its own
    that the model scores highest with ``images[j]`` (ranking captions for the image, ``"i2t"``) and the image other
    than ``images[j]`` that it scores highest with the pair's caption (ranking images for the caption, ``"t2i"``).

    ``image_embeds`` (K, N, ...) and ``text_embeds`` (K, M, ...) encode every image and caption of the split; the
    queries are scored :data:`CHUNK` at a time against the whole other side, so no (N, M) matrix is held.
    """
    caption, caption_similarity = _best_other(retriever, image_embeds, text_embeds, images, pairs, "i2t")
    image, image_similarity = _best_other(retriever, image_embeds, text_embeds, pairs, images, "t2i")
    return Repairings(caption, caption_similarity, image, image_similarity)


def _best_other(
    retriever: Retriever,
    image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    queries: np.ndarray,
    excluded: np.ndarray,
    direction: str,
) -> tuple[np.ndarray, np.ndarray]:
    """For each query (an image for ``"i2t"``, a caption for ``"t2i"``), the best gallery item but ``excluded[j]``."""
    best = np.empty(len(queries), dtype=np.int64)
    score = np.empty(len(queries), dtype=np.float64)
    for start in range(0, len(queries), CHUNK):
        rows = torch.as_tensor(queries[start : start + CHUNK])
        if direction == "i2t":
            scores = retriever.similarity(image_embeds[:, rows], text_embeds, direction)
        else:
            scores = retriever.similarity(image_embeds, text_embeds[:, rows], direction).t()
        scores = scores.float().cpu()
        scores[torch.arange(len(rows)), torch.as_tensor(excluded[start : start + CHUNK])] = -torch.inf
        values, indices = scores.max(dim=1)
        best[start : start + len(rows)], score[start : start + len(rows)] = indices.numpy(), values.numpy()
    return best, score
