"""Two-tower retrieval model: K matching networks behind one ``PreTrainedModel``.

A :class:`MatchingNetwork` is one image tower, one text tower and a similarity head
(SCAN / VSE++ precomp encoder). :class:`NCLModel` holds ``config.num_networks`` of
them, each initialised with its own random draw (co-teaching methods such as NCR
need two networks that start apart); at inference its similarity is the mean of the
networks' similarities, as NCR evaluates its two networks.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from hfncl.models.configuration import NCLConfig
from hfncl.models.encoders import GRUTextEncoder, RegionImageEncoder, init_word_embedding, init_xavier_linear


class MatchingNetwork(nn.Module):
    """One image encoder, one text encoder and a cosine similarity (SCAN / VSE++ precomp encoder).

    Args:
        config: the architecture; ``config.num_networks`` is ignored here.
    """

    def __init__(self, config: NCLConfig) -> None:
        super().__init__()
        config.check_values()
        self.image_encoder = RegionImageEncoder(config.image_dim, config.embed_dim, config.image_pooling)
        self.text_encoder = GRUTextEncoder(
            config.vocab_size, config.word_dim, config.embed_dim, config.text_layers, config.bidirectional
        )

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """Region features (B, R, D) -> unit-norm image embeddings (B, embed_dim)."""
        return self.image_encoder(images)

    def encode_text(self, captions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Token ids (B, L) padded with 0 and lengths (B,) -> unit-norm caption embeddings (B, embed_dim)."""
        return self.text_encoder(captions, lengths)

    def forward(
        self, images: torch.Tensor, captions: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Embed a batch of pairs: returns ``(image_embeds, text_embeds)``, each (B, embed_dim)."""
        return self.encode_image(images), self.encode_text(captions, lengths)

    def similarity(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        """Cosine similarity of every image (n, d) with every caption (m, d) -> (n, m).

        The embeddings are unit-norm, so the cosine is their dot product.
        """
        return image_embeds @ text_embeds.t()


class NCLModel(PreTrainedModel):
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
        """
        if isinstance(module, nn.Linear):
            init_xavier_linear(module)
        elif isinstance(module, nn.Embedding):
            init_word_embedding(module)
        elif isinstance(module, nn.GRU):
            module.reset_parameters()

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """Region features (B, R, D) -> image embeddings of every network, stacked (K, B, embed_dim)."""
        return torch.stack([network.encode_image(images) for network in self.networks])

    def encode_text(self, captions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Token ids (B, L) and lengths (B,) -> caption embeddings of every network, stacked (K, B, embed_dim)."""
        return torch.stack([network.encode_text(captions, lengths) for network in self.networks])

    def similarity(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        """Mean over the K networks of their image-caption similarities.

        Args:
            image_embeds: (K, n, d) from :meth:`encode_image`.
            text_embeds: (K, m, d) from :meth:`encode_text`.

        Returns:
            (n, m) similarity of every image with every caption.
        """
        k = len(self.networks)
        if image_embeds.dim() != 3 or text_embeds.dim() != 3 or image_embeds.size(0) != k or text_embeds.size(0) != k:
            raise ValueError(
                f"NCLModel.similarity expects (K={k}, n, d) image and (K={k}, m, d) text embeddings, got "
                f"{tuple(image_embeds.shape)} and {tuple(text_embeds.shape)}"
            )
        sims = [network.similarity(image_embeds[i], text_embeds[i]) for i, network in enumerate(self.networks)]
        return torch.stack(sims).mean(dim=0)

    def forward(self, images: torch.Tensor, captions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Similarity matrix (B, B) of a batch's images (rows) and captions (columns), averaged over networks."""
        return self.similarity(self.encode_image(images), self.encode_text(captions, lengths))
