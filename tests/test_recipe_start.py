"""A recipe's start (issue 60): a line when its data is far smaller than its paper's, naming the demo's settings
that learn there; ``--help`` without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hfncl import experiment
from hfncl.arguments import ARGUMENTS_OF_KIND
from hfncl.data.check import paper_size_warning
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.demo import QUICK, demo_runs, planned_runs
from hfncl.plugin_listing import listed_plugins
from hfncl.recipe import argument_types, run_recipe
from hfncl.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> list:
    """``run_experiment`` replaced by a recorder: the recipe's start is what is tested."""
    calls: list = []
    monkeypatch.setattr(experiment, "run_experiment", lambda *args: calls.append(args) or {})
    monkeypatch.setattr(experiment, "summary_line", lambda result, output_dir: "trained")
    return calls


def test_a_recipe_on_small_data_says_so_and_names_the_settings_that_learn(tmp_path, capsys, no_training):
    data = generate_precomp(tmp_path / "data", SyntheticConfig(num_train=40, num_dev=11, num_test=11))
    argv = ["--data-dir", str(data), "--output-dir", str(tmp_path / "run")]
    assert run_recipe("ugncl", ["ugncl"], {"epochs": 45}, argv=argv, paper="f30k") == 0
    first, last = capsys.readouterr().out.strip().splitlines()
    assert first.startswith(
        f"warning: {data} has 40 train images, under a tenth of Flickr30K's 29000: this recipe's schedule (the "
        "paper's) will not learn here; the demo's settings do (hfncl demo --plugins ugncl trains them): --"
    )
    assert last == "trained" and len(no_training) == 1
    flags = first.split("trains them): ", 1)[1]
    (run,) = planned_runs(demo_runs(plugins=["ugncl"]), QUICK)
    settings = {"epochs": 45, "options": {}}  # the named flags override the recipe's defaults
    printed = subprocess.run(
        f"{sys.executable} {ROOT / 'recipes' / 'ugncl_f30k.py'} --data-dir {data} {flags} --print-config",
        shell=True, capture_output=True, text=True, timeout=600,
    )
    assert printed.returncode == 0, printed.stderr[-2000:]
    training = json.loads(printed.stdout)["training"]
    for name, value in run.settings.items():
        expected = {**settings.get(name, {}), **value} if name == "options" else value
        if name == "options":
            assert {key: training["options"][key] for key in expected} == expected
        else:
            assert training[name] == pytest.approx(expected), name


def test_data_of_a_tenth_of_the_papers_or_more_starts_without_the_line(tmp_path):
    np.lib.format.open_memmap(tmp_path / "train_ims.npy", mode="w+", dtype=np.float32, shape=(2900, 1, 1))
    assert paper_size_warning(tmp_path, "train", "f30k") is None
    assert paper_size_warning(tmp_path, "train", "coco").startswith(f"warning: {tmp_path} has 2900 train images")
    (tmp_path / "raw" / "train").mkdir(parents=True)
    (tmp_path / "raw" / "train" / "metadata.jsonl").write_text('{"file_name": "a.png", "captions": ["x"]}\n' * 3)
    assert "has 3 train images" in paper_size_warning(tmp_path / "raw", "train", "cc152k")
    assert paper_size_warning(tmp_path / "missing", "train", "f30k") is None


def test_the_kinds_arguments_are_their_tasks():
    assert {kind: (task.data_arguments, task.model_arguments) for kind, task in TASKS.items()} == ARGUMENTS_OF_KIND
    listed_plugins()
    assert argument_types(["dmcm"], listed=True) == ARGUMENTS_OF_KIND["labels"] == argument_types(["dmcm"])
    assert argument_types(["ncr"], listed=True) == ARGUMENTS_OF_KIND["pairs"]


@pytest.mark.parametrize(("recipe", "flag"), [("ugncl_f30k.py", "--noise_file"), ("ncr_coco.py", "--test_folds")])
def test_a_recipes_help_imports_no_torch(recipe, flag):
    """``--help`` reads the plugin's kind of data from the cached listing (built here, as ``hfncl plugins`` does)."""
    listed_plugins()
    path = ROOT / "recipes" / recipe
    code = (
        "import json, runpy, sys\n"
        f"sys.argv = [{str(path)!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_path({str(path)!r}, run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=os.environ)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert not {"torch", "transformers", "hfncl.tasks"} & modules
    assert flag in done.stdout and "--print-config" in done.stdout


def test_every_recipe_of_a_papers_dataset_names_it():
    """The small-data line needs the paper's dataset: a recipe for Flickr30K, MS-COCO or CC152K names it."""
    for path in sorted((ROOT / "recipes").glob("*.py")):
        dataset = next((name for name in ("f30k", "coco", "cc152k") if f"_{name}" in path.stem), None)
        if dataset is not None:
            assert f'paper="{dataset}"' in path.read_text(), f"{path.name} gives no paper={dataset!r} to run_recipe"
