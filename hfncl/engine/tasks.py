"""What the trainer needs to know about a kind of training data: a small, explicit contract.

The trainer (:class:`hfncl.engine.trainer.Trainer`) runs the plugins' hooks the same
way whatever the data are; a *task* supplies the parts that depend on them:

=================  =========================================================================
``kind``           the data kind plugins declare they train on (``data_kind`` hook).
``best_metric``    the validation metric that selects the best checkpoint (higher is better).
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

:class:`PairTask` is image-caption pairs with noisy correspondence (:class:`NCLModel`,
R@K / rSum). :class:`CategoryTask` is category-labelled samples with noisy labels
(:class:`hfncl.models.CategoryModel`, mAP): a division there covers every (modality,
sample) unit, modality-major, i.e. unit ``u`` is sample ``u % N`` of modality
``("image", "text")[u // N]``.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import numpy as np
import torch

from hfncl.data import collate_pairs
from hfncl.data.labelled import MODALITIES, LabelledSplit
from hfncl.data.noisy_labels import collate_labelled
from hfncl.engine.callbacks import progress_bar
from hfncl.engine.encoding import RetrievalSplit, evaluate_retrieval
from hfncl.evaluation.map import cross_modal_map
from hfncl.models import CategoryConfig, CategoryModel, CategoryNetwork, MatchingNetwork, NCLConfig, NCLModel
from hfncl.types import Batch, CategoryOutputs, PairOutputs


class Task(Protocol):
    """The data-dependent part of training (see the module docstring)."""

    kind: str
    best_metric: str

    def build_model(self, model_config: Any) -> Any: ...

    def collate(self, items: list[dict[str, Any]]) -> Batch: ...

    def encode(self, module: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, ...]: ...

    def outputs(self, network: torch.nn.Module, gathered: tuple[torch.Tensor, ...], index: torch.Tensor) -> Any: ...

    def evaluate(
        self, model: Any, split: Any, *, batch_size: int, device: torch.device | str, hook: Any, progress: bool = False
    ) -> dict[str, float]: ...

    def clean_masks(self, train_data: Any) -> dict[str, np.ndarray]: ...

    def pretrained_text_parameters(self, model: Any) -> list[torch.nn.Parameter]: ...


class PairTask:
    """Image-caption pairs with noisy correspondence: :class:`NCLModel`, :class:`PairOutputs`, rSum.

    ``noise_rate`` is the share of training pairs the run corrupted: the configured ratio, or
    the share a noise file re-pairs. Small-loss selection methods keep ``1 - noise_rate`` of
    the pairs and read it as ``trainer.noise_rate``. ``None`` when the run injected no noise:
    the data's own pairs, clean or with real noise of unknown rate (CC152K).
    """

    kind = "pairs"
    best_metric = "rsum"

    def __init__(self, noise_rate: float | None = None) -> None:
        if noise_rate is not None and not 0.0 <= noise_rate < 1.0:
            raise ValueError(f"PairTask.noise_rate must be in [0, 1) or None, got {noise_rate}")
        self.noise_rate = noise_rate

    def build_model(self, model_config: NCLConfig) -> NCLModel:
        return NCLModel(model_config)

    def pretrained_text_parameters(self, model: NCLModel) -> list[torch.nn.Parameter]:
        """The weights ``TrainConfig.text_tower_lr_scale`` and ``freeze_text_tower_epochs`` act on: every network's
        pretrained text encoder (:meth:`NCLModel.pretrained_text_parameters`)."""
        return model.pretrained_text_parameters()

    def collate(self, items: list[dict[str, Any]]) -> Batch:
        return collate_pairs(items)

    def encode(self, module: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, ...]:
        """``(image_embeds, text_embeds)`` of every pair; in eval mode each distinct image is encoded once.

        A statistics pass over the training set (:meth:`hfncl.engine.trainer.Trainer.collect`,
        e.g. a division) reads pairs in dataset order, where an image's k captions sit
        side by side: encoding the image once instead of k times is the same result (an
        encoder in eval mode treats every image on its own) at a fraction of the cost.
        In training mode every row is encoded (dropout differs per row).
        """
        images, captions, lengths = batch["images"], batch["captions"], batch["lengths"]
        distinct = None if module.training else distinct_images(images, batch["image_index"])
        if distinct is None:
            return tuple(module(images, captions, lengths))
        first, slot = distinct
        network = cast(MatchingNetwork, module)
        return network.encode_image(images[first])[slot], network.encode_text(captions, lengths)

    def outputs(self, network: torch.nn.Module, gathered: tuple[torch.Tensor, ...], index: torch.Tensor) -> PairOutputs:
        image_embeds, text_embeds = gathered
        matching = cast(MatchingNetwork, network)
        view_scores = matching.view_scores(image_embeds, text_embeds)
        view_similarity = matching.squash(view_scores)
        return PairOutputs(image_embeds, text_embeds, view_similarity.mean(dim=0), index, view_similarity, view_scores)

    def evaluate(
        self,
        model: NCLModel,
        split: RetrievalSplit,
        *,
        batch_size: int,
        device: torch.device | str,
        hook: Any,
        progress: bool = False,
    ) -> dict[str, float]:
        """R@1/5/10, rSum, medr and meanr, scored as the active plugins rank (:func:`evaluate_retrieval`)."""
        return evaluate_retrieval(model, split, batch_size=batch_size, device=device, hook=hook, progress=progress)

    def clean_masks(self, train_data: Any) -> dict[str, np.ndarray]:
        return {"pairs": np.asarray(train_data.clean_mask, dtype=bool)}


def distinct_images(images: torch.Tensor, image_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(first, slot)`` with ``images[first][slot] == images``: the first row of each distinct image and
    each row's image among them, or ``None`` when every row is its own image.

    Rows are grouped by ``image_index`` and a group is only merged when its rows are
    equal (a plugin may have changed one pair's image input, e.g. by augmentation, and
    kept its index); if any group's rows differ, ``None``.
    """
    distinct, slot = torch.unique(image_index, return_inverse=True)
    rows = image_index.numel()
    if distinct.numel() == rows:
        return None
    positions = torch.arange(rows, device=image_index.device)
    first = torch.full_like(distinct, rows).scatter_reduce(0, slot, positions, reduce="amin")
    if not torch.equal(images[first][slot], images):
        return None
    return first, slot


class CategoryTask:
    """Category-labelled samples with noisy labels: :class:`CategoryModel`, :class:`CategoryOutputs`, mAP.

    ``noise_rate`` is the rate the training labels were corrupted with when the run
    knows it (it generated the noise): the label-noise paper assumes it known (Sec.
    3.2), and a method that does reads it as ``trainer.noise_rate``. ``None``
    when it is not known (e.g. noisy labels read from a file).
    """

    kind = "labels"
    best_metric = "mean_map"

    def __init__(self, noise_rate: float | None = None) -> None:
        if noise_rate is not None and not 0.0 <= noise_rate < 1.0:
            raise ValueError(f"CategoryTask.noise_rate must be in [0, 1) or None, got {noise_rate}")
        self.noise_rate = noise_rate

    def build_model(self, model_config: CategoryConfig) -> CategoryModel:
        if not isinstance(model_config, CategoryConfig):
            raise TypeError(f"label-noise training needs a CategoryConfig, got {type(model_config).__name__}")
        return CategoryModel(model_config)

    def pretrained_text_parameters(self, model: CategoryModel) -> list[torch.nn.Parameter]:
        """None: a category model maps precomputed features with MLPs."""
        return []

    def collate(self, items: list[dict[str, Any]]) -> Batch:
        return collate_labelled(items)

    def encode(self, module: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, ...]:
        return tuple(module(batch["image"], batch["text"]))

    def outputs(
        self, network: torch.nn.Module, gathered: tuple[torch.Tensor, ...], index: torch.Tensor
    ) -> CategoryOutputs:
        image_embeds, text_embeds = gathered
        return CategoryOutputs(image_embeds, text_embeds, cast(CategoryNetwork, network).normalized_prototypes(), index)

    @torch.no_grad()
    def evaluate(
        self,
        model: CategoryModel,
        split: LabelledSplit,
        *,
        batch_size: int,
        device: torch.device | str,
        hook: Any,
        progress: bool = False,
    ) -> dict[str, float]:
        """I2T and T2I mAP over the full cosine ranking of ``split`` (its labels), and their mean.

        With several networks the ranking is by their mean cosine similarity
        (:meth:`CategoryModel.retrieval_embeddings`). ``progress`` shows a bar over the batches.
        """
        was_training = model.training
        model.eval()
        try:
            embeds = {}
            for modality in MODALITIES:
                features = torch.from_numpy(split.features(modality))
                starts = progress_bar(range(0, features.size(0), batch_size), f"evaluation: {modality}", progress)
                embeds[modality] = torch.cat(
                    [
                        model.retrieval_embeddings(modality, features[start : start + batch_size].to(device)).cpu()
                        for start in starts
                    ]
                )
        finally:
            model.train(was_training)
        return cross_modal_map(embeds["image"], split.labels("image"), embeds["text"], split.labels("text"))

    def clean_masks(self, train_data: Any) -> dict[str, np.ndarray]:
        masks = train_data.clean_masks
        return {m: np.asarray(masks[m], dtype=bool) for m in MODALITIES}


DATA_KINDS = (PairTask.kind, CategoryTask.kind)
"""The kinds of training data, each named once, by its task class."""
