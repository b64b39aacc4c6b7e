"""Image and text towers of the SCAN / VSE++ precomp encoder: the ``regions`` image tower and the ``gru`` text tower
(entry points of the ``hfncl.image_towers`` and ``hfncl.text_towers`` groups, :mod:`hfncl.models.towers`).

Both towers map their input into the same ``embed_dim``-dimensional joint space and
L2-normalise the result, so the cosine similarity of an image and a caption is the
dot product of their embeddings.

The initialisers below work on single layers and use only ``torch.nn.init``
functions, which transformers guards while it loads a checkpoint: a weight read from
a file is never overwritten by a fresh draw, a weight the file lacks is drawn anew.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

POOLINGS = ("mean", "max")


class ViewProjection(nn.Linear):
    """A linear layer whose output is ``views`` stacked projections of ``out_features // views`` each."""

    def __init__(self, in_features: int, view_features: int, views: int) -> None:
        super().__init__(in_features, view_features * views)
        self.views = views


def init_xavier_linear(linear: nn.Linear) -> None:
    """Xavier-uniform weight, zero bias, as SCAN's ``EncoderImagePrecomp.init_weights``.

    A :class:`ViewProjection` is drawn as its views would be one by one: the fan-out is
    one view's size.
    """
    fan_out = linear.out_features // getattr(linear, "views", 1)
    r = math.sqrt(6.0) / math.sqrt(linear.in_features + fan_out)
    nn.init.uniform_(linear.weight, -r, r)
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


def init_word_embedding(embedding: nn.Embedding) -> None:
    """Uniform word vectors in [-0.1, 0.1], as SCAN's ``EncoderText.init_weights``.

    The padding row is drawn like the others, as in SCAN; packed sequences never read it.
    """
    nn.init.uniform_(embedding.weight, -0.1, 0.1)


def l2norm(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``x`` scaled to unit L2 norm along ``dim`` (zero vectors stay zero), as SCAN's and SGRAF's ``l2norm``."""
    return x / x.norm(dim=dim, keepdim=True).clamp_min(1e-8)


def masked_pool(states: torch.Tensor, mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """Mean or max of ``states`` (B, T, d) over the positions where ``mask`` (B, T) is true (all if None)."""
    if pooling == "mean":
        if mask is None:
            return states.mean(dim=1)
        weights = mask.unsqueeze(-1).to(states.dtype)
        return (states * weights).sum(dim=1) / weights.sum(dim=1)
    if mask is None:
        return states.amax(dim=1)
    return states.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)


class RegionImageEncoder(nn.Module):
    """Precomputed region features -> W image embeddings (SCAN / VSE++ precomp encoder).

    A linear layer projects each of the R region features into the joint space; the
    regions are then pooled (mean or max) and the result L2-normalised. With
    ``views = W > 1`` there are W such projections (UGNCL's multi-view visual
    extractor f(v_i) -> {v_{w,i}}, Sec. 3.2.1), each initialised, pooled and normalised
    on its own; their embeddings are concatenated.

    Args:
        image_dim: size D of one region feature (2048 for bottom-up attention features).
        embed_dim: size of the joint embedding space.
        pooling: ``"mean"`` or ``"max"`` over the regions.
        views: number W of projections.
    """

    def __init__(self, image_dim: int, embed_dim: int, pooling: str = "mean", views: int = 1) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        if views < 1:
            raise ValueError(f"views must be >= 1, got {views}")
        self.pooling = pooling
        self.views = views
        self.embed_dim = embed_dim
        self.fc = ViewProjection(image_dim, embed_dim, views)
        self.init_weights()

    def init_weights(self) -> None:
        """Draw the projections anew (:func:`init_xavier_linear`)."""
        init_xavier_linear(self.fc)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Embed a batch of images.

        Args:
            images: float tensor (B, R, D) of region features.

        Returns:
            float tensor (B, W * embed_dim): W unit-norm view embeddings, concatenated.
        """
        regions = self.fc(images).unflatten(-1, (self.views, self.embed_dim))
        return l2norm(masked_pool(regions, None, self.pooling)).flatten(1)

    def local(self, images: torch.Tensor) -> tuple[torch.Tensor, None]:
        """Projected region features before pooling (local features for SGR / SAF heads).

        Args:
            images: float tensor (B, R, D) of region features.

        Returns:
            ``(states, None)``: states (B, R, W * embed_dim), every region valid (no mask).
        """
        return self.fc(images), None


class GRUTextEncoder(nn.Module):
    """Token ids -> one caption embedding with a (bi)GRU over word embeddings (SCAN / VSE++).

    The word embeddings, after dropout with rate ``dropout`` (SGRAF's official ``EncoderText``:
    0.4), are read by a GRU; with ``bidirectional=True`` the forward and
    backward hidden states are averaged at every position (SCAN: ``(fwd + bwd) / 2``).
    The hidden states of the valid positions are pooled (mean, or max as TcVSE's
    max-pooled word features) and L2-normalised.

    Args:
        vocab_size: number of token ids; id 0 is padding.
        word_dim: size of a word embedding.
        embed_dim: size of the joint embedding space (the GRU hidden size).
        num_layers: stacked GRU layers.
        bidirectional: read captions in both directions and average the two.
        pooling: ``"mean"`` or ``"max"`` over the valid positions.
        dropout: dropout rate on the word embeddings (0: none).
    """

    def __init__(
        self,
        vocab_size: int,
        word_dim: int,
        embed_dim: int,
        num_layers: int = 1,
        bidirectional: bool = True,
        pooling: str = "mean",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.pooling = pooling
        self.bidirectional = bidirectional
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.GRU(word_dim, embed_dim, num_layers, batch_first=True, bidirectional=bidirectional)
        self.init_weights()

    def init_weights(self) -> None:
        """Draw the word embeddings (:func:`init_word_embedding`) and the GRU (torch's default, as SCAN) anew."""
        init_word_embedding(self.embed)
        self.rnn.reset_parameters()

    def forward(self, captions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Embed a batch of captions.

        Args:
            captions: long tensor (B, L) of token ids, padded with 0.
            lengths: long tensor (B,) with the number of tokens of each caption (>= 1).

        Returns:
            float tensor (B, embed_dim) of unit-norm caption embeddings.
        """
        return l2norm(masked_pool(*self.local(captions, lengths), self.pooling))

    def local(self, captions: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-word GRU states (local features for SGR / SAF heads), before pooling.

        Args:
            captions: long tensor (B, L) of token ids, padded with 0.
            lengths: long tensor (B,) with the number of tokens of each caption (>= 1).

        Returns:
            ``(states, mask)``: states (B, T, embed_dim) with T = max(lengths) (directions
            averaged), mask (B, T) true at the positions of real words.
        """
        lengths = lengths.to(device="cpu", dtype=torch.long)
        words = self.dropout(self.embed(captions))
        packed = pack_padded_sequence(words, lengths, batch_first=True, enforce_sorted=False)
        hidden, _ = pad_packed_sequence(self.rnn(packed)[0], batch_first=True)
        if self.bidirectional:
            fwd, bwd = hidden.chunk(2, dim=-1)
            hidden = (fwd + bwd) / 2
        positions = torch.arange(hidden.size(1), device=hidden.device)
        return hidden, positions[None, :] < lengths.to(hidden.device)[:, None]


def build_region_tower(config: Any) -> RegionImageEncoder:
    """The ``regions`` image tower of ``config``: ``image_views`` projections of ``image_dim`` features, pooled."""
    return RegionImageEncoder(config.image_dim, config.embed_dim, config.image_pooling, config.image_views)


def build_gru_tower(config: Any) -> GRUTextEncoder:
    """The ``gru`` text tower of ``config``: a (bi)GRU over ``word_dim`` word embeddings of the vocabulary."""
    return GRUTextEncoder(
        config.vocab_size,
        config.word_dim,
        config.embed_dim,
        config.text_layers,
        config.bidirectional,
        config.text_pooling,
        config.word_dropout,
    )
