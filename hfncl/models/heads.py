"""The similarity-head contract: what a head is (:class:`LocalHead`), the packed local features it scores
(:func:`pack_local`), and the heads by name, every one an entry point of the ``hfncl.similarity_heads`` group
(``NCLConfig.similarity`` names one; hfncl's own SGR, SAF and SCAN are registered in ``pyproject.toml`` exactly
as a third-party head is). ``cosine`` is no head: the dot product of the pooled unit-norm embeddings.

A registered head is a callable ``build(config) -> torch.nn.Module`` that receives the model's
:class:`~hfncl.models.NCLConfig` and returns a *local* head: it scores packed local features (the
towers' per-region and per-word embeddings, :func:`pack_local`) and implements
:class:`LocalHead`. A package adds one without any change to hfncl::

    [project.entry-points."hfncl.similarity_heads"]
    bilinear = "my_package.heads:build_bilinear_head"

and a run selects it with ``--similarity bilinear``; a saved model names it in its ``config.json``,
so loading the model where the package is not installed fails naming the head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from hfncl.models.encoders import l2norm
from hfncl.registry import SIMILARITY_HEADS, registered_entry_points

HEAD_GROUP = SIMILARITY_HEADS
NO_HEAD = "cosine"
"""The ``similarity`` of a model without a head: the dot product of pooled unit-norm embeddings."""


class LocalHead(Protocol):
    """What a similarity head does with packed local features (B, T, d + 1): the last channel flags real positions."""

    logits: bool
    """Set by the model while it scores for a loss: return raw scores (:meth:`squash` maps them to similarities)."""

    def __call__(self, image_embeds: "torch.Tensor", text_embeds: "torch.Tensor") -> "torch.Tensor":
        """Scores (n, m) of every image (n, R, d + 1) with every caption (m, L, d + 1)."""

    def join(self, parts: "Sequence[torch.Tensor]", dim: int = 0) -> "torch.Tensor":
        """Packed features of several batches joined along ``dim`` (padding to the longest item)."""

    def squash(self, scores: "torch.Tensor") -> "torch.Tensor":
        """Similarities from scores (the identity for a head whose score is its similarity)."""

    def within(self, embeds: "torch.Tensor", modality: str) -> "torch.Tensor":
        """Scores (B, B) of every item with every other item of the same ``modality`` (``"image"``/``"text"``)."""


class UnknownHeadError(ValueError):
    """``NCLConfig.similarity`` names no built-in head and no installed one."""


def installed_heads() -> dict[str, Any]:
    """The entry points of the ``hfncl.similarity_heads`` group, by name."""
    return registered_entry_points(HEAD_GROUP, "Similarity head")


def similarity_head_names() -> tuple[str, ...]:
    """Every value ``NCLConfig.similarity`` may take: ``cosine``, then the installed heads."""
    return (NO_HEAD, *sorted(set(installed_heads()) - {NO_HEAD}))


def check_head_name(name: str) -> None:
    """Refuse a head name that is neither built in nor installed, in one line naming both lists.

    Raises:
        UnknownHeadError: naming the field, the value and the heads there are.
    """
    if name == NO_HEAD or name in installed_heads():
        return
    raise UnknownHeadError(
        f"NCLConfig.similarity must be one of {similarity_head_names()}, got {name!r} (a head is installed with "
        f"the package that registers it in the {HEAD_GROUP!r} entry-point group)"
    )


def head_builder(name: str) -> Callable[[Any], Any]:
    """The ``build(config)`` callable registered as head ``name``.

    Raises:
        UnknownHeadError: ``name`` is not installed, or its entry point fails to import or is not callable.
    """
    check_head_name(name)
    point = installed_heads()[name]
    try:
        builder = point.load()
    except Exception as error:
        raise UnknownHeadError(
            f"similarity head {name!r} is installed but failed to import ({point.value}): "
            f"{type(error).__name__}: {error}"
        ) from error
    if not callable(builder):
        raise UnknownHeadError(f"similarity head {name!r} ({point.value}) must be a callable build(config) -> module")
    return builder


def full_precision(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 at least (float64 stays). Under autocast the heads' softmaxes, normalisations and scores
    run in full precision, as CUDA's autocast keeps softmaxes (the CPU's would run them in bf16); only the
    products run in bf16 / fp16."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def pack_local(states: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Local features (B, T, d) and their validity mask (B, T) (None: all valid) -> packed (B, T, d + 1)."""
    if states.dim() != 3:
        raise ValueError(f"local states must have shape (B, T, d), got {tuple(states.shape)}")
    if mask is None:
        flag = states.new_ones(states.shape[:2])
    else:
        if mask.shape != states.shape[:2]:
            raise ValueError(f"mask must have shape {tuple(states.shape[:2])}, got {tuple(mask.shape)}")
        flag = mask.to(states.dtype)
        states = states * flag.unsqueeze(-1)
    return torch.cat([states, flag.unsqueeze(-1)], dim=-1)


def unpack_local(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed (B, T, d + 1) -> states (B, T, d) and boolean mask (B, T)."""
    if packed.dim() != 3 or packed.size(-1) < 2:
        raise ValueError(
            f"packed local features must have shape (B, T, d + 1) (see hfncl.models.heads.pack_local), "
            f"got {tuple(packed.shape)}"
        )
    return packed[..., :-1], packed[..., -1] > 0.5


def concat_packed(parts: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
    """Concatenate packed tensors along ``dim`` after zero-padding the position axis (dim -2) to the longest."""
    longest = max(part.size(-2) for part in parts)
    padded = [F.pad(part, (0, 0, 0, longest - part.size(-2))) for part in parts]
    return torch.cat(padded, dim=dim)


def global_embeddings(embeds: torch.Tensor) -> torch.Tensor:
    """One vector per item: pooled embeddings (B, d) as they are; packed local features (B, T, d + 1)
    (:func:`pack_local`) as the mean of their L2-normalised valid positions, SGRAF's global mean (the query of its
    attention pooling) and what the cross-modal structure of GSC and the anchor affinities of BiCro compare."""
    if embeds.dim() == 2:
        return embeds
    if embeds.dim() == 3:
        states, mask = unpack_local(embeds)
        weights = mask.unsqueeze(-1).to(states.dtype)
        return (l2norm(states) * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
    raise ValueError(
        f"global_embeddings expects (B, d) embeddings or packed (B, T, d + 1) local features, got {tuple(embeds.shape)}"
    )
