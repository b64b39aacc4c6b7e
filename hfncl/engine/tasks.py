"""What the trainer needs to know about a kind of training data: a small, explicit contract.

The trainer (:class:`hfncl.engine.trainer.Trainer`) runs the plugins' hooks the same
way whatever the data are; a *task* supplies the parts that depend on them:

=================  =========================================================================
``kind``           the data kind plugins declare they train on (``data_kind`` hook).
``best_metric``    the validation metric that selects the best checkpoint (higher is better).
``noise_rate``     the share of training samples the run corrupted when it knows it, else ``None``
                   (what methods read as ``trainer.noise_rate``).
``build_model``    the model (a ``PreTrainedModel`` with ``.networks``) from its config.
``collate``        training items -> a batch dict (:mod:`hfncl.types`).
``encode``         one network module on this process's slice of a batch -> a tuple of
                   per-sample tensors, run under autocast; the trainer gathers each over
                   processes (with gradients) in order.
``outputs``        the gathered tensors -> the outputs dataclass the hooks receive.
``evaluate``       a model on an evaluation split -> metrics (``best_metric`` among them).
``clean_masks``    the hidden ground truth of the training set, by part; the parts'
                   concatenation, in order, is what a :class:`hfncl.types.Division`
                   covers and is judged against. For diagnostics only: never given to a plugin.
``pretrained_text_parameters``
                   the model's pretrained text-encoder weights, which the optimiser gives
                   ``TrainConfig.text_tower_lr_scale`` and ``freeze_text_tower_epochs`` (may be empty).
=================  =========================================================================

The tasks themselves sit above the engine, one class per kind of data, each with the rest of
what a whole run does for its kind (:mod:`hfncl.tasks`): :class:`hfncl.tasks.pairs.PairTask`
(image-caption pairs with noisy correspondence, R@K / rSum) and
:class:`hfncl.tasks.labels.CategoryTask` (category-labelled samples with noisy labels, mAP; a
division there covers every (modality, sample) unit, modality-major, i.e. unit ``u`` is
sample ``u % N`` of modality ``("image", "text")[u // N]``).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from hfncl.types import Batch


class Task(Protocol):
    """The data-dependent part of training (see the module docstring)."""

    kind: str
    best_metric: str
    noise_rate: float | None

    def build_model(self, model_config: Any) -> Any: ...

    def collate(self, items: list[dict[str, Any]]) -> Batch: ...

    def encode(self, module: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, ...]: ...

    def outputs(self, network: torch.nn.Module, gathered: tuple[torch.Tensor, ...], index: torch.Tensor) -> Any: ...

    def evaluate(
        self, model: Any, split: Any, *, batch_size: int, device: torch.device | str, hook: Any, progress: bool = False
    ) -> dict[str, float]: ...

    def clean_masks(self, train_data: Any) -> dict[str, np.ndarray]: ...

    def pretrained_text_parameters(self, model: Any) -> list[torch.nn.Parameter]: ...
