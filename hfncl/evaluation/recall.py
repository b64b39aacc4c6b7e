"""Image-text retrieval recall (R@K, rSum) and ranks, computed in streaming fashion.

Conventions: ``N`` images, each with ``k`` captions (``k = 5`` for Flickr30K and
MS-COCO, ``1`` for CC152K); caption ``c`` belongs to image ``c // k``. A similarity
matrix ``S`` has shape ``(N, N * k)`` and ``S[i, c]`` scores image ``i`` against
caption ``c`` (higher means more similar).

The evaluator never holds ``S`` whole: it asks a *row scorer* for blocks of rows,
``score_rows(slice(a, b)) -> S[a:b]``, so a 5K x 25K evaluation needs one
``chunk_size x N * k`` block at a time. The metrics follow SCAN's evaluation code
(R@K in percent, ranks 0-based internally, median / mean rank reported 1-based),
with one documented difference: ties are resolved pessimistically. A query's rank
is the number of wrong candidates scoring *at least as high* as its ground truth,
whereas SCAN's ``argsort`` places tied candidates in an arbitrary order; a constant
similarity therefore ranks every query last, at chance level, never at the top. With
continuous scores ties do not occur and both rules agree. A block holding NaN or
infinite similarities is refused with a ``ValueError``: such scores come from broken
weights or features and no ranking of them means anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

RowScorer = Callable[[slice], torch.Tensor]

RECALL_KEYS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10")
RANK_KEYS = ("i2t_medr", "i2t_meanr", "t2i_medr", "t2i_meanr")
_RECALL_AT = (1, 5, 10)


def check_split_size(num_images: int, name: str, folds: int = 1, folds_name: str = "folds") -> None:
    """Refuse a split whose recalls would not say anything: ``folds`` that do not divide its ``num_images`` into
    equal folds, or a split (or fold) of at most ``K`` images for the largest ``K`` of R@K (10), where every
    caption finds its image among the top ``K`` (t2i R@10 is 100%; one image scores rSum 600).

    ``name`` names the split in the message (``"test split 'test'"``), ``folds_name`` the setting of the folds.

    Raises:
        ValueError: one line naming the split, its size and what it needs.
    """
    largest = max(_RECALL_AT)
    if folds < 1:
        raise ValueError(f"{folds_name} must be >= 1, got {folds}")
    if num_images % folds:
        raise ValueError(f"{folds_name} {folds}: the {name} has {num_images} images, not {folds} equal folds")
    if num_images // folds <= largest:
        where = f" per fold ({folds_name} {folds})" if folds > 1 else ""
        raise ValueError(
            f"the {name} has {num_images // folds} images{where}; retrieval is scored on more than {largest} "
            f"(with {largest} or fewer, R@{largest} is 100% for every caption)"
        )


def _row_chunks(num_rows: int, chunk_size: int) -> list[slice]:
    """Consecutive slices of at most ``chunk_size`` rows covering ``range(num_rows)``."""
    return [slice(a, min(a + chunk_size, num_rows)) for a in range(0, num_rows, chunk_size)]


def _checked_chunk(score_rows: RowScorer, rows: slice, num_captions: int) -> torch.Tensor:
    """Call the scorer for ``rows``; check the block has the promised shape and finite values."""
    block = score_rows(rows)
    expected = (rows.stop - rows.start, num_captions)
    if tuple(block.shape) != expected:
        raise ValueError(
            f"score_rows({rows.start}:{rows.stop}) returned shape {tuple(block.shape)}, "
            f"expected {expected}"
        )
    finite = torch.isfinite(block)
    if not bool(finite.all()):
        bad_rows = (~finite).any(dim=1).nonzero().flatten() + rows.start
        raise ValueError(
            f"similarity rows {rows.start}:{rows.stop} hold {int((~finite).sum())} non-finite values (NaN or inf) "
            f"in image rows {bad_rows[:5].tolist()}{' ...' if len(bad_rows) > 5 else ''}: "
            "the model's weights or the features are broken"
        )
    return block


def _own_columns(rows: slice, captions_per_image: int, device: torch.device) -> torch.Tensor:
    """Column indices of each image's own captions, shape ``(rows, k)``."""
    first = torch.arange(rows.start, rows.stop, device=device) * captions_per_image
    return first[:, None] + torch.arange(captions_per_image, device=device)


def _summarize(ranks: torch.Tensor, prefix: str) -> dict[str, float]:
    """R@1/5/10 in percent and SCAN's 1-based median and mean rank of 0-based ``ranks``."""
    ranks_np = ranks.cpu().numpy()
    metrics = {f"{prefix}_r{k}": 100.0 * float(np.mean(ranks_np < k)) for k in _RECALL_AT}
    metrics[f"{prefix}_medr"] = float(math.floor(np.median(ranks_np)) + 1)
    metrics[f"{prefix}_meanr"] = float(ranks_np.mean() + 1)
    return metrics


def _assemble(i2t_ranks: torch.Tensor, t2i_ranks: torch.Tensor) -> dict[str, float]:
    """The flat metric dictionary: six recalls, ``rsum`` (their sum), then the rank statistics."""
    summary = _summarize(i2t_ranks, "i2t") | _summarize(t2i_ranks, "t2i")
    metrics = {key: summary[key] for key in RECALL_KEYS}
    metrics["rsum"] = sum(metrics.values())
    return metrics | {key: summary[key] for key in RANK_KEYS}


@torch.no_grad()
def retrieval_metrics(
    score_rows: RowScorer,
    num_images: int,
    captions_per_image: int,
    chunk_size: int = 1000,
    t2i_score_rows: RowScorer | None = None,
) -> dict[str, float]:
    """Recall@1/5/10, rSum, median and mean rank of both directions, streaming over rows.

    ``score_rows(slice(a, b))`` must return the ``(b - a, num_images * captions_per_image)``
    similarity rows of images ``a .. b-1`` against every caption; it is only ever asked
    for at most ``chunk_size`` rows. The rows are visited twice (the scorer is called
    ``2 * ceil(num_images / chunk_size)`` times, under ``torch.no_grad``):

    1. image-to-text: an image's rank is the number of other images' captions scoring
       at least as high as its best ground-truth caption (its own captions never count
       against it). The same pass collects each caption's ground-truth score
       ``S[c // k, c]``.
    2. text-to-image: a caption's rank is the number of other images scoring at least
       as high as its ground-truth image, accumulated over the row blocks. The
       ground-truth image never counts against its own caption, so a scorer that is not
       bit-for-bit deterministic between the two passes cannot push a caption down one rank.

    Ties count against the query (a constant matrix gives chance-level recall); a
    block with NaN or infinite scores raises ``ValueError`` naming its rows. Recalls are
    percentages; ``rsum`` is the sum of the six recalls; ``*_medr`` is
    ``floor(median(rank)) + 1`` and ``*_meanr`` is ``mean(rank) + 1`` as in SCAN.
    The computation stays on the device of the returned blocks.

    A method that ranks captions for an image differently from images for a caption
    (e.g. one branch per direction) passes the text-to-image similarity as
    ``t2i_score_rows`` (same shape and contract); the first pass then also asks it for
    the ground-truth scores.
    """
    if num_images < 1 or captions_per_image < 1 or chunk_size < 1:
        raise ValueError(
            "num_images, captions_per_image and chunk_size must be positive, got "
            f"{num_images}, {captions_per_image}, {chunk_size}"
        )
    num_captions = num_images * captions_per_image
    chunks = _row_chunks(num_images, chunk_size)

    t2i_scorer = score_rows if t2i_score_rows is None else t2i_score_rows
    i2t_ranks, gt_scores = [], []
    for rows in chunks:
        block = _checked_chunk(score_rows, rows, num_captions)
        own_columns = _own_columns(rows, captions_per_image, block.device)
        own = block.gather(1, own_columns)
        at_least = block >= own.amax(dim=1, keepdim=True)
        i2t_ranks.append(at_least.scatter_(1, own_columns, False).sum(dim=1))
        if t2i_score_rows is not None:
            t2i_block = _checked_chunk(t2i_score_rows, rows, num_captions)
            own = t2i_block.gather(1, _own_columns(rows, captions_per_image, t2i_block.device))
        gt_scores.append(own.reshape(-1))
    caption_gt = torch.cat(gt_scores)

    t2i_ranks = torch.zeros(num_captions, dtype=torch.long, device=caption_gt.device)
    for rows in chunks:
        block = _checked_chunk(t2i_scorer, rows, num_captions)
        at_least = block >= caption_gt.to(block.device)[None, :]
        at_least.scatter_(1, _own_columns(rows, captions_per_image, block.device), False)
        t2i_ranks += at_least.sum(dim=0).to(t2i_ranks.device)
    return _assemble(torch.cat(i2t_ranks), t2i_ranks)


def retrieval_metrics_from_matrix(
    sims: torch.Tensor | np.ndarray,
    captions_per_image: int,
    chunk_size: int = 1000,
) -> dict[str, float]:
    """:func:`retrieval_metrics` of a full ``(N, N * k)`` similarity matrix already in memory."""
    matrix = torch.as_tensor(sims)
    if matrix.ndim != 2 or matrix.shape[1] != matrix.shape[0] * captions_per_image:
        raise ValueError(
            f"sims must have shape (N, N * {captions_per_image}), got {tuple(matrix.shape)}"
        )
    num_images = matrix.shape[0]
    return retrieval_metrics(lambda rows: matrix[rows], num_images, captions_per_image, chunk_size)


def _stack_networks(embeds: torch.Tensor, name: str) -> torch.Tensor:
    """View ``(n, d)`` embeddings as one network ``(1, n, d)``; keep ``(K, n, d)`` as is."""
    if embeds.ndim == 2:
        return embeds.unsqueeze(0)
    if embeds.ndim == 3:
        return embeds
    raise ValueError(f"{name} must have shape (n, d) or (K, n, d), got {tuple(embeds.shape)}")


def embedding_scorer(image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> RowScorer:
    """Row scorer averaging the dot-product similarity of ``K`` networks.

    ``image_embeds`` is ``(K, N, d)`` and ``text_embeds`` ``(K, N * k, d)`` (or ``(N, d)``
    and ``(N * k, d)`` for a single network); row block ``rows`` scores
    ``mean_k image_embeds[k, rows] @ text_embeds[k].T``, the inference rule of methods that
    train several networks or views. Embeddings are used as given: L2-normalise them
    first for cosine similarity.
    """
    images = _stack_networks(image_embeds, "image_embeds")
    texts = _stack_networks(text_embeds, "text_embeds")
    if images.shape[0] != texts.shape[0] or images.shape[2] != texts.shape[2]:
        raise ValueError(
            "image_embeds and text_embeds must agree on networks K and dimension d, got "
            f"{tuple(images.shape)} and {tuple(texts.shape)}"
        )

    def score_rows(rows: slice) -> torch.Tensor:
        block = images[0, rows] @ texts[0].T
        for net in range(1, images.shape[0]):
            block += images[net, rows] @ texts[net].T
        return block / images.shape[0]

    return score_rows


def _fold_scorer(
    score_rows: RowScorer, first_image: int, images: int, captions_per_image: int
) -> RowScorer:
    """Scorer of one fold: its images' rows restricted to its own captions, re-indexed from 0."""
    columns = slice(first_image * captions_per_image, (first_image + images) * captions_per_image)

    def score_fold_rows(rows: slice) -> torch.Tensor:
        return score_rows(slice(first_image + rows.start, first_image + rows.stop))[:, columns]

    return score_fold_rows


def coco_5fold_per_fold(
    score_rows: RowScorer,
    num_images: int = 5000,
    captions_per_image: int = 5,
    folds: int = 5,
    chunk_size: int = 1000,
    t2i_score_rows: RowScorer | None = None,
) -> list[dict[str, float]]:
    """Metrics of each of ``folds`` consecutive, equal image folds against their own captions.

    With the defaults this is MS-COCO's "5-fold 1K" protocol: images ``1000 f .. 1000 f + 999``
    and their captions form fold ``f``. ``score_rows`` (and ``t2i_score_rows``) score rows
    of the whole set (as for :func:`retrieval_metrics`); each fold keeps only its own
    caption columns.
    """
    if folds < 1 or num_images % folds:
        raise ValueError(f"num_images ({num_images}) must split into {folds} equal folds")
    size = num_images // folds
    return [
        retrieval_metrics(
            _fold_scorer(score_rows, fold * size, size, captions_per_image),
            size,
            captions_per_image,
            chunk_size,
            None if t2i_score_rows is None else _fold_scorer(t2i_score_rows, fold * size, size, captions_per_image),
        )
        for fold in range(folds)
    ]


def coco_5fold_metrics(
    score_rows: RowScorer,
    num_images: int = 5000,
    captions_per_image: int = 5,
    folds: int = 5,
    chunk_size: int = 1000,
    t2i_score_rows: RowScorer | None = None,
) -> dict[str, float]:
    """Mean over folds of every metric of :func:`coco_5fold_per_fold` (COCO 5-fold 1K).

    ``rsum`` is the sum of the six mean recalls (equal to the mean of per-fold rSums).
    The full 5K evaluation is plain :func:`retrieval_metrics` over all images.
    """
    per_fold = coco_5fold_per_fold(score_rows, num_images, captions_per_image, folds, chunk_size, t2i_score_rows)
    mean = {key: float(np.mean([fold[key] for fold in per_fold])) for key in per_fold[0]}
    mean["rsum"] = sum(mean[key] for key in RECALL_KEYS)
    return mean
