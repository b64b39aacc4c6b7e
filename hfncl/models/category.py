"""A model for cross-modal retrieval on category-labelled precomputed features, and its configuration.

Each modality i has its own function f_i (a 3-layer fully connected network on the
precomputed features: CLIP or any other backbone's vectors) into a common space of
``embed_dim`` dimensions (z = f_i(x), Eq. 1 of the label-noise paper in
``shared/papers``), and K class prototypes c_k, shared by the modalities, classify an
embedding (Eq. 2). Embeddings and prototypes are L2-normalised, as in MRL's code (the
prototype classifier this family of methods shares), so prototype scores are cosines
and retrieval ranks by cosine similarity.

Importing :mod:`hfncl.models` registers the ``"hfncl_category"`` model type with the
Auto classes; saving writes ``config.json`` and ``model.safetensors``.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from hfncl.model_settings import check_sizes
from hfncl.models.loading import HfnclPreTrainedModel
from hfncl.models.provenance import CHECKPOINT_FORMAT, HfnclConfig

_POSITIVE_INTS = ("image_dim", "text_dim", "num_classes", "embed_dim", "hidden_dim", "num_networks")


class CategoryConfig(HfnclConfig):
    """Architecture of a :class:`CategoryModel` and the plugins that trained it.

    Args:
        image_dim: size of an image feature vector.
        text_dim: size of a text feature vector.
        num_classes: number K of categories (prototypes).
        embed_dim: dimension c of the common space (512 in the label-noise paper, Sec. 3.2).
        hidden_dim: width of the two hidden layers of each modality's 3-layer MLP (the
            paper does not give it; 4096 is MRL's code).
        num_networks: number of independently initialised networks; retrieval ranks by
            the mean of their cosine similarities.
        plugins, plugin_versions, plugin_options, plugin_distributions, hfncl_version,
            checkpoint_format: provenance, as in :class:`hfncl.models.provenance.HfnclConfig`.
        kwargs: the common :class:`~transformers.PretrainedConfig` arguments.

    Raises:
        ValueError: when a field holds a value outside its allowed range.
    """

    model_type = "hfncl_category"

    def __init__(
        self,
        image_dim: int = 512,
        text_dim: int = 512,
        num_classes: int = 10,
        embed_dim: int = 512,
        hidden_dim: int = 4096,
        num_networks: int = 1,
        plugins: list[str] | None = None,
        plugin_versions: dict[str, str] | None = None,
        plugin_options: dict[str, Any] | None = None,
        plugin_distributions: dict[str, str] | None = None,
        hfncl_version: str | None = None,
        checkpoint_format: int = CHECKPOINT_FORMAT,
        **kwargs: Any,
    ) -> None:
        self.set_provenance(
            plugins, plugin_versions, plugin_options, plugin_distributions, hfncl_version, checkpoint_format
        )
        self.image_dim = image_dim
        self.text_dim = text_dim
        self.num_classes = num_classes
        self.embed_dim = embed_dim
        self.hidden_dim = hidden_dim
        self.num_networks = num_networks
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"CategoryConfig.{name} must be a positive integer, got {value!r}")
        check_sizes({name: getattr(self, name) for name in _POSITIVE_INTS}, "CategoryConfig")
        if self.num_classes < 2:
            raise ValueError(f"CategoryConfig.num_classes must be at least 2, got {self.num_classes}")
        self.check_provenance()
        super().__init__(**kwargs)



MODALITIES = ("image", "text")


def modality_mlp(input_dim: int, hidden_dim: int, embed_dim: int) -> nn.Sequential:
    """f_i of Eq. 1: Linear-ReLU-Linear-ReLU-Linear (3 fully connected layers)."""
    return nn.Sequential(
        nn.Linear(input_dim, hidden_dim),
        nn.ReLU(),
        nn.Linear(hidden_dim, hidden_dim),
        nn.ReLU(),
        nn.Linear(hidden_dim, embed_dim),
    )


class CategoryNetwork(nn.Module):
    """One network: an MLP per modality into the common space and K shared class prototypes."""

    def __init__(self, config: CategoryConfig) -> None:
        super().__init__()
        self.image_mlp = modality_mlp(config.image_dim, config.hidden_dim, config.embed_dim)
        self.text_mlp = modality_mlp(config.text_dim, config.hidden_dim, config.embed_dim)
        self.prototypes = nn.Parameter(torch.empty(config.num_classes, config.embed_dim))

    def encode(self, modality: str, features: torch.Tensor) -> torch.Tensor:
        """(B, D_modality) features -> (B, embed_dim) L2-normalised embeddings."""
        if modality not in MODALITIES:
            raise ValueError(f"modality must be one of {MODALITIES}, got {modality!r}")
        mlp = self.image_mlp if modality == "image" else self.text_mlp
        return F.normalize(mlp(features), dim=-1)

    def normalized_prototypes(self) -> torch.Tensor:
        """(K, embed_dim) unit-norm prototypes c_k."""
        return F.normalize(self.prototypes, dim=-1)

    def forward(self, image: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encode("image", image), self.encode("text", text)


class CategoryModel(HfnclPreTrainedModel):
    """K category networks saved and loaded as one transformers model."""

    config_class = CategoryConfig
    base_model_prefix = "hfncl_category"
    main_input_name = "image"

    def __init__(self, config: CategoryConfig) -> None:
        super().__init__(config)
        self.networks = nn.ModuleList([CategoryNetwork(config) for _ in range(config.num_networks)])
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """PyTorch's default Linear initialisation; orthogonal prototypes (as in MRL's code).

        Every draw uses the global generator, so networks start apart, and identically
        under the same ``torch.manual_seed``.
        """
        if isinstance(module, nn.Linear):
            module.reset_parameters()
        elif isinstance(module, CategoryNetwork):
            nn.init.orthogonal_(module.prototypes)

    def encode(self, modality: str, features: torch.Tensor) -> torch.Tensor:
        """(B, D) features of ``modality`` -> (K, B, embed_dim) embeddings of every network."""
        return torch.stack([cast(CategoryNetwork, network).encode(modality, features) for network in self.networks])

    def retrieval_embeddings(self, modality: str, features: torch.Tensor) -> torch.Tensor:
        """(B, K * embed_dim): every network's unit embedding, concatenated and scaled by 1/sqrt(K).

        The cosine of two such vectors is the mean over networks of their cosines, so one
        cosine ranking (the mAP protocol) ranks by the networks' mean similarity.
        """
        embeds = self.encode(modality, features)
        return embeds.permute(1, 0, 2).reshape(features.size(0), -1) / len(self.networks) ** 0.5

    def forward(self, image: torch.Tensor, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings of both modalities by every network, (K, B, embed_dim) each."""
        return self.encode("image", image), self.encode("text", text)
