"""Configuration of an :class:`hfncl.models.NCLModel` (saved as ``config.json``)."""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

IMAGE_POOLINGS = ("mean", "max")
SIMILARITIES = ("cosine",)
_POSITIVE_INTS = ("image_dim", "embed_dim", "word_dim", "vocab_size", "text_layers", "num_networks")


class NCLConfig(PretrainedConfig):
    """Architecture of a two-tower retrieval model and the plugins that trained it.

    The defaults are the SCAN / VSE++ precomp encoder: 36 x 2048 bottom-up region
    features, a 300-d word embedding read by a biGRU, a 1024-d joint space.

    Args:
        image_dim: size of one precomputed region feature.
        embed_dim: size of the joint image-text embedding space.
        word_dim: size of a word embedding.
        vocab_size: number of token ids (id 0 is padding).
        text_layers: stacked GRU layers of the text tower.
        bidirectional: whether the text GRU reads captions in both directions.
        image_pooling: how region embeddings are pooled into one image embedding, one of
            ``"mean"``, ``"max"``.
        similarity: image-caption similarity, one of ``"cosine"``.
        num_networks: number K of independently initialised networks (co-teaching
            methods train two); the model's similarity is their mean.
        plugins: names of the method plugins that trained the model (metadata).
        plugin_versions: version of each of those plugins (metadata).
        kwargs: the common :class:`~transformers.PretrainedConfig` arguments.

    Raises:
        ValueError: when a field holds a value outside its allowed range or set.
    """

    model_type = "hfncl"

    def __init__(
        self,
        image_dim: int = 2048,
        embed_dim: int = 1024,
        word_dim: int = 300,
        vocab_size: int = 10000,
        text_layers: int = 1,
        bidirectional: bool = True,
        image_pooling: str = "mean",
        similarity: str = "cosine",
        num_networks: int = 1,
        plugins: list[str] | None = None,
        plugin_versions: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.image_dim = image_dim
        self.embed_dim = embed_dim
        self.word_dim = word_dim
        self.vocab_size = vocab_size
        self.text_layers = text_layers
        self.bidirectional = bidirectional
        self.image_pooling = image_pooling
        self.similarity = similarity
        self.num_networks = num_networks
        plugins = [] if plugins is None else plugins
        plugin_versions = {} if plugin_versions is None else plugin_versions
        self.plugins = list(plugins) if isinstance(plugins, (list, tuple)) else plugins
        self.plugin_versions = dict(plugin_versions) if isinstance(plugin_versions, dict) else plugin_versions
        self.check_values()
        super().__init__(**kwargs)

    def check_values(self) -> None:
        """Raise a ``ValueError`` naming the first field whose value is not allowed."""
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"NCLConfig.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.bidirectional, bool):
            raise ValueError(f"NCLConfig.bidirectional must be True or False, got {self.bidirectional!r}")
        if self.image_pooling not in IMAGE_POOLINGS:
            raise ValueError(f"NCLConfig.image_pooling must be one of {IMAGE_POOLINGS}, got {self.image_pooling!r}")
        if self.similarity not in SIMILARITIES:
            raise ValueError(f"NCLConfig.similarity must be one of {SIMILARITIES}, got {self.similarity!r}")
        if not isinstance(self.plugins, list) or not all(isinstance(p, str) for p in self.plugins):
            raise ValueError(f"NCLConfig.plugins must be a list of plugin names, got {self.plugins!r}")
        if not isinstance(self.plugin_versions, dict):
            raise ValueError(f"NCLConfig.plugin_versions must be a dict name -> version, got {self.plugin_versions!r}")
