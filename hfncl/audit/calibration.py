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

LAMBDA = 0.05
"""Storey's lambda for in-sample p-values: pairs whose p-value exceeds it are counted as wrong, the count scaled by
1 / (1 - lambda)."""
HELD_OUT_LAMBDA = 0.5
"""Storey's lambda for held-out p-values (:mod:`hfncl.audit.cross_fitting`), Storey's own choice: a wrong pair's
p-value is uniform there, so half of the wrong pairs exceed it, and only the right pairs the model cannot match do."""


def storey_lambda(held_out: bool) -> float:
    """:data:`HELD_OUT_LAMBDA` for p-values of a model that did not train on the pairs, else :data:`LAMBDA`."""
    return HELD_OUT_LAMBDA if held_out else LAMBDA


@dataclass(frozen=True)
class PairPValues:
    """Per pair: its image's rank p-value among all images for its caption (``image``), its caption's among the other
    images' captions for its image (``caption``), and the model's similarity of the pair in each direction."""

    image: np.ndarray
    caption: np.ndarray
    similarity_t2i: np.ndarray
    similarity_i2t: np.ndarray


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
