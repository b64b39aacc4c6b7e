"""Issue 59: the model's settings are declared once (``hfncl.model_settings.ModelSettings``), and both
``NCLConfig`` and the command line's ``ModelArguments`` are made from that declaration."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from hfncl.arguments import ModelArguments
from hfncl.model_settings import ModelSettings, setting_defaults
from hfncl.models import NCLConfig
from hfncl.recipe import HelpFormatter, OneLineErrorParser

PROVENANCE = ["plugins", "plugin_versions", "plugin_options", "plugin_distributions", "hfncl_version",
              "checkpoint_format"]


def test_the_config_takes_every_setting_with_its_declared_default() -> None:
    parameters = inspect.signature(NCLConfig.__init__).parameters
    names = [name for name in parameters if name not in ("self", "kwargs")]
    assert names == [spec.name for spec in dataclasses.fields(ModelSettings)] + PROVENANCE
    assert {name: parameters[name].default for name in setting_defaults()} == setting_defaults()
    config = NCLConfig()
    resolved = {"head_options": {}, "word_dropout": 0.0, "image_regions": 36}  # the None defaults, resolved
    assert {name: getattr(config, name) for name in setting_defaults()} == setting_defaults() | resolved


def test_the_command_line_flags_are_the_declared_settings_unset_until_given() -> None:
    flags = [spec.name for spec in dataclasses.fields(ModelSettings) if spec.metadata["flag"]]
    assert [spec.name for spec in dataclasses.fields(ModelArguments)] == flags
    assert "image_dim" not in flags and "vocab_size" not in flags and "embed_dim" in flags
    assert all(value is None for value in dataclasses.asdict(ModelArguments()).values())
    assert ModelArguments(embed_dim=64, image_tower="openai/clip").explicit() == {
        "embed_dim": 64, "image_tower": "transformer", "image_tower_name": "openai/clip"
    }


def test_a_flag_says_its_declared_default_and_is_checked_like_the_other_arguments() -> None:
    parser = OneLineErrorParser((ModelArguments,), formatter_class=HelpFormatter)
    text = " ".join(parser.format_help().split())
    assert "--embed-dim EMBED_DIM Joint image-text embedding dimension (default 1024)." in text
    (parsed,) = parser.parse_args_into_dataclasses(["--embed_dim", "64", "--lora_towers", "text"])
    assert parsed.explicit() == {"embed_dim": 64, "lora_towers": ["text"]}
    with pytest.raises(ValueError, match="ModelArguments.embed_dim must be an integer or null, got 'a'"):
        ModelArguments(embed_dim="a")
    with pytest.raises(ValueError, match="ModelArguments.embed_dim must be at most 65536"):
        ModelArguments(embed_dim=1 << 20)
