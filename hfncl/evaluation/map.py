"""Mean average precision over the full ranking, for category-labelled cross-modal retrieval.

A query retrieves every item of the other modality's gallery, ranked by cosine
similarity (highest first); a retrieved item is relevant iff it has the query's label.
For a query with R relevant items at ranks k_1 < ... < k_R (1-based),
AP = (1/R) sum_r r / k_r, i.e. the mean of the precision at each relevant item; mAP is
the mean over queries. This is the "mAP@all" of the category cross-modal retrieval
literature (e.g. the evaluation code published with DSCMR and MRL):

* tied scores share one cut-off: a relevant item's precision counts every item
  scoring at least as high (scikit-learn's ``average_precision_score`` treats ties the
  same way), so ties never favour the query and the gallery order does not matter;
* a query without any relevant item in the gallery has AP 0 and still counts in the
  mean (as in that code);
* embeddings holding NaN or infinite values are refused with a ``ValueError`` (broken
  weights or features); an all-zero embedding ties with everything and so scores no better
  than chance.

The similarity matrix is never held whole: queries are scored ``chunk_size`` at a
time against the full gallery, so memory is ``chunk_size x gallery`` floats.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import ArrayLike

MAP_KEYS = ("i2t_map", "t2i_map", "mean_map")


def _embeddings(values: torch.Tensor | ArrayLike, name: str) -> torch.Tensor:
    tensor = torch.as_tensor(values).detach()
    if tensor.dim() != 2 or tensor.size(0) == 0:
        raise ValueError(f"{name} must be a non-empty (N, D) matrix, got shape {tuple(tensor.shape)}")
    finite = torch.isfinite(tensor)
    if not bool(finite.all()):
        rows = (~finite).any(dim=1).nonzero().flatten()
        raise ValueError(
            f"{name} hold non-finite values (NaN or inf) in rows {rows[:5].tolist()}{' ...' if len(rows) > 5 else ''}: "
            "the model's weights or the features are broken"
        )
    return F.normalize(tensor.float(), dim=1)


def _labels(values: torch.Tensor | ArrayLike, count: int, name: str) -> torch.Tensor:
    tensor = torch.as_tensor(values).detach().reshape(-1)
    if tensor.numel() != count:
        raise ValueError(f"{name} has {tensor.numel()} labels for {count} embeddings")
    if tensor.is_floating_point() or tensor.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer class indices, got dtype {tensor.dtype}")
    return tensor.long()


@torch.no_grad()
def average_precisions(
    query_embeds: torch.Tensor | ArrayLike,
    query_labels: torch.Tensor | ArrayLike,
    gallery_embeds: torch.Tensor | ArrayLike,
    gallery_labels: torch.Tensor | ArrayLike,
    chunk_size: int = 256,
) -> np.ndarray:
    """AP of every query over the full cosine ranking of the gallery, shape (N_queries,), float64.

    Embeddings are L2-normalised here; labels are integer class indices. A relevant
    item's precision is counted over every gallery item scoring at least as high as it
    (so tied items share one cut-off), which is what sorting the gallery and reading the
    precision at each relevant item gives when there are no ties.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    queries = _embeddings(query_embeds, "query_embeds")
    gallery = _embeddings(gallery_embeds, "gallery_embeds")
    if queries.size(1) != gallery.size(1):
        raise ValueError(f"queries have dimension {queries.size(1)} but the gallery has {gallery.size(1)}")
    q_labels = _labels(query_labels, queries.size(0), "query_labels").cpu().numpy()
    g_labels = _labels(gallery_labels, gallery.size(0), "gallery_labels").cpu().numpy()
    gallery = gallery.to(queries.device)
    out = [
        _block_average_precisions(
            (queries[start : start + chunk_size] @ gallery.t()).cpu().numpy(),
            g_labels[None, :] == q_labels[start : start + chunk_size, None],
        )
        for start in range(0, queries.size(0), chunk_size)
    ]
    return np.concatenate(out)


def _block_average_precisions(scores: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """AP of each row of a (B, G) score block with its (B, G) relevance mask.

    AP = (1/R) sum over relevant items i of #{relevant j: s_j >= s_i} / #{j: s_j >= s_i}.
    Both counts come from sorted rows and ``searchsorted``: after sorting, row r is shifted
    by 4 r (cosines lie in [-1, 1]; a float32 plus the shift is exact in float64), so the
    flattened block is sorted as a whole and a search counts within the item's own row.
    """
    rows, size = scores.shape
    shift = 4.0 * np.arange(rows)
    all_sorted = (np.sort(scores, axis=1).astype(np.float64) + shift[:, None]).ravel()
    row_of = np.nonzero(relevant)[0]
    values = scores[relevant].astype(np.float64) + shift[row_of]
    per_row = relevant.sum(axis=1)
    at_least = (row_of + 1) * size - np.searchsorted(all_sorted, values, side="left")
    relevant_at_least = np.cumsum(per_row)[row_of] - np.searchsorted(np.sort(values), values, side="left")
    precision_sum = np.bincount(row_of, weights=relevant_at_least / at_least, minlength=rows)
    return np.divide(precision_sum, per_row, out=np.zeros(rows), where=per_row > 0)


def mean_average_precision(
    query_embeds: torch.Tensor | ArrayLike,
    query_labels: torch.Tensor | ArrayLike,
    gallery_embeds: torch.Tensor | ArrayLike,
    gallery_labels: torch.Tensor | ArrayLike,
    chunk_size: int = 256,
) -> float:
    """mAP over the full ranking of one retrieval direction (see :func:`average_precisions`)."""
    return float(average_precisions(query_embeds, query_labels, gallery_embeds, gallery_labels, chunk_size).mean())


def cross_modal_map(
    image_embeds: torch.Tensor | ArrayLike,
    image_labels: torch.Tensor | ArrayLike,
    text_embeds: torch.Tensor | ArrayLike,
    text_labels: torch.Tensor | ArrayLike,
    chunk_size: int = 256,
) -> dict[str, float]:
    """I2T and T2I mAP over the full ranking and their mean, keyed by :data:`MAP_KEYS`.

    Image queries retrieve from all texts (I2T) and text queries from all images (T2I).
    """
    i2t = mean_average_precision(image_embeds, image_labels, text_embeds, text_labels, chunk_size)
    t2i = mean_average_precision(text_embeds, text_labels, image_embeds, image_labels, chunk_size)
    return {"i2t_map": i2t, "t2i_map": t2i, "mean_map": float(np.mean([i2t, t2i]))}
