"""Hub integration: round trips, cards with model-index, push at the HTTP boundary, load-time errors."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
from conftest import TINY_MODEL, tiny_config
from huggingface_hub import CommitInfo, HfApi, ModelCard, RepoUrl
from safetensors.torch import load as safetensors_load
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel, BertConfig, BertModel, BertTokenizer

from hfncl import cli
from hfncl.config import TrainConfig
from hfncl.data import TokenizerVocabulary, Vocabulary
from hfncl.experiment import DataArguments, run_experiment
from hfncl.hub import (
    RUN_RECORD,
    CheckpointError,
    DataDescription,
    RunRecord,
    add_test_results,
    build_model_card,
    card_name,
    checkpoint_files,
    load_vocabulary,
    push_checkpoint,
    read_run_record,
    save_text_vocabulary,
    save_trained_model,
)
from hfncl.hub.card import write_model_card
from hfncl.hub.card_tables import division_rows, eval_results, metric_label
from hfncl.models import CategoryConfig, CategoryModel, NCLConfig, NCLModel
from hfncl.models.provenance import CHECKPOINT_FORMAT, IncompatibleCheckpointError
from hfncl.plugins import MissingPluginError, load_plugin, plugin_citations
from hfncl.tasks.pair_data import dataset_name_of

WORDS = ["a", "dog", "runs", "on", "the", "grass", "cat", "sits"]
REPO = Path(__file__).resolve().parents[1]
TINY = dict(image_dim=8, embed_dim=16, word_dim=6)
B, R, L = 4, 3, 6
REPO_ID = "hfncl-test/tiny-ncr"
DATA = DataDescription(
    dataset="tiny_precomp",
    train_split="train",
    val_split="dev",
    test_split="test",
    train_pairs=800,
    train_images=160,
    captions_per_image=5,
    test_images=40,
    noise_kind="caption",
    noise_ratio=0.4,
    noise_seed=7,
    noise_file=None,
    true_noise_ratio=0.375,
    test_folds=2,
)
VALIDATION = {
    "i2t_r1": 20.0,
    "i2t_r5": 45.0,
    "i2t_r10": 60.0,
    "t2i_r1": 15.0,
    "t2i_r5": 40.0,
    "t2i_r10": 55.0,
    "rsum": 235.0,
    "i2t_medr": 6.0,
    "i2t_meanr": 9.5,
    "t2i_medr": 8.0,
    "t2i_meanr": 11.25,
}
TEST = {**{k: v + 1.0 for k, v in VALIDATION.items()}, "i2t_r1": 21.456, "fold_i2t_r1": 30.0, "fold_rsum": 250.0}
DIVISION = {
    "division/net0/auc": 0.91,
    "division/net0/precision": 0.8,
    "division/net0/recall": 0.7,
    "division/net1/auc": 0.875,
    "division/net1/precision": 0.75,
    "division/net1/recall": math.nan,
}


def tiny_record(**overrides) -> RunRecord:
    values = dict(
        training=TrainConfig(plugins=["ncr"], epochs=5, warmup_epochs=1, seed=3).to_dict(),
        best_epoch=4,
        validation=dict(VALIDATION),
        division=dict(DIVISION),
    )
    values.update(overrides)
    return RunRecord(**values)


def tiny_model(seed: int = 0, **overrides) -> NCLModel:
    values = dict(TINY, vocab_size=len(Vocabulary(WORDS)), num_networks=2, plugins=["ncr"])
    values.update(overrides)
    torch.manual_seed(seed)
    return NCLModel(NCLConfig(**values)).eval()


def make_checkpoint(directory: Path, model: NCLModel | None = None, with_test: bool = True) -> NCLModel:
    """A checkpoint as a full run leaves it: saved by the trainer's path, vocabulary, test results."""
    model = model or tiny_model()
    save_trained_model(model, directory, tiny_record())
    Vocabulary(WORDS).save_json(directory / "vocab.json")
    if with_test:
        add_test_results(directory, DATA, TEST)
    return model


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    images = torch.randn(B, R, TINY["image_dim"], generator=generator)
    lengths = torch.tensor([6, 2, 4, 1])
    captions = torch.randint(4, 4 + len(WORDS), (B, L), generator=generator)
    captions[torch.arange(L)[None, :] >= lengths[:, None]] = 0
    return images, captions, lengths


def assert_same_similarities(loaded: NCLModel, original: NCLModel, batch) -> None:
    """Bit-identical weights of every network; similarities equal up to float rounding.

    Loaded parameters live in one buffer read from model.safetensors and are not 64-byte
    aligned, so vectorised GRU kernels may round the last bit differently.
    """
    state, loaded_state = original.state_dict(), loaded.state_dict()
    assert state.keys() == loaded_state.keys()
    assert all(torch.equal(state[k], loaded_state[k]) for k in state)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(*batch), original(*batch), rtol=1e-6, atol=1e-6)


class FakeHub:
    """``HfApi.create_repo`` / ``create_commit`` replaced at the HTTP boundary.

    Commits are recorded, and their files laid out as a Hub cache snapshot under
    ``cache`` so that ``from_pretrained(repo_id, cache_dir=cache)`` reads them offline.
    """

    def __init__(self, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cache = cache
        self.repos: list[dict] = []
        self.commits: list[dict] = []
        monkeypatch.setattr(HfApi, "create_repo", self._create_repo)
        monkeypatch.setattr(HfApi, "create_commit", self._create_commit)
        monkeypatch.setenv("HF_TOKEN", "hf_fake_token_for_the_fake_hub")  # hfncl push asks for a token first

    def _create_repo(self, repo_id: str, **kwargs) -> RepoUrl:
        self.repos.append({"repo_id": repo_id, **kwargs})
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def _create_commit(self, repo_id: str, operations, *, commit_message: str, **kwargs) -> CommitInfo:
        files = {op.path_in_repo: Path(op.path_or_fileobj).read_bytes() for op in operations}
        oid = f"{len(self.commits) + 1:040x}"
        self.commits.append({"repo_id": repo_id, "files": files, "message": commit_message, **kwargs})
        repo_dir = self.cache / f"models--{repo_id.replace('/', '--')}"
        snapshot = repo_dir / "snapshots" / oid
        snapshot.mkdir(parents=True)
        for name, content in files.items():
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            (snapshot / name).write_bytes(content)
        (repo_dir / "refs").mkdir(exist_ok=True)
        (repo_dir / "refs" / "main").write_text(oid)
        return CommitInfo(
            commit_url=f"https://huggingface.co/{repo_id}/commit/{oid}",
            commit_message=commit_message,
            commit_description="",
            oid=oid,
        )


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: None) -> FakeHub:
    return FakeHub(tmp_path / "hub_cache", monkeypatch)


# --- round trips ----------------------------------------------------------------------------------


def test_round_trip_from_directory_offline_and_through_auto_model(tmp_path, batch, offline):
    model = make_checkpoint(tmp_path)
    assert {"config.json", "model.safetensors", "vocab.json", RUN_RECORD, "README.md"} <= {
        p.name for p in tmp_path.iterdir()
    }
    loaded = NCLModel.from_pretrained(tmp_path)
    assert len(loaded.networks) == 2
    assert_same_similarities(loaded, model, batch)
    auto = AutoModel.from_pretrained(str(tmp_path))  # no trust_remote_code
    assert type(auto) is NCLModel
    assert_same_similarities(auto, model, batch)
    assert load_vocabulary(tmp_path) == Vocabulary(WORDS)


def test_saving_records_the_plugin_packages_and_the_hfncl_version(tmp_path):
    make_checkpoint(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["plugin_distributions"] == {"ncr": "hfncl"}
    assert saved["plugin_versions"] == {"ncr": version("hfncl")}
    assert (saved["hfncl_version"], saved["checkpoint_format"]) == (version("hfncl"), CHECKPOINT_FORMAT)
    summary = read_run_record(tmp_path).plugin_summaries["ncr"]
    assert summary and "\n" not in summary


def test_config_keeps_its_writer_version_and_is_restamped_when_saved(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "hfncl_version": "0.0.1"}))
    config = NCLConfig.from_pretrained(tmp_path)
    assert config.hfncl_version == "0.0.1"
    config.save_pretrained(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["hfncl_version"] == version("hfncl")


def test_push_sends_every_checkpoint_file_and_loads_back_from_the_hub_id(tmp_path, batch, hub):
    checkpoint = tmp_path / "run" / "best"
    model = make_checkpoint(checkpoint)
    (checkpoint / "notes.txt").write_text("not part of the model")

    commit = push_checkpoint(checkpoint, REPO_ID, private=True)

    assert hub.repos == [{"repo_id": REPO_ID, "private": True, "exist_ok": True}]
    [sent] = hub.commits
    assert sent["repo_id"] == REPO_ID and sent["message"] == "Upload tiny-ncr with hfncl"
    expected = {"config.json", "model.safetensors", "vocab.json", RUN_RECORD, "README.md"}
    assert set(sent["files"]) == expected
    for name in expected:
        assert sent["files"][name] == (checkpoint / name).read_bytes(), name
    assert commit.commit_url.startswith(f"https://huggingface.co/{REPO_ID}/commit/")
    card = ModelCard((checkpoint / "README.md").read_text())
    assert card.data.eval_results[0].metric_value == round(TEST["i2t_r1"], 2)
    assert card.data.model_name == REPO_ID and f'from_pretrained("{REPO_ID}")' in card.text

    loaded = NCLModel.from_pretrained(REPO_ID, cache_dir=hub.cache)
    assert_same_similarities(loaded, model, batch)
    assert_same_similarities(AutoModel.from_pretrained(REPO_ID, cache_dir=hub.cache), model, batch)
    assert load_vocabulary(REPO_ID, cache_dir=hub.cache) == Vocabulary(WORDS)


def test_push_with_keep_card_uploads_the_card_unchanged(tmp_path, hub):
    make_checkpoint(tmp_path)
    (tmp_path / "README.md").write_text("---\nlicense: mit\n---\n# edited by hand\n")
    push_checkpoint(tmp_path, REPO_ID, keep_card=True, commit_message="hand-written card")
    [sent] = hub.commits
    assert sent["files"]["README.md"] == b"---\nlicense: mit\n---\n# edited by hand\n"
    assert sent["message"] == "hand-written card"


def drop_tensor(directory: Path) -> None:
    weights = load_file(directory / "model.safetensors")
    del weights["networks.1.image_encoder.fc.weight"]
    save_file(weights, directory / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "vocab.json").unlink(), r"vocab\.json does not exist"),
        (
            lambda d: Vocabulary(WORDS[:-1]).save_json(d / "vocab.json"),
            r"has 11 words but config\.json says vocab_size 12",
        ),
        (lambda d: (d / "model.safetensors").unlink(), r"has no model\.safetensors"),
        (drop_tensor, r"do not fit its config\.json: tensor networks\.1\.image_encoder\.fc\.weight is missing$"),
        (lambda d: (d / RUN_RECORD).unlink(), r"hfncl_run\.json does not exist"),
    ],
)
def test_push_checks_the_checkpoint_before_sending_anything(tmp_path, hub, damage, message):
    make_checkpoint(tmp_path)
    damage(tmp_path)
    with pytest.raises(CheckpointError, match=message):
        push_checkpoint(tmp_path, REPO_ID)
    assert hub.repos == [] and hub.commits == []


# --- model.push_to_hub ---------------------------------------------------------------------------

CHECKPOINT_FILES = {"config.json", "model.safetensors", "vocab.json", RUN_RECORD, "README.md"}


def test_push_to_hub_of_a_loaded_checkpoint_sends_what_hfncl_push_sends(tmp_path, hub):
    checkpoint = tmp_path / "run" / "best"
    make_checkpoint(checkpoint)
    (checkpoint / "notes.txt").write_text("not part of the model")
    loaded = NCLModel.from_pretrained(checkpoint)
    assert loaded.checkpoint_source.name_or_path == str(checkpoint.resolve())

    commit = loaded.push_to_hub(REPO_ID, private=True, commit_message="from the model")
    push_checkpoint(checkpoint, REPO_ID, private=True, commit_message="from the directory")

    by_model, by_cli = hub.commits
    assert hub.repos == 2 * [{"repo_id": REPO_ID, "private": True, "exist_ok": True}]
    assert set(by_model["files"]) == set(by_cli["files"]) == CHECKPOINT_FILES
    assert by_model["files"] == by_cli["files"]  # same bytes, the card naming the repo id included
    assert (by_model["message"], by_model["repo_id"]) == ("from the model", REPO_ID)
    assert commit.commit_url == f"https://huggingface.co/{REPO_ID}/commit/{1:040x}"


def test_push_to_hub_sends_the_weights_as_they_are_now(tmp_path, hub):
    make_checkpoint(tmp_path)
    loaded = NCLModel.from_pretrained(tmp_path)
    name = "networks.1.image_encoder.fc.weight"
    with torch.no_grad():
        loaded.get_parameter(name).mul_(-2.0)

    loaded.push_to_hub(REPO_ID)

    [sent] = hub.commits
    weights = safetensors_load(sent["files"]["model.safetensors"])
    state = loaded.state_dict()
    assert weights.keys() == state.keys() and all(torch.equal(weights[k], state[k]) for k in state)
    assert not torch.equal(weights[name], load_file(tmp_path / "model.safetensors")[name])
    for companion in ("vocab.json", RUN_RECORD):
        assert sent["files"][companion] == (tmp_path / companion).read_bytes()


def test_push_to_hub_takes_the_companion_files_from_the_subfolder_it_was_loaded_from(tmp_path, hub):
    make_checkpoint(tmp_path / "best")
    (tmp_path / "vocab.json").write_text("{}")  # the parent directory's files are not the model's
    NCLModel.from_pretrained(tmp_path, subfolder="best").push_to_hub(REPO_ID)
    [sent] = hub.commits
    assert set(sent["files"]) == CHECKPOINT_FILES
    for name in CHECKPOINT_FILES - {"README.md"}:  # the card is regenerated, naming the repository
        assert sent["files"][name] == (tmp_path / "best" / name).read_bytes(), name


def test_push_to_hub_of_a_model_built_in_memory_and_again_from_its_hub_id(tmp_path, hub, batch):
    model = tiny_model()
    model.push_to_hub(REPO_ID, vocabulary=Vocabulary(WORDS), record=tiny_record(), license="mit")

    [first] = hub.commits
    assert set(first["files"]) == CHECKPOINT_FILES and first["message"] == "Upload tiny-ncr with hfncl"
    Vocabulary(WORDS).save_json(tmp_path / "vocab.json")
    assert first["files"]["vocab.json"] == (tmp_path / "vocab.json").read_bytes()
    config = json.loads(first["files"]["config.json"])
    assert config["plugin_distributions"] == {"ncr": "hfncl"} and config["plugin_versions"] == {"ncr": version("hfncl")}
    record = RunRecord.from_dict(json.loads(first["files"][RUN_RECORD]), RUN_RECORD)
    assert record.best_epoch == 4 and record.plugin_summaries["ncr"]
    card = ModelCard(first["files"]["README.md"].decode())
    assert card.data.model_name == REPO_ID and card.data.license == "mit"

    loaded = NCLModel.from_pretrained(REPO_ID, cache_dir=hub.cache)
    assert_same_similarities(loaded, model, batch)
    assert loaded.checkpoint_source.revision == f"{1:040x}"  # the commit the weights came from
    # a newer commit to the repository does not change what the loaded model publishes
    tiny_model(seed=1).push_to_hub(REPO_ID, vocabulary=Vocabulary(WORDS), record=tiny_record(best_epoch=9))
    loaded.push_to_hub("hfncl-test/copy")

    copy = hub.commits[-1]
    assert copy["repo_id"] == "hfncl-test/copy" and set(copy["files"]) == CHECKPOINT_FILES
    for name in ("config.json", "model.safetensors", "vocab.json", RUN_RECORD):
        assert copy["files"][name] == first["files"][name], name
    assert ModelCard(copy["files"]["README.md"].decode()).data.model_name == "hfncl-test/copy"


def in_memory(directory: Path) -> tuple[NCLModel, dict]:
    return tiny_model(), {}


def in_memory_with_record(directory: Path) -> tuple[NCLModel, dict]:
    return tiny_model(), {"record": tiny_record()}


def loaded_then_vocabulary_deleted(directory: Path) -> tuple[NCLModel, dict]:
    make_checkpoint(directory)
    model = NCLModel.from_pretrained(directory)
    (directory / "vocab.json").unlink()
    return model, {}


VOCABULARY_MISSING = r"  - the text vocabulary \(vocab\.json\): pass vocabulary=<the hfncl\.data\.Vocabulary"
RECORD_MISSING = r"  - the run record \(hfncl_run\.json\) the model card is generated from: pass record=<"


@pytest.mark.parametrize(
    ("build", "missing", "where"),
    [
        (in_memory, [VOCABULARY_MISSING, RECORD_MISSING], "The model was built in memory, not loaded"),
        (in_memory_with_record, [VOCABULARY_MISSING], "The model was built in memory, not loaded"),
        (loaded_then_vocabulary_deleted, [VOCABULARY_MISSING], ", where the model was loaded from, does not have"),
    ],
)
def test_push_to_hub_without_a_companion_file_says_how_to_supply_it_and_sends_nothing(
    tmp_path, hub, build, missing, where
):
    model, kwargs = build(tmp_path)
    with pytest.raises(CheckpointError) as raised:
        model.push_to_hub(REPO_ID, **kwargs)
    message = str(raised.value)
    assert message.startswith(f"Nothing was uploaded: NCLModel.push_to_hub('{REPO_ID}') publishes a complete")
    listed = [line for line in message.splitlines() if line.startswith("  - ")]
    assert len(listed) == len(missing) and all(
        re.match(pattern, line) for pattern, line in zip(missing, listed, strict=True)
    )
    assert where in message and f"`hfncl push CHECKPOINT {REPO_ID}`" in message
    assert hub.repos == [] and hub.commits == []


def tiny_category_model() -> CategoryModel:
    torch.manual_seed(0)
    config = CategoryConfig(image_dim=6, text_dim=5, num_classes=3, embed_dim=4, hidden_dim=8, plugins=["prototype_ce"])
    return CategoryModel(config).eval()


@pytest.mark.parametrize(
    ("build", "kwargs", "error", "message"),
    [
        (
            tiny_model,
            {"vocabulary": Vocabulary(WORDS[:-1]), "record": tiny_record()},
            CheckpointError,
            r"vocabulary= has 11 words but the model's config\.vocab_size is 12",
        ),
        (
            tiny_model,
            {"revision": "dev", "create_pr": True},
            TypeError,
            r"unsupported argument\(s\) \['create_pr', 'revision'\]: .* takes only vocabulary, record, "
            r"image_processor, commit_message",
        ),
        (
            tiny_category_model,
            {"vocabulary": Vocabulary(WORDS), "record": tiny_record()},
            CheckpointError,
            "CategoryModel is a category-label model .* it has no text vocabulary",
        ),
    ],
)
def test_push_to_hub_refuses_wrong_arguments_before_sending_anything(hub, build, kwargs, error, message):
    with pytest.raises(error, match=message):
        build().push_to_hub(REPO_ID, **kwargs)
    assert hub.repos == [] and hub.commits == []


def test_category_model_pushes_without_a_vocabulary(hub):
    record = tiny_record(training=TrainConfig(plugins=["prototype_ce"]).to_dict(), validation={"mean_map": 0.5})
    model = tiny_category_model()
    model.push_to_hub(REPO_ID, record=record)
    loaded = AutoModel.from_pretrained(REPO_ID, cache_dir=hub.cache)
    loaded.push_to_hub("hfncl-test/copy")

    first, copy = hub.commits
    expected = {"config.json", "model.safetensors", RUN_RECORD, "README.md"}
    assert set(first["files"]) == set(copy["files"]) == expected
    assert copy["files"][RUN_RECORD] == first["files"][RUN_RECORD]
    assert copy["files"]["model.safetensors"] == first["files"]["model.safetensors"]
    assert "noisy category labels" in ModelCard(first["files"]["README.md"].decode()).text


def test_push_to_hub_sends_the_tokenizer_of_a_transformer_text_tower(tmp_path, hub):
    bert = tmp_path / "bert"
    vocab = {word: i for i, word in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tiny_bert = BertConfig(
        vocab_size=len(vocab), hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8
    )
    BertModel(tiny_bert).save_pretrained(bert)
    BertTokenizer(vocab=vocab).save_pretrained(bert)
    config = NCLConfig(image_dim=8, embed_dim=8, text_tower="transformer", text_tower_name=str(bert), plugins=["ncr"])
    tokenizer = TokenizerVocabulary.from_pretrained(bert)
    model = NCLModel(config).eval()
    with pytest.raises(CheckpointError, match="vocabulary= must be a TokenizerVocabulary for a transformer text tower"):
        model.push_to_hub(REPO_ID, vocabulary=Vocabulary(WORDS), record=tiny_record())
    checkpoint = tmp_path / "checkpoint"
    save_trained_model(model, checkpoint, tiny_record())
    save_text_vocabulary(tokenizer, checkpoint)

    NCLModel.from_pretrained(checkpoint).push_to_hub(REPO_ID)
    model.push_to_hub("hfncl-test/copy", vocabulary=tokenizer, record=tiny_record())

    from_directory, from_memory = hub.commits
    tokenizer_files = {p.relative_to(checkpoint).as_posix() for p in (checkpoint / "tokenizer").rglob("*")}
    assert tokenizer_files and set(from_directory["files"]) == set(from_memory["files"]) == {
        "config.json",
        "model.safetensors",
        RUN_RECORD,
        "README.md",
        *tokenizer_files,
    }
    for name in tokenizer_files:
        assert from_directory["files"][name] == from_memory["files"][name] == (checkpoint / name).read_bytes()


# --- the card -------------------------------------------------------------------------------------


def test_card_parses_and_carries_the_test_results_as_model_index(tmp_path):
    make_checkpoint(tmp_path)
    card = ModelCard.load(tmp_path / "README.md")
    results = card.data.eval_results
    whole = {k: v for k, v in TEST.items() if not k.startswith("fold_")}
    assert [r.metric_type for r in results] == list(whole) + ["fold_i2t_r1", "fold_rsum"]
    assert [r.metric_value for r in results] == [round(v, 2) for v in whole.values()] + [30.0, 250.0]
    first = results[0]
    assert (first.task_type, first.dataset_type, first.dataset_split) == (
        "image-text-retrieval",
        "tiny_precomp",
        "test",
    )
    assert first.metric_name == "Image-to-text R@1"
    assert results[-1].metric_name == "rSum (2-fold mean)"
    assert card.data.library_name == "hfncl" and "ncr" in card.data.tags
    # the model-index round-trips through the YAML header
    assert ModelCard(str(card)).data.eval_results == results


def test_card_body_reports_plugins_architecture_data_noise_training_and_division(tmp_path):
    make_checkpoint(tmp_path)
    text = ModelCard.load(tmp_path / "README.md").text
    assert f"| `ncr` | `hfncl` | {version('hfncl')} |" in text
    assert "| `ncr.alpha` |" not in text  # options come from the config; this tiny model has none
    assert "| `num_networks` | `2` |" in text and "| `image_dim` | `8` |" in text
    assert "`tiny_precomp`: trained on the `train` split" in text and "tested on `test` (40 images)" in text
    assert "caption-level (a share of the captions re-paired with other images), ratio 40%, seed 7; " in text
    assert "37.5% of the 800 training pairs are wrong" in text
    assert "| `seed` | `3` |" in text and "| `warmup_epochs` | `1` |" in text and "`output_dir`" not in text
    assert "weights of epoch 4, the best on the validation split by rSum" in text
    assert "noisy image-caption pairs" in text and 'load_text_vocabulary("' in text
    assert "| test: `test` (40 images) | 21.46 | 46.00 |" in text
    assert "| test: `test`, mean of 2 folds of 20 images | 30.00 | – |" in text
    assert "| validation: `dev`, epoch 4 | 20.00 | 45.00 |" in text
    assert "| net0 | 0.910 | 0.800 | 0.700 |" in text
    assert "| net1 | 0.875 | 0.750 | – |" in text
    assert "pip install 'hfncl==" in text


def test_card_shows_the_plugin_options_of_the_config():
    config = NCLConfig(**TINY, plugins=["ncr"], plugin_options={"ncr.alpha": 0.2, "ncr.threshold": 0.5})
    text = build_model_card(config, tiny_record(), "some/model").text
    assert "| `ncr.alpha` | `0.2` |" in text and "| `ncr.threshold` | `0.5` |" in text


def test_card_before_test_results_has_no_model_index_and_says_so(tmp_path):
    make_checkpoint(tmp_path, with_test=False)
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.eval_results is None
    assert "Not recorded: this checkpoint was saved by the trainer alone." in card.text
    assert "| validation: validation, epoch 4 | 20.00 |" in card.text


def test_card_of_a_clean_run_and_of_a_noise_file():
    clean = DataDescription(**{**DATA.__dict__, "noise_ratio": 0.0, "true_noise_ratio": 0.0})
    text = build_model_card(NCLConfig(**TINY), tiny_record(data=clean, test=TEST), "m").text
    assert "none, the dataset's own pairs; 0.0% of the 800 training pairs are wrong." in text
    published = DataDescription(
        **{**DATA.__dict__, "noise_kind": None, "noise_ratio": None, "noise_seed": None, "noise_file": "noise.npy"}
    )
    text = build_model_card(NCLConfig(**TINY), tiny_record(data=published, test=TEST), "m").text
    assert "pairing read from the noise index `noise.npy`; 37.5%" in text


def test_card_of_an_ncr_checkpoint_cites_ncr_in_bibtex(tmp_path):
    make_checkpoint(tmp_path)
    bibtex = (REPO / "plugins" / "bibtex" / "ncr.bib").read_text().strip()
    assert read_run_record(tmp_path).plugin_citations == {"ncr": bibtex}
    text = ModelCard.load(tmp_path / "README.md").text
    section = "## Citation\n\nThe paper(s) of the method, as the plugins that trained this model cite them:\n\n"
    assert f"{section}```bibtex\n{bibtex}\n```" in text and "hfncl has no paper of its own" in text
    assert "Learning with Noisy Correspondence for Cross-modal Matching" in text


def test_a_plugin_without_the_citation_hook_cites_nothing():
    loaded = {name: load_plugin(name) for name in ("prototype_ce", "gsc", "gsc_intra")}
    assert plugin_citations(loaded).keys() == {"gsc", "gsc_intra"}
    text = build_model_card(NCLConfig(**TINY, plugins=["prototype_ce"]), tiny_record(), "m").text
    assert "None of the plugins that trained this model names a paper." in text and "```bibtex" not in text
    cited_twice = tiny_record(plugin_citations={"gsc": "@misc{gsc}", "gsc_intra": "@misc{gsc}"})
    text = build_model_card(NCLConfig(**TINY, plugins=["gsc", "gsc_intra"]), cited_twice, "m").text
    assert text.count("@misc{gsc}") == 1


def test_a_run_record_from_before_citations_loads_and_gives_a_card(tmp_path):
    make_checkpoint(tmp_path)
    payload = json.loads((tmp_path / RUN_RECORD).read_text())
    del payload["plugin_citations"]
    (tmp_path / RUN_RECORD).write_text(json.dumps(payload))
    assert read_run_record(tmp_path).plugin_citations == {}
    write_model_card(tmp_path)
    assert "None of the plugins that trained this model names a paper." in (tmp_path / "README.md").read_text()


def test_card_without_division_says_so():
    text = build_model_card(NCLConfig(**TINY), tiny_record(division={}), "m").text
    assert "None: the saved epoch trained without a division" in text


def test_undefined_metrics_stay_out_of_the_model_index():
    results = eval_results(tiny_record(data=DATA, test={"i2t_r1": math.nan, "rsum": 12.345}))
    assert [(r.metric_type, r.metric_value) for r in results] == [("rsum", 12.35)]


def test_metric_labels():
    assert [metric_label(k) for k in ("i2t_r1", "t2i_r10", "rsum", "i2t_medr", "t2i_meanr", "map")] == [
        "i2t R@1",
        "t2i R@10",
        "rSum",
        "i2t medr",
        "t2i meanr",
        "map",
    ]
    assert metric_label("t2i_r5", long=True) == "Text-to-image R@5"
    assert metric_label("i2t_meanr", long=True) == "Image-to-text mean rank"


def test_division_keys_are_grouped_by_network():
    assert division_rows({"division/auc": 0.5, "division/recall": 0.25}) == [("all", {"auc": 0.5, "recall": 0.25})]
    assert [net for net, _ in division_rows(DIVISION)] == ["net0", "net1"]
    with pytest.raises(CheckpointError, match="'loss/auc' is not division"):
        division_rows({"loss/auc": 0.5})


def test_card_name_is_the_run_name_for_a_best_directory(tmp_path):
    assert card_name(tmp_path / "ncr_f30k_50" / "best") == "ncr_f30k_50"
    assert card_name(tmp_path / "exported") == "exported"
    assert card_name("user/model-name") == "model-name"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([], "expected a JSON object"),
        ({"training": {}, "best_epoch": 1}, r"missing field\(s\) \['validation'\]"),
        ({"training": {}, "best_epoch": 1, "validation": {}, "extra": 1}, r"unknown field\(s\) \['extra'\]"),
        ({"training": {}, "best_epoch": "1", "validation": {}}, "'best_epoch' must be an integer"),
        ({"training": {}, "best_epoch": 1, "validation": {"rsum": "high"}}, "'validation' must be an object of metric"),
        ({"training": {}, "best_epoch": 1, "validation": {}, "data": {"dataset": "x"}}, "'data' must have the fields"),
        ({"training": {}, "best_epoch": 1, "validation": {}, "plugin_citations": ["x"]}, "'plugin_citations' must"),
    ],
)
def test_malformed_run_record_is_named(tmp_path, payload, message):
    (tmp_path / RUN_RECORD).write_text(json.dumps(payload))
    with pytest.raises(CheckpointError, match=rf"{RUN_RECORD}: .*{message}|{message}"):
        read_run_record(tmp_path)


# --- load-time errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda data: data[: len(data) // 2],  # truncated download
        lambda data: b"\xff" * 8 + data[8:],  # header length overwritten
        lambda data: b"",  # empty file
    ],
)
def test_corrupted_or_truncated_weights_give_a_clear_error(tmp_path, corrupt):
    make_checkpoint(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(corrupt(weights.read_bytes()))
    for load in (NCLModel.from_pretrained, AutoModel.from_pretrained):
        with pytest.raises(OSError, match=rf"The weights of '{re.escape(str(tmp_path))}' cannot be read: .*corrupted"):
            load(str(tmp_path))
    with pytest.raises(CheckpointError, match=r"model\.safetensors is corrupted or truncated"):
        checkpoint_files(tmp_path)


def test_config_of_a_newer_checkpoint_format_is_refused(tmp_path, capsys):
    make_checkpoint(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    newer = {**config, "checkpoint_format": CHECKPOINT_FORMAT + 1, "hfncl_version": "9.0.0", "similarity": "future"}
    (tmp_path / "config.json").write_text(json.dumps(newer))
    message = (
        rf"checkpoint_format {CHECKPOINT_FORMAT + 1} \(written by hfncl 9\.0\.0\).*"
        rf"reads checkpoint formats up to {CHECKPOINT_FORMAT}\. Upgrade hfncl"
    )
    with pytest.raises(IncompatibleCheckpointError, match=rf"^{re.escape(str(tmp_path))}: config\.json has {message}"):
        NCLModel.from_pretrained(tmp_path)
    for load in (AutoModel.from_pretrained, AutoConfig.from_pretrained):
        with pytest.raises(IncompatibleCheckpointError, match=message):
            load(str(tmp_path))
    assert cli.main(["card", str(tmp_path)]) == 1
    assert f"{tmp_path}: config.json has checkpoint_format" in capsys.readouterr().err


@pytest.mark.parametrize("value", [0, "1", True])
def test_invalid_checkpoint_format_is_named(value):
    with pytest.raises(ValueError, match="NCLConfig.checkpoint_format must be a positive integer"):
        NCLConfig(checkpoint_format=value)


def test_missing_plugin_names_the_package_to_install(tmp_path):
    make_checkpoint(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(
        plugins=["ncr", "absent_method", "unrecorded_method"],
        plugin_distributions={"ncr": "hfncl", "absent_method": "hfncl-absent-method"},
        plugin_versions={"ncr": version("hfncl"), "absent_method": "1.2.3"},
    )
    (tmp_path / "config.json").write_text(json.dumps(config))
    for load in (NCLModel.from_pretrained, AutoModel.from_pretrained):
        with pytest.raises(MissingPluginError) as raised:
            load(str(tmp_path))
        message = str(raised.value)
        assert message.startswith(f"{tmp_path} was trained with plugin(s) that are not installed here")
        package = "plugin 'absent_method' comes from the package 'hfncl-absent-method'"
        assert f"{package}: pip install 'hfncl-absent-method==1.2.3'" in message
        assert (
            "plugin 'unrecorded_method': install the package that registers it in the 'hfncl' entry-point group"
            in message
        )
        assert "'ncr'" not in message


def test_hub_id_offline_fails_with_a_clear_message(offline, tmp_path):
    repo = "hfncl-test/made-up-model-that-does-not-exist"
    with pytest.raises(OSError, match=rf"'{repo}' is not a local directory, and HF_HUB_OFFLINE=1 forbids downloading"):
        NCLModel.from_pretrained(repo, cache_dir=tmp_path)
    with pytest.raises(OSError, match=rf"Cannot fetch vocab\.json of '{repo}': it is not a local directory"):
        load_vocabulary(repo, cache_dir=tmp_path)


def test_local_directory_without_vocabulary_is_named(tmp_path):
    with pytest.raises(CheckpointError, match=r"vocab\.json does not exist"):
        load_vocabulary(tmp_path)


# --- command line ---------------------------------------------------------------------------------


def test_cli_card_regenerates_into_the_checkpoint_and_model_cards(tmp_path, capsys):
    checkpoint = tmp_path / "my_run" / "best"
    make_checkpoint(checkpoint)
    (checkpoint / "README.md").unlink()
    cards = tmp_path / "model_cards"
    assert cli.main(["card", str(checkpoint), "--model-cards-dir", str(cards), "--license", "apache-2.0"]) == 0
    assert capsys.readouterr().out.split() == [str(checkpoint / "README.md"), str(cards / "my_run.md")]
    card = ModelCard.load(cards / "my_run.md")
    assert card.data.license == "apache-2.0" and card.data.eval_results
    assert (checkpoint / "README.md").read_text() == (cards / "my_run.md").read_text()


def test_cli_card_without_a_run_record_fails_clearly(tmp_path, capsys):
    tiny_model().save_pretrained(tmp_path)
    assert cli.main(["card", str(tmp_path)]) == 1
    assert "hfncl_run.json does not exist: a model card is generated from the results" in capsys.readouterr().err


def test_cli_push(tmp_path, hub, capsys):
    make_checkpoint(tmp_path)
    assert cli.main(["push", str(tmp_path), REPO_ID, "--private"]) == 0
    assert capsys.readouterr().out.strip() == f"https://huggingface.co/{REPO_ID}/commit/{1:040x}"
    assert hub.repos[0]["private"] is True and len(hub.commits) == 1
    (tmp_path / "vocab.json").unlink()
    assert cli.main(["push", str(tmp_path), REPO_ID]) == 1
    assert "vocab.json does not exist" in capsys.readouterr().err and len(hub.commits) == 1


# --- from a real run ------------------------------------------------------------------------------


@pytest.mark.slow
def test_run_writes_a_card_from_its_own_results(tiny_data_dir, tmp_path):
    output = tmp_path / "tiny_ncr"
    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4, noise_seed=2, test_folds=2),
        tiny_config(output, ["ncr"], epochs=3, warmup_epochs=0),  # every epoch divides, so the best one did
        TINY_MODEL,
        model_cards_dir=tmp_path / "model_cards",
    )
    best = output / "best"
    record = read_run_record(best)
    assert record.best_epoch == result["best_epoch"] and record.test == result["test"]
    history = result["history"][result["best_epoch"] - 1]
    assert record.validation == {k[len("val/") :]: v for k, v in history.items() if k.startswith("val/")}
    assert record.division == {k: v for k, v in history.items() if k.startswith("division")}
    assert set(record.division) >= {"division/net0/auc", "division/net1/precision"}
    assert record.data.noise_seed == 2 and record.data.true_noise_ratio == result["true_noise_ratio"]
    card = ModelCard.load(tmp_path / "model_cards" / "tiny_ncr.md")
    by_type = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert by_type == {k: round(v, 2) for k, v in result["test"].items()}
    auc = record.division["division/net0/auc"]
    assert f"| net0 | {auc:.3f} |" in card.text
    assert (best / "README.md").read_text() == (tmp_path / "model_cards" / "tiny_ncr.md").read_text()
    assert checkpoint_files(best)


def test_card_of_a_local_checkpoint_follows_the_hub_conventions(tmp_path):
    make_checkpoint(tmp_path / "run" / "best")
    card = ModelCard.load(tmp_path / "run" / "best" / "README.md")
    assert str(tmp_path) not in card.data.model_name and "ncr" in card.data.model_name
    assert "tiny_precomp" in card.data.model_name and card.data.datasets is None
    assert "## Limitations" in card.text and "same extractor" in card.text and "injected" in card.text
    assert "Not stated by whoever trained the model" in card.text
    write_model_card(tmp_path / "run" / "best", license="apache-2.0")
    card = ModelCard.load(tmp_path / "run" / "best" / "README.md")
    assert card.data.license == "apache-2.0" and "`apache-2.0`" in card.text


def test_a_dataset_named_by_its_hub_id_is_listed_in_the_cards_datasets(tmp_path):
    record = tiny_record(data=dataclasses.replace(DATA, dataset="nlphuji/flickr30k"), test=dict(TEST))
    card = build_model_card(tiny_model().config, record, "someone/model")
    assert card.data.datasets == ["nlphuji/flickr30k"] and card.data.model_name == "someone/model"
    assert card.data.eval_results[0].dataset_name == "nlphuji/flickr30k"


def test_generic_data_directory_names_take_their_parents():
    assert dataset_name_of("/x/runs/demo/data") == "demo-data"
    assert dataset_name_of("/data/f30k_precomp") == "f30k_precomp"


def test_a_local_path_that_does_not_exist_is_said_so_at_once_without_asking_the_hub(tmp_path, monkeypatch):
    """``hfncl evaluate out/nonexistent`` asked the Hub 10 times over 79 s, then blamed the network."""
    import time

    from hfncl.models import NCLModel

    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    started = time.perf_counter()
    for name in ("out/nonexistent", str(tmp_path / "out" / "nonexistent"), "./nonexistent", "out/a/b"):
        with pytest.raises(OSError, match=r"does not exist: no such local directory"):
            NCLModel.from_pretrained(name)
    assert time.perf_counter() - started < 5


# --- a model loads whole or not at all (issue 58) ---------------------------------------------------------------


def _small_checkpoint(directory: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """An untrained region model saved by ``save_pretrained``, and its tensors."""
    NCLModel(NCLConfig(image_dim=8, vocab_size=20, embed_dim=8, word_dim=8)).save_pretrained(directory)
    return directory, load_file(directory / "model.safetensors")


def _first_float(weights: dict[str, torch.Tensor]) -> str:
    return next(name for name, tensor in weights.items() if tensor.is_floating_point())


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("missing", r"tensor {name} is missing; nothing was loaded"),
        ("extra", r"tensor extra\.weight is not one of the model's; nothing was loaded"),
        ("mis-shaped", r"tensor {name} has shape \[3, 3\], the model's is \[\d+(, \d+)?\]; nothing was loaded"),
        ("integers", r"tensor {name} is stored as I32 \(integer\), the model's is float32 \(float\) \(and \d+ more\)"),
    ],
)
def test_a_checkpoint_whose_tensors_do_not_fit_its_model_is_refused_in_one_line_naming_the_tensor(
    tmp_path, capsys, case, said
):
    checkpoint, weights = _small_checkpoint(tmp_path / "model")
    name = _first_float(weights)
    if case == "missing":
        del weights[name]
    elif case == "extra":
        weights["extra.weight"] = torch.zeros(2)
    elif case == "mis-shaped":
        weights[name] = torch.zeros(3, 3)
    else:
        weights = {k: t.to(torch.int32) if t.is_floating_point() else t for k, t in weights.items()}
    save_file(weights, checkpoint / "model.safetensors", metadata={"format": "pt"})
    pattern = "The weights of .* do not fit its config.json: " + said.format(name=re.escape(name))
    with pytest.raises(CheckpointError, match=pattern):
        NCLModel.from_pretrained(checkpoint)
    capsys.readouterr()
    assert cli.main(["evaluate", str(checkpoint), "--data-dir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and re.search(pattern, captured.err) and "LOAD REPORT" not in captured.out


def test_half_precision_weights_load_and_the_loading_info_is_given_when_asked(tmp_path):
    checkpoint, weights = _small_checkpoint(tmp_path / "model")
    save_file(
        {k: t.half() if t.is_floating_point() else t for k, t in weights.items()},
        checkpoint / "model.safetensors",
        metadata={"format": "pt"},
    )
    model, info = NCLModel.from_pretrained(checkpoint, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert isinstance(model, NCLModel)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("vocab_size", 10**10, "NCLConfig.vocab_size must be at most 16777216, got 10000000000"),
        ("vocab_size", 1e10, "NCLConfig.vocab_size must be a positive integer, got 10000000000.0"),
        ("embed_dim", 10**9, "NCLConfig.embed_dim must be at most 65536, got 1000000000"),
        ("word_dim", 60000, r"NCLConfig.vocab_size x NCLConfig.word_dim = 16000000 x 60000 is a weight matrix"),
    ],
)
def test_config_sizes_over_their_bounds_are_refused_before_any_allocation(tmp_path, capsys, field, value, said):
    checkpoint, _ = _small_checkpoint(tmp_path / "model")
    config = json.loads((checkpoint / "config.json").read_text())
    config[field] = value
    if field == "word_dim":  # each size within its bound, their product not
        config["vocab_size"] = 16_000_000
    (checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=said):
        NCLModel.from_pretrained(checkpoint)
    capsys.readouterr()
    assert cli.main(["evaluate", str(checkpoint), "--data-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_model_widths_over_their_bounds_are_refused_on_the_command_line_before_any_work(tmp_path, capsys):
    from hfncl.tasks.pairs import ModelArguments

    with pytest.raises(ValueError, match="ModelArguments.embed_dim must be at most 65536, got 1000000000"):
        ModelArguments(embed_dim=10**9)
    for command in (["train", "--plugins", "vsepp"], ["audit", "--plugins", "ncr"]):
        capsys.readouterr()
        code = cli.main([*command, "--data_dir", str(tmp_path / "absent"), "--output_dir", str(tmp_path / "out"),
                         "--embed_dim", "1000000000"])
        assert code in (1, 2)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "embed_dim must be at most 65536, got 1000000000" in err
    assert not (tmp_path / "out").exists()


def test_an_allocation_failure_while_loading_is_one_line(tmp_path, capsys, monkeypatch):
    checkpoint, _ = _small_checkpoint(tmp_path / "model")

    def no_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried "
                           "to allocate 34359738368 bytes.")

    monkeypatch.setattr(NCLModel, "from_pretrained", no_memory)
    capsys.readouterr()
    assert cli.main(["evaluate", str(checkpoint), "--data-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "can't allocate memory" in err
