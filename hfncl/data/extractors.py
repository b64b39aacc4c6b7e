"""The image models that make features, each a batched ``datasets.map`` function: an image encoder's pooled
embedding or patch states (:class:`ImageFeatureExtractor`), or an object detector's regions
(:class:`RegionFeatureExtractor`), as :func:`hfncl.data.extract.extract_features` runs them. A Hub model is
resolved to its commit once, which keys the extraction cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from huggingface_hub import HfApi, is_offline_mode
from huggingface_hub.errors import HfHubHTTPError, RevisionResolutionError

MODEL_FEATURES = ("pooled", "patches")
"""The features of an image model (:class:`ImageFeatureExtractor`); ``regions`` are a detector's."""


def _resolve_revision(model_name: str, revision: str | None, what: str) -> tuple[Any, str | None]:
    """``(revision to load, commit)``: a local directory as is (no commit), a Hub id resolved to its commit once.

    Raises:
        OSError: one line; a Hub id that cannot be resolved (offline, or not in the Hub cache) says how to save
            the model in a local folder to pass instead.
    """
    if Path(model_name).is_dir():
        return revision, None
    try:
        resolved = HfApi().resolve_revision(model_name, revision=revision, local_files_only=is_offline_mode())
    except (HfHubHTTPError, OSError, ValueError, RevisionResolutionError) as error:
        flag = "--detector" if what == "detector" else "--model"
        raise OSError(
            f"Cannot load the {what} {model_name!r}: it is not a local directory, and as a Hub id its revision "
            f"{revision or 'main'!r} cannot be resolved"
            f"{' (HF_HUB_OFFLINE=1 and not in the Hub cache)' if is_offline_mode() else ''} "
            f"({_first_line(error)}). To work offline, save it in a folder where there is a network "
            f"(`hf download {model_name} --local-dir DIR`) and pass {flag} DIR"
        ) from None
    return resolved, resolved.resolved


def _first_line(error: BaseException) -> str:
    """The first line of an error's message, cut at 160 characters (a Hub error's message runs on)."""
    lines = str(error).strip().splitlines()
    return (lines[0] if lines else type(error).__name__)[:160]


def _load_failure(what: str, model_name: str, error: Exception) -> OSError:
    """A model or its image processor that did not load, in one line; a missing ``timm`` (the backbone of
    ``facebook/detr-resnet-50``) names the package to install and the detectors that do without it."""
    if isinstance(error, ImportError) and "timm" in str(error):
        return OSError(
            f"Cannot load the {what} {model_name!r}: its backbone is a timm model, and timm is not installed "
            "(pip install timm, which needs torchvision); or take a detector without timm: RT-DETR "
            "(PekingU/rtdetr_r50vd) or facebook/detr-resnet-50 at --revision no_timm"
        )
    return OSError(f"Cannot load the {what} or its image processor from {model_name!r}: {_first_line(error)}")


def _model_identity(model_name: str, commit: str | None) -> dict[str, Any]:
    """A model as a cache key: a local directory's file names, sizes and times, or a Hub id's resolved commit."""
    path = Path(model_name)
    files = sorted(path.glob("*")) if path.is_dir() else []
    stamps = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files if p.is_file()]
    return {"model": model_name, "commit": commit, "files": stamps}


class ImageFeatureExtractor:
    """A Hugging Face image model and its image processor, as a batched ``datasets.map`` function.

    Args:
        model_name: Hub id or directory of the image model (a vision encoder such as
            ``CLIPVisionModel``, or a dual encoder such as ``CLIPModel``) and its processor.
        feature: ``"pooled"`` or ``"patches"`` (see the module docstring).
        device: where the model runs.
        revision: for a Hub id, the branch, tag or commit to load (default: the default
            branch). It is resolved to a commit once, before loading, so that the model and
            the processor come from that commit and the cache key names it: features of a
            newer commit are extracted anew, not read from an older cache.
    """

    def __init__(
        self,
        model_name: str,
        feature: str = "pooled",
        device: str | torch.device = "cpu",
        revision: str | None = None,
    ) -> None:
        from transformers import AutoImageProcessor, AutoModel

        if feature not in MODEL_FEATURES:
            raise ValueError(f"feature must be one of {MODEL_FEATURES}, got {feature!r}")
        revision, self.commit = _resolve_revision(model_name, revision, "image model")
        try:
            self.processor = AutoImageProcessor.from_pretrained(model_name, revision=revision)
            self.model = AutoModel.from_pretrained(model_name, revision=revision).to(device).eval()
        except (OSError, ImportError) as error:
            raise _load_failure("image model", model_name, error) from error
        self.model_name = model_name
        self.feature = feature
        self.device = torch.device(device)

    def identity(self) -> dict[str, Any]:
        """What determines the features (hashed into the cache file names): the model and the feature."""
        return _model_identity(self.model_name, self.commit) | {"feature": self.feature}

    def columns(self, images: Sequence[Any]) -> dict[str, np.ndarray]:
        """The mapped columns of a batch of PIL images: ``regions`` (B, R, D)."""
        return {"regions": self(images)}

    @torch.no_grad()
    def __call__(self, images: Sequence[Any]) -> np.ndarray:
        """Features (B, R, D) float32 of a batch of PIL images."""
        pixels = self.processor(images=[image.convert("RGB") for image in images], return_tensors="pt")
        pixel_values = pixels["pixel_values"].to(self.device)
        vision = getattr(self.model, "vision_model", None)
        if self.feature == "pooled" and hasattr(self.model, "get_image_features"):
            pooled = self.model.get_image_features(pixel_values=pixel_values)
            states = (pooled if isinstance(pooled, torch.Tensor) else pooled.pooler_output)[:, None]
        else:
            encoder = vision if vision is not None and hasattr(self.model, "get_image_features") else self.model
            output = encoder(pixel_values=pixel_values)
            if self.feature == "patches":
                states = output.last_hidden_state
            elif getattr(output, "pooler_output", None) is not None:
                states = output.pooler_output[:, None]
            else:
                states = output.last_hidden_state.mean(dim=1, keepdim=True)
        return states.float().cpu().numpy()


class RegionFeatureExtractor:
    """An object detector's R top-scoring regions per image, as a batched ``datasets.map`` function.

    The detector is a ``transformers`` ``AutoModelForObjectDetection`` whose base model has a
    convolutional ``backbone`` returning ``(feature_map, mask)`` pairs: the DETR family (DETR,
    Conditional and Deformable DETR, RT-DETR, D-FINE). Its image processor's
    ``post_process_object_detection`` gives the scored boxes; class-agnostic non-maximum
    suppression keeps the top ``num_regions``; each box's feature is the mean of the backbone's
    last feature map sampled on a ``pool_size`` x ``pool_size`` bilinear grid over the box
    (RoIAlign followed by average pooling, as the bottom-up-attention features).

    Args:
        detector_name: Hub id or directory of the detector and its image processor.
        num_regions: R, boxes kept per image; images with fewer are zero-padded.
        box_geometry: append the box's normalised x1, y1, x2, y2 and area (D + 5 features).
        score_threshold: boxes scoring at most this are dropped before NMS (0 keeps every box).
        nms_threshold: a box overlapping a higher-scoring kept box with IoU above it is dropped.
        pool_size: bilinear samples per box side.
        device: where the detector runs.
        revision: for a Hub id, the branch, tag or commit (resolved to a commit, which keys the cache).
    """

    def __init__(
        self,
        detector_name: str,
        num_regions: int = 36,
        box_geometry: bool = False,
        score_threshold: float = 0.0,
        nms_threshold: float = 0.5,
        pool_size: int = 14,
        device: str | torch.device = "cpu",
        revision: str | None = None,
    ) -> None:
        from transformers import AutoImageProcessor, AutoModelForObjectDetection

        if num_regions < 1 or pool_size < 1:
            raise ValueError(f"num_regions and pool_size must be >= 1, got {num_regions} and {pool_size}")
        revision, self.commit = _resolve_revision(detector_name, revision, "detector")
        try:
            self.processor = AutoImageProcessor.from_pretrained(detector_name, revision=revision)
            self.model = AutoModelForObjectDetection.from_pretrained(detector_name, revision=revision).to(device).eval()
        except (OSError, ValueError, ImportError) as error:
            raise _load_failure("detector", detector_name, error) from error
        backbone = getattr(self.model.base_model, "backbone", None)
        if not isinstance(backbone, torch.nn.Module):
            raise ValueError(
                f"detector {detector_name!r} ({type(self.model).__name__}) has no convolutional base_model.backbone "
                "to pool regions from; expected a DETR-family detector "
                "(DETR, Conditional/Deformable DETR, RT-DETR, D-FINE)"
            )
        backbone.register_forward_hook(self._keep_feature_map)
        self.detector_name = detector_name
        self.options: dict[str, Any] = {
            "num_regions": num_regions,
            "box_geometry": box_geometry,
            "score_threshold": score_threshold,
            "nms_threshold": nms_threshold,
            "pool_size": pool_size,
        }
        self.device = torch.device(device)

    def _keep_feature_map(self, module: torch.nn.Module, args: Any, output: Sequence[Any]) -> None:
        """Forward hook on the backbone: keep its last (deepest) feature map, (B, C, h, w)."""
        self._feature_map = output[-1][0]

    def identity(self) -> dict[str, Any]:
        """What determines the features (hashed into the cache file names): the detector and the options."""
        return _model_identity(self.detector_name, self.commit) | {"feature": "regions", **self.options}

    def columns(self, images: Sequence[Any]) -> dict[str, np.ndarray]:
        """The mapped columns of a batch of PIL images: ``regions`` (B, R, D) and ``num_regions`` (B,)."""
        regions, counts = self(images)
        return {"regions": regions, "num_regions": counts}

    @torch.no_grad()
    def __call__(self, images: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Region features (B, R, D) float32, zero past each image's count, and the counts (B,) int64."""
        inputs = self.processor(images=[image.convert("RGB") for image in images], return_tensors="pt").to(self.device)
        outputs = self.model(**inputs)
        detections = self.processor.post_process_object_detection(outputs, threshold=self.options["score_threshold"])
        padded = tuple(inputs["pixel_values"].shape[-2:])
        mask = inputs.get("pixel_mask")  # images are padded at the bottom and right
        sizes = [padded] * len(images) if mask is None else [(int(m.any(1).sum()), int(m.any(0).sum())) for m in mask]
        size = self.options["num_regions"]
        width = self._feature_map.shape[1] + 5 * self.options["box_geometry"]
        regions = np.zeros((len(images), size, width), np.float32)
        counts = np.zeros(len(images), dtype=np.int64)
        for index, (found, image_size) in enumerate(zip(detections, sizes, strict=True)):
            boxes = found["boxes"].clamp(0, 1)
            boxes = boxes[_nms(boxes, found["scores"], self.options["nms_threshold"], size)]
            pooled = self._pool(self._feature_map[index], boxes, image_size, padded)
            if self.options["box_geometry"]:
                area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
                pooled = torch.cat([pooled, boxes, area[:, None]], dim=1)
            counts[index] = len(boxes)
            regions[index, : len(boxes)] = pooled.float().cpu().numpy()
        return regions, counts

    def _pool(
        self, feature_map: torch.Tensor, boxes: torch.Tensor, image_size: tuple[int, int], padded: tuple[int, int]
    ) -> torch.Tensor:
        """(n, C) means of ``feature_map`` (C, h, w) sampled bilinearly on an S x S grid over each box.

        Boxes are (x1, y1, x2, y2) relative to the image, which fills the top-left ``image_size``
        of the ``padded`` input; ``grid_sample``'s [-1, 1] spans the whole map (``align_corners=False``).
        """
        steps = (torch.arange(self.options["pool_size"], device=boxes.device) + 0.5) / self.options["pool_size"]
        x = (boxes[:, 0:1] + (boxes[:, 2:3] - boxes[:, 0:1]) * steps) * (image_size[1] / padded[1])
        y = (boxes[:, 1:2] + (boxes[:, 3:4] - boxes[:, 1:2]) * steps) * (image_size[0] / padded[0])
        grid = torch.stack(torch.broadcast_tensors(x[:, None, :], y[:, :, None]), dim=-1).flatten(1, 2) * 2 - 1
        return F.grid_sample(feature_map[None], grid[None].to(feature_map.dtype), align_corners=False)[0].mean(dim=-1).T


def _nms(boxes: torch.Tensor, scores: torch.Tensor, threshold: float, limit: int) -> torch.Tensor:
    """Indices of at most ``limit`` boxes (x1, y1, x2, y2) kept by greedy NMS, highest score first."""
    order = scores.argsort(descending=True, stable=True)
    boxes = boxes[order]
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    corner_min = torch.maximum(boxes[:, None, :2], boxes[None, :, :2])
    corner_max = torch.minimum(boxes[:, None, 2:], boxes[None, :, 2:])
    inter = (corner_max - corner_min).clamp(min=0).prod(dim=-1)
    iou = inter / (area[:, None] + area[None, :] - inter).clamp(min=1e-12)
    keep: list[int] = []
    for candidate in range(len(order)):
        if len(keep) == limit:
            break
        if not keep or not bool((iou[candidate, keep] > threshold).any()):
            keep.append(candidate)
    return order[keep]
