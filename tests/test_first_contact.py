"""Issue 43 (a newcomer's first contact): the Hub and the network, TrainingArguments names, the console, the number
of processes, what the command line and the card tell."""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

import httpx2
import huggingface_hub
import pytest
import torch
from conftest import write_imagefolder
from huggingface_hub import HfApi
from huggingface_hub.errors import RevisionResolutionError
from test_hub import REPO_ID, FakeHub, make_checkpoint
from transformers import DetrConfig, DetrImageProcessor, PreTrainedModel

from hfncl import cli
from hfncl.hub import push_checkpoint
from hfncl.hub.publish import HubUploadError


def _unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HfApi.resolve_revision`` as it answers without a network: the Hub could not be reached, nothing cached."""

    def resolve(self, repo_id, **kwargs):
        try:
            raise httpx2.ConnectError("[Errno -2] Name or service not known")
        except httpx2.ConnectError as error:
            raise RevisionResolutionError(f"Cannot resolve revision 'main' for model '{repo_id}'") from error

    monkeypatch.setattr(HfApi, "resolve_revision", resolve)


def _one_line_error(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hfncl: error: "), text
    return lines[0]


# --- 2: the Hub and the network -----------------------------------------------------------------


def test_an_unreachable_hub_detector_is_one_line_saying_how_to_pass_a_local_folder(tmp_path, monkeypatch, capsys):
    """``hfncl extract --detector PekingU/rtdetr_r50vd`` offline ended in a 106-line traceback."""
    _unreachable_hub(monkeypatch)
    raw = write_imagefolder(tmp_path / "raw", {"train": 2})
    detector = ["--feature", "regions", "--detector", "PekingU/rtdetr_r50vd"]
    assert cli.main(["extract", str(raw), str(tmp_path / "out"), *detector]) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert "'PekingU/rtdetr_r50vd': it is not a local directory" in line
    assert "`hf download PekingU/rtdetr_r50vd --local-dir DIR`) and pass --detector DIR" in line
    assert not (tmp_path / "out").exists()


def test_a_detector_with_a_timm_backbone_names_the_package_and_the_alternatives(tmp_path, capsys):
    """``facebook/detr-resnet-50`` needs timm, which nothing installs: one line, not an ImportError's lines."""
    if importlib.util.find_spec("timm") is not None:
        pytest.skip("timm is installed here")
    detector = tmp_path / "detr_timm"
    DetrConfig(use_timm_backbone=True, backbone="resnet50", num_queries=4).save_pretrained(detector)
    DetrImageProcessor().save_pretrained(detector)
    from safetensors.torch import save_file

    save_file({"unused": torch.zeros(1)}, detector / "model.safetensors")
    raw = write_imagefolder(tmp_path / "raw", {"train": 2})
    arguments = ["extract", str(raw), str(tmp_path / "out"), "--feature", "regions", "--detector", str(detector)]
    assert cli.main(arguments) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert "its backbone is a timm model, and timm is not installed (pip install timm" in line
    assert "RT-DETR (PekingU/rtdetr_r50vd) or facebook/detr-resnet-50 at --revision no_timm" in line


def test_a_name_that_is_neither_a_folder_here_nor_a_reachable_hub_id_is_said_so_without_downloading(
    tmp_path, monkeypatch, capsys
):
    """``hfncl evaluate out/nonexistent`` (no out/ folder either) asked the Hub 10 times over 79 s, then blamed the
    network in three lines."""
    _unreachable_hub(monkeypatch)

    def download(*args, **kwargs):
        raise AssertionError("from_pretrained asked the Hub for the files")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(download))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["evaluate", "out/nonexistent", "--data-dir", str(tmp_path)]) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert "'out/nonexistent' is not a local directory, and the Hub cannot be reached to download it" in line
    assert "Give the path of a saved checkpoint directory (none of that name exists here)" in line


def test_push_without_a_token_is_one_error_and_changes_nothing(tmp_path, monkeypatch):
    """``model.push_to_hub()`` without a token was a 76-line traceback."""
    make_checkpoint(tmp_path)
    card = (tmp_path / "README.md").read_bytes()
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(HubUploadError, match=r"^Nothing was uploaded to hfncl-test/tiny-ncr: no Hub token; check the"):
        push_checkpoint(tmp_path, REPO_ID)
    from hfncl.models import NCLModel

    with pytest.raises(HubUploadError) as raised:
        NCLModel.from_pretrained(tmp_path).push_to_hub(REPO_ID)
    assert "\n" not in str(raised.value) and raised.value.__cause__ is None and raised.value.__context__ is None
    assert (tmp_path / "README.md").read_bytes() == card


def test_a_failed_push_leaves_the_card_as_it_was_and_a_pushed_one_names_the_repository(
    tmp_path, monkeypatch, offline, capsys
):
    """A failed ``hfncl push`` rewrote best/README.md to point at a repository it never created."""
    make_checkpoint(tmp_path)
    card = (tmp_path / "README.md").read_bytes()
    monkeypatch.setenv("HF_TOKEN", "hf_a_token_with_no_network")
    capsys.readouterr()
    assert cli.main(["push", str(tmp_path), REPO_ID]) == 1  # HF_HUB_OFFLINE=1: the Hub cannot be reached
    line = _one_line_error(capsys.readouterr().err)
    assert f"Pushing to {REPO_ID} failed (" in line and "check the network, and log in" in line
    assert (tmp_path / "README.md").read_bytes() == card
    hub = FakeHub(tmp_path / "hub_cache", monkeypatch)
    assert cli.main(["push", str(tmp_path), REPO_ID]) == 0
    pushed = hub.commits[0]["files"]["README.md"]
    assert pushed != card and REPO_ID.encode() in pushed
    assert (tmp_path / "README.md").read_bytes() == pushed, "the local card is the published one"


# --- 5: TrainingArguments names -----------------------------------------------------------------


def _printed_training(arguments: list[str], capsys) -> dict:
    """The training settings ``hfncl train ... --print-config`` prints."""
    assert cli.main(["train", "--plugins", "vsepp", "--data-dir", "unused", *arguments, "--print-config"]) == 0
    return json.loads(capsys.readouterr().out)["training"]


def test_training_arguments_names_set_the_fields_from_flags_and_config_files(tmp_path, monkeypatch, capsys):
    flags = [
        "--per_device_train_batch_size", "32", "--per_device_eval_batch_size", "64", "--max_grad_norm", "1.5",
        "--dataloader_num_workers", "2", "--bf16",
    ]
    training = _printed_training(flags, capsys)
    assert (training["batch_size"], training["eval_batch_size"], training["grad_clip"]) == (32, 64, 1.5)
    assert (training["num_workers"], training["mixed_precision"]) == (2, "bf16")
    assert _printed_training(["--fp16", "true"], capsys)["mixed_precision"] == "fp16"
    assert _printed_training(["--bf16", "false"], capsys)["mixed_precision"] == "no"
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun / accelerate launch --multi_gpu start each process
    assert _printed_training(["--per_device_train_batch_size", "32"], capsys)["batch_size"] == 64, "global batch"
    monkeypatch.delenv("WORLD_SIZE")
    config = tmp_path / "run.yaml"
    config.write_text("per_device_train_batch_size: 16\nmax_grad_norm: 0.5\nfp16: true\ndataloader_num_workers: 1\n")
    training = _printed_training(["--config", str(config)], capsys)
    assert (training["batch_size"], training["grad_clip"], training["mixed_precision"]) == (16, 0.5, "fp16")
    assert training["num_workers"] == 1


@pytest.mark.parametrize(
    ("flags", "content", "message"),
    [
        (["--batch_size", "8", "--per_device_train_batch_size", "4"], None,
         "error: the command line gives batch_size twice, as batch_size and per_device_train_batch_size: give one"),
        (["--bf16", "--fp16"], None, "gives mixed_precision twice, as bf16 and fp16"),
        (["--epochs=2", "--num_train_epochs", "3"], None, "gives epochs twice, as epochs and num_train_epochs"),
        ([], "grad_clip: 1\nmax_grad_norm: 2\n", "run.yaml gives grad_clip twice, as grad_clip and max_grad_norm"),
        ([], "bf16: maybe\n", "run.yaml: bf16 must be true or false, got 'maybe'"),
        ([], "per_device_train_batch_size: '8x'\n", "per_device_train_batch_size must be an integer, got '8x'"),
        (["--bf16", "maybe"], None, "error: bf16 must be true or false, got 'maybe'"),
    ],
)
def test_one_field_under_two_names_or_a_bad_alias_value_is_one_line(tmp_path, capsys, flags, content, message):
    if content is not None:
        (tmp_path / "run.yaml").write_text(content)
        flags = [*flags, "--config", str(tmp_path / "run.yaml")]
    assert cli.main(["train", "--plugins", "vsepp", "--data-dir", "unused", *flags, "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err, err


def test_a_missing_config_file_is_one_line_naming_it(tmp_path, capsys):
    """A missing --config file gave the raw ``[Errno 2] No such file or directory``."""
    missing = tmp_path / "nowhere.yaml"
    assert cli.main(["train", "--plugins", "vsepp", "--config", str(missing), "--print-config"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --config {missing}: no such file"


# --- 7: two processes that are one --------------------------------------------------------------


def test_accelerate_running_fewer_processes_than_launched_is_a_warning(tmp_path, monkeypatch):
    """``ACCELERATE_USE_CPU=true accelerate launch --num_processes 2`` without ``--multi_gpu`` silently ran one
    process: its simple launcher sets MASTER_ADDR / MASTER_PORT for two, and no WORLD_SIZE."""
    from hfncl.engine.distributed import fewer_processes_warning, run_accelerator

    for name in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.warns(UserWarning, match=r"Accelerate runs 1 \(accelerate launch --num_processes N without --multi"):
        accelerator = run_accelerator("no", [], str(tmp_path))
    assert accelerator.num_processes == 1
    assert "WORLD_SIZE is 2 but Accelerate runs 1" in fewer_processes_warning(1, {"WORLD_SIZE": "2"})
    assert fewer_processes_warning(2, {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}) is None
    assert fewer_processes_warning(1, {}) is None


# --- 6: the end of a run ------------------------------------------------------------------------


def test_a_run_hides_checkpoint_bars_records_its_compute_and_the_readme_scores_its_similarities(
    micro_data_dir, tmp_path, capfd
):
    """transformers' ``Writing model shards`` (saving best/) and ``Loading weights`` (reloading it for the test)
    bars stayed on screen between the epoch lines."""
    from conftest import TINY_MODEL, tiny_config

    from hfncl.experiment import run_experiment
    from hfncl.hub import read_run_record
    from hfncl.tasks.pairs import DataArguments

    config = tiny_config(tmp_path, ["vsepp"], epochs=1, warmup_epochs=0, batch_size=8, progress=True)
    run_experiment(DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.2), config, TINY_MODEL)
    out, err = capfd.readouterr()
    assert "Writing model shards" not in err + out and "Loading weights" not in err + out
    line = next(line for line in out.splitlines() if line.startswith("epoch 1/1 | loss "))
    assert (tmp_path / "epochs.log").read_text().startswith("epoch 1/1 | loss triplet_hardest ") and len(line) <= 120
    compute = read_run_record(tmp_path / "best").compute
    assert compute["processes"] == 1 and compute["device"].startswith("cpu") and compute["seconds"] > 0
    assert "process(es) of cpu" in (tmp_path / "best" / "README.md").read_text()
    # docs/hub.md's example of the retrieval metric on a trained model's similarities prints hfncl evaluate's numbers
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    page = (root / "docs" / "hub.md").read_text()
    blocks = [block.split("```")[0] for block in page.split("```python\n")[1:]]
    example = next(block for block in blocks if "retriever.similarity(images, texts" in block)
    example = example.replace("runs/ncr_f30k_50/best", str(tmp_path / "best"))
    example = example.replace("/data/f30k_precomp", str(micro_data_dir))
    lines = example.strip().splitlines()
    namespace: dict = {}
    exec("\n".join([*lines[:-1], "metrics = " + lines[-1]]), namespace)
    capfd.readouterr()
    assert cli.main(["evaluate", str(tmp_path / "best"), "--data-dir", str(micro_data_dir), "--no-progress"]) == 0
    evaluated = json.loads(capfd.readouterr().out)["metrics"]
    assert namespace["metrics"] == pytest.approx(evaluated)
    # one vocabulary loader named everywhere: the README's and the card's
    card = (tmp_path / "best" / "README.md").read_text()
    assert "load_text_vocabulary(" in card and "load_text_vocabulary(" in readme and "load_vocabulary(" not in readme


# --- 8: discoverability and the card ------------------------------------------------------------


def test_plugins_lists_each_method_s_summary_data_kind_and_what_each_option_takes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HFNCL_CACHE", str(tmp_path))
    assert cli.main(["plugins", "--refresh"]) == 0
    text = capsys.readouterr().out
    ncr = text[text.index("\nncr  "):text.index("\nprototype_ce  ")]
    assert "\n    NCR: Noisy Correspondence Rectifier (Huang et al., NeurIPS 2021).\n    data: pairs    hooks: " in ncr
    assert "(default, what it takes):\n      alpha and m of Eq. 7" in ncr
    assert "\n        ncr.alpha = 0.2  (float >= 0)\n" in ncr
    assert "ncr.prediction = \"paper\"  (one of paper, hinge)" in ncr
    assert "\n    data: labels    hooks: " in text[text.index("\ndmcm  "):text.index("\ngsc  ")]
    assert cli.main(["plugins", "--json"]) == 0  # read back from the cache
    listed = {record["name"]: record for record in json.loads(capsys.readouterr().out)}
    assert listed["coteaching"]["option_help"]["coteaching.forget_rate"] == "float >= 0, < 1 or null"
    assert listed["dmcm"]["data_kind"] == "labels" and listed["vsepp"]["summary"].startswith("VSE++")


def test_train_help_names_the_installed_plugins_and_gives_examples_that_run(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["train", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert (
        "installed plugins: bicro, coteaching, crcl, decl, dmcm, gsc, gsc_intra, l2rm, ncr, npc, prototype_ce, rcl, "
        "tcvse, ugncl, vsepp"
    ) in text
    example = next(line for line in text.splitlines() if "--print-config" in line and line.startswith("  hfncl train"))
    arguments = shlex.split(example.replace("NAME.OPTION", "ncr.alpha").replace("NAME", "ncr"))[1:]
    assert cli.main(arguments) == 0
    settings = json.loads(capsys.readouterr().out)
    assert settings["options"]["ncr.alpha"] == 0.3 and settings["training"]["epochs"] == 10


def test_the_card_has_a_pipeline_tag_uses_and_compute_and_lists_only_the_fields_the_model_uses():
    from huggingface_hub import ModelCard
    from test_hub import TINY, WORDS, tiny_record

    from hfncl.hub import build_model_card
    from hfncl.models import NCLConfig

    def table_fields(card: str) -> set[str]:
        table = card[card.index("that this model uses:"):card.index("## Training data")]
        return {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}

    record = tiny_record(compute={"processes": 2, "device": "cpu (x86_64)", "mixed_precision": "bf16", "seconds": 7200})
    config = NCLConfig(**TINY, vocab_size=len(WORDS) + 4, plugins=["ncr"])
    card = ModelCard(str(build_model_card(config, record, "user/model")))
    assert card.data.pipeline_tag == "feature-extraction"
    assert "## Uses\n\nIntended:\n\n- Ranking one modality's items" in card.text
    assert "Out of scope:\n\n- Other domains" in card.text
    assert (
        "## Compute\n\n4 of 5 epoch(s) to the saved weights, 2 hour(s) of training on 2 process(es) of cpu (x86_64), "
        "mixed precision `bf16`." in card.text
    )
    cosine = table_fields(card.text)
    assert {"embed_dim", "word_dim", "similarity", "vocab_size"} <= cosine
    assert not cosine & {"head_options", "image_regions", "text_tower_name", "lora_alpha"}
    sgr = table_fields(str(build_model_card(NCLConfig(**TINY, similarity="sgr", plugins=["ncr"]), record, "user/m")))
    assert {"head_options", "image_regions"} <= sgr
    unrecorded = build_model_card(config, tiny_record(), "user/model").text
    assert "the device and time were not recorded" in unrecorded


@pytest.mark.parametrize(
    ("plugin", "statistic"),
    [
        ("ncr", "the peer network's per-pair loss L_w (Eq. 2)"),
        ("ugncl", "uncertainty u of the pair's opinion (Eq. 7)"),
        ("gsc", "correspondence label y = min(y_CM, y_IM) (Eq. 5)"),
        ("dmcm", "per-sample robust loss L_m (Eq. 3)"),
    ],
)
def test_every_method_s_division_plot_names_its_statistic_histograms_its_clean_probability_and_keeps_the_legend_out(
    plugin, statistic, micro_data_dir, tmp_path, monkeypatch
):
    """UGNCL's clean probability was a line through the sorted statistic (a comb of vertical lines, as it is no
    function of it); no plot named its statistic, and the legend covered the data."""
    from conftest import TINY_MODEL, tiny_config

    import hfncl.plots
    from hfncl.data.synthetic_labels import LabelledSyntheticConfig, generate_labelled
    from hfncl.experiment import run_experiment
    from hfncl.tasks.labels import CategoryModelArguments, LabelDataArguments
    from hfncl.tasks.pairs import DataArguments

    drawn = []
    save_png = hfncl.plots.save_png

    def keep(figure, path):
        drawn.append(figure)
        return save_png(figure, path)

    monkeypatch.setattr(hfncl.plots, "save_png", keep)
    if plugin == "dmcm":
        sizes = LabelledSyntheticConfig(train_per_class=8, valid_per_class=4, test_per_class=4, seed=2)
        data = LabelDataArguments(data_path=str(generate_labelled(tmp_path / "data", sizes)), noise_ratio=0.4)
        model = CategoryModelArguments(embed_dim=16, hidden_dim=32)
    else:
        data, model = DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.4), TINY_MODEL
    config = tiny_config(tmp_path / "run", [plugin], epochs=2, warmup_epochs=1, batch_size=8, plot_divisions=True)
    run_experiment(data, config, model)
    assert sorted(path.name for path in (tmp_path / "run" / "divisions").iterdir())[0].startswith("epoch-002-net-0")
    divisions = [figure for figure in drawn if "division of epoch" in figure.get_suptitle()]
    assert divisions, "no division plot"
    for figure in divisions:
        above, below = figure.axes
        assert above.get_xlabel() == f"{statistic}, min-max normalised"
        assert below.get_xlabel() == "clean probability the method assigned"
        assert not below.lines and len(below.patches) == 2 * 40, "the clean probability as two histograms"
        assert figure.legends and above.get_legend() is None and below.get_legend() is None
        legend, panels = figure.legends[0].get_window_extent(), [axes.get_window_extent() for axes in figure.axes]
        assert all(legend.x0 >= panel.x1 for panel in panels), "the legend right of both panels"
