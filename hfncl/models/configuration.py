"""Configuration of an :class:`hfncl.models.NCLModel` (saved as ``config.json``)."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from transformers import PretrainedConfig

CHECKPOINT_FORMAT = 1
"""Version of the checkpoint layout (config fields, weight names) this hfncl writes and reads.

Bumped only by a change that would make an older hfncl misread a checkpoint; a config of
a newer format is refused with :class:`IncompatibleCheckpointError` instead of misread.
"""


class IncompatibleCheckpointError(ValueError):
    """``config.json`` was written by a newer hfncl, in a checkpoint format this one cannot read."""


def installed_hfncl_version() -> str:
    """Version of the installed hfncl distribution (written into every saved config)."""
    return version("hfncl")


def _check_checkpoint_format(checkpoint_format: Any, hfncl_version: Any) -> None:
    """Refuse a config whose ``checkpoint_format`` is not one this hfncl reads, naming both versions."""
    if isinstance(checkpoint_format, bool) or not isinstance(checkpoint_format, int) or checkpoint_format < 1:
        raise ValueError(f"NCLConfig.checkpoint_format must be a positive integer, got {checkpoint_format!r}")
    if checkpoint_format > CHECKPOINT_FORMAT:
        raise IncompatibleCheckpointError(
            f"config.json has checkpoint_format {checkpoint_format} (written by hfncl {hfncl_version or '(unknown)'}), "
            f"but the installed hfncl {installed_hfncl_version()} reads checkpoint formats up to "
            f"{CHECKPOINT_FORMAT}. Upgrade hfncl (pip install -U hfncl) to load this checkpoint."
        )

IMAGE_POOLINGS = ("mean", "max")
TEXT_POOLINGS = ("mean", "max")
SIMILARITIES = ("cosine",)
_POSITIVE_INTS = ("image_dim", "embed_dim", "word_dim", "vocab_size", "text_layers", "num_networks", "image_views")


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
        image_views: number W of image views: W projections of the regions into the joint
            space, each pooled and normalised on its own (UGNCL's multi-view visual
            extractor, Sec. 3.2.1). A network's similarity is the mean over its views.
        text_pooling: how the GRU's word states are pooled into one caption embedding,
            one of ``"mean"`` (VSE++ / SCAN precomp), ``"max"``.
        similarity: image-caption similarity, one of ``"cosine"``.
        num_networks: number K of independently initialised networks (co-teaching
            methods train two); the model's similarity is their mean.
        plugins: names of the method plugins that trained the model (metadata).
        plugin_versions: version of each of those plugins (metadata).
        plugin_options: the plugin options the model was trained with, defaults included
            (read at inference by plugins that score or rank, e.g. which branch retrieves).
        plugin_distributions: the distribution package that provided each of those plugins
            (metadata; names the package to install when a plugin is missing at load time).
        hfncl_version: version of the hfncl that wrote the config; a fresh config gets the
            installed version, and every save writes the installed version.
        checkpoint_format: checkpoint layout version (:data:`CHECKPOINT_FORMAT`); a config
            of a newer format raises :class:`IncompatibleCheckpointError`.
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
        image_views: int = 1,
        text_pooling: str = "mean",
        similarity: str = "cosine",
        num_networks: int = 1,
        plugins: list[str] | None = None,
        plugin_versions: dict[str, str] | None = None,
        plugin_options: dict[str, Any] | None = None,
        plugin_distributions: dict[str, str] | None = None,
        hfncl_version: str | None = None,
        checkpoint_format: int = CHECKPOINT_FORMAT,
        **kwargs: Any,
    ) -> None:
        _check_checkpoint_format(checkpoint_format, hfncl_version)
        self.image_dim = image_dim
        self.embed_dim = embed_dim
        self.word_dim = word_dim
        self.vocab_size = vocab_size
        self.text_layers = text_layers
        self.bidirectional = bidirectional
        self.image_pooling = image_pooling
        self.image_views = image_views
        self.text_pooling = text_pooling
        self.similarity = similarity
        self.num_networks = num_networks
        plugins = [] if plugins is None else plugins
        plugin_versions = {} if plugin_versions is None else plugin_versions
        self.plugins = list(plugins) if isinstance(plugins, (list, tuple)) else plugins
        self.plugin_versions = dict(plugin_versions) if isinstance(plugin_versions, dict) else plugin_versions
        plugin_options = {} if plugin_options is None else plugin_options
        self.plugin_options = dict(plugin_options) if isinstance(plugin_options, dict) else plugin_options
        plugin_distributions = {} if plugin_distributions is None else plugin_distributions
        self.plugin_distributions = (
            dict(plugin_distributions) if isinstance(plugin_distributions, dict) else plugin_distributions
        )
        self.hfncl_version = installed_hfncl_version() if hfncl_version is None else hfncl_version
        self.checkpoint_format = checkpoint_format
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
        if self.text_pooling not in TEXT_POOLINGS:
            raise ValueError(f"NCLConfig.text_pooling must be one of {TEXT_POOLINGS}, got {self.text_pooling!r}")
        if self.similarity not in SIMILARITIES:
            raise ValueError(f"NCLConfig.similarity must be one of {SIMILARITIES}, got {self.similarity!r}")
        if not isinstance(self.plugins, list) or not all(isinstance(p, str) for p in self.plugins):
            raise ValueError(f"NCLConfig.plugins must be a list of plugin names, got {self.plugins!r}")
        if not isinstance(self.plugin_versions, dict):
            raise ValueError(f"NCLConfig.plugin_versions must be a dict name -> version, got {self.plugin_versions!r}")
        if not isinstance(self.plugin_options, dict):
            raise ValueError(f"NCLConfig.plugin_options must be a dict name -> value, got {self.plugin_options!r}")
        if not isinstance(self.plugin_distributions, dict) or not all(
            isinstance(v, str) for v in self.plugin_distributions.values()
        ):
            raise ValueError(
                f"NCLConfig.plugin_distributions must be a dict name -> package, got {self.plugin_distributions!r}"
            )
        if not isinstance(self.hfncl_version, str):
            raise ValueError(f"NCLConfig.hfncl_version must be a version string, got {self.hfncl_version!r}")

    def to_dict(self) -> dict[str, Any]:
        """The config as a dict, stamped with the installed hfncl version and :data:`CHECKPOINT_FORMAT`.

        Like ``transformers_version``: what is being written is written by this hfncl, in
        its format, whatever the config was read from.
        """
        output = super().to_dict()
        output["hfncl_version"] = installed_hfncl_version()
        output["checkpoint_format"] = CHECKPOINT_FORMAT
        return output
