"""Configuration of an :class:`hfncl.models.NCLModel` (saved as ``config.json``)."""

from __future__ import annotations

import math
from typing import Any

from hfncl.model_settings import (
    FLAT_HEAD_FIELDS,
    IMAGE_POOLINGS,
    LORA_TOWERS,
    TEXT_POOLINGS,
    TRANSFORMER_POOLINGS,
    check_sizes,
    setting_defaults,
    with_settings_signature,
)
from hfncl.models.heads import check_head_name, head_config_fields, head_word_dropout, resolve_head_options
from hfncl.models.provenance import CHECKPOINT_FORMAT, HfnclConfig
from hfncl.models.towers import check_tower_name, resolve_tower_config

PRECOMP_REGIONS = 36
"""Regions per image of the bottom-up attention (precomp) features."""

_POSITIVE_INTS = (
    "image_dim", "embed_dim", "word_dim", "vocab_size", "text_layers", "num_networks", "image_views", "image_regions",
)


def _tower_config(
    tower: str, kind: str, name: str | None, config: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The stored config dict of a transformer tower: given, or read from ``name`` (first construction only)."""
    if kind != "transformer" or config is not None:
        return config
    if not name:
        raise ValueError(
            f"NCLConfig.{tower}_tower is 'transformer' but neither {tower}_tower_name (a Hub id or directory) nor "
            f"{tower}_tower_config is given"
        )
    return resolve_tower_config(name, "text" if tower == "text" else "vision")


def word_dropout_default(similarity: str, checkpoint_format: int = CHECKPOINT_FORMAT) -> float:
    """What :class:`NCLConfig` takes for ``word_dropout`` left at None: the official SGRAF code's 0.4 with an SGR /
    SAF head, 0 with another head or in a config of checkpoint format 1: what the head declares
    (:func:`~hfncl.models.heads.head_word_dropout`)."""
    return head_word_dropout(similarity) if checkpoint_format >= 2 else 0.0


def _image_positions(tower_config: dict[str, Any] | None) -> int:
    """Positions per image: 36 precomp regions, or a ViT's patches and class token (its ``image_size``,
    ``patch_size``)."""
    if tower_config is None or "image_size" not in tower_config or "patch_size" not in tower_config:
        return PRECOMP_REGIONS
    return (int(tower_config["image_size"]) // int(tower_config["patch_size"])) ** 2 + 1


class NCLConfig(HfnclConfig):
    """Architecture of a two-tower retrieval model and the plugins that trained it.

    Its keyword arguments and their defaults are the fields of :class:`~hfncl.model_settings.ModelSettings` (each
    field's help says what it sets; the defaults are the SCAN / VSE++ precomp encoder), then the provenance of
    :class:`HfnclConfig` and the common :class:`~transformers.PretrainedConfig` arguments.

    Beside their declaration:

    - ``similarity`` names a head: ``"cosine"``, or an entry point of the ``hfncl.similarity_heads`` group
      (hfncl's ``"sgr"`` and ``"saf"``, :mod:`hfncl.models.sgraf`, and ``"scan"``, :mod:`hfncl.models.scan`); with
      W image views a head scores each view's local features on its own. ``head_options`` are its options by full
      name (``{"sgr.sim_dim": 256}``), checked against the head's declaration and stored with every default
      (:func:`~hfncl.models.heads.resolve_head_options`). A config of checkpoint format 2 or older stored the
      built-in heads' settings as flat fields (:data:`FLAT_HEAD_FIELDS`, ``sim_dim=256``); they are read into
      ``head_options`` (also when a Python caller passes them), and a format-1 SGR / SAF config keeps the plain
      layers it was trained with (ReLU, no dropout, no batch norm), so an older checkpoint scores as it did.
    - ``word_dropout`` left at None takes the official SGRAF code's 0.4 with an SGR / SAF head and 0 with
      another head or in a config of checkpoint format 1 (:func:`word_dropout_default`). ``image_regions`` left
      at None is 36 (precomp regions), or a vision tower's patches and class token.
    - ``text_tower_name`` / ``image_tower_name`` are read only when a model is first built (the encoder's config
      into ``text_tower_config`` / ``image_tower_config``, its weights at initialisation), never when a saved
      model is loaded; a CLIP checkpoint contributes its ``text_config`` / ``vision_config``. With a transformer
      text tower, ``word_dim``, ``text_layers`` and ``bidirectional`` are unused.
    - With ``lora_rank`` > 0 only the LoRA adapters (peft) of the towers ``lora_towers`` names are trainable
      there; ``lora_target_modules`` None adapts the attention query and value projections of the tower's
      ``model_type`` (``DEFAULT_LORA_TARGETS``).
    - A config of a newer checkpoint format raises :class:`~hfncl.hub.IncompatibleCheckpointError`.
    - ``pretrained_heads``: a CLIP tower's head into the joint space starts from CLIP's own projection where it has
      the head's shape (``True``); ``False`` draws every transformer tower's head fresh (Xavier-uniform, zero bias)
      from the global generator, so the K networks of a co-trained method start apart although their encoders copy
      the same pretrained weights.

    Raises:
        ValueError: when a field holds a value outside its allowed range or set.
    """

    model_type = "hfncl"

    @with_settings_signature
    def __init__(
        self,
        plugins: list[str] | None = None,
        plugin_versions: dict[str, str] | None = None,
        plugin_options: dict[str, Any] | None = None,
        plugin_distributions: dict[str, str] | None = None,
        hfncl_version: str | None = None,
        checkpoint_format: int = CHECKPOINT_FORMAT,
        **kwargs: Any,
    ) -> None:
        self.set_provenance(
            plugins, plugin_versions, plugin_options, plugin_distributions, hfncl_version, checkpoint_format
        )
        settings = {name: kwargs.pop(name, default) for name, default in setting_defaults().items()}
        for name in ("lora_towers", "lora_target_modules"):
            if isinstance(settings[name], tuple):
                settings[name] = list(settings[name])
        for part in ("text", "image"):
            settings[f"{part}_tower_config"] = _tower_config(
                part, settings[f"{part}_tower"], settings[f"{part}_tower_name"], settings[f"{part}_tower_config"]
            )
        if settings["word_dropout"] is None:
            settings["word_dropout"] = word_dropout_default(settings["similarity"], self.checkpoint_format)
        check_head_name(settings["similarity"])
        flat = {name: kwargs.pop(name) for name in FLAT_HEAD_FIELDS if name in kwargs}
        settings["head_options"] = resolve_head_options(
            settings["similarity"], settings["head_options"], flat, self.checkpoint_format
        )
        if settings["image_regions"] is None:
            settings["image_regions"] = _image_positions(settings["image_tower_config"])
        for name, value in settings.items():
            setattr(self, name, value)
        self.check_values()
        super().__init__(**kwargs)

    def check_values(self) -> None:
        """Raise a ``ValueError`` naming the first field whose value is not allowed."""
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"NCLConfig.{name} must be a positive integer, got {value!r}")
        check_sizes({name: getattr(self, name) for name in _POSITIVE_INTS}, "NCLConfig")
        if not isinstance(self.bidirectional, bool):
            raise ValueError(f"NCLConfig.bidirectional must be True or False, got {self.bidirectional!r}")
        image_poolings = TRANSFORMER_POOLINGS if self.image_tower == "transformer" else IMAGE_POOLINGS
        if self.image_pooling not in image_poolings:
            raise ValueError(f"NCLConfig.image_pooling must be one of {image_poolings}, got {self.image_pooling!r}")
        text_poolings = TRANSFORMER_POOLINGS if self.text_tower == "transformer" else TEXT_POOLINGS
        if self.text_pooling not in text_poolings:
            raise ValueError(f"NCLConfig.text_pooling must be one of {text_poolings}, got {self.text_pooling!r}")
        resolve_head_options(self.similarity, self.head_options, {}, self.checkpoint_format)
        dropout = self.word_dropout
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ValueError(f"NCLConfig.word_dropout must be a number in [0, 1), got {dropout!r}")
        self._check_towers()
        self.check_provenance()

    def _check_towers(self) -> None:
        """The tower and LoRA fields (see the class docstring)."""
        check_tower_name("text", self.text_tower)
        check_tower_name("image", self.image_tower)
        if self.image_tower == "transformer" and self.image_views != 1:
            raise ValueError(f"NCLConfig.image_views must be 1 with image_tower 'transformer', got {self.image_views}")
        rank = self.lora_rank
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ValueError(f"NCLConfig.lora_rank must be an integer >= 0 (0: no LoRA), got {rank!r}")
        alpha, dropout = self.lora_alpha, self.lora_dropout
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"NCLConfig.lora_alpha must be a positive number, got {alpha!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ValueError(f"NCLConfig.lora_dropout must be in [0, 1), got {dropout!r}")
        towers = self.lora_towers
        if towers is not None and (not isinstance(towers, list) or not set(towers) <= set(LORA_TOWERS)):
            raise ValueError(f"NCLConfig.lora_towers must be None or a list of {LORA_TOWERS}, got {towers!r}")
        if rank and towers is not None:
            kinds = {"text": self.text_tower, "image": self.image_tower}
            plain = [t for t in towers if kinds[t] != "transformer"]
            if plain:
                raise ValueError(f"NCLConfig.lora_towers names {plain}, which are not transformer towers")
        if not isinstance(self.pretrained_heads, bool):
            raise ValueError(f"NCLConfig.pretrained_heads must be True or False, got {self.pretrained_heads!r}")
        modules = self.lora_target_modules
        if modules is not None and (not isinstance(modules, list) or not all(isinstance(m, str) for m in modules)):
            raise ValueError(f"NCLConfig.lora_target_modules must be None or a list of module names, got {modules!r}")

    def unused_fields(self) -> set[str]:
        """The fields this model's own choices leave unread (the card's architecture table omits them): the GRU's
        beside a transformer text tower, a pretrained tower's name and config beside a GRU or region tower, LoRA's
        without LoRA, ``image_regions`` beside a head that does not read it (:attr:`HeadPlugin.config_fields
        <hfncl.models.heads.HeadPlugin>`), and the empty ``head_options`` of a head without options."""
        unused = set()
        if self.text_tower == "transformer":
            unused |= {"word_dim", "text_layers", "bidirectional", "word_dropout"}
        else:
            unused |= {"text_tower_name", "text_tower_config"}
        if self.image_tower != "transformer":
            unused |= {"image_tower_name", "image_tower_config"}
            if self.text_tower != "transformer":
                unused.add("pretrained_heads")
        if not self.lora_rank:
            unused |= {"lora_alpha", "lora_dropout", "lora_towers", "lora_target_modules"}
        if "image_regions" not in head_config_fields(self.similarity):
            unused.add("image_regions")
        if not self.head_options:
            unused.add("head_options")
        return unused

    def lora_applies_to(self, tower: str) -> bool:
        """Whether the ``tower`` (``"text"`` or ``"image"``) gets LoRA adapters."""
        kind = self.text_tower if tower == "text" else self.image_tower
        wanted = self.lora_towers is None or tower in self.lora_towers
        return self.lora_rank > 0 and kind == "transformer" and wanted
