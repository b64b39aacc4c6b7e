"""Recipes as users launch them: accelerate with one and two CPU processes, bad data dirs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1"]
ACCELERATE += ["--mixed_precision", "no", "--dynamo_backend", "no"]
# accelerate 1.x starts ONE process for `--cpu --num_processes 2`; several CPU processes
# need `--multi_gpu` with ACCELERATE_USE_CPU=true (Accelerate then runs MULTI_CPU over gloo).
CPU_ONLY = {"ACCELERATE_USE_CPU": "true"}
TINY_ARGS = ["--epochs", "2", "--warmup-epochs", "1", "--batch-size", "32", "--eval-batch-size", "64"]
TINY_ARGS += [
    "--embed-dim", "32", "--word-dim", "16", "--noise-ratio", "0.4", "--no-progress", "--similarity", "cosine"
]


def _launch(processes: int, data_dir: Path, output_dir: Path, recipe: str = "ncr_f30k") -> dict:
    mode = ["--multi_gpu"] if processes > 1 else ["--cpu"]
    command = ACCELERATE + mode + ["--num_processes", str(processes), str(REPO / "recipes" / f"{recipe}.py")]
    command += ["--data-dir", str(data_dir), "--output-dir", str(output_dir), *TINY_ARGS]
    environment = dict(os.environ, **CPU_ONLY, OMP_NUM_THREADS="1")
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads((output_dir / "results.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["ncr_f30k", "coteaching_f30k"])
def test_two_processes_give_the_division_and_metrics_of_one(tiny_data_dir, tmp_path, recipe):
    """NCR's division and rectified labels, and Co-teaching's small-loss selection, read the global batch."""
    one = _launch(1, tiny_data_dir, tmp_path / "one", recipe)
    two = _launch(2, tiny_data_dir, tmp_path / "two", recipe)
    assert (one["num_processes"], two["num_processes"]) == (1, 2)
    assert one["test"] == two["test"]
    for epoch_one, epoch_two in zip(one["history"], two["history"], strict=True):
        assert {k: v for k, v in epoch_one.items() if not k.startswith("train/")} == {
            k: v for k, v in epoch_two.items() if not k.startswith("train/")
        }
        for key, value in epoch_one.items():
            if key.startswith("train/"):
                assert epoch_two[key] == pytest.approx(value, rel=1e-5)


def _recipe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "recipes" / "ncr_f30k.py"), *args], capture_output=True, text=True, timeout=300
    )


def test_recipe_help_works():
    completed = _recipe("--help")
    assert completed.returncode == 0 and "--noise-ratio" in completed.stdout and "--resume" in completed.stdout


@pytest.mark.parametrize(
    "name", ["gsc_cc152k", "ugncl_cc152k", "tcvse_coco", "tcvse_f30k_bert", "tcvse_coco_bert", "ncr_scan_f30k"]
)
def test_every_recipe_s_help_shows_its_docstring(name):
    completed = subprocess.run(
        [sys.executable, str(REPO / "recipes" / f"{name}.py"), "--help"], capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0 and f"recipes/{name}.py --data-dir" in completed.stdout
    assert "--data-dir" in completed.stdout and "--similarity" in completed.stdout


def test_missing_data_dir_is_a_clear_error(tmp_path):
    completed = _recipe("--data-dir", str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "out"))
    assert completed.returncode == 2
    assert "nowhere" in completed.stderr and "does not exist" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_malformed_data_dir_names_the_file(tiny_data_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_data_dir, broken)
    (broken / "dev_caps.txt").unlink()
    completed = _recipe("--data-dir", str(broken), "--output-dir", str(tmp_path / "out"), *TINY_ARGS)
    assert completed.returncode == 2 and "dev_caps" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_a_recipe_s_options_are_kept_under_those_of_the_command_line_and_config_file(tmp_path, capsys):
    """A recipe's ``options`` default is added to, not replaced by, ``--options`` (the user's values win by name)."""
    from hfncl.recipe import run_recipe

    recipe = {"options": {"ncr.prediction": "hinge", "ncr.label_layout": "broadcast"}}

    def printed_options(*argv: str) -> dict:
        assert run_recipe("A recipe.", ["ncr"], recipe, ["--print-config", *argv]) == 0
        return json.loads(capsys.readouterr().out)["training"]["options"]

    assert printed_options() == recipe["options"]
    given = printed_options("--options", '{"ncr.label_layout": "pair", "ncr.alpha": 0.1}')
    assert given == {"ncr.prediction": "hinge", "ncr.label_layout": "pair", "ncr.alpha": 0.1}
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"options": {"ncr.alpha": 0.3}}))
    assert printed_options("--config", str(config)) == {**recipe["options"], "ncr.alpha": 0.3}
