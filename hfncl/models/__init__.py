"""Models: :class:`NCLConfig`, :class:`NCLModel` and its :class:`MatchingNetwork`.

Importing this package registers the ``"hfncl"`` model type with ``AutoConfig`` and
``AutoModel``, so ``AutoModel.from_pretrained`` loads a saved ``NCLModel`` without
``trust_remote_code``.
"""

from transformers import AutoConfig, AutoModel

from hfncl.models.configuration import NCLConfig
from hfncl.models.modeling import MatchingNetwork, NCLModel

__all__ = ["MatchingNetwork", "NCLConfig", "NCLModel"]


# exist_ok: importing twice (or reloading the module) re-registers instead of raising.
AutoConfig.register(NCLConfig.model_type, NCLConfig, exist_ok=True)
AutoModel.register(NCLConfig, NCLModel, exist_ok=True)
