"""Every pair of a split scored by the trained model in one pass per direction: its rank p-values
(:mod:`hfncl.audit.calibration`) and a suggested re-pairing (its image's best other caption, its caption's best other
image).

Both need every image against every caption, (N, M) scores: 2e9 at 100K pairs of 5 captions per image. They are made
a block at a time (:data:`CHUNK_SCORES` scores, whole columns or rows), and each block is read once for both, so the
memory stays bounded and the work is the two similarity passes (N x M each) and a few comparisons per score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hfncl.audit.calibration import PairPValues
from hfncl.retrieval import Retriever

CHUNK_SCORES = 2**24
"""Scores held at a time (64 MB of float32, times the model's networks while it averages them): the block is as many
whole columns (captions) or rows (images) as fit, at least one."""


@dataclass(frozen=True)
class Repairings:
    """For every pair (by caption position): the caption other than its own that the model scores highest with its
    image (``caption``, ranking captions for the image) and the image other than its own that it scores highest with
    its caption (``image``, ranking images for the caption), with the model's similarity of each; ties go to the
    first."""

    caption: np.ndarray
    caption_similarity: np.ndarray
    image: np.ndarray
    image_similarity: np.ndarray


@dataclass(frozen=True)
class PairScores:
    """What :func:`score_pairs` reads off the similarities: the pairs' p-values and their re-pairings."""

    p_values: PairPValues
    repairings: Repairings


def score_pairs(
    retriever: Retriever, image_embeds: torch.Tensor, text_embeds: torch.Tensor, captions_per_image: int
) -> PairScores:
    """The rank p-values and re-pairings of every pair of a precomp split, pair ``c`` being caption ``c`` with image
    ``c // k``, under the retriever's similarity in each direction.

    ``p_image[c] = (1 + #{j != c // k: S_t2i(j, c) >= S_t2i(c // k, c)}) / N`` over the N images and
    ``p_caption[c] = (1 + #{c' of another image: S_i2t(c // k, c') >= S_i2t(c // k, c)}) / (M - k + 1)``, both in
    (0, 1] and uniform for a caption and image drawn independently. ``image_embeds`` (K, N, ...) and ``text_embeds``
    (K, M, ...) encode every image and caption of the split.
    """
    image, similarity_t2i, best_image, best_image_similarity = _rank_images(
        retriever, image_embeds, text_embeds, captions_per_image
    )
    caption, similarity_i2t, best_caption, best_caption_similarity = _rank_captions(
        retriever, image_embeds, text_embeds, captions_per_image
    )
    return PairScores(
        PairPValues(image, caption, similarity_t2i, similarity_i2t),
        Repairings(best_caption, best_caption_similarity, best_image, best_image_similarity),
    )


def block_size(gallery: int) -> int:
    """Queries scored at a time against a gallery of ``gallery`` items (:data:`CHUNK_SCORES`)."""
    return max(1, CHUNK_SCORES // max(gallery, 1))


def _rank_images(
    retriever: Retriever, image_embeds: torch.Tensor, text_embeds: torch.Tensor, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per caption (``"t2i"``, blocks of whole columns): the p-value of its own image, the pair's similarity, and
    its best other image with that image's similarity."""
    n, m = image_embeds.size(1), text_embeds.size(1)
    p_value, similarity = np.empty(m), np.empty(m)
    best, best_similarity = np.empty(m, dtype=np.int64), np.empty(m)
    step = block_size(n)
    for start in range(0, m, step):
        stop = min(start + step, m)
        scores = retriever.similarity(image_embeds, text_embeds[:, start:stop], "t2i").float().cpu()  # (N, chunk)
        columns = torch.arange(stop - start)
        own_rows = torch.arange(start, stop) // k
        own = scores[own_rows, columns]
        p_value[start:stop] = (scores >= own).sum(dim=0, dtype=torch.int32).numpy() / n  # the own image counts as the 1
        similarity[start:stop] = own.numpy()
        scores[own_rows, columns] = -torch.inf
        values, indices = scores.max(dim=0)
        best[start:stop], best_similarity[start:stop] = indices.numpy(), values.numpy()
    return p_value, similarity, best, best_similarity


def _rank_captions(
    retriever: Retriever, image_embeds: torch.Tensor, text_embeds: torch.Tensor, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per caption (``"i2t"``, blocks of whole rows: its image's k captions together): the p-value of the caption
    among the other images' captions for its image, the pair's similarity, and its image's best caption but itself
    with that caption's similarity (the image's best caption, or its second best for the best one)."""
    n, m = image_embeds.size(1), text_embeds.size(1)
    p_value, similarity = np.empty(m), np.empty(m)
    best, best_similarity = np.empty(m, dtype=np.int64), np.empty(m)
    step = block_size(m)
    for start in range(0, n, step):
        stop = min(start + step, n)
        scores = retriever.similarity(image_embeds[:, start:stop], text_embeds, "i2t").float().cpu()  # (chunk, M)
        rows = torch.arange(stop - start)
        own_columns = torch.arange(start, stop)[:, None] * k + torch.arange(k)  # (chunk, k)
        own = scores.gather(1, own_columns)
        at_least = torch.stack([(scores >= own[:, [j]]).sum(dim=1, dtype=torch.int32) for j in range(k)], dim=1)
        own_at_least = (own[:, None, :] >= own[:, :, None]).sum(dim=2)  # the image's own captions are no competitors
        pairs = own_columns.flatten().numpy()
        p_value[pairs] = ((at_least - own_at_least + 1).flatten().numpy()) / (m - k + 1)
        similarity[pairs] = own.flatten().numpy()
        first_values, first = scores.max(dim=1)
        scores[rows, first] = -torch.inf
        second_values, second = scores.max(dim=1)
        is_first = own_columns == first[:, None]  # the pair whose caption is its image's best gets the second best
        best[pairs] = torch.where(is_first, second[:, None], first[:, None]).flatten().numpy()
        best_similarity[pairs] = torch.where(is_first, second_values[:, None], first_values[:, None]).flatten().numpy()
    return p_value, similarity, best, best_similarity
