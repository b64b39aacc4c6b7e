"""hfncl: learning cross-modal retrieval from noisy correspondence, with methods as plugins.

Importing hfncl registers its model with the transformers Auto classes, so
``AutoModel.from_pretrained`` loads an hfncl checkpoint without ``trust_remote_code``;
``evaluate.load(hfncl.metrics_path("retrieval"))`` loads its retrieval metrics (and ``"map"``).
"""

from hfncl.config import TrainConfig
from hfncl.hookspecs import hookimpl
from hfncl.metrics import metrics_path
from hfncl.models import MatchingNetwork, NCLConfig, NCLModel
from hfncl.types import Division, PairOutputs

__version__ = "0.1.0"

__all__ = ["Division", "MatchingNetwork", "NCLConfig", "NCLModel", "PairOutputs", "TrainConfig", "hookimpl", "metrics_path"]
