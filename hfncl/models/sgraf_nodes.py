"""SGRAF's similarity nodes and the blockwise scoring every SGR / SAF head shares (Sec. 3.1-3.2; the formulas
and reading choices: :mod:`hfncl.models.sgraf`).

:class:`SimilarityHead` turns packed local features into the nodes N = {s^g, s_1^l, ..., s_L^l} of every
image-caption pair, block by block (:mod:`hfncl.models.sgraf_kernels`): the global representations
(:class:`AttentionPooling`), the vector similarity function (:class:`SimilarityRepresentation`) and the
text-to-region attention (:func:`region_attention`, whose weights and block assembly SCAN's head shares);
its subclasses score the nodes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from hfncl.models.encoders import l2norm
from hfncl.models.heads import concat_packed, full_precision, unpack_local, valid_length
from hfncl.models.sgraf_kernels import PairBlock, block_budget, local_nodes, plan_blocks, region_gram

_EPS = 1e-8


class AttentionPooling(nn.Module):
    """Global feature of a set of unit-norm local features by self-attention (SGRAF Sec. 3.1).

    h_i = D(tanh(N_l(W_l x_i))) * D(tanh(N_g(W_g q))) with the masked mean q of the x_i as the
    query; alpha = softmax over the valid i of w^T h_i; result l2norm(sum_i alpha_i x_i).
    D is dropout with rate ``dropout``. N_l and N_g are the identity, or with ``regions`` set
    (the image side of the official SGRAF, ``VisualSA``) batch norms: N_l a ``BatchNorm1d``
    over the ``regions`` positions (each position's statistics over the batch and the d
    features), N_g a ``BatchNorm1d`` over the d features of the query.
    """

    def __init__(self, embed_dim: int, dropout: float = 0.0, regions: int | None = None) -> None:
        super().__init__()
        self.local_proj = nn.Linear(embed_dim, embed_dim)
        self.query_proj = nn.Linear(embed_dim, embed_dim)
        self.score = nn.Linear(embed_dim, 1)
        self.dropout = nn.Dropout(dropout)
        self.regions = regions
        self.local_norm = None if regions is None else nn.BatchNorm1d(regions)
        self.query_norm = None if regions is None else nn.BatchNorm1d(embed_dim)

    def forward(self, local: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T, d) unit-norm local features, (B, T) mask -> (B, d) unit-norm global features."""
        weights = mask.unsqueeze(-1).to(local.dtype)
        query = (local * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
        hidden, gate = self.local_proj(local), self.query_proj(query)
        if self.local_norm is not None and self.query_norm is not None:
            if local.size(1) != self.regions:
                raise ValueError(
                    f"the SGR / SAF image pooling batch-normalises NCLConfig.image_regions = {self.regions} "
                    f"positions per image, got images of {local.size(1)}"
                )
            hidden, gate = self.local_norm(hidden), self.query_norm(gate)
        hidden = self.dropout(torch.tanh(hidden)) * self.dropout(torch.tanh(gate)).unsqueeze(1)
        logits = self.score(hidden).squeeze(-1).masked_fill(~mask, float("-inf"))
        alpha = full_precision(logits).softmax(dim=1)
        return l2norm((alpha.unsqueeze(-1) * local).sum(dim=1))


class SimilarityRepresentation(nn.Module):
    """The vector similarity function s(x, y; W) = W |x - y|^2 / ||W |x - y|^2||_2 (SGRAF Eq. 4)."""

    def __init__(self, embed_dim: int, sim_dim: int) -> None:
        super().__init__()
        self.transform = nn.Linear(embed_dim, sim_dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Broadcast ``x`` and ``y`` (..., d) -> (..., sim_dim) unit-norm similarity vectors."""
        return l2norm(self.transform((x - y).pow(2)))


def region_attention(
    regions: torch.Tensor,
    region_mask: torch.Tensor,
    words: torch.Tensor,
    word_mask: torch.Tensor,
    smooth: float,
    negative_slope: float = 0.0,
) -> torch.Tensor:
    """Text-to-region attention weights of every word of every caption for every image (SGRAF Eq. 2-3).

    Args:
        regions: (n, R, d) unit-norm region features x_i of n images.
        region_mask: (n, R) valid regions.
        words: (m, L, d) unit-norm word features y_j of m captions.
        word_mask: (m, L) valid words.
        smooth: the inverse temperature lambda of the softmax over regions.
        negative_slope: slope a of the rectifier [c]_a = max(c, a c): 0 is the paper's ReLU
            [c]_+, 0.1 the official code's ``LeakyReLU(0.1)``.

    Returns:
        (n, m, L, R): alpha_ij = softmax_i(lambda c^_ij) with c_ij = x_i^T y_j and
        c^_ij = [c_ij]_a / sqrt(sum_{valid j} [c_ij]_a^2). The attended region vector is
        sum_i alpha_ij x_i (:func:`~hfncl.models.sgraf_kernels.local_nodes` forms it).
    """
    cosine = torch.einsum("nrd,mld->nmlr", regions, words)
    return attention_weights(cosine, region_mask, word_mask, smooth, negative_slope)


def attention_weights(
    cosine: torch.Tensor, region_mask: torch.Tensor, word_mask: torch.Tensor, smooth: float, negative_slope: float
) -> torch.Tensor:
    """:func:`region_attention` from the (n, m, L, R) cosines c_ij: softmax_i(lambda c^_ij) over the valid regions,
    c^_ij = [c_ij]_a / sqrt(sum_{valid j} [c_ij]_a^2) (SGRAF Eq. 2-3; SCAN's text-to-image attention)."""
    positive = F.leaky_relu(full_precision(cosine), negative_slope)
    if not bool(word_mask.all()):  # a block's captions all have its length: no padding to clear
        positive = positive * word_mask[None, :, :, None].to(positive.dtype)
    logits = positive * (smooth / positive.norm(dim=2, keepdim=True).clamp_min(_EPS))
    if not bool(region_mask.all()):
        logits = logits.masked_fill(~region_mask[:, None, None, :], float("-inf"))
    return logits.softmax(dim=-1)


class Side(NamedTuple):
    """The per-item work of one side, done once per item: unit-norm local features, mask, global feature,
    and on the image side the regions' Gram matrices (:func:`~hfncl.models.sgraf_kernels.region_gram`)."""

    local: torch.Tensor
    mask: torch.Tensor
    glob: torch.Tensor
    gram: torch.Tensor | None = None

    def take(self, items: torch.Tensor | slice, length: int | None = None) -> "Side":
        """The items ``items``, their positions cut to ``length`` (all when None); without a Gram matrix,
        which :meth:`with_gram` forms for the cut positions."""
        positions = slice(None, length)
        return Side(self.local[items, positions], self.mask[items, positions], self.glob[items])

    def with_gram(self) -> "Side":
        """This side with the Gram matrices of its local features."""
        return self._replace(gram=region_gram(self.local))

    def split(self, sizes: list[int]) -> list["Side"]:
        """Consecutive parts of ``sizes`` items (one autograd node gathers their gradients, where slicing
        would give each part a gradient of the whole side)."""
        if len(sizes) == 1:
            return [self]
        parts = ([None] * len(sizes) if tensor is None else tensor.split(sizes) for tensor in self)
        return [Side(*part) for part in zip(*parts, strict=True)]


class SimilarityHead(nn.Module, ABC):
    """Similarity nodes of SGRAF (global + one per word) and a scalar score from them.

    Every pair is scored in blocks (:func:`~hfncl.models.sgraf_kernels.plan_blocks`): captions
    sorted by length in small groups, each group trimmed to its longest caption, with as
    many image rows per block as keep the block's largest tensor within ``block_bytes``.
    Training, the statistics pass and evaluation all use this path; the work of one side
    (normalisation, global pooling) is done once per image and once per caption.
    Subclasses define :meth:`score`: (n, m, 1 + L, sim_dim) nodes and their (m, 1 + L)
    mask -> (n, m) similarities in (0, 1).

    Args:
        embed_dim: size d of the local features.
        sim_dim: size of a similarity representation (256 in SGRAF).
        smooth: lambda of the text-to-region attention (9 in SGRAF).
        block_bytes: memory budget of a block's largest tensor; None: the device's default
            (:func:`~hfncl.models.sgraf_kernels.block_budget`).
        negative_slope: slope of the attention's rectifier (:func:`region_attention`).
        dropout: dropout rate inside both attention poolings (:class:`AttentionPooling`).
        image_regions: positions per image of the image pooling's batch norms; None: no batch norm.
    """

    logits: bool = False
    """Whether :meth:`score` returns the raw score W_o s (an unbounded logit) instead of its sigmoid."""

    def __init__(
        self,
        embed_dim: int,
        sim_dim: int,
        smooth: float,
        block_bytes: int | None = None,
        negative_slope: float = 0.0,
        dropout: float = 0.0,
        image_regions: int | None = None,
    ) -> None:
        super().__init__()
        self.smooth = smooth
        self.block_bytes = block_bytes
        self.negative_slope = negative_slope
        self.image_pool = AttentionPooling(embed_dim, dropout, image_regions)
        self.text_pool = AttentionPooling(embed_dim, dropout)
        self.global_sim = SimilarityRepresentation(embed_dim, sim_dim)
        self.local_sim = SimilarityRepresentation(embed_dim, sim_dim)

    def nodes(self, images: Side, texts: Side) -> tuple[torch.Tensor, torch.Tensor]:
        """Similarity nodes (n, m, 1 + L, sim_dim) of every image-caption pair and their mask (m, 1 + L).

        Node 0 is the global similarity s^g, node 1 + j the local similarity of word j. ``images`` carry
        their regions' Gram matrices (:meth:`Side.with_gram`).
        """
        if images.gram is None:
            raise ValueError("the image side of a block needs its regions' Gram matrices (Side.with_gram)")
        alpha = region_attention(images.local, images.mask, texts.local, texts.mask, self.smooth, self.negative_slope)
        transform = self.local_sim.transform
        local = local_nodes(alpha, images.local, images.gram, texts.local, transform.weight, transform.bias)
        glob = self.global_sim(images.glob.unsqueeze(1), texts.glob.unsqueeze(0))
        node_mask = torch.cat([texts.mask.new_ones(texts.mask.size(0), 1), texts.mask], dim=1)
        return torch.cat([glob.unsqueeze(2), local], dim=2), node_mask

    @abstractmethod
    def score(self, nodes: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
        """(n, m, 1 + L, sim_dim) similarity nodes and their (m, 1 + L) mask -> (n, m) similarities."""

    @staticmethod
    def squash(scores: torch.Tensor) -> torch.Tensor:
        """Similarities in (0, 1) of raw scores W_o s (``logits``): their sigmoid."""
        return torch.sigmoid(scores)

    def readout(self, representation: torch.Tensor) -> torch.Tensor:
        """The score of a final similarity representation s (..., sim_dim): W_o s, or sigmoid(W_o s) unless
        ``logits`` (Eq. 9).

        In the layer's own precision (float32) always: under autocast the reasoning before it runs in
        bf16 / fp16, but a score rounded to 8 or 11 significant bits would tie with its neighbours in
        a ranking of thousands.
        """
        output = cast(nn.Linear, self.output)
        with torch.autocast(representation.device.type, enabled=False):
            raw = output(representation.to(output.weight.dtype)).squeeze(-1)
        return raw if self.logits else torch.sigmoid(raw)

    @staticmethod
    def join(parts: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
        """Concatenate packed local features of several batches along ``dim``
        (:func:`concat_packed`: the shorter ones zero-padded, which marks the added positions as padding)."""
        return concat_packed(parts, dim=dim)

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        """Similarity (n, m) of every image (n, R, d + 1) with every caption (m, L, d + 1), packed."""
        images, texts = self._encode_side(image_embeds, self.image_pool), self._encode_side(text_embeds, self.text_pool)
        return self._pair_scores(images, texts)

    def within(self, embeds: torch.Tensor, modality: str) -> torch.Tensor:
        """Similarity (B, B) of every item (B, T, d + 1), packed, with every other of the same ``modality``.

        The rows take the image's place and the columns the caption's: each item's local features attend
        to the other's (Eq. 1-2 with both sets from one modality), its global feature comes from its own
        modality's pooling (``"image"``: the image pooling with its batch norms, ``"text"``: the text
        pooling), and the similarity nodes, reasoning and output layer are the pair scoring's. For methods
        that score intra-modal structure through the similarity module.
        """
        if modality not in ("image", "text"):
            raise ValueError(f"within: modality must be 'image' or 'text', got {modality!r}")
        side = self._encode_side(embeds, self.image_pool if modality == "image" else self.text_pool)
        return self._pair_scores(side, side)

    def _pair_scores(self, images: Side, texts: Side) -> torch.Tensor:
        """Scores (n, m) of every item of ``images`` (the attended side) with every item of ``texts``."""
        n = images.local.size(0)
        images = images.take(slice(None), int(valid_length(images.mask).max().item())).with_gram()
        blocks, order = plan_blocks(
            n, valid_length(texts.mask), texts.local.size(-1),
            texts.local.element_size(), block_budget(self.block_bytes, texts.local.device),
        )
        columns = self.score_blocks(images, texts.take(order.to(texts.local.device)), blocks)
        return columns[:, torch.argsort(order).to(columns.device)]

    def score_blocks(self, images: Side, texts: Side, blocks: list[PairBlock]) -> torch.Tensor:
        """Scores of the blocks, as the (n, m) matrix with its columns in the blocks' caption order
        (``texts``: the captions in that order)."""
        return assemble(blocks, [self.score(*nodes) for nodes in self.block_nodes(images, texts, blocks)])

    def block_nodes(
        self, images: Side, texts: Side, blocks: list[PairBlock]
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """:meth:`nodes` of each block in turn: its image rows against its captions, cut to their length.

        ``texts`` are in the blocks' caption order; each caption group and each group's image rows are
        parts of one split, so backward gathers a side's gradient once per group, not once per block."""
        groups: dict[int, list[PairBlock]] = {}
        for block in blocks:
            groups.setdefault(block.group, []).append(block)
        text_parts = texts.split([len(group[0].captions) for group in groups.values()])
        for group, captions in zip(groups.values(), text_parts, strict=True):
            captions = captions.take(slice(None), group[0].length)
            rows = images.split([block.rows.stop - block.rows.start for block in group])
            for block_images in rows:
                yield self.nodes(block_images, captions)

    @staticmethod
    def _encode_side(packed: torch.Tensor, pool: AttentionPooling) -> Side:
        """Packed (B, T, d + 1) -> unit-norm local features (B, T, d), mask (B, T), global features (B, d)."""
        states, mask = unpack_local(packed)
        if not bool(mask.any(dim=1).all()):
            raise ValueError("every image and caption needs at least one valid position (an all-padding item came)")
        local = l2norm(states)
        return Side(local, mask, pool(local, mask))


def assemble(blocks: list[PairBlock], scores: list[torch.Tensor]) -> torch.Tensor:
    """Block scores (rows, captions) -> the (n, m) matrix: rows stacked within a caption group, groups side by side."""
    groups: dict[int, list[torch.Tensor]] = {}
    for block, score in zip(blocks, scores, strict=True):
        groups.setdefault(block.group, []).append(score)
    return torch.cat([torch.cat(rows) for rows in groups.values()], dim=1)
