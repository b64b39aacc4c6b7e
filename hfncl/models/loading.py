"""The base of hfncl's models: ``from_pretrained`` with errors that say what to do."""

from __future__ import annotations

import os
from typing import Any

from huggingface_hub import is_offline_mode
from safetensors import SafetensorError
from transformers import PreTrainedModel

from hfncl.models.configuration import IncompatibleCheckpointError
from hfncl.plugins import require_plugins


class HfnclPreTrainedModel(PreTrainedModel):
    """A transformers model whose loading names the problem: a newer checkpoint format, damaged
    weights, an offline Hub id, a missing plugin. Subclasses set ``config_class``; a config
    carries the plugin metadata fields of :class:`hfncl.models.NCLConfig`."""

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike, *model_args: Any, **kwargs: Any
    ) -> HfnclPreTrainedModel:
        """``PreTrainedModel.from_pretrained`` (local directory or Hub id) with errors that say what to do.

        ``AutoModel.from_pretrained`` ends here too, so the Auto classes give the same errors.

        Raises:
            IncompatibleCheckpointError: ``config.json`` was written by a newer hfncl in a
                checkpoint format this one cannot read.
            hfncl.plugins.MissingPluginError: a plugin that trained the model is not
                installed; the message names the package to install.
            OSError: the safetensors weights are corrupted or truncated, or
                ``HF_HUB_OFFLINE=1`` is set and a name that is not a local directory is not
                in the Hub cache.
        """
        name = str(pretrained_model_name_or_path)
        try:
            model = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        except IncompatibleCheckpointError as error:
            raise IncompatibleCheckpointError(f"{name}: {error}") from error
        except SafetensorError as error:
            raise OSError(
                f"The weights of {name!r} cannot be read: its safetensors file is corrupted or truncated ({error}). "
                "Save the model again, or download it again with force_download=True."
            ) from error
        except OSError as error:
            if is_offline_mode() and not os.path.isdir(name):
                raise OSError(
                    f"{name!r} is not a local directory, and HF_HUB_OFFLINE=1 forbids downloading it from the Hub "
                    "(nor is a complete copy in the local Hub cache). Give the path of a saved checkpoint, "
                    "or unset HF_HUB_OFFLINE."
                ) from error
            raise
        model.after_loading()
        config = model.config
        require_plugins(config.plugins, config.plugin_distributions, config.plugin_versions, source=name)
        return model

    def after_loading(self) -> None:
        """Restore what the saved weights do not carry (nothing by default)."""
