"""How unlike a wrong pair each pair looks to the trained model, and how many pairs are wrong.

A wrong pair (a caption shown with an image it does not describe) is, to the model, a caption and an image drawn
apart: its image ranks among all images for its caption like any other image, so the rank's p-value is uniform
on (0, 1]. A right pair's image ranks near the top, its p-value near 0. The p-values of a split are therefore a
mixture, (1 - pi) * (right pairs' near 0) + pi * uniform, and Storey's estimator reads pi off the pairs whose
p-value exceeds lambda, where right pairs are rare (J. D. Storey, J. R. Stat. Soc. B 64, 2002, 479-498, Eq. 6):

    pi^(lambda) = #{p_i > lambda} / (M (1 - lambda))

Both directions give a p-value: the rank of the pair's image among the N images for its caption (``p_image``)
and of its caption among the captions of the other images for its image (``p_caption``). The audit's estimate
averages the two directions' counts. The estimate needs no assumption on how a method divides: on clean data
few pairs exceed lambda and it is near 0, where a two-component mixture always finds a second component.

A wrong pair the model has partly learnt ranks higher than a fresh random one, which biases pi^ low; a small
lambda keeps more of them in the count. :data:`LAMBDA` 0.05 is chosen on the generated benchmark
(``benchmarks/audit.py``, ``benchmarks/README.md``). How much a model learns of the wrong pairs depends on the data
and the schedule, so in-sample no lambda holds everywhere; p-values of a model that never trained on the pairs
(:mod:`hfncl.audit.cross_fitting`) are uniform for wrong pairs and read with :data:`HELD_OUT_LAMBDA`. There the
estimate errs the other way: a right pair the model cannot match counts as wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hfncl.retrieval import Retriever

LAMBDA = 0.05
"""Storey's lambda for in-sample p-values: pairs whose p-value exceeds it are counted as wrong, the count scaled by
1 / (1 - lambda)."""
HELD_OUT_LAMBDA = 0.5
"""Storey's lambda for held-out p-values (:mod:`hfncl.audit.cross_fitting`), Storey's own choice: a wrong pair's
p-value is uniform there, so half of the wrong pairs exceed it, and only the right pairs the model cannot match do."""


def storey_lambda(held_out: bool) -> float:
    """:data:`HELD_OUT_LAMBDA` for p-values of a model that did not train on the pairs, else :data:`LAMBDA`."""
    return HELD_OUT_LAMBDA if held_out else LAMBDA
CHUNK = 256
"""Images or captions scored against the whole other side at a time."""


@dataclass(frozen=True)
class PairPValues:
    """Per pair: its image's rank p-value among all images for its caption (``image``), its caption's among the other
    images' captions for its image (``caption``), and the model's similarity of the pair in each direction."""

    image: np.ndarray
    caption: np.ndarray
    similarity_t2i: np.ndarray
    similarity_i2t: np.ndarray


def pair_p_values(
    retriever: Retriever, image_embeds: torch.Tensor, text_embeds: torch.Tensor, captions_per_image: int
) -> PairPValues:
    """The rank p-values of every pair of a precomp split, pair ``c`` being caption ``c`` with image ``c // k``.

    ``p_image[c] = (1 + #{j != c // k: S_t2i(j, c) >= S_t2i(c // k, c)}) / N`` over the N images and
    ``p_caption[c] = (1 + #{c' of another image: S_i2t(c // k, c') >= S_i2t(c // k, c)}) / (M - k + 1)``, both in
    (0, 1] and uniform for a caption and image drawn independently. Scored :data:`CHUNK` rows at a time, so no
    (N, M) matrix is held.
    """
    k = captions_per_image
    n, m = image_embeds.size(1), text_embeds.size(1)
    image_of = torch.arange(m) // k
    p_image, p_caption = np.empty(m), np.empty(m)
    sim_t2i, sim_i2t = np.empty(m), np.empty(m)
    for start in range(0, m, CHUNK):
        columns = torch.arange(start, min(start + CHUNK, m))
        scores = retriever.similarity(image_embeds, text_embeds[:, columns], "t2i").float().cpu()  # (N, chunk)
        own = scores[image_of[columns], torch.arange(len(columns))]
        p_image[columns] = (((scores >= own).sum(dim=0)).numpy()) / n  # the own image counts as the 1
        sim_t2i[columns] = own.numpy()
    for start in range(0, n, CHUNK):
        rows = torch.arange(start, min(start + CHUNK, n))
        scores = retriever.similarity(image_embeds[:, rows], text_embeds, "i2t").float().cpu()  # (chunk, M)
        own_columns = rows[:, None] * k + torch.arange(k)  # (chunk, k)
        own = scores.gather(1, own_columns)
        scores.scatter_(1, own_columns, -torch.inf)  # the image's own captions are not its competitors
        ranked = scores.sort(dim=1).values
        better = m - torch.searchsorted(ranked, own.contiguous(), side="left")  # (chunk, k): scores >= own
        p_caption[own_columns.flatten().numpy()] = ((better + 1).flatten().numpy()) / (m - k + 1)
        sim_i2t[own_columns.flatten().numpy()] = own.flatten().numpy()
    return PairPValues(p_image, p_caption, sim_t2i, sim_i2t)


def exceeding(p_image: np.ndarray, p_caption: np.ndarray, lam: float = LAMBDA) -> float:
    """Storey's count of the pairs above ``lam``, averaged over the two directions."""
    return float((np.count_nonzero(p_image > lam) + np.count_nonzero(p_caption > lam)) / 2)


def storey_noise_rate(p_image: np.ndarray, p_caption: np.ndarray, lam: float = LAMBDA) -> float:
    """pi^(lambda) of Storey's Eq. 6, from both directions' p-values (:func:`exceeding`), clipped to [0, 1]."""
    if not 0 <= lam < 1:
        raise ValueError(f"lambda must lie in [0, 1), got {lam}")
    return min(1.0, exceeding(p_image, p_caption, lam) / (len(p_image) * (1 - lam)))


def suspicion_order(p_image: np.ndarray, p_caption: np.ndarray, similarity: np.ndarray) -> np.ndarray:
    """The pairs, most suspicious first: by the mean of the two p-values, descending; ties by the pair's
    similarity, ascending, then by pair order."""
    return np.lexsort((np.arange(len(similarity)), similarity, -(p_image + p_caption) / 2))
