"""The audit table: one row per training pair with every network's verdict and, for a flagged pair, a re-pairing."""

from __future__ import annotations

from dataclasses import dataclass

import datasets
import numpy as np
import torch

from hfncl.audit.calibration import PairPValues, storey_lambda, storey_noise_rate, suspicion_order
from hfncl.audit.finite import check_finite_p_values
from hfncl.audit.scoring import PairScores, score_pairs
from hfncl.audit.training import TrainedMethod
from hfncl.data.pairs import PairSplit
from hfncl.retrieval import Retriever
from hfncl.types import Division

ENCODING_CHUNK = 1024
"""Images read and encoded at a time."""


def network_column(net: int) -> str:
    """The column of network ``net``'s clean probability."""
    return f"clean_prob_net{net}"


def method_verdicts(divisions: dict[int, Division]) -> dict[str, np.ndarray]:
    """The method's own verdict: every network's clean probability (``clean_prob_netK``), their mean
    (``clean_prob``) and whether the networks agree (all at or above 0.5, or all below); none without divisions."""
    if not divisions:
        return {}
    probs = {network_column(net): d.clean_prob.detach().float().cpu().numpy() for net, d in divisions.items()}
    stacked = np.stack(list(probs.values()))
    return probs | {
        "clean_prob": stacked.mean(axis=0),
        "agree": (stacked >= 0.5).all(axis=0) | (stacked < 0.5).all(axis=0),
    }


@dataclass(frozen=True)
class Rescored:
    """Every pair's p-values from models other than the audited one: cross-fitted (:mod:`hfncl.audit.cross_fitting`,
    every pair held out) or refit (:mod:`hfncl.audit.refit`, ``refit``: held out are the pairs the first verdict
    flagged). ``held_out`` says per pair whether the model that scored it never trained on it."""

    p_values: PairPValues
    held_out: np.ndarray
    refit: bool = False

    @classmethod
    def cross_fitted(cls, p_values: PairPValues) -> Rescored:
        return cls(p_values, np.ones(len(p_values.image), dtype=bool))

    @property
    def read_as_held_out(self) -> bool:
        """Whether Storey's estimate reads these p-values at the held-out lambda
        (:func:`~hfncl.audit.calibration.storey_lambda`): every pair held out, or a refit."""
        return self.refit or bool(np.all(self.held_out))


def model_verdicts(
    p_values: PairPValues, held_out: bool | np.ndarray = False, refit: bool = False
) -> dict[str, np.ndarray]:
    """The trained model's verdict (:mod:`hfncl.audit.calibration`): the two rank p-values (``p_image``,
    ``p_caption``), whether they come from a model that did not train on the pair (``held_out``, one for all pairs
    or one per pair: :mod:`hfncl.audit.cross_fitting`, :mod:`hfncl.audit.refit`), whether that model was refit on
    the pairs a first verdict kept (``refit``), the pair's ``similarity`` (mean of both directions), the ``rank`` (1:
    the most suspicious, :func:`~hfncl.audit.calibration.suspicion_order`) and ``flagged``: the round(pi^ M) first
    ranks, pi^ Storey's estimated noise rate at :func:`~hfncl.audit.calibration.storey_lambda` (held out when every
    pair is, or for a refit)."""
    similarity = (p_values.similarity_t2i + p_values.similarity_i2t) / 2
    order = suspicion_order(p_values.image, p_values.caption, similarity)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(1, len(order) + 1)
    held = np.broadcast_to(np.asarray(held_out, dtype=bool), (len(order),)).copy()
    rate = storey_noise_rate(p_values.image, p_values.caption, storey_lambda(refit or bool(np.all(held))))
    return {
        "p_image": p_values.image,
        "p_caption": p_values.caption,
        "held_out": held,
        "refit": np.full(len(order), refit),
        "similarity": similarity,
        "rank": rank,
        "flagged": rank <= round(rate * len(order)),
    }


def encode_images(retriever: Retriever, split: PairSplit) -> torch.Tensor:
    """Every image of ``split`` encoded by the retriever's model (K, N, ...), :data:`ENCODING_CHUNK` at a time: region
    features, or pixel values made by the format's reader."""
    return retriever.model.join_embeddings(
        [
            retriever.encode_images(split.image_inputs(np.arange(start, min(start + ENCODING_CHUNK, split.num_images))))
            for start in range(0, split.num_images, ENCODING_CHUNK)
        ]
    )


def encode_split(retriever: Retriever, split: PairSplit) -> tuple[torch.Tensor, torch.Tensor]:
    """Every image (:func:`encode_images`) and every caption of ``split`` encoded by the retriever's model."""
    return encode_images(retriever, split), retriever.encode_texts(list(split.captions))


def split_p_values(retriever: Retriever, split: PairSplit) -> PairPValues:
    """The rank p-values of ``split``'s pairs under the retriever's model, ranked among ``split``'s images and
    captions (:func:`~hfncl.audit.scoring.score_pairs`)."""
    return score_pairs(retriever, *encode_split(retriever, split), split.captions_per_image).p_values


def fold_p_values(trained: TrainedMethod, fold: PairSplit) -> PairPValues:
    """A held-out fold's p-values under the method trained without it (:func:`split_p_values` of its retriever;
    the scorer of :func:`~hfncl.audit.cross_fitting.held_out_p_values`)."""
    return split_p_values(trained.retriever(), fold)


def audit_table(trained: TrainedMethod, rescored: Rescored | None = None) -> datasets.Dataset:
    """One row per training pair, in pair order: ``pair``, ``image`` (its number in the split), ``image_id`` (its
    name in the data: :meth:`~hfncl.audit.data.AuditData.image_ids`), ``caption``, the :func:`method_verdicts` and
    :func:`model_verdicts` and, for a flagged pair (``None`` otherwise), ``suggested_caption`` /
    ``suggested_caption_text`` / ``suggested_caption_similarity`` (its image's best other caption) and
    ``suggested_image`` / ``suggested_image_similarity`` (its caption's best other image) under the trained model.

    The p-values, ranks and flags are the trained model's, or ``rescored``'s when given (cross-fitted:
    :func:`~hfncl.audit.cross_fitting.held_out_p_values`; refit: :func:`~hfncl.audit.refit.refit_p_values`); the
    method's verdicts and the re-pairings stay the trained model's. The split is encoded (:func:`encode_split`), every
    pair scored in one pass per direction (:func:`trained_scores`), and the rows built (:func:`pair_table`)."""
    return pair_table(trained, trained_scores(trained), rescored)


def trained_scores(trained: TrainedMethod) -> PairScores:
    """Every pair of the trained method's split scored by its model: the split encoded (:func:`encode_split`), then
    one pass per direction (:func:`~hfncl.audit.scoring.score_pairs`)."""
    retriever = trained.retriever()
    return score_pairs(retriever, *encode_split(retriever, trained.data.split), trained.data.split.captions_per_image)


def pair_table(trained: TrainedMethod, scores: PairScores, rescored: Rescored | None = None) -> datasets.Dataset:
    """:func:`audit_table`'s rows from the trained model's ``scores`` of the split (``rescored``'s p-values, ranks
    and flags instead of the model's when given). A non-finite similarity or p-value is refused
    (:func:`~hfncl.audit.finite.check_finite_p_values`)."""
    check_finite_p_values(scores.p_values, "the trained model's")
    if rescored is not None:
        check_finite_p_values(rescored.p_values, "the held-out or refit model's")
    split = trained.data.split
    pairs = np.arange(split.num_captions)
    images = pairs // split.captions_per_image
    verdicts = (
        model_verdicts(scores.p_values)
        if rescored is None
        else model_verdicts(rescored.p_values, rescored.held_out, rescored.refit)
    )
    columns = method_verdicts(trained.divisions) | verdicts
    flagged = np.flatnonzero(columns["flagged"])
    repairings = scores.repairings
    captions = list(split.captions)
    suggested = _scatter(len(pairs), flagged, repairings.caption[flagged])
    table = {
        "pair": pairs,
        "image": images,
        "image_id": np.asarray(trained.data.image_ids(), dtype=object)[images].tolist(),
        "caption": captions,
        **columns,
        "suggested_caption": suggested,
        "suggested_caption_text": [None if c is None else captions[c] for c in suggested],
        "suggested_caption_similarity": _scatter(len(pairs), flagged, repairings.caption_similarity[flagged]),
        "suggested_image": _scatter(len(pairs), flagged, repairings.image[flagged]),
        "suggested_image_similarity": _scatter(len(pairs), flagged, repairings.image_similarity[flagged]),
    }
    return datasets.Dataset.from_dict(table, features=_features(trained.divisions))


def _scatter(size: int, positions: np.ndarray, values: np.ndarray) -> list:
    """A list of ``size`` entries: ``values`` at ``positions``, ``None`` elsewhere."""
    out: list = [None] * size
    for position, value in zip(positions.tolist(), values.tolist(), strict=True):
        out[position] = value
    return out


def _features(divisions: dict[int, Division]) -> datasets.Features:
    """The table's column types (stated, so that a table without flagged pairs keeps them)."""
    value = datasets.Value
    return datasets.Features(
        {
            "pair": value("int64"),
            "image": value("int64"),
            "image_id": value("string"),
            "caption": value("string"),
            **{network_column(net): value("float64") for net in divisions},
            **({"clean_prob": value("float64"), "agree": value("bool")} if divisions else {}),
            "p_image": value("float64"),
            "p_caption": value("float64"),
            "held_out": value("bool"),
            "refit": value("bool"),
            "similarity": value("float64"),
            "rank": value("int64"),
            "flagged": value("bool"),
            "suggested_caption": value("int64"),
            "suggested_caption_text": value("string"),
            "suggested_caption_similarity": value("float64"),
            "suggested_image": value("int64"),
            "suggested_image_similarity": value("float64"),
        }
    )
