"""The similarity-head contract: what a head is (:class:`LocalHead`), how a package registers one
(:class:`HeadPlugin`, an entry point of the ``hfncl.similarity_heads`` group), its options (a
:class:`~hfncl.options.HeadOptions` dataclass, kept in ``NCLConfig.head_options``), and the packed local features it
scores (:func:`pack_local`, :func:`unpack_local`, :func:`concat_packed`, :func:`valid_length`).
``NCLConfig.similarity`` names a head; hfncl's own SGR, SAF and SCAN are registered in ``pyproject.toml`` exactly as
a third-party head is. ``cosine`` is no head: the dot product of the pooled unit-norm embeddings.

A registered head is a :class:`HeadPlugin` (or, for a head without options, its ``build`` callable alone):
``build(config) -> torch.nn.Module`` receives the model's :class:`~hfncl.models.NCLConfig` and returns a *local*
head: it scores packed local features (the towers' per-region and per-word embeddings) and implements
:class:`LocalHead`. Its options are declared once, as a method's are::

    @dataclass(frozen=True)
    class BilinearOptions(HeadOptions, namespace="bilinear"):
        rank: int = option(64, minimum=1, help="rank of the bilinear form")

    def build_bilinear_head(config):
        options = BilinearOptions.read(config.head_options)
        ...

    BILINEAR = HeadPlugin(build=build_bilinear_head, options=BilinearOptions)

and registered without any change to hfncl::

    [project.entry-points."hfncl.similarity_heads"]
    bilinear = "my_package.heads:BILINEAR"

A run selects it with ``--similarity bilinear`` and sets its options with ``--head_options '{"bilinear.rank": 32}'``
(a recipe: ``head_options={...}``); ``NCLConfig`` checks them against the declaration and stores every option of the
head, defaults included. A saved model names its head in its ``config.json``, so loading the model where the package
is not installed fails naming the head.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.nn.functional as F

from hfncl.models.encoders import l2norm
from hfncl.registry import SIMILARITY_HEADS, registered_entry_points

if TYPE_CHECKING:
    from hfncl.options import HeadOptions

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


@dataclass(frozen=True)
class HeadPlugin:
    """What a package registers as a similarity head.

    Attributes:
        build: ``build(config) -> torch.nn.Module``, the head of a model's :class:`~hfncl.models.NCLConfig` (it
            reads its options with ``options.read(config.head_options)``).
        options: the head's options (a :class:`~hfncl.options.HeadOptions` dataclass whose namespace is the
            head's name); ``None``: the head takes none.
        config_fields: the ``NCLConfig`` fields the head reads besides its options (the model card shows them).
        word_dropout: the dropout on the GRU's word embeddings that a model with this head takes when
            ``NCLConfig.word_dropout`` is left unset (SGR / SAF: the official SGRAF code's 0.4).
    """

    build: Callable[[Any], Any]
    options: type[HeadOptions] | None = None
    config_fields: tuple[str, ...] = ()
    word_dropout: float = 0.0


def head_plugin(name: str) -> HeadPlugin:
    """The :class:`HeadPlugin` registered as head ``name`` (a registered callable is a head without options).

    Raises:
        UnknownHeadError: ``name`` is not installed, or its entry point fails to import or is neither a
            :class:`HeadPlugin` nor callable.
    """
    check_head_name(name)
    point = installed_heads()[name]
    try:
        registered = point.load()
    except Exception as error:
        raise UnknownHeadError(
            f"similarity head {name!r} is installed but failed to import ({point.value}): "
            f"{type(error).__name__}: {error}"
        ) from error
    if isinstance(registered, HeadPlugin):
        return registered
    if not callable(registered):
        raise UnknownHeadError(
            f"similarity head {name!r} ({point.value}) must be a HeadPlugin or a callable build(config) -> module"
        )
    return HeadPlugin(build=registered)


def head_builder(name: str) -> Callable[[Any], Any]:
    """The ``build(config)`` callable of head ``name`` (:func:`head_plugin`)."""
    return head_plugin(name).build


def head_config_fields(name: str) -> tuple[str, ...]:
    """The ``NCLConfig`` fields head ``name`` reads besides its options; none for ``cosine``."""
    return () if name == NO_HEAD else head_plugin(name).config_fields


def head_word_dropout(name: str) -> float:
    """The word dropout head ``name`` declares (:attr:`HeadPlugin.word_dropout`); none for ``cosine``."""
    return 0.0 if name == NO_HEAD else head_plugin(name).word_dropout


def resolve_head_options(
    name: str, given: Mapping[str, Any] | None, flat: Mapping[str, Any], checkpoint_format: int
) -> dict[str, Any]:
    """Every option of head ``name`` by full name, checked against its declaration: ``given`` (full names), over
    what the flat fields ``flat`` of a config of ``checkpoint_format`` 2 or older held
    (:meth:`~hfncl.options.HeadOptions.from_flat`), over the declared defaults.

    Raises:
        ValueError: one line naming ``NCLConfig.head_options``: an option the head does not declare, or a value
            its declaration refuses.
    """
    options = None if name == NO_HEAD else head_plugin(name).options
    given = dict(given or {})
    declared = set() if options is None else set(options.defaults())
    unknown = sorted(set(given) - declared)
    if unknown:
        raise ValueError(
            f"NCLConfig.head_options: {unknown} are not options of the similarity head {name!r} (its options: "
            f"{sorted(declared) or 'none'})"
        )
    if options is None:
        return {}
    values = options.from_flat(flat, checkpoint_format) | given
    try:
        return options.read(values).by_full_name()
    except ValueError as error:
        raise ValueError(f"NCLConfig.head_options: {error}") from error


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


def valid_length(mask: torch.Tensor) -> torch.Tensor:
    """(B, T) mask -> (B,) one past each item's last valid position."""
    positions = torch.arange(1, mask.size(1) + 1, device=mask.device)
    return (mask * positions).amax(dim=1)


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
