"""The settings of the models, importable without torch: :class:`ModelSettings`, declared once, the values its
fields take, and the bounds on every model's sizes.

Each field of :class:`ModelSettings` is a setting of :class:`hfncl.models.NCLConfig` (a keyword argument of its
``__init__`` with the field's default, read by :func:`setting_defaults`) and, unless its metadata says ``"flag":
False``, a model flag of ``hfncl train`` and the recipes (:func:`unset_arguments` makes
:class:`hfncl.arguments.ModelArguments` from it). A new setting is one field here; what ``NCLConfig`` checks
about it is written there.

The size bounds (:func:`check_sizes`) are checked before anything is allocated: a ``config.json`` or a flag asking
for a billion-wide layer is refused in one line instead of trying to allocate tens of gigabytes. They are far above
any model the papers train (1024-d joint spaces, 300-d words, vocabularies of 10^4 to 10^5 words, 36 regions of
2048-d features) and below what would not fit a GPU's memory.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from typing import Any, TypeVar

InitT = TypeVar("InitT", bound=Callable[..., None])

IMAGE_POOLINGS = ("mean", "max")
"""Poolings of region embeddings (``image_pooling``)."""
TEXT_POOLINGS = ("mean", "max")
"""Poolings of a GRU's word states (``text_pooling``)."""
TRANSFORMER_POOLINGS = ("mean", "max", "pooler")
"""Poolings of a transformer tower's states (``pooler``: its pooled output)."""
LORA_TOWERS = ("text", "image")
"""Towers LoRA may adapt (``lora_towers``)."""
FLAT_HEAD_FIELDS = (
    "sim_dim", "reasoning_steps", "attention_lambda", "scan_pooling", "scan_lse_lambda", "attention_negative_slope",
    "pooling_dropout", "pooling_batch_norm",
)
"""The fields in which a config of checkpoint format 2 or older (and a run's ``run_config.yaml`` of then) stored the
built-in heads' settings, all of them whatever its head; :func:`~hfncl.models.heads.resolve_head_options` reads a
checkpoint's into ``head_options``."""


SIZE_LIMITS = {
    "embed_dim": 1 << 16,
    "word_dim": 1 << 16,
    "image_dim": 1 << 16,
    "text_dim": 1 << 16,
    "sim_dim": 1 << 16,
    "hidden_dim": 1 << 17,
    "vocab_size": 1 << 24,
    "image_regions": 1 << 16,
    "text_layers": 64,
    "num_networks": 64,
    "image_views": 64,
    "reasoning_steps": 64,
    "num_classes": 1 << 24,
}
"""The largest value of each size field."""
MAX_TENSOR_ELEMENTS = 1 << 31
"""The most elements of one weight matrix (8 GiB of float32)."""
TENSOR_SHAPES = (("vocab_size", "word_dim"), ("image_dim", "embed_dim"), ("word_dim", "embed_dim"),
                 ("embed_dim", "embed_dim"), ("hidden_dim", "hidden_dim"), ("image_dim", "hidden_dim"),
                 ("text_dim", "hidden_dim"))
"""Pairs of fields whose product is the size of one of the model's weight matrices."""


def check_sizes(values: dict[str, Any], owner: str) -> None:
    """Refuse a size field of ``values`` (integers; others are left to the owner's type checks) above its
    :data:`SIZE_LIMITS` bound, or a weight matrix over :data:`MAX_TENSOR_ELEMENTS`, naming ``owner.field``.

    Raises:
        ValueError: in one line, naming the field, its value and its bound.
    """
    sizes = {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
    for name, bound in SIZE_LIMITS.items():
        if sizes.get(name, 0) > bound:
            raise ValueError(f"{owner}.{name} must be at most {bound}, got {sizes[name]} (no allocation was tried)")
    for rows, columns in TENSOR_SHAPES:
        if rows in sizes and columns in sizes and sizes[rows] * sizes[columns] > MAX_TENSOR_ELEMENTS:
            raise ValueError(
                f"{owner}.{rows} x {owner}.{columns} = {sizes[rows]} x {sizes[columns]} is a weight matrix of more "
                f"than {MAX_TENSOR_ELEMENTS} elements (no allocation was tried)"
            )


def setting(default: Any, help: str, *, flag: bool = True, flag_help: str | None = None) -> Any:
    """A field of :class:`ModelSettings`: its ``default``, ``help`` (the config's meaning) and whether it is a
    command-line flag (``flag_help``: the flag's help where the flag takes other values than the config)."""
    metadata = {"help": help, "flag": flag} | ({} if flag_help is None else {"flag_help": flag_help})
    return field(default=default, metadata=metadata)


@dataclass
class ModelSettings:
    """The architecture of an :class:`hfncl.models.NCLModel`: the SCAN / VSE++ precomp encoder by default (36 x
    2048 bottom-up region features, a 300-d word embedding read by a biGRU, a 1024-d joint space)."""

    image_dim: int = setting(2048, "Size of one precomputed region feature.", flag=False)
    embed_dim: int = setting(1024, "Joint image-text embedding dimension.")
    word_dim: int = setting(300, "Word embedding dimension.")
    vocab_size: int = setting(10000, "Number of token ids (id 0 is padding).", flag=False)
    text_layers: int = setting(1, "Stacked GRU layers of the text tower.")
    bidirectional: bool = setting(True, "Whether the text GRU reads captions in both directions.", flag=False)
    image_pooling: str = setting(
        "mean", "Pooling of the region embeddings into one image embedding: mean or max (a vision tower also takes "
        "pooler, CLIP's class token)."
    )
    image_views: int = setting(
        1, "Image views W: W projections of the regions into the joint space, each pooled and normalised on its "
        "own; a network's similarity is the mean over its views (a method asks for several through model_defaults)."
    )
    text_pooling: str = setting(
        "mean", "Pooling of the word states into one caption embedding: mean or max (a transformer text tower also "
        "takes pooler, its pooler_output)."
    )
    similarity: str = setting(
        "cosine", "Similarity head: cosine (the dot product of the pooled unit-norm embeddings), sgr or saf "
        "(SGRAF), scan (SCAN t2i attention), or a head an installed package registers (entry-point group "
        "hfncl.similarity_heads)."
    )
    head_options: dict[str, Any] | None = setting(
        None, 'Options of the similarity head, by full name, as JSON: \'{"sgr.sim_dim": 512}\' (default: the '
        "head's declared defaults)."
    )
    image_regions: int | None = setting(
        None, "Positions per image the SGR / SAF pooling batch norms expect (default: 36 precomp regions, or a vision "
        "tower's patches and class token; a training run sets the data's count).", flag=False
    )
    word_dropout: float | None = setting(
        None, "Dropout on the GRU's word embeddings (default: 0.4, the official SGRAF code's, with an SGR / SAF head; "
        "0 with another head or in a config of checkpoint format 1)."
    )
    num_networks: int = setting(
        1, "Independently initialised networks K (co-teaching methods train two); the similarity is their mean.",
        flag=False,
    )
    text_tower: str = setting(
        "gru", "gru (the biGRU), transformer (a BERT-family or CLIP text encoder, with its own tokenizer), or a tower "
        "an installed package registers (entry-point group hfncl.text_towers).",
        flag_help="gru (a biGRU, when unset), a tower an installed package registers (entry-point group "
        "hfncl.text_towers), or a Hub id / directory of a BERT-family or CLIP text encoder.",
    )
    text_tower_name: str | None = setting(
        None, "Hub id or directory of the pretrained text encoder, read when a model is first built.", flag=False
    )
    text_tower_config: dict[str, Any] | None = setting(
        None, "The text encoder's own config (filled from text_tower_name), so a saved config rebuilds it offline.",
        flag=False,
    )
    image_tower: str = setting(
        "regions", "regions (precomputed region or cached CLIP features), transformer (a CLIP vision encoder on "
        "pixel values), or a tower an installed package registers (entry-point group hfncl.image_towers).",
        flag_help="regions (default: precomputed features), a tower an installed package registers (entry-point "
        "group hfncl.image_towers), or a Hub id / directory of a CLIP vision encoder and its image processor, which "
        "reads the raw images of an imagefolder.",
    )
    image_tower_name: str | None = setting(
        None, "Hub id or directory of the pretrained vision encoder, read when a model is first built.", flag=False
    )
    image_tower_config: dict[str, Any] | None = setting(
        None, "The vision encoder's own config (filled from image_tower_name).", flag=False
    )
    lora_rank: int = setting(0, "LoRA rank on the transformer towers (0: none; the towers are fine-tuned whole).")
    lora_alpha: float = setting(16.0, "LoRA alpha (the update is alpha / r * B A).")
    lora_dropout: float = setting(0.0, "LoRA dropout.")
    lora_towers: list[str] | None = setting(
        None, "Transformer towers that get LoRA adapters: text, image (default: every one)."
    )
    lora_target_modules: list[str] | None = setting(
        None, "Layers LoRA adapts (default: the tower's attention query and value)."
    )
    pretrained_heads: bool = setting(
        True, "Start a CLIP tower's head from CLIP's projection (default true); false draws each network's head "
        "fresh, so co-trained networks start apart."
    )


def setting_defaults() -> dict[str, Any]:
    """Every setting's default, by name, in declaration order."""
    return {spec.name: spec.default for spec in dataclasses.fields(ModelSettings)}


def with_settings_signature(init: InitT) -> InitT:
    """``init`` (a config's ``__init__(self, ..., **kwargs)`` that reads the settings from its keyword arguments)
    with a signature that names them: ``self``, every setting with its default, then ``init``'s own parameters
    (what ``inspect.signature`` and the model card's architecture table read)."""
    hints = typing.get_type_hints(ModelSettings)
    own = list(inspect.signature(init).parameters.values())
    settings = [
        inspect.Parameter(spec.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=spec.default,
                          annotation=hints[spec.name])
        for spec in dataclasses.fields(ModelSettings)
    ]
    init.__signature__ = inspect.Signature([own[0], *settings, *own[1:]])  # type: ignore[attr-defined]
    return init


def unset_arguments(
    name: str, base: type[Any], doc: str, flag_types: dict[str, type[Any]] | None = None
) -> type[Any]:
    """A dataclass ``name`` (a subclass of ``base``) with one field per flag of :class:`ModelSettings`, typed
    ``X | None`` (``flag_types``: another ``X`` by field, which reads the flag's text) and ``None`` when not given,
    whose help ends in the setting's default."""
    hints = typing.get_type_hints(ModelSettings)
    specs = []
    for spec in dataclasses.fields(ModelSettings):
        if not spec.metadata["flag"]:
            continue
        text = spec.metadata.get("flag_help", spec.metadata["help"])
        if spec.default is not None and spec.default is not MISSING and "default" not in text:
            text = f"{text[:-1]} (default {spec.default})."
        kind = (flag_types or {}).get(spec.name, hints[spec.name])
        specs.append((spec.name, kind | None, field(default=None, metadata={"help": text})))
    arguments = dataclasses.make_dataclass(name, specs, bases=(base,))
    arguments.__doc__ = doc
    arguments.__module__ = base.__module__
    return arguments
