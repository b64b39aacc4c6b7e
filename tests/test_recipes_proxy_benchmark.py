"""benchmarks/recipes_proxy.py: which runs the recipes become, what each run is given, how its history is read."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import benchmark_module


@pytest.fixture(scope="module")
def recipes_proxy():
    return benchmark_module("recipes_proxy")


@pytest.fixture(scope="module")
def settings(recipes_proxy):
    names = ("ncr_f30k", "ncr_coco", "ncr_scan_f30k", "tcvse_f30k_bert", "vsepp_f30k", "dmcm_wiki")
    return {name: recipes_proxy.recipe_settings(name) for name in names}


def test_only_recipes_of_image_caption_methods_run(recipes_proxy, settings):
    kept = recipes_proxy.image_text_recipes(settings, ["ncr", "tcvse", "vsepp"])
    assert "dmcm_wiki" not in kept and set(kept) == set(settings) - {"dmcm_wiki"}


def test_recipes_that_differ_only_in_schedule_train_once_under_the_flickr_name(recipes_proxy, settings):
    args = recipes_proxy.parse_args([])
    pairs = {name: s for name, s in settings.items() if name != "dmcm_wiki"}
    runs = {run.recipes: run for run in recipes_proxy.plan(pairs, args, "/local/minilm")}
    assert set(runs) == {("ncr_f30k", "ncr_coco"), ("ncr_scan_f30k",), ("tcvse_f30k_bert",), ("vsepp_f30k",)}
    ncr = runs["ncr_f30k", "ncr_coco"].config
    assert (ncr["epochs"], ncr["warmup_epochs"], ncr["lr_decay_epochs"]) == (1 + 3, 1, [])  # 5 warmup epochs -> 1
    assert (ncr["embed_dim"], ncr["head_options"]["sgr.sim_dim"], ncr["noise_ratio"]) == (256, 64, 0.5)
    assert (ncr["test_split"], ncr["test_folds"]) == ("test", 1)
    vsepp = runs["vsepp_f30k",].config
    assert (vsepp["epochs"], vsepp["warmup_epochs"]) == (1 + 3, 1)  # every recipe: the same warmup and epochs
    assert runs["tcvse_f30k_bert",].config["text_tower"] == "/local/minilm" and "text_tower" not in ncr


def test_the_warmup_is_every_recipes_first_division_put_off_by_as_many_epochs(recipes_proxy, settings):
    args = recipes_proxy.parse_args(["--warmup-epochs", "10", "--epochs", "4"])
    for name in ("ncr_f30k", "vsepp_f30k", "tcvse_f30k_bert"):  # 5 warmup epochs, none, none
        config = recipes_proxy.reduced_config(settings[name], args, None)
        assert (config["warmup_epochs"], config["epochs"]) == (10, 14), name


def test_paper_width_keeps_the_recipes_widths(recipes_proxy, settings):
    args = recipes_proxy.parse_args(["--paper-width", "--epochs", "2"])
    config = recipes_proxy.reduced_config(settings["ncr_f30k"], args, None)
    assert "embed_dim" not in config and "head_options" not in config and config["epochs"] == 3


def test_options_change_one_thing_over_the_recipes_own(recipes_proxy, settings):
    recipe = settings["ncr_f30k"]
    own = {"ncr.alpha": 0.5, "ncr.noisy_batch": "split"}  # as a recipe that fixes options of its own
    recipe = {**recipe, "training": {**recipe["training"], "options": own}}
    args = recipes_proxy.parse_args(["--options", '{"ncr.alpha": 0.6}'])
    config = recipes_proxy.reduced_config(recipe, args, None)
    assert config["options"] == {"ncr.alpha": 0.6, "ncr.noisy_batch": "split"}
    assert "options" not in recipes_proxy.reduced_config(settings["ncr_f30k"], recipes_proxy.parse_args([]), None)
    with pytest.raises(SystemExit):
        recipes_proxy.parse_args(["--options", "[1]"])  # a JSON list is no set of options


HISTORY = [
    {"epoch": 0, "warmup": True, "train/warmup_lw/net0": 50.8, "train/warmup_lw/net1": 50.9, "val/rsum": 40.0},
    {
        "epoch": 1, "train/soft_margin_triplet/net0": 20.0, "train/soft_margin_triplet/net1": 21.0,
        "division/net0/auc": 0.61, "division/net0/precision": 0.7, "division/net0/recall": 0.2,
        "division/net1/auc": 0.99, "division/net0/clean_share": 0.25, "val/rsum": 60.0,
    },
    {
        "epoch": 2, "train/soft_margin_triplet/net0": 12.5, "train/soft_margin_triplet/net1": 30.0,
        "division/net0/auc": 0.74, "division/net0/precision": 0.8, "division/net0/recall": 0.4,
        "division/net1/auc": 0.99, "division/net0/clean_share": 0.3, "division/net0/noisy_share": 0.7,
    },
]


def test_network_a_is_net0_or_the_only_network(recipes_proxy):
    assert recipes_proxy.network_a(HISTORY[1], "train") == {"soft_margin_triplet": 20.0}
    assert recipes_proxy.network_a({"train/triplet_hardest": 3.0, "val/rsum": 1.0}, "train") == {"triplet_hardest": 3.0}
    assert recipes_proxy.network_a(HISTORY[2], "division")["auc"] == 0.74


def test_losses_division_and_sets_are_read_from_network_a(recipes_proxy):
    assert recipes_proxy.loss_phases(HISTORY) == "warmup_lw 50.8 (1 ep); soft_margin_triplet 20 → 12.5"
    assert recipes_proxy.division_cells(HISTORY) == ("0.61 0.74", "0.80 / 0.40", "clean 30%, noisy 70%")
    assert recipes_proxy.division_cells(HISTORY[:1]) == ("-", "-", "-")


def test_a_failing_recipe_is_named_with_the_end_of_its_log(recipes_proxy, tmp_path):
    run = recipes_proxy.RecipeRun(("vsepp_f30k",), {"epochs": 1})
    with pytest.raises(RuntimeError, match=r"recipes/vsepp_f30k.py exited with 2: .*not_there"):
        recipes_proxy.train(run, tmp_path / "not_there", tmp_path / "runs", resume=False)


def test_report_only_trains_nothing_and_reads_finished_runs(recipes_proxy, tmp_path):
    run = recipes_proxy.RecipeRun(("vsepp_f30k",), {"epochs": 1})
    assert recipes_proxy.train(run, tmp_path / "data", tmp_path, resume=False, report_only=True) is None
    assert not (tmp_path / "vsepp_f30k").exists()
    (tmp_path / "vsepp_f30k").mkdir()
    (tmp_path / "vsepp_f30k" / "results.json").write_text('{"test": {"rsum": 80.0}, "history": []}')
    (tmp_path / "vsepp_f30k" / "seconds.json").write_text('{"seconds": 12.0}')
    outcome = recipes_proxy.train(run, tmp_path / "data", tmp_path, resume=False, report_only=True)
    assert outcome == {"results": {"test": {"rsum": 80.0}, "history": []}, "seconds": 12.0}


@pytest.mark.parametrize(
    ("resume", "expected"), [(True, ["--resume_from_checkpoint", "latest"]), (False, ["--overwrite_output_dir"])]
)
def test_a_killed_run_continues_from_its_checkpoint_with_resume(recipes_proxy, tmp_path, monkeypatch, resume, expected):
    """A killed run resumes (``--resume``) or starts again; the flag goes on the command line, as a --config file
    may not carry it (it would repeat or delete the run whenever the file is reused)."""
    run = recipes_proxy.RecipeRun(("vsepp_f30k",), {"epochs": 1})
    (tmp_path / "runs" / "vsepp_f30k" / "checkpoints").mkdir(parents=True)
    (tmp_path / "runs" / "vsepp_f30k" / "train.log").write_text("epoch 1/3 | before the kill\n")
    commands = []

    def recipe_fails(command, **kwargs):
        commands.append(command)
        return subprocess.CompletedProcess(command, 2)

    monkeypatch.setattr(recipes_proxy.subprocess, "run", recipe_fails)
    with pytest.raises(RuntimeError, match="exited with 2"):
        recipes_proxy.train(run, tmp_path / "not_there", tmp_path / "runs", resume=resume)
    [command] = commands
    assert command[-len(expected):] == expected and command[command.index("--config") + 1].endswith("reduced.json")
    saved = json.loads((tmp_path / "runs" / "vsepp_f30k" / "reduced.json").read_text())
    assert not {"resume_from_checkpoint", "overwrite_output_dir"} & set(saved)
    assert ("before the kill" in (tmp_path / "runs" / "vsepp_f30k" / "train.log").read_text()) is resume
