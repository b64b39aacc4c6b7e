"""The tower contract, the towers by name, and the pretrained ``transformer`` towers (BERT / CLIP, LoRA by peft).

Every tower is an entry point of the ``hfncl.text_towers`` or ``hfncl.image_towers`` group
(``NCLConfig.text_tower`` / ``image_tower`` names one; hfncl's ``gru``, ``regions`` and ``transformer`` are
registered in ``pyproject.toml`` exactly as a third-party tower is): a callable ``build(config) -> torch.nn.Module``
that receives the model's :class:`~hfncl.models.NCLConfig`. A package adds one without any change to hfncl::

    [project.entry-points."hfncl.text_towers"]
    bow = "my_package.towers:build_bow_tower"

and a run selects it with ``--text-tower bow``. Interface shared by every tower: ``forward(...)`` returns
unit-norm pooled embeddings (B, embed_dim) (an image tower with ``image_views`` W: (B, W * embed_dim), W unit-norm
views side by side); ``local(...)`` returns the per-token features in the joint space and a validity mask,
``(states (B, T, embed_dim), mask (B, T) bool or None)``, which a similarity head scores. A text tower reads token
ids (B, L) padded with 0 and lengths (B,): ids of hfncl's vocabulary (``vocab_size``), of the tokenizer of
``text_tower_name`` for ``transformer``. An image tower reads the data's image inputs: precomputed features
(B, R, ``image_dim``), pixel values (B, C, H, W) for ``transformer``.

A ``transformer`` tower wraps a transformers model built from its own config (``AutoModel.from_config``) and a
linear head into the joint space. Its config travels inside :class:`~hfncl.models.NCLConfig` as a plain dict
(``text_tower_config`` / ``image_tower_config``, as ``VisionTextDualEncoderConfig`` nests its towers), so a saved
checkpoint rebuilds the architecture without the Hub; its weights are in hfncl's own safetensors file.

A CLIP tower (``clip_text_model`` / ``clip_vision_model``) whose source holds CLIP's own projection
(``text_projection`` / ``visual_projection`` of a ``CLIPModel``, or of a ``CLIPTextModelWithProjection`` /
``CLIPVisionModelWithProjection``) into a space of ``embed_dim`` dimensions starts its head from that projection
(zero bias): with ``pooling="pooler"`` the tower's embeddings at step 0 are CLIP's ``text_embeds`` /
``image_embeds``, normalised, so fine-tuning starts from CLIP's aligned space.

The pretrained weights are read from ``source`` (a Hub id or a local directory) only when a model is
*initialised*: :class:`~hfncl.models.NCLModel`'s ``_init_weights`` calls :meth:`PretrainedTower.init_weights` from
``post_init``. ``from_pretrained`` builds the model on the meta device, where transformers runs no initialiser, and
then reads every weight from the checkpoint (the loaded head marks the tower initialised), so a reload never
touches ``source``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any, TypeVar

import torch
from huggingface_hub import is_offline_mode
from peft import LoraConfig, inject_adapter_in_model
from peft.tuners.lora import LoraLayer
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    CLIPTextModelWithProjection,
    CLIPVisionModelWithProjection,
    PretrainedConfig,
    PreTrainedModel,
)

from hfncl.models.encoders import l2norm, masked_pool
from hfncl.registry import TOWERS, installed_towers

TRANSFORMER_POOLINGS = ("mean", "max", "pooler")
LORA_ADAPTER = "default"
DEFAULT_LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "bert": ("query", "value"),
    "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"),
    "electra": ("query", "value"),
    "clip_text_model": ("q_proj", "v_proj"),
    "clip_vision_model": ("q_proj", "v_proj"),
    "distilbert": ("q_lin", "v_lin"),
}
"""The attention projections LoRA adapts by default, by ``model_type`` of the tower (LoRA paper: W_q, W_v)."""

CLIP_PROJECTIONS: dict[str, tuple[type[PreTrainedModel], str, str]] = {
    "clip_text_model": (CLIPTextModelWithProjection, "text", "text_projection"),
    "clip_vision_model": (CLIPVisionModelWithProjection, "vision", "visual_projection"),
}
"""By CLIP tower ``model_type``: the transformers class with CLIP's projection, the tower's part of a dual config,
and the projection's attribute (CLIP's ``visual_projection`` / ``text_projection``, a linear map without bias)."""


class TowerLoadError(OSError):
    """A pretrained tower's config or weights cannot be read; the message says why and what to do."""


def resolve_tower_config(source: str, part: str) -> dict[str, Any]:
    """The config dict of the ``part`` (``"text"`` or ``"vision"``) tower stored at ``source``.

    ``source`` is a Hub id or a local directory. A dual-encoder config (CLIP, SigLIP)
    contributes its ``text_config`` or ``vision_config``; any other config is the tower.

    Raises:
        TowerLoadError: ``source`` cannot be read, e.g. a Hub id with ``HF_HUB_OFFLINE=1``
            that is not in the local cache.
    """
    try:
        config = AutoConfig.from_pretrained(source)
    except OSError as error:
        if is_offline_mode():
            raise TowerLoadError(
                f"Cannot read the {part} tower {source!r}: HF_HUB_OFFLINE=1 forbids downloading it and it is neither "
                "a local directory nor in the local Hub cache. Give the path of a saved model, or unset HF_HUB_OFFLINE."
            ) from error
        raise TowerLoadError(f"Cannot read the {part} tower {source!r}: {error}") from error
    nested = getattr(config, f"{part}_config", None)
    if isinstance(nested, PretrainedConfig):
        config = nested
    return config.to_dict()


def build_tower_config(config: dict[str, Any], field: str) -> PretrainedConfig:
    """The transformers config of a stored tower dict (``field`` names it in errors)."""
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ValueError(f"NCLConfig.{field} must be a transformers config dict with a 'model_type', got {config!r}")
    values = dict(config)
    return AutoConfig.for_model(values.pop("model_type"), **values)


def lora_target_regex(modules: Sequence[str]) -> str:
    """A peft ``target_modules`` regex matching the modules named ``modules`` (last path component).

    peft matches a string ``target_modules`` with ``re.fullmatch`` against the full module
    path inside the model it is given; the tower injects into its own transformers model
    only, so e.g. CLIP's ``q_proj`` is adapted in the tower asked for and not in the other.
    """
    return rf"(?:.*\.)?(?:{'|'.join(re.escape(m) for m in modules)})"


class PretrainedTower(nn.Module):
    """A transformers encoder, a linear head into the joint space, optional LoRA adapters.

    Args:
        tower_config: the encoder's config as a dict (``PretrainedConfig.to_dict()``).
        source: Hub id or local directory whose weights :meth:`init_weights` copies in; ``None`` keeps the
            encoder's random initialisation.
        embed_dim: size of the joint space.
        pooling: ``"mean"`` / ``"max"`` over the valid tokens of the projected states, or ``"pooler"``: the
            encoder's ``pooler_output`` (CLIP: the final-layer-normed EOS token for text, CLS token for vision;
            BERT: tanh layer on CLS) projected.
        lora: a :class:`peft.LoraConfig` to inject into the encoder, or ``None``; with it, only the adapters (and the
            head) of this tower are trainable.
        field: the NCLConfig field ``tower_config`` came from (for error messages).
        pretrained_head: start the head from CLIP's projection where ``source`` holds one of its shape
            (``NCLConfig.pretrained_heads``); ``False``: always a fresh head.
    """

    def __init__(
        self,
        tower_config: dict[str, Any],
        source: str | None,
        embed_dim: int,
        pooling: str,
        lora: LoraConfig | None,
        field: str,
        pretrained_head: bool = True,
    ) -> None:
        super().__init__()
        if pooling not in TRANSFORMER_POOLINGS:
            raise ValueError(f"pooling must be one of {TRANSFORMER_POOLINGS}, got {pooling!r}")
        self.source = source
        self.pooling = pooling
        self.pretrained_head = pretrained_head
        self.model = AutoModel.from_config(build_tower_config(tower_config, field))
        self.proj_weight = nn.Parameter(torch.empty(embed_dim, self.model.config.hidden_size))
        self.proj_bias = nn.Parameter(torch.empty(embed_dim))
        if lora is not None:
            inject_adapter_in_model(lora, self.model, adapter_name=LORA_ADAPTER)
        self.set_trainable()

    @property
    def has_lora(self) -> bool:
        return any(isinstance(module, LoraLayer) for module in self.model.modules())

    def set_trainable(self) -> None:
        """With LoRA adapters, freeze the encoder but its adapters; else train it whole (the head always).

        ``from_pretrained`` materialises the parameters anew, so ``NCLModel`` calls this again after loading.
        """
        lora = self.has_lora
        for name, parameter in self.model.named_parameters():
            parameter.requires_grad_("lora_" in name or not lora)

    def fc(self, states: torch.Tensor) -> torch.Tensor:
        """The linear head into the joint space."""
        return nn.functional.linear(states, self.proj_weight, self.proj_bias)

    @torch.no_grad()
    def init_weights(self) -> None:
        """Draw the head, copy the pretrained encoder weights in and start every LoRA adapter at zero.

        The head's weight and bias are the tower's own parameters, so transformers calls ``NCLModel._init_weights``
        on the tower exactly when they are not loaded from a checkpoint: at first construction, after the encoder's
        own modules (children first). The head has a zero bias; its weight is CLIP's own projection where ``source``
        holds one of the head's shape (``embed_dim`` equal to CLIP's ``projection_dim``) and ``pretrained_head`` is
        set, else Xavier-uniform (SCAN's scheme: a BERT-family tower, a CLIP tower without its projection, a joint
        space of another size, whose head CLIP's projection cannot fill, or a fresh head asked for). Adapted layers
        keep their pretrained weight under ``base_layer``; the adapters start as LoRA prescribes (A random, B zero:
        the adapted layer equals the pretrained one). Every encoder weight must be found in ``source``; with
        ``source = None`` the encoder keeps its random initialisation.

        Raises:
            TowerLoadError: ``source`` cannot be read or lacks a weight of the encoder.
        """
        nn.init.xavier_uniform_(self.proj_weight)
        nn.init.zeros_(self.proj_bias)
        if self.source is not None:
            try:
                pretrained, projection = load_pretrained(self.source, self.model)
            except OSError as error:
                hint = " (HF_HUB_OFFLINE=1 is set)" if is_offline_mode() else ""
                raise TowerLoadError(f"Cannot load the pretrained weights of {self.source!r}{hint}: {error}") from error
            if self.pretrained_head and projection is not None and projection.shape == self.proj_weight.shape:
                self.proj_weight.copy_(projection)
            weights = pretrained.state_dict()
            own = {name: t for name, t in self.model.state_dict().items() if "lora_" not in name}
            missing = sorted(name for name in own if name.replace(".base_layer", "") not in weights)
            if missing:
                raise TowerLoadError(f"{self.source!r} lacks weights the tower needs: {missing[:5]}")
            for name, tensor in own.items():
                tensor.copy_(weights[name.replace(".base_layer", "")])
        for module in self.model.modules():
            if isinstance(module, LoraLayer):
                module.reset_lora_parameters(LORA_ADAPTER, True)

    def _pool(self, output: Any, states: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if self.pooling == "pooler":
            return self.fc(output.pooler_output)
        return masked_pool(states, mask, self.pooling)


class TransformerTextEncoder(PretrainedTower):
    """Token ids -> caption embeddings with a BERT-family or CLIP text encoder.

    The attention mask comes from ``lengths`` (the first ``lengths[b]`` tokens are
    valid), so the padding id of the batch is never read.
    """

    def _encode(self, captions: torch.Tensor, lengths: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor]:
        positions = torch.arange(captions.size(1), device=captions.device)
        mask = positions[None, :] < lengths.to(captions.device)[:, None]
        output = self.model(input_ids=captions, attention_mask=mask.long())
        return output, self.fc(output.last_hidden_state), mask

    def forward(self, captions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Token ids (B, L) and lengths (B,) -> unit-norm caption embeddings (B, embed_dim)."""
        output, states, mask = self._encode(captions, lengths)
        return l2norm(self._pool(output, states, mask))

    def local(self, captions: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected token states (B, L, embed_dim) and the valid-token mask (B, L)."""
        _, states, mask = self._encode(captions, lengths)
        return states, mask


class TransformerImageEncoder(PretrainedTower):
    """Pixels -> image embeddings with a CLIP (or other ``pixel_values``) vision encoder."""

    def _encode(self, pixel_values: torch.Tensor) -> tuple[Any, torch.Tensor]:
        if pixel_values.dim() != 4:
            raise ValueError(
                f"the vision tower expects pixel values (B, C, H, W), got shape {tuple(pixel_values.shape)}"
            )
        output = self.model(pixel_values=pixel_values)
        return output, self.fc(output.last_hidden_state)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Pixel values (B, C, H, W) -> unit-norm image embeddings (B, embed_dim)."""
        output, states = self._encode(pixel_values)
        return l2norm(self._pool(output, states, None))

    def local(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, None]:
        """Projected patch-token states (B, T, embed_dim) (class token included); every token is valid."""
        return self._encode(pixel_values)[1], None


def load_pretrained(source: str, model: PreTrainedModel) -> tuple[PreTrainedModel, torch.Tensor | None]:
    """The pretrained encoder of ``model``'s class stored at ``source``, and CLIP's projection of it (``None``: not a
    CLIP tower, or ``source`` holds no projection).

    A CLIP tower is read through its ``...WithProjection`` class, its config's ``projection_dim`` taken from a dual
    config's own (a ``CLIPConfig`` nests tower configs whose ``projection_dim`` keeps its default).

    Raises:
        OSError: ``source`` cannot be read.
    """
    local = os.path.isdir(source)  # a local tower's pickle weights are never read
    safetensors = True if local else None
    found = CLIP_PROJECTIONS.get(str(model.config.model_type))
    if found is None:
        return type(model).from_pretrained(source, use_safetensors=safetensors), None
    model_class, part, attribute = found
    stored = AutoConfig.from_pretrained(source)
    config = getattr(stored, f"{part}_config", None)
    if isinstance(config, PretrainedConfig):
        config.projection_dim = stored.projection_dim
    else:
        config = stored
    loaded, info = model_class.from_pretrained(
        source, config=config, use_safetensors=safetensors, output_loading_info=True
    )
    missing = any(key.startswith(f"{attribute}.") for key in info["missing_keys"])
    encoder = getattr(loaded, f"{part}_model")
    return encoder, None if missing else getattr(loaded, attribute).weight


def lora_config(
    tower_config: dict[str, Any], rank: int, alpha: float, dropout: float, targets: Sequence[str] | None
) -> LoraConfig:
    """The LoRA adapters of one tower: ``targets`` (module names) or the default of its ``model_type``."""
    model_type = tower_config.get("model_type")
    modules = tuple(targets) if targets else DEFAULT_LORA_TARGETS.get(str(model_type))
    if not modules:
        raise ValueError(
            f"NCLConfig.lora_target_modules is empty and hfncl knows no default for model_type {model_type!r}: "
            "name the linear layers to adapt, e.g. ['query', 'value']"
        )
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=lora_target_regex(modules))


def parameter_counts(model: nn.Module) -> dict[str, dict[str, int]]:
    """Trainable and total parameters of each tower of each network: ``{"net0.text": {...}, ...}``.

    Keys name the network (``netK``) and the part (``text``, ``image``, or another
    submodule of the network such as a similarity head).
    """
    counts: dict[str, dict[str, int]] = {}
    networks = model.get_submodule("networks")
    for k, network in enumerate(networks.children()):
        for name, child in network.named_children():
            part = {"text_encoder": "text", "image_encoder": "image"}.get(name, name)
            entry = counts.setdefault(f"net{k}.{part}", {"trainable": 0, "total": 0})
            for parameter in child.parameters():
                entry["total"] += parameter.numel()
                entry["trainable"] += parameter.numel() if parameter.requires_grad else 0
    return counts


def _lora(config: Any, tower: str, tower_config: dict[str, Any]) -> LoraConfig | None:
    if not config.lora_applies_to(tower):
        return None
    return lora_config(
        tower_config, config.lora_rank, config.lora_alpha, config.lora_dropout, config.lora_target_modules
    )


TowerT = TypeVar("TowerT", bound=PretrainedTower)


def _transformer_tower(encoder_class: type[TowerT], config: Any, tower: str) -> TowerT:
    """The ``tower`` (``"text"`` or ``"image"``) of ``config`` as a transformer: its stored
    config, source, pooling and LoRA settings are the config's ``{tower}_...`` fields."""
    tower_config = getattr(config, f"{tower}_tower_config")
    return encoder_class(
        tower_config,
        getattr(config, f"{tower}_tower_name"),
        config.embed_dim,
        getattr(config, f"{tower}_pooling"),
        _lora(config, tower, tower_config),
        f"{tower}_tower_config",
        config.pretrained_heads,
    )


def build_transformer_text_tower(config: Any) -> TransformerTextEncoder:
    """The ``transformer`` text tower of ``config``: a BERT-family or CLIP text encoder."""
    return _transformer_tower(TransformerTextEncoder, config, "text")


def build_transformer_image_tower(config: Any) -> TransformerImageEncoder:
    """The ``transformer`` image tower of ``config``: a CLIP (or other ``pixel_values``) vision encoder."""
    return _transformer_tower(TransformerImageEncoder, config, "image")


def check_tower_name(part: str, name: str) -> None:
    """Refuse a ``part`` (``"text"`` / ``"image"``) tower no installed package registers, in one line naming the
    field and the installed towers."""
    installed = installed_towers(part)
    if name not in installed:
        raise ValueError(
            f"NCLConfig.{part}_tower must be one of {tuple(sorted(installed))}, got {name!r} (a tower is installed "
            f"with the package that registers it in the {TOWERS[part]!r} entry-point group)"
        )


def build_tower(config: Any, part: str) -> nn.Module:
    """The ``part`` (``"text"`` / ``"image"``) tower ``config`` names, built by its entry point.

    Raises:
        ValueError: no such tower, or its entry point fails to import.
    """
    name = getattr(config, f"{part}_tower")
    check_tower_name(part, name)
    point = installed_towers(part)[name]
    try:
        build = point.load()
    except Exception as error:
        raise ValueError(
            f"{part} tower {name!r} is installed but failed to import ({point.value}): {type(error).__name__}: {error}"
        ) from error
    return build(config)
