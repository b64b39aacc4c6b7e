"""Issue 59: a similarity head declares its options (``HeadOptions``) and a config keeps them in ``head_options``
under the head's name; a ``config.json`` that stored them as flat fields (checkpoint format 2 or older) loads them
into that namespace, and the command line and the recipes set them by full name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hfncl import cli
from hfncl.arguments import ModelArguments
from hfncl.model_settings import FLAT_HEAD_FIELDS
from hfncl.models import NCLConfig, NCLModel
from hfncl.models.sgraf import SGRHead
from hfncl.recipe import HelpFormatter, OneLineErrorParser

SIZES = {"image_dim": 6, "embed_dim": 8, "word_dim": 5, "vocab_size": 20}
FORMAT_2_FLAT = {  # what hfncl wrote for every model before head options: each built-in head's settings
    "sim_dim": 6, "reasoning_steps": 2, "attention_lambda": 9.0, "scan_pooling": "avg", "scan_lse_lambda": 4.0,
    "attention_negative_slope": 0.1, "pooling_dropout": 0.4, "pooling_batch_norm": True,
}


def saved_format_2(directory: Path, similarity: str, **flat: object) -> Path:
    """A ``config.json`` as hfncl wrote it at checkpoint format 2 (flat head fields), from a config saved today."""
    NCLConfig(**SIZES, similarity=similarity).save_pretrained(directory)
    written = json.loads((directory / "config.json").read_text())
    written.pop("head_options", None)
    written |= {"checkpoint_format": 2, "image_regions": 36, "word_dropout": 0.4} | FORMAT_2_FLAT | flat
    (directory / "config.json").write_text(json.dumps(written))
    return directory


@pytest.mark.parametrize(
    ("similarity", "expected"),
    [
        ("sgr", {"sgr.sim_dim": 6, "sgr.reasoning_steps": 2, "sgr.attention_lambda": 9.0,
                 "sgr.attention_negative_slope": 0.1, "sgr.pooling_dropout": 0.4, "sgr.pooling_batch_norm": True}),
        ("saf", {"saf.sim_dim": 6, "saf.attention_lambda": 9.0, "saf.attention_negative_slope": 0.1,
                 "saf.pooling_dropout": 0.4, "saf.pooling_batch_norm": True}),
        ("scan", {"scan.attention_lambda": 9.0, "scan.attention_negative_slope": 0.1, "scan.pooling": "avg",
                  "scan.lse_lambda": 4.0}),
        ("cosine", {}),
    ],
)
def test_a_format_2_config_reads_its_flat_head_fields_into_the_head_options(
    tmp_path: Path, similarity: str, expected: dict
) -> None:
    config = NCLConfig.from_pretrained(saved_format_2(tmp_path, similarity))
    assert config.head_options == expected and not any(hasattr(config, name) for name in FLAT_HEAD_FIELDS)
    config.save_pretrained(tmp_path / "again")
    written = json.loads((tmp_path / "again" / "config.json").read_text())
    assert written["checkpoint_format"] == 3 and not set(FLAT_HEAD_FIELDS) & set(written)
    assert NCLConfig.from_pretrained(tmp_path / "again").head_options == expected


def test_a_format_2_sgr_model_is_built_from_its_flat_fields(tmp_path: Path) -> None:
    head = NCLModel(NCLConfig.from_pretrained(saved_format_2(tmp_path, "sgr"))).networks[0].head
    assert isinstance(head, SGRHead) and len(head.steps) == 2 and head.output.in_features == 6


def test_a_format_1_config_keeps_the_plain_layers_and_a_bad_flat_value_is_refused_in_one_line(tmp_path: Path) -> None:
    plain = NCLConfig(**SIZES, similarity="saf", sim_dim=6, checkpoint_format=1)
    assert plain.head_options == {"saf.sim_dim": 6, "saf.attention_lambda": 9.0, "saf.attention_negative_slope": 0.0,
                                  "saf.pooling_dropout": 0.0, "saf.pooling_batch_norm": False}
    with pytest.raises(ValueError, match=r"^NCLConfig.head_options: Option 'sgr.reasoning_steps' must be >= 1, got 0$"):
        NCLConfig.from_pretrained(saved_format_2(tmp_path, "sgr", reasoning_steps=0))


def test_options_of_another_head_or_given_for_no_head_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^NCLConfig.head_options: \['scan.pooling'\] are not options of the "
                                         r"similarity head 'sgr' \(its options: \['sgr.attention_lambda', "):
        NCLConfig(similarity="sgr", head_options={"scan.pooling": "avg"})
    with pytest.raises(ValueError, match=r"similarity head 'cosine' \(its options: none\)"):
        NCLConfig(head_options={"sgr.sim_dim": 8})


def test_the_command_line_sets_head_options_by_full_name_as_json() -> None:
    parser = OneLineErrorParser((ModelArguments,), formatter_class=HelpFormatter)
    (parsed,) = parser.parse_args_into_dataclasses(
        ["--similarity", "sgr", "--head_options", '{"sgr.sim_dim": 4, "sgr.reasoning_steps": 1}']
    )
    config = NCLConfig(**SIZES, **parsed.explicit())
    assert (config.head_options["sgr.sim_dim"], config.head_options["sgr.reasoning_steps"]) == (4, 1)
    torch.manual_seed(0)
    assert NCLModel(config).networks[0].head.output.in_features == 4
    with pytest.raises(ValueError, match=r"^argument --head_options/--head-options: ModelArguments.head_options must "
                                         r"be a JSON object, got list \[1\]$"):
        parser.parse_args_into_dataclasses(["--head_options", "[1]"])
    with pytest.raises(ValueError, match=r"^ModelArguments.head_options must be a JSON object such as"):
        ModelArguments(head_options=3)


def test_hfncl_plugins_heads_lists_each_heads_options_with_their_defaults(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["plugins", "--heads", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["sgr"]["sgr.sim_dim"] == {"default": 256, "takes": "int >= 1, <= 65536; size s of the similarity "
                                            "representations (256 in the paper)"}
    assert listed["scan"]["scan.pooling"]["takes"].startswith("one of lse, avg;")
    assert "sgr.reasoning_steps" in listed["sgr"] and "sgr.reasoning_steps" not in listed["saf"]
    assert cli.main(["plugins", "--heads"]) == 0
    assert "        scan.lse_lambda = 6.0  (float > 0; " in capsys.readouterr().out
