"""``bilinear``: s(I, T) = mean-pooled regions W mean-pooled words, a learned bilinear form on packed local features,
W starting at ``bilinear.scale`` times the identity (its one option)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hfncl.models.heads import HeadPlugin
from hfncl.options import HeadOptions, option


@dataclass(frozen=True)
class BilinearOptions(HeadOptions, namespace="bilinear"):
    scale: float = option(1.0, exclusive_minimum=0, help="W's initial multiple of the identity")


def _pooled(packed: torch.Tensor) -> torch.Tensor:
    """The mean of the real positions of packed local features (B, T, d + 1), the last channel their flag."""
    flag = packed[..., -1:]
    return (packed[..., :-1] * flag).sum(dim=1) / flag.sum(dim=1).clamp_min(1.0)


class BilinearHead(nn.Module):
    """A local head (:class:`hfncl.models.heads.LocalHead`) of one learned matrix."""

    logits = False

    def __init__(self, embed_dim: int, scale: float = 1.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(scale * torch.eye(embed_dim))

    @staticmethod
    def join(parts: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
        length = max(part.size(1) for part in parts)
        return torch.cat([nn.functional.pad(part, (0, 0, 0, length - part.size(1))) for part in parts], dim=dim)

    @staticmethod
    def squash(scores: torch.Tensor) -> torch.Tensor:
        return scores

    def within(self, embeds: torch.Tensor, modality: str) -> torch.Tensor:
        return self(embeds, embeds)

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        return _pooled(image_embeds) @ self.weight @ _pooled(text_embeds).t()


def build_bilinear_head(config: Any) -> BilinearHead:
    """The head of an ``NCLConfig`` with ``similarity="bilinear"``, with its ``bilinear.*`` options."""
    return BilinearHead(config.embed_dim, BilinearOptions.read(config.head_options).scale)


BILINEAR = HeadPlugin(build=build_bilinear_head, options=BilinearOptions)
