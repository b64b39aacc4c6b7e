"""Two-tower retrieval model: K matching networks behind one ``PreTrainedModel``.

A :class:`MatchingNetwork` is one image tower, one text tower and a similarity head
(SCAN / VSE++ precomp encoder). :class:`NCLModel` holds ``config.num_networks`` of
them, each initialised with its own random draw (co-teaching methods such as NCR
need two networks that start apart); at inference its similarity is the mean of the
networks' similarities, as NCR evaluates its two networks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from hfncl.models.configuration import NCLConfig
from hfncl.models.encoders import init_word_embedding, init_xavier_linear
from hfncl.models.heads import NO_HEAD, full_precision, head_builder, pack_local
from hfncl.models.loading import HfnclPreTrainedModel
from hfncl.models.towers import PretrainedTower, build_tower


def build_head(config: NCLConfig) -> torch.nn.Module | None:
    """The similarity head ``config.similarity`` names: ``None`` for cosine, else the one its entry point builds
    (:mod:`hfncl.models.heads`: SGRAF's SGR / SAF, SCAN's, or a third party's)."""
    if config.similarity == NO_HEAD:
        return None
    return head_builder(config.similarity)(config)


class MatchingNetwork(nn.Module):
    """One image encoder, one text encoder and a similarity head (SCAN / VSE++ precomp encoder).

    With ``config.similarity == "cosine"`` the embeddings are the towers' pooled unit-norm
    vectors and the similarity is their dot product. With ``"sgr"`` or ``"saf"`` (SGRAF,
    :mod:`hfncl.models.sgraf`) or ``"scan"`` (SCAN's text-to-image attention, :mod:`hfncl.models.scan`)
    the embeddings are the towers' local features, packed as
    (B, T, d + 1) with a validity flag (:func:`hfncl.models.heads.pack_local`), and the
    similarity is the head's, scored for each of the W image views on its own (the views'
    local features sit side by side in the packed image tensor).

    Args:
        config: the architecture; ``config.num_networks`` is ignored here.
    """

    def __init__(self, config: NCLConfig) -> None:
        super().__init__()
        config.check_values()
        self.views = config.image_views
        self.image_encoder: Any = build_tower(config, "image")  # a tower of hfncl.models.towers' contract
        self.text_encoder: Any = build_tower(config, "text")
        self.head: Any = build_head(config)

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """Region features (B, R, D) -> image embeddings (B, W * embed_dim): W unit-norm views, concatenated.

        With an SGR / SAF head: packed local features (B, R, W * embed_dim + 1), the W views side by side.
        """
        if self.head is not None:
            return pack_local(*self.image_encoder.local(images))
        return self.image_encoder(images)

    def encode_text(self, captions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Token ids (B, L) padded with 0 and lengths (B,) -> unit-norm caption embeddings (B, embed_dim).

        With an SGR / SAF head: packed local features (B, T, embed_dim + 1), T the longest caption.
        """
        if self.head is not None:
            return pack_local(*self.text_encoder.local(captions, lengths))
        return self.text_encoder(captions, lengths)

    def join(self, parts: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
        """Concatenate the embeddings of several batches (from :meth:`encode_image` or
        :meth:`encode_text`) along ``dim``: pooled vectors as they are, packed local features
        through the head (:meth:`hfncl.models.sgraf_nodes.SimilarityHead.join`)."""
        if self.head is not None:
            return self.head.join(parts, dim=dim)
        return torch.cat(list(parts), dim=dim)

    def forward(
        self, images: torch.Tensor, captions: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Embed a batch of pairs: returns ``(image_embeds, text_embeds)``, each (B, embed_dim)."""
        return self.encode_image(images), self.encode_text(captions, lengths)

    def view_scores(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        """Unbounded score of every image view with every caption: (n, W * d), (m, d) -> (W, n, m).

        Scores are float32 under autocast too (rounded ones would tie in a ranking).
        A cosine head's score is the cosine (the dot product of the unit-norm embeddings). An
        SGR / SAF head's is its raw output W_o s before the sigmoid, for each view's local
        features (packed (n, R, W * d + 1): the views side by side, one validity flag) against
        the captions' (m, T, d + 1), all pairs at once in training mode, in bounded blocks otherwise.
        """
        if self.head is not None:
            flag = image_embeds[..., -1:]
            views = image_embeds[..., :-1].chunk(self.views, dim=-1)
            self.head.logits = True  # the raw W_o s; the head alone keeps returning its sigmoid
            try:
                return torch.stack([self.head(torch.cat([view, flag], dim=-1), text_embeds) for view in views])
            finally:
                self.head.logits = False
        views = image_embeds.unflatten(-1, (self.views, -1)).transpose(0, 1)
        with torch.autocast(image_embeds.device.type, enabled=False):
            return full_precision(views) @ full_precision(text_embeds).t()

    def squash(self, scores: torch.Tensor) -> torch.Tensor:
        """Similarities of :meth:`view_scores`' scores: the sigmoid of an SGR / SAF head's, a cosine or a SCAN
        score as it is (the head's ``squash``)."""
        return scores if self.head is None else self.head.squash(scores)

    def view_similarity(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        """Similarity of every image view with every caption, (W, n, m): :meth:`squash` of :meth:`view_scores`."""
        return self.squash(self.view_scores(image_embeds, text_embeds))

    def similarity(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        """Similarity of every image (n, W * d) with every caption (m, d) -> (n, m): the mean over the W views."""
        return self.view_similarity(image_embeds, text_embeds).mean(dim=0)

    def within_similarity(self, embeds: torch.Tensor, modality: str) -> torch.Tensor:
        """Similarity (B, B) of every image (``modality="image"``) or caption (``"text"``) of a batch with every other.

        The cosine of the embeddings with a cosine head (of the concatenated unit-norm views: the mean of the
        views' cosines); with an SGR / SAF / SCAN head, the head's similarity of the two items' local features
        (the head's ``within``), for an image the mean over its views.
        """
        if self.head is None:
            unit = F.normalize(embeds.float(), dim=1)
            return unit @ unit.t()
        if modality != "image":
            return self.head.squash(self._within_scores(embeds, modality))
        flag = embeds[..., -1:]
        views = embeds[..., :-1].chunk(self.views, dim=-1)
        scores = [self._within_scores(torch.cat([view, flag], dim=-1), modality) for view in views]
        return self.head.squash(torch.stack(scores)).mean(dim=0)

    def _within_scores(self, embeds: torch.Tensor, modality: str) -> torch.Tensor:
        """The head's raw scores of ``embeds`` with themselves (``logits`` switched on, as in :meth:`view_scores`)."""
        head = cast(Any, self.head)
        if not callable(getattr(head, "within", None)):
            raise ValueError(
                f"the similarity head {type(head).__name__} has no within(embeds, modality) method: it cannot score "
                "two images or two captions"
            )
        head.logits = True
        try:
            return head.within(embeds, modality)
        finally:
            head.logits = False


class NCLModel(HfnclPreTrainedModel):
    """K matching networks saved and loaded as one transformers model.

    ``save_pretrained`` writes ``config.json`` and ``model.safetensors``;
    ``NCLModel.from_pretrained`` (or ``AutoModel.from_pretrained`` once
    :mod:`hfncl.models` is imported) reads them back from a local directory or a Hub repository.

    Args:
        config: the architecture and the number of networks.
    """

    config_class = NCLConfig
    base_model_prefix = "hfncl"
    main_input_name = "images"

    def after_loading(self) -> None:
        """Restore the trainable flags of pretrained towers (loading marks every parameter trainable)."""
        for module in self.modules():
            if isinstance(module, PretrainedTower):
                module.set_trainable()

    def pretrained_text_parameters(self) -> list[nn.Parameter]:
        """The trainable weights of every network's pretrained text encoder (a transformer text tower without
        its projection head into the joint space; with LoRA, its adapters); empty for a biGRU text tower."""
        return [
            parameter
            for network in self.networks
            if isinstance(network.text_encoder, PretrainedTower)
            for parameter in network.text_encoder.model.parameters()
            if parameter.requires_grad
        ]

    def __init__(self, config: NCLConfig) -> None:
        super().__init__(config)
        self.networks = nn.ModuleList([MatchingNetwork(config) for _ in range(config.num_networks)])
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Initialise one layer with the SCAN scheme instead of transformers' generic one.

        transformers calls this for every submodule from ``post_init`` and, while
        loading, for the layers that hold a weight the checkpoint lacks. Its default
        draws every ``nn.Linear`` and ``nn.Embedding`` from N(0, 0.02), which would
        replace the SCAN initialisation. The dispatch is per layer, not per tower: for
        custom models transformers skips modules without parameters of their own (the
        towers) when loading, so a tower-level initialiser would leave a missing weight
        as uninitialised memory. Every call draws from the global generator, so the K
        networks start apart, and identically under the same ``torch.manual_seed``.

        A transformer tower's encoder is a ``PreTrainedModel``: transformers initialises
        its layers with that model's own scheme, never with this one. The tower itself
        (a :class:`~hfncl.models.towers.PretrainedTower`, visited after its layers, whose
        own parameters are its head) then draws its head, copies in its pretrained
        weights and zeroes its LoRA updates. ``from_pretrained`` builds the model on the
        meta device, where no initialiser runs, and fills every weight from the
        checkpoint; the loaded head marks the tower initialised, so a reload never reads
        the tower's source.
        """
        if isinstance(module, PretrainedTower):
            module.init_weights()
        elif isinstance(module, nn.Linear):
            init_xavier_linear(module)
        elif isinstance(module, nn.Embedding):
            init_word_embedding(module)
        elif isinstance(module, (nn.GRU, nn.BatchNorm1d)):
            module.reset_parameters()

    def single_network(self, index: int) -> "NCLModel":
        """Network ``index`` alone, as a one-network model sharing its weights (a co-trained method's one-network
        evaluation: that network's own similarity instead of the mean over the K networks).

        Raises:
            ValueError: ``index`` is not one of the model's networks.
        """
        if not 0 <= index < len(self.networks):
            raise ValueError(f"network {index} does not exist: the model holds {len(self.networks)} network(s)")
        config = type(self.config).from_dict({**self.config.to_dict(), "num_networks": 1})
        with torch.device("meta"):
            single = type(self)(config)
        single.networks = nn.ModuleList([self.networks[index]])
        return single.train(self.training)

    @property
    def matching_networks(self) -> list[MatchingNetwork]:
        """The K networks of :attr:`networks` (an ``nn.ModuleList``), as the class they are."""
        return cast(list[MatchingNetwork], list(self.networks))

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """Region features (B, R, D) -> image embeddings of every network, stacked (K, B, W * embed_dim).

        With an SGR / SAF head: packed local features (K, B, R, W * embed_dim + 1).
        """
        return torch.stack([network.encode_image(images) for network in self.matching_networks])

    def encode_text(self, captions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Token ids (B, L) and lengths (B,) -> caption embeddings of every network, stacked (K, B, embed_dim).

        With an SGR / SAF head: packed local features (K, B, T, embed_dim + 1).
        """
        return torch.stack([network.encode_text(captions, lengths) for network in self.matching_networks])

    def join_embeddings(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """Concatenate per-batch embeddings of every network, (K, B, ...) each, along the items (dim 1).

        What joins the batches of an encoded split: pooled embeddings (K, B, d) are
        concatenated as they are; packed local features (K, B, T, d + 1) of SGR / SAF heads
        are first zero-padded to the longest T (:meth:`MatchingNetwork.join`).
        """
        return self.matching_networks[0].join(parts, dim=1)

    def network_similarities(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        """Each network's image-caption similarities, stacked (K, n, m).

        Args:
            image_embeds: (K, n, W * d) from :meth:`encode_image`.
            text_embeds: (K, m, d) from :meth:`encode_text`.
        """
        k = len(self.networks)
        dims = 3 if self.config.similarity == "cosine" else 4
        shapes = "(K={k}, n, W*d) image and (K={k}, m, d) text"
        if dims == 4:
            shapes = "packed (K={k}, n, R, d+1) image and (K={k}, m, T, d+1) text"
        shapes_fit = image_embeds.dim() == dims and text_embeds.dim() == dims
        if not shapes_fit or image_embeds.size(0) != k or text_embeds.size(0) != k:
            raise ValueError(
                f"NCLModel expects {shapes.format(k=k)} embeddings, got "
                f"{tuple(image_embeds.shape)} and {tuple(text_embeds.shape)}"
            )
        return torch.stack(
            [network.similarity(image_embeds[i], text_embeds[i]) for i, network in enumerate(self.matching_networks)]
        )

    def similarity(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        """Mean over the K networks of their image-caption similarities.

        Args:
            image_embeds: (K, n, W * d) from :meth:`encode_image`.
            text_embeds: (K, m, d) from :meth:`encode_text`.

        Returns:
            (n, m) similarity of every image with every caption.
        """
        return self.network_similarities(image_embeds, text_embeds).mean(dim=0)

    def forward(self, images: torch.Tensor, captions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Similarity matrix (B, B) of a batch's images (rows) and captions (columns), averaged over networks."""
        return self.similarity(self.encode_image(images), self.encode_text(captions, lengths))
