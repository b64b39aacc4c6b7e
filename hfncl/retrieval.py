"""Retrieval with a trained model: encode images and captions, rank, and say how sure.

    from hfncl.retrieval import Retriever

    retriever = Retriever.from_pretrained("runs/ugncl_f30k/best")      # or a Hub id
    images = retriever.encode_images(region_features)                  # (N, R, D) precomputed regions
    images = retriever.encode_images([Image.open("dog.jpg")])          # a model whose image tower reads pixels
    texts = retriever.encode_texts(["a dog runs on the beach", ...])
    ranking = retriever.rank(images, texts, direction="i2t", top_k=5)  # captions for each image
    ranking.indices, ranking.scores, ranking.uncertainty

Scores come from the plugins the model was trained with where they rank in their own
way (``inference_similarity``, e.g. one branch per direction), else from
``model.similarity``; ``uncertainty`` is each query's uncertainty over the gallery for
methods that model it (``query_uncertainty``), else ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pluggy import HookRelay

from hfncl.data import TokenizerVocabulary, Vocabulary, collate_captions
from hfncl.data.pixels import pixel_values
from hfncl.hub import load_text_vocabulary
from hfncl.hub.checkpoint import load_image_processor
from hfncl.models import NCLModel
from hfncl.plugins import build_plugin_manager

DIRECTIONS = ("i2t", "t2i")


@dataclass
class Ranking:
    """The top candidates of every query.

    ``indices`` (q, k): gallery positions, best first; ``scores`` (q, k): their scores;
    ``uncertainty`` (q,): each query's uncertainty in [0, 1] (``None`` if the method has none).
    """

    indices: torch.Tensor
    scores: torch.Tensor
    uncertainty: torch.Tensor | None


class Retriever:
    """Encodes and ranks with an :class:`~hfncl.models.NCLModel` as the plugins that trained it rank.

    Args:
        model: the trained model (its config names its plugins, which must be installed).
        vocab: the vocabulary for :meth:`encode_texts` (token ids can be encoded without one);
            for a transformer text tower, its tokenizer (:class:`~hfncl.data.TokenizerVocabulary`).
        image_processor: for a model whose image tower reads pixels, the image processor it
            was trained with, so that :meth:`encode_images` takes PIL images.
        device: where to run the model.
        batch_size: encoding batch size.
        hook: the hook relay of the model's plugins, as the run that trained it set them up (default: a plugin
            manager of ``model.config.plugins`` built here).
    """

    def __init__(
        self,
        model: NCLModel,
        vocab: Vocabulary | TokenizerVocabulary | None = None,
        *,
        image_processor: Any = None,
        device: str | torch.device = "cpu",
        batch_size: int = 256,
        hook: Any = None,
    ) -> None:
        self.model = model.to(device).eval()
        self.vocab = vocab
        self.image_processor = image_processor
        self.device = torch.device(device)
        self.batch_size = batch_size
        if hook is None and model.config.plugins:
            hook = build_plugin_manager(model.config.plugins).hook
        self.hook = hook

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, **kwargs: Any) -> "Retriever":
        """Load the model and its vocabulary (or tokenizer) from a checkpoint directory or a Hub repository,
        and the image processor of a model whose image tower reads pixels (``image_processor/``)."""
        model = NCLModel.from_pretrained(str(name_or_path))
        if "image_processor" not in kwargs:
            kwargs["image_processor"] = load_image_processor(name_or_path, model.config)
        return cls(model, load_text_vocabulary(name_or_path, model.config), **kwargs)

    @torch.no_grad()
    def encode_images(self, regions: torch.Tensor | np.ndarray | Sequence[Any]) -> torch.Tensor:
        """Region features (N, R, D) -> image embeddings of every network (K, N, W * d).

        A model with a transformer image tower takes pixel values (N, C, H, W) instead, or a
        sequence of PIL images, which the retriever's image processor turns into pixel values
        batch by batch.
        """
        if hasattr(regions, "convert"):
            raise TypeError("encode_images expects a sequence of images, got one image")
        if isinstance(regions, Sequence) and regions and all(hasattr(image, "convert") for image in regions):
            return self._encode_pil_images(regions)
        regions = torch.as_tensor(np.asarray(regions) if not isinstance(regions, torch.Tensor) else regions)
        if self.model.config.image_tower == "transformer":
            if regions.dim() != 4:
                raise ValueError(f"encode_images expects pixel values (N, C, H, W), got shape {tuple(regions.shape)}")
        elif regions.dim() != 3 or regions.size(-1) != self.model.config.image_dim:
            raise ValueError(
                f"encode_images expects region features (N, R, {self.model.config.image_dim}), "
                f"got shape {tuple(regions.shape)}"
            )
        batches = regions.float().split(self.batch_size)
        return self.model.join_embeddings([self.model.encode_image(batch.to(self.device)) for batch in batches])

    def _encode_pil_images(self, images: Sequence[Any]) -> torch.Tensor:
        """PIL images -> image embeddings (K, N, d), through the image processor, one batch at a time."""
        if self.model.config.image_tower != "transformer":
            raise TypeError(
                "encode_images got images, but this model's image tower reads precomputed region features "
                f"(N, R, {self.model.config.image_dim}): extract them first (hfncl extract)"
            )
        if self.image_processor is None:
            raise ValueError(
                "encode_images needs the image processor the model was trained with to read images "
                "(Retriever(image_processor=...), or Retriever.from_pretrained of a checkpoint with image_processor/)"
            )
        images = list(images)
        batches = [images[start : start + self.batch_size] for start in range(0, len(images), self.batch_size)]
        return self.model.join_embeddings(
            [
                self.model.encode_image(torch.from_numpy(pixel_values(self.image_processor, batch)).to(self.device))
                for batch in batches
            ]
        )

    @torch.no_grad()
    def encode_texts(self, texts: Sequence[str]) -> torch.Tensor:
        """Captions -> caption embeddings of every network (K, M, d), tokenised with the checkpoint's vocabulary.

        With an SGR / SAF / SCAN head the embeddings are packed local features (K, M, T, d + 1).
        """
        if self.vocab is None:
            raise ValueError("encode_texts needs the vocabulary the model was trained with (Retriever(vocab=...))")
        if isinstance(texts, str):
            raise TypeError("encode_texts expects a sequence of captions, got one string")
        tokens = [torch.tensor(self.vocab.encode(text), dtype=torch.long) for text in texts]
        empty = [i for i, ids in enumerate(tokens) if ids.numel() == 0]
        if empty:
            raise ValueError(f"captions {empty} have no tokens after tokenisation")
        items = [{"caption": ids, "index": i} for i, ids in enumerate(tokens)]
        embeds = []
        for start in range(0, len(items), self.batch_size):
            batch = collate_captions(items[start : start + self.batch_size])
            embeds.append(self.model.encode_text(batch["captions"].to(self.device), batch["lengths"].to(self.device)))
        return self.model.join_embeddings(embeds)

    @torch.no_grad()
    def similarity(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor, direction: str = "i2t") -> torch.Tensor:
        """The (N, M) scores the model ranks with in ``direction``."""
        _check_direction(direction)
        return direction_similarity(self.model, self.hook, direction)(image_embeds, text_embeds)

    @torch.no_grad()
    def rank(
        self, image_embeds: torch.Tensor, text_embeds: torch.Tensor, *, direction: str = "i2t", top_k: int = 10
    ) -> Ranking:
        """The ``top_k`` captions of every image (``"i2t"``) or images of every caption (``"t2i"``)."""
        scores = self.similarity(image_embeds, text_embeds, direction)
        if direction == "t2i":
            scores = scores.t()
        best = scores.topk(min(top_k, scores.size(1)), dim=1)
        uncertainty = None
        if self.hook is not None:
            uncertainty = self.hook.query_uncertainty(
                model=self.model, image_embeds=image_embeds, text_embeds=text_embeds, direction=direction
            )
        return Ranking(best.indices, best.values, uncertainty)


def direction_similarity(
    model: NCLModel, hook: HookRelay | None, direction: str
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The similarity ``(image_embeds, text_embeds) -> (n, m)`` that ranks in ``direction``.

    A plugin's ``inference_similarity`` answer where one gives it, else ``model.similarity``
    (also when ``hook`` is ``None`` or no active plugin implements the hook). The retriever
    ranks with it, and so does evaluation during and after training
    (:func:`hfncl.engine.encoding.evaluate_retrieval`).
    """
    if hook is None or not hook.inference_similarity.get_hookimpls():
        return model.similarity

    def similarity(image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        answer = hook.inference_similarity(
            model=model, image_embeds=image_embeds, text_embeds=text_embeds, direction=direction
        )
        return model.similarity(image_embeds, text_embeds) if answer is None else answer

    return similarity


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
