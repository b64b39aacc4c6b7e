"""Configuration of an :class:`hfncl.models.NCLModel` (saved as ``config.json``)."""

from __future__ import annotations

import math
from typing import Any

from hfncl.limits import check_sizes
from hfncl.models.heads import check_head_name
from hfncl.models.provenance import CHECKPOINT_FORMAT, HfnclConfig
from hfncl.models.towers import resolve_tower_config

OFFICIAL_SGRAF_DROPOUT = 0.4
"""Dropout rate of the official SGRAF code on the word embeddings and in the attention poolings."""

OFFICIAL_SGRAF_NEGATIVE_SLOPE = 0.1
"""Slope of the official SGRAF code's ``LeakyReLU`` in the text-to-region attention."""

PRECOMP_REGIONS = 36
"""Regions per image of the bottom-up attention (precomp) features."""


IMAGE_POOLINGS = ("mean", "max")
TEXT_POOLINGS = ("mean", "max")
TRANSFORMER_POOLINGS = ("mean", "max", "pooler")
TEXT_TOWERS = ("gru", "transformer")
IMAGE_TOWERS = ("regions", "transformer")
LORA_TOWERS = ("text", "image")
SCAN_POOLINGS = ("lse", "avg")
_POSITIVE_INTS = (
    "image_dim", "embed_dim", "word_dim", "vocab_size", "text_layers", "num_networks", "image_views", "sim_dim",
    "reasoning_steps", "image_regions",
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


def sgraf_layer_defaults(similarity: str, checkpoint_format: int = CHECKPOINT_FORMAT) -> dict[str, Any]:
    """What :class:`NCLConfig` takes for its SGRAF layer fields left at None: the official SGRAF code's layers
    with an SGR / SAF head, none of them with a cosine or SCAN head or in a config of checkpoint format 1."""
    official = similarity in ("sgr", "saf") and checkpoint_format >= 2
    return {
        "attention_negative_slope": OFFICIAL_SGRAF_NEGATIVE_SLOPE if official else 0.0,
        "pooling_dropout": OFFICIAL_SGRAF_DROPOUT if official else 0.0,
        "pooling_batch_norm": official,
        "word_dropout": OFFICIAL_SGRAF_DROPOUT if official else 0.0,
    }


def _given(value: Any, default: Any) -> Any:
    """``value`` when given (not None), else ``default``."""
    return default if value is None else value


def _image_positions(tower_config: dict[str, Any] | None) -> int:
    """Positions per image: 36 precomp regions, or a ViT's patches and class token (its ``image_size``,
    ``patch_size``)."""
    if tower_config is None or "image_size" not in tower_config or "patch_size" not in tower_config:
        return PRECOMP_REGIONS
    return (int(tower_config["image_size"]) // int(tower_config["patch_size"])) ** 2 + 1


_SGRAF_FIELDS = {
    "sim_dim", "attention_lambda", "attention_negative_slope", "pooling_dropout", "pooling_batch_norm", "image_regions"
}
"""The settings of SGRAF's SGR and SAF heads (:class:`NCLConfig`)."""


class NCLConfig(HfnclConfig):
    """Architecture of a two-tower retrieval model and the plugins that trained it.

    The defaults are the SCAN / VSE++ precomp encoder: 36 x 2048 bottom-up region
    features, a 300-d word embedding read by a biGRU, a 1024-d joint space.

    Args:
        image_dim: size of one precomputed region feature.
        embed_dim: size of the joint image-text embedding space.
        word_dim: size of a word embedding.
        vocab_size: number of token ids (id 0 is padding).
        text_layers: stacked GRU layers of the text tower.
        bidirectional: whether the text GRU reads captions in both directions.
        image_pooling: how region embeddings are pooled into one image embedding, one of
            ``"mean"``, ``"max"``; a transformer image tower also takes ``"pooler"``
            (CLIP's class token).
        image_views: number W of image views: W projections of the regions into the joint
            space, each pooled and normalised on its own (UGNCL's multi-view visual
            extractor, Sec. 3.2.1). A network's similarity is the mean over its views; an SGR /
            SAF head compares each view's projected regions with the caption's words.
        text_pooling: how the GRU's word states are pooled into one caption embedding,
            one of ``"mean"`` (VSE++ / SCAN precomp), ``"max"``; a transformer text tower
            also takes ``"pooler"`` (its ``pooler_output``: CLIP's EOS token).
        similarity: image-caption similarity, one of ``"cosine"`` (dot product of the pooled
            unit-norm embeddings), ``"sgr"`` or ``"saf"`` (SGRAF's similarity graph reasoning
            or attention filtration over local and global similarity representations,
            :mod:`hfncl.models.sgraf`; with W image views the head scores each view's local
            features on its own), or ``"scan"`` (SCAN's text-to-image stacked cross attention over
            the local features, :mod:`hfncl.models.scan`; NCR-SCAN).
        sim_dim: size of SGRAF's similarity representations (256 in the paper); SGR / SAF only.
        reasoning_steps: graph-reasoning steps of the SGR head (3 in the paper); SGR only.
        attention_lambda: inverse temperature lambda of SGRAF's text-to-region attention
            softmax (9 in the paper); SGR / SAF / SCAN (SCAN's lambda_1).
        scan_pooling: how the SCAN head pools its word relevances: ``"lse"`` (LogSumExp, SCAN
            Eq. 5) or ``"avg"`` (average, Eq. 6); SCAN only.
        scan_lse_lambda: lambda_2 of the SCAN LogSumExp pooling (6 in SCAN); SCAN only.
        attention_negative_slope: slope a of the rectifier max(c, a c) of the text-to-region
            cosines (:func:`hfncl.models.sgraf_nodes.region_attention`): 0 is the paper's ReLU, 0.1 the
            official SGRAF code's ``LeakyReLU(0.1)``; SGR / SAF, and SCAN's clipping (default 0 there).
        pooling_dropout: dropout rate on the tanh features of SGRAF's image and text attention
            poolings (:class:`hfncl.models.sgraf_nodes.AttentionPooling`; official code: 0.4); SGR / SAF only.
        pooling_batch_norm: whether the image attention pooling batch-normalises its two
            projections, as the official code's ``VisualSA`` (a ``BatchNorm1d`` over the
            ``image_regions`` positions and one over the ``embed_dim`` features); SGR / SAF only.
        image_regions: positions per image those batch norms expect; None: 36 (precomp
            regions; a training run sets the data's count), or a vision tower's patches and
            class token.
        word_dropout: dropout rate on the GRU text tower's word embeddings (official SGRAF
            code: 0.4).

            Left at None, ``attention_negative_slope``, ``pooling_dropout``,
            ``pooling_batch_norm`` and ``word_dropout`` take the official SGRAF code's layers
            with an SGR / SAF head (slope 0.1, dropouts 0.4, batch norms on) and none of them
            with a cosine head (0, 0, off); a config of checkpoint format 1, written before
            they existed, takes none of them (ReLU, no dropout, no batch norm), as hfncl then
            built every head, so an older checkpoint scores as it did
            (:func:`sgraf_layer_defaults`).
        num_networks: number K of independently initialised networks (co-teaching
            methods train two); the model's similarity is their mean.
        plugins, plugin_versions, plugin_options, plugin_distributions, hfncl_version,
            checkpoint_format: provenance, as in :class:`HfnclConfig`; a config of a newer
            checkpoint format raises :class:`~hfncl.hub.IncompatibleCheckpointError`.
        text_tower: ``"gru"`` (the biGRU above) or ``"transformer"``: a BERT-family or CLIP
            text encoder (:mod:`hfncl.models.towers`) whose token ids come from its own
            tokenizer; ``word_dim``, ``text_layers`` and ``bidirectional`` are then unused.
        text_tower_name: Hub id or local directory of the pretrained text encoder; read only
            when a model is first built (its config into ``text_tower_config``, its weights at
            initialisation), never when a saved model is loaded.
        text_tower_config: the text encoder's own config as a dict (``to_dict()``; a CLIP
            checkpoint contributes its ``text_config``); filled from ``text_tower_name`` when
            not given, so a saved config rebuilds the tower offline.
        image_tower: ``"regions"`` (precomputed region or cached CLIP features, (B, R, D)) or
            ``"transformer"``: a CLIP vision encoder on pixel values (B, 3, H, W).
        image_tower_name: like ``text_tower_name``, for the vision encoder.
        image_tower_config: like ``text_tower_config`` (a CLIP checkpoint contributes its
            ``vision_config``).
        lora_rank: rank r of the LoRA adapters (peft) injected into the transformer towers
            named by ``lora_towers``; 0 means no LoRA (the towers are fine-tuned whole).
            With LoRA only the adapters of those towers are trainable there.
        lora_alpha: LoRA scaling alpha (the update is ``alpha / r * B A``).
        lora_dropout: dropout on the LoRA input.
        lora_towers: which transformer towers get adapters, ``"text"`` and / or ``"image"``;
            ``None``: every transformer tower.
        lora_target_modules: names of the linear layers to adapt inside each adapted tower
            (e.g. ``["query", "value"]``); ``None``: the attention query and value
            projections of the tower's ``model_type`` (``DEFAULT_LORA_TARGETS``).
        pretrained_heads: a CLIP tower's head into the joint space starts from CLIP's own
            projection where it has the head's shape (``True``); ``False`` draws every
            transformer tower's head fresh (Xavier-uniform, zero bias) from the global
            generator, so the K networks of a co-trained method start apart although their
            encoders copy the same pretrained weights.
        kwargs: the common :class:`~transformers.PretrainedConfig` arguments.

    Raises:
        ValueError: when a field holds a value outside its allowed range or set.
    """

    model_type = "hfncl"

    def __init__(
        self,
        image_dim: int = 2048,
        embed_dim: int = 1024,
        word_dim: int = 300,
        vocab_size: int = 10000,
        text_layers: int = 1,
        bidirectional: bool = True,
        image_pooling: str = "mean",
        image_views: int = 1,
        text_pooling: str = "mean",
        similarity: str = "cosine",
        sim_dim: int = 256,
        reasoning_steps: int = 3,
        attention_lambda: float = 9.0,
        scan_pooling: str = "lse",
        scan_lse_lambda: float = 6.0,
        attention_negative_slope: float | None = None,
        pooling_dropout: float | None = None,
        pooling_batch_norm: bool | None = None,
        image_regions: int | None = None,
        word_dropout: float | None = None,
        num_networks: int = 1,
        plugins: list[str] | None = None,
        plugin_versions: dict[str, str] | None = None,
        plugin_options: dict[str, Any] | None = None,
        plugin_distributions: dict[str, str] | None = None,
        hfncl_version: str | None = None,
        checkpoint_format: int = CHECKPOINT_FORMAT,
        text_tower: str = "gru",
        text_tower_name: str | None = None,
        text_tower_config: dict[str, Any] | None = None,
        image_tower: str = "regions",
        image_tower_name: str | None = None,
        image_tower_config: dict[str, Any] | None = None,
        lora_rank: int = 0,
        lora_alpha: float = 16.0,
        lora_dropout: float = 0.0,
        lora_towers: list[str] | None = None,
        lora_target_modules: list[str] | None = None,
        pretrained_heads: bool = True,
        **kwargs: Any,
    ) -> None:
        self.set_provenance(
            plugins, plugin_versions, plugin_options, plugin_distributions, hfncl_version, checkpoint_format
        )
        self.text_tower = text_tower
        self.text_tower_name = text_tower_name
        self.text_tower_config = _tower_config("text", text_tower, text_tower_name, text_tower_config)
        self.image_tower = image_tower
        self.image_tower_name = image_tower_name
        self.image_tower_config = _tower_config("image", image_tower, image_tower_name, image_tower_config)
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha
        self.lora_dropout = lora_dropout
        self.lora_towers = list(lora_towers) if isinstance(lora_towers, tuple) else lora_towers
        self.lora_target_modules = (
            list(lora_target_modules) if isinstance(lora_target_modules, tuple) else lora_target_modules
        )
        self.pretrained_heads = pretrained_heads
        self.image_dim = image_dim
        self.embed_dim = embed_dim
        self.word_dim = word_dim
        self.vocab_size = vocab_size
        self.text_layers = text_layers
        self.bidirectional = bidirectional
        self.image_pooling = image_pooling
        self.image_views = image_views
        self.text_pooling = text_pooling
        self.similarity = similarity
        self.sim_dim = sim_dim
        self.reasoning_steps = reasoning_steps
        self.attention_lambda = attention_lambda
        self.scan_pooling = scan_pooling
        self.scan_lse_lambda = scan_lse_lambda
        layers = sgraf_layer_defaults(similarity, self.checkpoint_format)
        self.attention_negative_slope = _given(attention_negative_slope, layers["attention_negative_slope"])
        self.pooling_dropout = _given(pooling_dropout, layers["pooling_dropout"])
        self.pooling_batch_norm = _given(pooling_batch_norm, layers["pooling_batch_norm"])
        self.word_dropout = _given(word_dropout, layers["word_dropout"])
        self.image_regions = _image_positions(self.image_tower_config) if image_regions is None else image_regions
        self.num_networks = num_networks
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
        check_head_name(self.similarity)
        lam = self.attention_lambda
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not math.isfinite(lam) or lam <= 0:
            raise ValueError(f"NCLConfig.attention_lambda must be a positive finite number, got {lam!r}")
        if self.scan_pooling not in SCAN_POOLINGS:
            raise ValueError(f"NCLConfig.scan_pooling must be one of {SCAN_POOLINGS}, got {self.scan_pooling!r}")
        lse = self.scan_lse_lambda
        if isinstance(lse, bool) or not isinstance(lse, (int, float)) or not math.isfinite(lse) or lse <= 0:
            raise ValueError(f"NCLConfig.scan_lse_lambda must be a positive finite number, got {lse!r}")
        for name in ("attention_negative_slope", "pooling_dropout", "word_dropout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"NCLConfig.{name} must be a number in [0, 1), got {value!r}")
        if not isinstance(self.pooling_batch_norm, bool):
            raise ValueError(f"NCLConfig.pooling_batch_norm must be True or False, got {self.pooling_batch_norm!r}")
        self._check_towers()
        self.check_provenance()

    def _check_towers(self) -> None:
        """The tower and LoRA fields (see the class docstring)."""
        if self.text_tower not in TEXT_TOWERS:
            raise ValueError(f"NCLConfig.text_tower must be one of {TEXT_TOWERS}, got {self.text_tower!r}")
        if self.image_tower not in IMAGE_TOWERS:
            raise ValueError(f"NCLConfig.image_tower must be one of {IMAGE_TOWERS}, got {self.image_tower!r}")
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
        without LoRA, and the settings of the built-in similarity heads this model's head does not read (a head
        of another package may read any of them)."""
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
        head_fields = {
            "cosine": set(),
            "sgr": _SGRAF_FIELDS | {"reasoning_steps"},
            "saf": _SGRAF_FIELDS,
            "scan": {"attention_lambda", "attention_negative_slope", "scan_pooling", "scan_lse_lambda"},
        }
        if self.similarity in head_fields:
            unused |= set().union(*head_fields.values()) - head_fields[self.similarity]
        return unused

    def lora_applies_to(self, tower: str) -> bool:
        """Whether the ``tower`` (``"text"`` or ``"image"``) gets LoRA adapters."""
        kind = self.text_tower if tower == "text" else self.image_tower
        wanted = self.lora_towers is None or tower in self.lora_towers
        return self.lora_rank > 0 and kind == "transformer" and wanted
