"""hfncl: learning cross-modal retrieval from noisy correspondence, with methods as plugins.

Importing hfncl registers its model with the transformers Auto classes, so
``AutoModel.from_pretrained`` loads an hfncl checkpoint without ``trust_remote_code``.
"""

from hfncl.config import TrainConfig
from hfncl.hookspecs import hookimpl
from hfncl.models import MatchingNetwork, NCLConfig, NCLModel
from hfncl.types import Division, PairOutputs

__version__ = "0.1.0"

__all__ = ["Division", "MatchingNetwork", "NCLConfig", "NCLModel", "PairOutputs", "TrainConfig", "hookimpl"]
