"""Runs configured from a YAML or JSON file, saved with the run and read back to repeat it."""

from __future__ import annotations

import json

import pytest
import yaml

from hfncl.config import TrainConfig
from hfncl.dataclass_parser import DataclassArgumentParser
from hfncl.experiment import DataArguments, ModelArguments
from hfncl.recipe import parse_with_config_file, run_recipe


def recipe_parser() -> DataclassArgumentParser:
    return DataclassArgumentParser((DataArguments, TrainConfig, ModelArguments))


def test_a_config_file_trains_flags_override_it_and_the_saved_config_repeats_the_run(tiny_data_dir, tmp_path):
    run_dir = tmp_path / "run"
    settings = {
        "data_dir": str(tiny_data_dir),
        "plugins": ["vsepp"],
        "output_dir": str(run_dir),
        "num_train_epochs": 1,  # TrainingArguments' name of `epochs`
        "batch-size": 32,
        "eval_batch_size": 64,
        "seed": 1,
        "progress": False,
        "embed_dim": 32,
        "word_dim": 16,
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(settings))
    argv = ["--config", str(tmp_path / "run.yaml"), "--seed", "3"]
    assert run_recipe("test", plugins=[], defaults={}, argv=argv) == 0

    saved = run_dir / "run_config.yaml"
    effective = yaml.safe_load(saved.read_text())
    assert (effective["epochs"], effective["seed"], effective["batch_size"], effective["embed_dim"]) == (1, 3, 32, 32)
    again = parse_with_config_file(recipe_parser(), ["--config", str(saved)])
    assert again == parse_with_config_file(recipe_parser(), ["--config", str(saved)])
    assert again[1].seed == 3 and again[0].data_dir == str(tiny_data_dir) and again[2].word_dim == 16
    (tmp_path / "run.json").write_text(json.dumps(effective))  # JSON reads the same
    assert parse_with_config_file(recipe_parser(), ["--config", str(tmp_path / "run.json")]) == again


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.yaml", "epochs: 2\nepochz: 3\n", r"unknown field\(s\) 'epochz' \(did you mean 'epochs'\?\)"),
        ("bad.yaml", "- 1\n", "expected a mapping"),
        ("bad.json", "{", "not valid JSON"),
        ("bad.txt", "", "expected a .yaml, .yml or .json file"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_it(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        parse_with_config_file(recipe_parser(), ["--config", str(tmp_path / name)])


def test_a_tracker_that_is_not_installed_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"TrainConfig.log_with: tracker 'wandb' is not installed \(pip install wandb"):
        TrainConfig(log_with=["wandb"])
    with pytest.raises(ValueError, match="unknown tracker 'tensorbord'"):
        TrainConfig(log_with=["tensorbord"])


def test_a_run_config_of_before_head_options_reads_and_its_set_flat_head_field_is_refused_with_the_fix(tmp_path):
    """A ``run_config.yaml`` written before checkpoint format 3 carries every head's flat field, unset: it reads as
    before; a set one names where its value goes now."""
    old = {"data_dir": str(tmp_path), "plugins": ["vsepp"], "epochs": 2, "sim_dim": None, "reasoning_steps": None,
           "pooling_batch_norm": None}
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    data, config, model = parse_with_config_file(recipe_parser(), ["--config", str(tmp_path / "old.yaml")])
    assert (data.data_dir, config.epochs, model.head_options) == (str(tmp_path), 2, None)
    (tmp_path / "set.yaml").write_text(yaml.safe_dump({**old, "sim_dim": 256, "reasoning_steps": 2}))
    with pytest.raises(ValueError, match=r"set.yaml: field\(s\) reasoning_steps, sim_dim are a head's options now: "
                                         r"give them as head_options, e\.g\. head_options: \{\"sgr\.sim_dim\": 256\}"):
        parse_with_config_file(recipe_parser(), ["--config", str(tmp_path / "set.yaml")])


def test_options_on_the_command_line_update_the_config_file_s_by_name_not_replace_them(tmp_path):
    """``--config RUN/run_config.yaml --options '{...}'`` changes the named options and keeps the file's others
    (a run's configuration plus one setting); the same for ``head_options``; without the flag, the file's."""
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "data_dir": str(tmp_path),
        "options": {"ncr.noisy_batch": "split", "ncr.alpha": 0.2},
        "head_options": {"sgr.sim_dim": 64, "sgr.reasoning_steps": 2},
    }))
    data, config, model = parse_with_config_file(recipe_parser(), [
        "--config", str(path), "--options", '{"ncr.alpha": 0.3}', "--head_options", '{"sgr.sim_dim": 32}'
    ])
    assert dict(config.options) == {"ncr.noisy_batch": "split", "ncr.alpha": 0.3}
    assert type(config.options) is type(TrainConfig().options)
    assert dict(model.head_options) == {"sgr.sim_dim": 32, "sgr.reasoning_steps": 2}
    _, alone, _ = parse_with_config_file(recipe_parser(), ["--config", str(path)])
    assert dict(alone.options) == {"ncr.noisy_batch": "split", "ncr.alpha": 0.2}
    argv = ["--data_dir", str(tmp_path), "--options", '{"ncr.alpha": 0.3}']
    _, without_file, _ = parse_with_config_file(recipe_parser(), argv)
    assert dict(without_file.options) == {"ncr.alpha": 0.3}
