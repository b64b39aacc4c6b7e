"""Similarity heads by name: the built-in ones and those a package registers in the ``hfncl.similarity_heads``
entry-point group (``NCLConfig.similarity`` names one).

A registered head is a callable ``build(config) -> torch.nn.Module`` that receives the model's
:class:`~hfncl.models.NCLConfig` and returns a *local* head: it scores packed local features (the
towers' per-region and per-word embeddings, :func:`hfncl.models.sgraf.pack_local`) and implements
:class:`LocalHead`. A package adds one without any change to hfncl::

    [project.entry-points."hfncl.similarity_heads"]
    bilinear = "my_package.heads:build_bilinear_head"

and a run selects it with ``--similarity bilinear``; a saved model names it in its ``config.json``,
so loading the model where the package is not installed fails naming the head.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from hfncl.plugins import registered_entry_points

if TYPE_CHECKING:
    import torch

HEAD_GROUP = "hfncl.similarity_heads"
BUILT_IN_HEADS = ("cosine", "sgr", "saf", "scan")
"""The heads hfncl ships: ``cosine`` (no head: the dot product of pooled unit-norm embeddings), SGRAF's ``sgr`` and
``saf``, SCAN's ``scan``."""


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
    """Every head a config may name: the built-in ones, then the installed ones."""
    return BUILT_IN_HEADS + tuple(sorted(set(installed_heads()) - set(BUILT_IN_HEADS)))


def check_head_name(name: str) -> None:
    """Refuse a head name that is neither built in nor installed, in one line naming both lists.

    Raises:
        UnknownHeadError: naming the field, the value and the heads there are.
    """
    if name in BUILT_IN_HEADS or name in installed_heads():
        return
    raise UnknownHeadError(
        f"NCLConfig.similarity must be one of {similarity_head_names()}, got {name!r} (a head of another package "
        f"is installed with it, registered in the {HEAD_GROUP!r} entry-point group)"
    )


def installed_head_builder(name: str) -> Callable[[Any], Any]:
    """The ``build(config)`` callable an installed package registers as head ``name``.

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
