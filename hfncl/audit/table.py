"""The audit table: one row per training pair with every network's verdict and, for a flagged pair, a re-pairing."""

from __future__ import annotations

import datasets
import numpy as np

from hfncl.audit.repairing import Repairings, suggest_repairings
from hfncl.audit.training import TrainedMethod
from hfncl.retrieval import Retriever
from hfncl.types import Division

ENCODING_CHUNK = 1024
"""Images read and encoded at a time."""


def network_column(net: int) -> str:
    """The column of network ``net``'s clean probability."""
    return f"clean_prob_net{net}"


def verdicts(divisions: dict[int, Division]) -> dict[str, np.ndarray]:
    """Every network's clean probability (``clean_prob_netK``), their mean (``clean_prob``), whether the networks
    agree (all at or above 0.5, or all below), the ``rank`` (1: the lowest mean, the most suspicious; ties in pair
    order) and ``flagged``: in the noisy set of most networks, a tie going to a mean below 0.5."""
    probs = {network_column(net): d.clean_prob.detach().float().cpu().numpy() for net, d in divisions.items()}
    stacked = np.stack(list(probs.values()))
    mean = stacked.mean(axis=0)
    noisy_votes = np.stack([~d.clean.cpu().numpy() for d in divisions.values()]).mean(axis=0)
    rank = np.empty(len(mean), dtype=np.int64)
    rank[np.argsort(mean, kind="stable")] = np.arange(1, len(mean) + 1)
    return probs | {
        "clean_prob": mean,
        "agree": (stacked >= 0.5).all(axis=0) | (stacked < 0.5).all(axis=0),
        "rank": rank,
        "flagged": (noisy_votes > 0.5) | ((noisy_votes == 0.5) & (mean < 0.5)),
    }


def audit_table(trained: TrainedMethod) -> datasets.Dataset:
    """One row per training pair, in pair order: ``pair``, ``image``, ``caption``, the :func:`verdicts` and, for a
    flagged pair (``None`` otherwise), ``suggested_caption`` / ``suggested_caption_text`` /
    ``suggested_caption_similarity`` (its image's best other caption) and ``suggested_image`` /
    ``suggested_image_similarity`` (its caption's best other image) under the trained model."""
    split = trained.split
    pairs = np.arange(split.num_captions)
    images = pairs // split.captions_per_image
    columns = verdicts(trained.divisions)
    flagged = np.flatnonzero(columns["flagged"])
    repairings = _repairings(trained, flagged, images[flagged])
    captions = list(split.captions)
    suggested = _scatter(len(pairs), flagged, repairings.caption)
    table = {
        "pair": pairs,
        "image": images,
        "caption": captions,
        **columns,
        "suggested_caption": suggested,
        "suggested_caption_text": [None if c is None else captions[c] for c in suggested],
        "suggested_caption_similarity": _scatter(len(pairs), flagged, repairings.caption_similarity),
        "suggested_image": _scatter(len(pairs), flagged, repairings.image),
        "suggested_image_similarity": _scatter(len(pairs), flagged, repairings.image_similarity),
    }
    return datasets.Dataset.from_dict(table, features=_features(trained.divisions))


def _repairings(trained: TrainedMethod, pairs: np.ndarray, images: np.ndarray) -> Repairings:
    """The re-pairings of ``pairs`` (nothing encoded when there are none)."""
    if len(pairs) == 0:
        empty = np.empty(0)
        return Repairings(empty.astype(np.int64), empty, empty.astype(np.int64), empty)
    retriever = Retriever(trained.model, trained.vocab, device=trained.device)
    split = trained.split
    image_embeds = trained.model.join_embeddings(
        [
            retriever.encode_images(split.regions(np.arange(start, min(start + ENCODING_CHUNK, split.num_images))))
            for start in range(0, split.num_images, ENCODING_CHUNK)
        ]
    )
    text_embeds = retriever.encode_texts(list(split.captions))
    return suggest_repairings(retriever, image_embeds, text_embeds, pairs, images)


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
            "caption": value("string"),
            **{network_column(net): value("float64") for net in divisions},
            "clean_prob": value("float64"),
            "agree": value("bool"),
            "rank": value("int64"),
            "flagged": value("bool"),
            "suggested_caption": value("int64"),
            "suggested_caption_text": value("string"),
            "suggested_caption_similarity": value("float64"),
            "suggested_image": value("int64"),
            "suggested_image_similarity": value("float64"),
        }
    )
