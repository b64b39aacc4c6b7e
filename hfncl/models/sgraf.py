"""SGR and SAF similarity heads (SGRAF: Diao et al., "Similarity Reasoning and Filtration
for Image-Text Matching", AAAI 2021), the similarity function S that NCR trains (Sec. 4).

Instead of one cosine between pooled embeddings, SGRAF compares an image and a caption
through *similarity representations*, vectors of ``sim_dim`` (256) dimensions:

- **Vector similarity function** s(x, y; W) = W |x - y|^2 / ||W |x - y|^2||_2, the square
  taken element-wise (Sec. 3.2, Eq. 4): :class:`SimilarityRepresentation`.
- **Global representation** of each side (Sec. 3.1): a self-attention pooling of the
  L2-normalised local features with their mean as the query:
  h_i = tanh(W_l x_i) * tanh(W_g mean(x)), alpha = softmax_i(w^T h_i),
  g = l2norm(sum_i alpha_i x_i) (:class:`AttentionPooling`). The global similarity
  node is s^g = s(g_image, g_text; W_g) (Eq. 5).
- **Local similarity** of word j (Sec. 3.2, Eq. 2-3): text-to-region attention
  c_ij = x_i^T y_j of region i and word j, c^_ij = [c_ij]_a / sqrt(sum_j [c_ij]_a^2)
  with the rectifier [c]_a = max(c, a c)
  (normalised over the caption's words), alpha_ij = softmax_i(lambda c^_ij) with the
  smoothing temperature lambda = 9, the attended region vector a_j = sum_i alpha_ij x_i
  and the node s_j^l = s(a_j, y_j; W_l) (:func:`region_attention`,
  :func:`~hfncl.models.sgraf_kernels.local_nodes`).
- **SGR** (Sec. 3.3, Eq. 6-7): a graph over the nodes N = {s^g, s_1^l, ..., s_L^l};
  edges e(s_p, s_q) = softmax_q((W_in s_p)^T (W_out s_q)); each of the ``reasoning_steps``
  (3) steps updates every node s_p <- ReLU(W_r sum_q e(s_p, s_q) s_q) with its own
  weights; S = sigmoid(W_o s^g) from the global node after the last step (Eq. 9).
- **SAF** (Sec. 3.4, Eq. 8): attention filtration of the nodes,
  beta_p = sigma(BN(W_f s_p)) / sum_q sigma(BN(W_f s_q)), s_f = sum_p beta_p s_p,
  S = sigmoid(W_o l2norm(s_f)).

The official SGRAF code (as NCR releases it, ``NCR/model.py``) adds layers the paper does not
print; :class:`~hfncl.models.NCLConfig` builds them by default for SGR / SAF (each a field; a
checkpoint of format 1 keeps the plain layers it was trained with):

- the rectifier's slope a = 0.1 (``LeakyReLU(0.1)``; the paper's [c]_+ is a = 0;
  ``attention_negative_slope``);
- in the image pooling (``VisualSA``) a ``BatchNorm1d`` after each projection, before the
  tanh: over the 36 region positions for W_l x_i and over the d features for W_g mean(x)
  (``pooling_batch_norm``, ``image_regions``); in training their statistics are the batch's;
- dropout 0.4 after each tanh of both poolings (``pooling_dropout``) and on the text
  tower's word embeddings (``word_dropout``, :class:`~hfncl.models.encoders.GRUTextEncoder`).

Reading choices where the paper leaves room:

- The attended vector a_j is L2-normalised before s(a_j, y_j) so that both arguments are
  unit vectors, as x_i and y_j are (the local features are L2-normalised per position).
- The maps are affine (``nn.Linear`` with a bias) where the paper writes weight matrices.
- Padding (words past a caption's length, masked regions) takes part in nothing: it is
  left out of the normalisation over words, the softmax over regions, the pooling, the
  graph's edges and SAF's weights, so a caption scores the same however it is padded.
- SAF's BN is a ``BatchNorm1d`` over the scalar scores W_f s_p of the valid nodes. In
  training (``module.training``) each caption's scores with every image of the batch have
  their own statistics, and the running statistics move once per caption, as in the official
  code's loop over captions; in evaluation the running statistics make a pair's score
  independent of what is scored with it.

How it is computed (same values; measurements in ``benchmarks/README.md``): pairs are
scored in memory-bounded blocks of captions of similar length (each side's blocks are parts
of one split, so backward gathers its gradient once per caption group), one side's work is done
once per item (each image's Gram matrix included, which every block's attention reads), the local
nodes keep only the attention weights for backward (:mod:`hfncl.models.sgraf_kernels`), SGR folds
W_out^T W_in into one matrix and its last step updates only the node that is read, and SAF's
filtration is one batched product per pair.

Embeddings of these heads are *packed local features*: one float tensor (B, T, d + 1)
per side, the L2-unnormalised states of the T positions in ``[..., :d]`` and a validity
flag (1 valid, 0 padding) in ``[..., d]`` (:func:`pack_local`). Packed tensors of
different lengths T are joined by zero-padding T (:func:`concat_packed`), which marks
the new positions as padding.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from hfncl.models.encoders import l2norm
from hfncl.models.heads import concat_packed, full_precision, unpack_local
from hfncl.models.sgraf_kernels import PairBlock, block_budget, local_nodes, plan_blocks, region_gram

LOCAL_SIMILARITIES = ("sgr", "saf")
"""Similarity heads that compare local features (:class:`SimilarityHead` subclasses)."""

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


class _Side(NamedTuple):
    """The per-item work of one side, done once per item: unit-norm local features, mask, global feature,
    and on the image side the regions' Gram matrices (:func:`~hfncl.models.sgraf_kernels.region_gram`)."""

    local: torch.Tensor
    mask: torch.Tensor
    glob: torch.Tensor
    gram: torch.Tensor | None = None

    def take(self, items: torch.Tensor | slice, length: int | None = None) -> "_Side":
        """The items ``items``, their positions cut to ``length`` (all when None); without a Gram matrix,
        which :meth:`with_gram` forms for the cut positions."""
        positions = slice(None, length)
        return _Side(self.local[items, positions], self.mask[items, positions], self.glob[items])

    def with_gram(self) -> "_Side":
        """This side with the Gram matrices of its local features."""
        return self._replace(gram=region_gram(self.local))

    def split(self, sizes: list[int]) -> list["_Side"]:
        """Consecutive parts of ``sizes`` items (one autograd node gathers their gradients, where slicing
        would give each part a gradient of the whole side)."""
        if len(sizes) == 1:
            return [self]
        parts = ([None] * len(sizes) if tensor is None else tensor.split(sizes) for tensor in self)
        return [_Side(*part) for part in zip(*parts, strict=True)]


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

    def nodes(self, images: _Side, texts: _Side) -> tuple[torch.Tensor, torch.Tensor]:
        """Similarity nodes (n, m, 1 + L, sim_dim) of every image-caption pair and their mask (m, 1 + L).

        Node 0 is the global similarity s^g, node 1 + j the local similarity of word j. ``images`` carry
        their regions' Gram matrices (:meth:`_Side.with_gram`).
        """
        if images.gram is None:
            raise ValueError("the image side of a block needs its regions' Gram matrices (_Side.with_gram)")
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

    def _pair_scores(self, images: _Side, texts: _Side) -> torch.Tensor:
        """Scores (n, m) of every item of ``images`` (the attended side) with every item of ``texts``."""
        n = images.local.size(0)
        images = images.take(slice(None), int(valid_length(images.mask).max().item())).with_gram()
        blocks, order = plan_blocks(
            n, valid_length(texts.mask), texts.local.size(-1),
            texts.local.element_size(), block_budget(self.block_bytes, texts.local.device),
        )
        columns = self.score_blocks(images, texts.take(order.to(texts.local.device)), blocks)
        return columns[:, torch.argsort(order).to(columns.device)]

    def score_blocks(self, images: _Side, texts: _Side, blocks: list[PairBlock]) -> torch.Tensor:
        """Scores of the blocks, as the (n, m) matrix with its columns in the blocks' caption order
        (``texts``: the captions in that order)."""
        return assemble(blocks, [self.score(*nodes) for nodes in self.block_nodes(images, texts, blocks)])

    def block_nodes(
        self, images: _Side, texts: _Side, blocks: list[PairBlock]
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
    def _encode_side(packed: torch.Tensor, pool: AttentionPooling) -> _Side:
        """Packed (B, T, d + 1) -> unit-norm local features (B, T, d), mask (B, T), global features (B, d)."""
        states, mask = unpack_local(packed)
        if not bool(mask.any(dim=1).all()):
            raise ValueError("every image and caption needs at least one valid position (an all-padding item came)")
        local = l2norm(states)
        return _Side(local, mask, pool(local, mask))


def assemble(blocks: list[PairBlock], scores: list[torch.Tensor]) -> torch.Tensor:
    """Block scores (rows, captions) -> the (n, m) matrix: rows stacked within a caption group, groups side by side."""
    groups: dict[int, list[torch.Tensor]] = {}
    for block, score in zip(blocks, scores, strict=True):
        groups.setdefault(block.group, []).append(score)
    return torch.cat([torch.cat(rows) for rows in groups.values()], dim=1)


def valid_length(mask: torch.Tensor) -> torch.Tensor:
    """(B, T) mask -> (B,) one past each item's last valid position."""
    positions = torch.arange(1, mask.size(1) + 1, device=mask.device)
    return (mask * positions).amax(dim=1)


class GraphReasoningStep(nn.Module):
    """One SGR step (Eq. 6-7): s_p <- ReLU(W_r sum_q softmax_q((W_in s_p)^T (W_out s_q)) s_q).

    The edge logits are computed as (W_out^T (W_in s_p + b_in))^T s_q: the terms
    (W_in s_p + b_in)^T b_out are constant over q and cancel in the softmax, and
    W_out^T W_in is one (s, s) matrix (:meth:`edge_map`, formed once for all blocks of a
    batch), so a step costs two node-wise products, not three.
    """

    def __init__(self, sim_dim: int) -> None:
        super().__init__()
        self.query = nn.Linear(sim_dim, sim_dim)
        self.key = nn.Linear(sim_dim, sim_dim)
        self.update = nn.Linear(sim_dim, sim_dim)

    def edge_map(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(W_out^T W_in, W_out^T b_in): the affine map from a node s_p to its edge query W_out^T (W_in s_p + b_in)."""
        key = self.key.weight.t()
        return key @ self.query.weight, key @ self.query.bias

    def forward(
        self, nodes: torch.Tensor, node_mask: torch.Tensor, edge_map: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Nodes (n, m, N, s) with mask (m, N) -> updated nodes (n, m, N, s); padding nodes are never read.

        ``edge_map``: :meth:`edge_map`'s value when the caller formed it already.
        """
        edges = F.linear(nodes, *(edge_map or self.edge_map())) @ nodes.transpose(-1, -2)
        edges = full_precision(edges).masked_fill(~node_mask[None, :, None, :], float("-inf")).softmax(dim=-1)
        return torch.relu(self.update(edges @ nodes))

    def first_node(
        self, nodes: torch.Tensor, node_mask: torch.Tensor, edge_map: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> torch.Tensor:
        """The updated node 0 only, (n, m, s): what the last step must give SGR's output."""
        queries = F.linear(nodes[:, :, 0], *(edge_map or self.edge_map()))
        edges = torch.einsum("nms,nmqs->nmq", queries, nodes)
        edges = full_precision(edges).masked_fill(~node_mask[None], float("-inf")).softmax(dim=-1)
        return torch.relu(self.update(torch.einsum("nmq,nmqs->nms", edges, nodes)))


class SGRHead(SimilarityHead):
    """Similarity Graph Reasoning: ``steps`` reasoning steps, then sigmoid(W_o s^g) (SGRAF Sec. 3.3)."""

    def __init__(self, embed_dim: int, sim_dim: int, smooth: float, steps: int, **layers: Any) -> None:
        super().__init__(embed_dim, sim_dim, smooth, **layers)
        self.steps = nn.ModuleList([GraphReasoningStep(sim_dim) for _ in range(steps)])
        self.output = nn.Linear(sim_dim, 1)

    def score(self, nodes: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
        """(n, m, N, s) nodes, (m, N) mask -> (n, m) similarities in (0, 1)."""
        return self._reason(nodes, node_mask, self._edge_maps())

    def score_blocks(self, images: _Side, texts: _Side, blocks: list[PairBlock]) -> torch.Tensor:
        """As :meth:`SimilarityHead.score_blocks`, with every step's edge map formed once for all blocks."""
        maps = self._edge_maps()
        return assemble(blocks, [self._reason(*nodes, maps) for nodes in self.block_nodes(images, texts, blocks)])

    def _edge_maps(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [cast(GraphReasoningStep, step).edge_map() for step in self.steps]

    def _reason(
        self, nodes: torch.Tensor, node_mask: torch.Tensor, maps: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """The reasoning steps and the output (Eq. 6-9). Only s^g is read after the last step, so that step
        updates node 0 alone."""
        steps = [cast(GraphReasoningStep, step) for step in self.steps]
        for step, edge_map in zip(steps[:-1], maps[:-1], strict=True):
            nodes = step(nodes, node_mask, edge_map)
        return self.readout(steps[-1].first_node(nodes, node_mask, maps[-1]))


class SAFHead(SimilarityHead):
    """Similarity Attention Filtration: BN-normalised sigmoid weights over the nodes (SGRAF Sec. 3.4, Eq. 8)."""

    def __init__(self, embed_dim: int, sim_dim: int, smooth: float, **layers: Any) -> None:
        super().__init__(embed_dim, sim_dim, smooth, **layers)
        self.attention = nn.Linear(sim_dim, 1)
        self.norm = nn.BatchNorm1d(1)
        self.output = nn.Linear(sim_dim, 1)

    def score(self, nodes: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
        """(n, m, N, s) nodes, (m, N) mask -> (n, m) similarities in (0, 1).

        The batch norm sees only the valid nodes' scores: in training each caption's over the n images
        (:meth:`_caption_norm`), in evaluation its running statistics.
        """
        valid, raw = self._raw(nodes, node_mask)
        if self.training:
            normed, (mean, var) = self._caption_norm(raw, valid)
            self._track(mean, var)
            return self._filter(nodes, valid, normed)
        return self._filter(nodes, valid, raw.masked_scatter(valid, self.norm(raw[valid].unsqueeze(1)).squeeze(1)))

    def score_blocks(self, images: _Side, texts: _Side, blocks: list[PairBlock]) -> torch.Tensor:
        """As :meth:`SimilarityHead.score_blocks`; in training each caption's batch-norm statistics are over
        its nodes with every image, from all blocks of its caption group, and the running statistics move
        once per caption in the captions' order, as the official code's loop over captions moves them."""
        if not self.training:
            return super().score_blocks(images, texts, blocks)
        parts = [(nodes, *self._raw(nodes, node_mask)) for nodes, node_mask in self.block_nodes(images, texts, blocks)]
        groups: dict[int, list[int]] = {}
        for index, block in enumerate(blocks):
            groups.setdefault(block.group, []).append(index)
        normed: dict[int, torch.Tensor] = {}
        captions, means, variances = [], [], []
        for indices in groups.values():
            raw, valid = (torch.cat([parts[i][part] for i in indices]) for part in (2, 1))
            values, (mean, var) = self._caption_norm(raw, valid)
            normed |= dict(zip(indices, values.split([parts[i][0].size(0) for i in indices]), strict=True))
            captions.append(blocks[indices[0]].captions)
            means.append(mean)
            variances.append(var)
        order = torch.argsort(torch.cat(captions)).to(raw.device)
        self._track(torch.cat(means)[order], torch.cat(variances)[order])
        return assemble(blocks, [self._filter(nodes, valid, normed[i]) for i, (nodes, valid, _) in enumerate(parts)])

    def _caption_norm(
        self, raw: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Training batch norm of the (n, m, N) logits with each caption's statistics over its valid nodes with
        all n images (the official code normalises each caption's (n, 1, N) scores on their own).

        Returns the normalised logits and each caption's (m,) mean and unbiased variance (detached)."""
        weights = valid.to(raw.dtype)
        count = weights.sum(dim=(0, 2))
        mean = (raw * weights).sum(dim=(0, 2)) / count
        centred = raw - mean[:, None]
        var = (centred.square() * weights).sum(dim=(0, 2)) / count
        normed = centred / torch.sqrt(var[:, None] + self.norm.eps) * self.norm.weight + self.norm.bias
        return normed, (mean.detach(), (var * count / (count - 1)).detach())

    @torch.no_grad()
    def _track(self, means: torch.Tensor, variances: torch.Tensor) -> None:
        """Move the running statistics once per caption, in order: r <- (1 - mu) r + mu x for each caption's x."""
        momentum = float(cast(float, self.norm.momentum))
        steps = means.numel()
        decay = momentum * (1 - momentum) ** torch.arange(steps - 1, -1, -1, dtype=means.dtype, device=means.device)
        for running, values in ((self.norm.running_mean, means), (self.norm.running_var, variances)):
            cast(torch.Tensor, running).mul_((1 - momentum) ** steps).add_((decay * values).sum())
        cast(torch.Tensor, self.norm.num_batches_tracked).add_(steps)

    def _raw(self, nodes: torch.Tensor, node_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The (n, m, N) mask of valid nodes and their attention logits W_f s_p (in the batch norm's
        precision: its statistics and the filtration weights stay float32 under autocast)."""
        logits = self.attention(nodes).squeeze(-1).to(self.norm.weight.dtype)
        return node_mask.unsqueeze(0).expand(nodes.shape[:3]), logits

    def _filter(self, nodes: torch.Tensor, valid: torch.Tensor, normed: torch.Tensor) -> torch.Tensor:
        """beta_p = sigma(BN(W_f s_p)) / sum_q sigma(BN(W_f s_q)), S = sigmoid(W_o l2norm(sum_p beta_p s_p)).

        The weighted sum is one batched product per pair, which neither keeps nor traverses the (n, m, N, s)
        products beta_p s_p (``benchmarks/README.md``); in float32 under autocast too, as the weights are."""
        gate = torch.sigmoid(normed) * valid.to(normed.dtype)
        weights = gate / gate.sum(dim=-1, keepdim=True)
        with torch.autocast(nodes.device.type, enabled=False):
            filtered = torch.einsum("nmp,nmps->nms", weights, full_precision(nodes))
        return self.readout(l2norm(filtered))


def build_similarity_head(config: Any) -> SimilarityHead | None:
    """The head of an :class:`~hfncl.models.NCLConfig`: :class:`SGRHead`, :class:`SAFHead`, or None for cosine.

    The head's layers follow the config's ``attention_negative_slope``, ``pooling_dropout`` and
    ``pooling_batch_norm`` (over ``image_regions`` positions).
    """
    layers: dict[str, Any] = {
        "negative_slope": config.attention_negative_slope,
        "dropout": config.pooling_dropout,
        "image_regions": config.image_regions if config.pooling_batch_norm else None,
    }
    dims = (config.embed_dim, config.sim_dim, config.attention_lambda)
    if config.similarity == "sgr":
        return SGRHead(*dims, config.reasoning_steps, **layers)
    if config.similarity == "saf":
        return SAFHead(*dims, **layers)
    if config.similarity == "cosine":
        return None
    raise ValueError(f"similarity must be 'cosine' or one of {LOCAL_SIMILARITIES}, got {config.similarity!r}")
