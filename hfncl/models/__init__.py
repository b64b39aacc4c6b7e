"""Models: :class:`NCLConfig`, :class:`NCLModel` and its :class:`MatchingNetwork`.

Importing this package registers the ``"hfncl"`` and ``"hfncl_category"`` model types
with ``AutoConfig`` and ``AutoModel``, so ``AutoModel.from_pretrained`` loads a saved
``NCLModel`` or :class:`CategoryModel` without ``trust_remote_code``.
"""

from transformers import AutoConfig, AutoModel

from hfncl.models.category import CategoryConfig, CategoryModel, CategoryNetwork
from hfncl.models.configuration import NCLConfig
from hfncl.models.modeling import MatchingNetwork, NCLModel
from hfncl.models.provenance import HfnclConfig

__all__ = [
    "CategoryConfig",
    "CategoryModel",
    "CategoryNetwork",
    "HfnclConfig",
    "MatchingNetwork",
    "NCLConfig",
    "NCLModel",
]


# exist_ok: importing twice (or reloading the module) re-registers instead of raising.
AutoConfig.register(NCLConfig.model_type, NCLConfig, exist_ok=True)
AutoModel.register(NCLConfig, NCLModel, exist_ok=True)
AutoConfig.register(CategoryConfig.model_type, CategoryConfig, exist_ok=True)
AutoModel.register(CategoryConfig, CategoryModel, exist_ok=True)
