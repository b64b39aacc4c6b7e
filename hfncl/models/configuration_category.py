"""Configuration of the model for cross-modal retrieval on category-labelled precomputed features
(:mod:`hfncl.models.modeling_category`).

Importing :mod:`hfncl.models` registers the ``"hfncl_category"`` model type with the Auto classes.
"""

from __future__ import annotations

from typing import Any

from hfncl.limits import check_sizes
from hfncl.models.configuration import CHECKPOINT_FORMAT, HfnclConfig

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
            checkpoint_format: provenance, as in :class:`hfncl.models.configuration.HfnclConfig`.
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
