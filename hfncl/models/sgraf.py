"""SGR and SAF similarity heads (SGRAF: Diao et al., "Similarity Reasoning and Filtration
for Image-Text Matching", AAAI 2021), the similarity function S that NCR trains (Sec. 4).

Instead of one cosine between pooled embeddings, SGRAF compares an image and a caption
through *similarity representations*, vectors of ``sim_dim`` (256) dimensions:

- **Vector similarity function** s(x, y; W) = W |x - y|^2 / ||W |x - y|^2||_2, the square
  taken element-wise (Sec. 3.2, Eq. 4): :class:`~hfncl.models.sgraf_nodes.SimilarityRepresentation`.
- **Global representation** of each side (Sec. 3.1): a self-attention pooling of the
  L2-normalised local features with their mean as the query:
  h_i = tanh(W_l x_i) * tanh(W_g mean(x)), alpha = softmax_i(w^T h_i),
  g = l2norm(sum_i alpha_i x_i) (:class:`~hfncl.models.sgraf_nodes.AttentionPooling`). The global similarity
  node is s^g = s(g_image, g_text; W_g) (Eq. 5).
- **Local similarity** of word j (Sec. 3.2, Eq. 2-3): text-to-region attention
  c_ij = x_i^T y_j of region i and word j, c^_ij = [c_ij]_a / sqrt(sum_j [c_ij]_a^2)
  with the rectifier [c]_a = max(c, a c)
  (normalised over the caption's words), alpha_ij = softmax_i(lambda c^_ij) with the
  smoothing temperature lambda = 9, the attended region vector a_j = sum_i alpha_ij x_i
  and the node s_j^l = s(a_j, y_j; W_l) (:func:`~hfncl.models.sgraf_nodes.region_attention`,
  :func:`~hfncl.models.sgraf_kernels.local_nodes`).
- **SGR** (Sec. 3.3, Eq. 6-7): a graph over the nodes N = {s^g, s_1^l, ..., s_L^l};
  edges e(s_p, s_q) = softmax_q((W_in s_p)^T (W_out s_q)); each of the ``reasoning_steps``
  (3) steps updates every node s_p <- ReLU(W_r sum_q e(s_p, s_q) s_q) with its own
  weights; S = sigmoid(W_o s^g) from the global node after the last step (Eq. 9).
- **SAF** (Sec. 3.4, Eq. 8): attention filtration of the nodes,
  beta_p = sigma(BN(W_f s_p)) / sum_q sigma(BN(W_f s_q)), s_f = sum_p beta_p s_p,
  S = sigmoid(W_o l2norm(s_f)).

The official SGRAF code (as NCR releases it, ``NCR/model.py``) adds layers the paper does not
print; the heads build them by default (each an option of :class:`SGROptions` / :class:`SAFOptions`, set as
``sgr.NAME`` / ``saf.NAME`` in ``NCLConfig.head_options``; a checkpoint of format 1 keeps the plain layers it was
trained with):

- the rectifier's slope a = 0.1 (``LeakyReLU(0.1)``; the paper's [c]_+ is a = 0;
  ``attention_negative_slope``);
- in the image pooling (``VisualSA``) a ``BatchNorm1d`` after each projection, before the
  tanh: over the 36 region positions for W_l x_i and over the d features for W_g mean(x)
  (``pooling_batch_norm``, ``image_regions``); in training their statistics are the batch's;
- dropout 0.4 after each tanh of both poolings (``pooling_dropout``) and on the text
  tower's word embeddings (``NCLConfig.word_dropout``, :class:`~hfncl.models.encoders.GRUTextEncoder`).

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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from hfncl.model_settings import SIZE_LIMITS
from hfncl.models.encoders import l2norm
from hfncl.models.heads import HeadPlugin, full_precision
from hfncl.models.sgraf_kernels import PairBlock
from hfncl.models.sgraf_nodes import Side, SimilarityHead, assemble
from hfncl.options import HeadOptions, option


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

    def score_blocks(self, images: Side, texts: Side, blocks: list[PairBlock]) -> torch.Tensor:
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

    def score_blocks(self, images: Side, texts: Side, blocks: list[PairBlock]) -> torch.Tensor:
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


OFFICIAL_SGRAF_DROPOUT = 0.4
"""Dropout rate of the official SGRAF code on the word embeddings and in the attention poolings."""


@dataclass(frozen=True)
class SGRAFOptions(HeadOptions):
    """The options SGR and SAF share; the layer options' defaults are the official SGRAF code's."""

    sim_dim: int = option(256, minimum=1, maximum=SIZE_LIMITS["sim_dim"], help="size s of the similarity "
                          "representations (256 in the paper)")
    attention_lambda: float = option(9.0, exclusive_minimum=0, help="inverse temperature lambda of the "
                                     "text-to-region attention softmax (Eq. 3; 9 in the paper)")
    attention_negative_slope: float = option(0.1, minimum=0, exclusive_maximum=1, help="slope a of the rectifier "
                                             "max(c, a c) of the cosines (0: the paper's ReLU; 0.1: the official "
                                             "code's LeakyReLU)")
    pooling_dropout: float = option(0.4, minimum=0, exclusive_maximum=1, help="dropout on the tanh features of the "
                                    "attention poolings (official code: 0.4)")
    pooling_batch_norm: bool = option(True, help="batch norms in the image attention pooling, over image_regions "
                                      "positions (the official code's VisualSA)")

    @classmethod
    def from_flat(cls, flat: Mapping[str, Any], checkpoint_format: int) -> dict[str, Any]:
        """As :meth:`HeadOptions.from_flat`; a config of checkpoint format 1, written before the official code's
        layers existed, keeps the plain layers it was trained with (ReLU, no dropout, no batch norm)."""
        values = super().from_flat(flat, checkpoint_format)
        if checkpoint_format < 2:
            plain = {"attention_negative_slope": 0.0, "pooling_dropout": 0.0, "pooling_batch_norm": False}
            values = {cls.full_name(name): value for name, value in plain.items()} | values
        return values


@dataclass(frozen=True)
class SAFOptions(SGRAFOptions, namespace="saf"):
    """The SAF head's options."""


@dataclass(frozen=True)
class SGROptions(SGRAFOptions, namespace="sgr"):
    """The SGR head's options."""

    reasoning_steps: int = option(3, minimum=1, maximum=SIZE_LIMITS["reasoning_steps"], help="graph-reasoning "
                                  "steps (3 in the paper)")


def _head_arguments(config: Any, options: SGRAFOptions) -> tuple[tuple[int, int, float], dict[str, Any]]:
    """The sizes and the layers of a head of ``config`` with ``options``."""
    layers: dict[str, Any] = {
        "negative_slope": options.attention_negative_slope,
        "dropout": options.pooling_dropout,
        "image_regions": config.image_regions if options.pooling_batch_norm else None,
    }
    return (config.embed_dim, options.sim_dim, options.attention_lambda), layers


def build_sgr_head(config: Any) -> SGRHead:
    """The :class:`SGRHead` of an :class:`~hfncl.models.NCLConfig` with its ``sgr.*`` head options."""
    options = SGROptions.read(config.head_options)
    dims, layers = _head_arguments(config, options)
    return SGRHead(*dims, options.reasoning_steps, **layers)


def build_saf_head(config: Any) -> SAFHead:
    """The :class:`SAFHead` of an :class:`~hfncl.models.NCLConfig` with its ``saf.*`` head options."""
    dims, layers = _head_arguments(config, SAFOptions.read(config.head_options))
    return SAFHead(*dims, **layers)


SGR = HeadPlugin(
    build=build_sgr_head, options=SGROptions, config_fields=("image_regions",), word_dropout=OFFICIAL_SGRAF_DROPOUT
)
"""The SGR head (entry point ``sgr``)."""
SAF = HeadPlugin(
    build=build_saf_head, options=SAFOptions, config_fields=("image_regions",), word_dropout=OFFICIAL_SGRAF_DROPOUT
)
"""The SAF head (entry point ``saf``)."""
