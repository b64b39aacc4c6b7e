"""What every hfncl model config carries besides its architecture: the plugins that trained the model, the hfncl
that wrote it and its checkpoint format (:class:`HfnclConfig`, the base of :class:`hfncl.models.NCLConfig` and
:class:`hfncl.models.CategoryConfig`).
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from transformers import PretrainedConfig

from hfncl.hub.record import IncompatibleCheckpointError

CHECKPOINT_FORMAT = 3
"""Version of the checkpoint layout (config fields, weight names) this hfncl writes and reads.

Bumped only by a change that would make an older hfncl misread a checkpoint; a config of
a newer format is refused with :class:`IncompatibleCheckpointError` instead of misread.

1. The first layout.
2. SGR / SAF heads with the official SGRAF code's layers (LeakyReLU(0.1) attention, the image
   pooling's batch norms, dropout 0.4; :class:`NCLConfig`'s ``word_dropout``,
   ``pooling_dropout``, ``pooling_batch_norm``, ``attention_negative_slope``,
   ``image_regions``). A format-1 config reads those fields as the layers of its time.
3. A similarity head's settings in ``head_options`` under its name (``{"sgr.sim_dim": 256}``), declared by the
   head; a format-2 config's flat fields (``sim_dim``, ``scan_pooling``, ...) are read into them.
"""


def installed_hfncl_version() -> str:
    """Version of the installed hfncl distribution (written into every saved config)."""
    return version("hfncl")


class HfnclConfig(PretrainedConfig):
    """What every hfncl model config carries besides its architecture: the plugins that
    trained the model and the checkpoint format it is written in.

    Subclasses call :meth:`set_provenance` first in their ``__init__`` (so that a config
    of a newer checkpoint format is refused before any of its fields is read) and
    :meth:`check_provenance` with their own value checks. ``to_dict`` stamps what is
    written with the installed hfncl version and :data:`CHECKPOINT_FORMAT`, like
    ``transformers_version``: what is being written is written by this hfncl, in its
    format, whatever the config was read from.

    Fields:
        plugins: names of the method plugins that trained the model.
        plugin_versions: version of each of those plugins.
        plugin_options: the plugin options the model was trained with, defaults included
            (read at inference by plugins that score or rank, e.g. which branch retrieves).
        plugin_distributions: the distribution package that provided each of those plugins
            (what to ``pip install`` when one is missing at load time).
        hfncl_version: the hfncl that wrote the config.
        checkpoint_format: the checkpoint layout version it was written in.
    """

    def set_provenance(
        self,
        plugins: list[str] | None,
        plugin_versions: dict[str, str] | None,
        plugin_options: dict[str, Any] | None,
        plugin_distributions: dict[str, str] | None,
        hfncl_version: str | None,
        checkpoint_format: int,
    ) -> None:
        """Refuse a newer checkpoint format, then store the plugin fields (copies of lists and dicts)."""
        self._check_checkpoint_format(checkpoint_format, hfncl_version)
        self.plugins = _copied([] if plugins is None else plugins)
        self.plugin_versions = _copied({} if plugin_versions is None else plugin_versions)
        self.plugin_options = _copied({} if plugin_options is None else plugin_options)
        self.plugin_distributions = _copied({} if plugin_distributions is None else plugin_distributions)
        self.hfncl_version = installed_hfncl_version() if hfncl_version is None else hfncl_version
        self.checkpoint_format = checkpoint_format

    def check_provenance(self) -> None:
        """Raise a ``ValueError`` naming the first plugin field whose value is not allowed."""
        name = type(self).__name__
        if not isinstance(self.plugins, list) or not all(isinstance(p, str) for p in self.plugins):
            raise ValueError(f"{name}.plugins must be a list of plugin names, got {self.plugins!r}")
        if not isinstance(self.plugin_versions, dict):
            raise ValueError(f"{name}.plugin_versions must be a dict name -> version, got {self.plugin_versions!r}")
        if not isinstance(self.plugin_options, dict):
            raise ValueError(f"{name}.plugin_options must be a dict name -> value, got {self.plugin_options!r}")
        if not isinstance(self.plugin_distributions, dict) or not all(
            isinstance(v, str) for v in self.plugin_distributions.values()
        ):
            raise ValueError(
                f"{name}.plugin_distributions must be a dict name -> package, got {self.plugin_distributions!r}"
            )
        if not isinstance(self.hfncl_version, str):
            raise ValueError(f"{name}.hfncl_version must be a version string, got {self.hfncl_version!r}")

    def _check_checkpoint_format(self, checkpoint_format: Any, hfncl_version: Any) -> None:
        """Refuse a config whose ``checkpoint_format`` is not one this hfncl reads, naming both versions."""
        if isinstance(checkpoint_format, bool) or not isinstance(checkpoint_format, int) or checkpoint_format < 1:
            raise ValueError(
                f"{type(self).__name__}.checkpoint_format must be a positive integer, got {checkpoint_format!r}"
            )
        if checkpoint_format > CHECKPOINT_FORMAT:
            raise IncompatibleCheckpointError(
                f"config.json has checkpoint_format {checkpoint_format} (written by hfncl "
                f"{hfncl_version or '(unknown)'}), but the installed hfncl {installed_hfncl_version()} reads "
                f"checkpoint formats up to {CHECKPOINT_FORMAT}. Upgrade hfncl (pip install -U hfncl) to load "
                "this checkpoint."
            )

    def to_dict(self) -> dict[str, Any]:
        """The config as a dict, stamped with the installed hfncl version and :data:`CHECKPOINT_FORMAT`."""
        output = super().to_dict()
        output["hfncl_version"] = installed_hfncl_version()
        output["checkpoint_format"] = CHECKPOINT_FORMAT
        return output


def _copied(value: Any) -> Any:
    """A copy of a list / tuple (as a list) or dict; any other value as it is (left to the value checks)."""
    if isinstance(value, (list, tuple)):
        return list(value)
    return dict(value) if isinstance(value, dict) else value
