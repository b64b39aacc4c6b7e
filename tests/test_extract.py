"""Feature extraction from raw images + captions (imagefolder) into a precomp directory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import save_processor, tiny_config, write_imagefolder
from PIL import Image
from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPVisionConfig, CLIPVisionModel

from hfncl import cli
from hfncl.data import DataFormatError, load_precomp_split
from hfncl.data.extract import extract_features
from hfncl.data.extractors import ImageFeatureExtractor
from hfncl.experiment import DataArguments, ModelArguments, run_experiment

VISION = dict(
    hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=8
)


@pytest.fixture(scope="module")
def vision_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CLIPVisionModel and its image processor, saved."""
    directory = tmp_path_factory.mktemp("tiny_clip_vision")
    torch.manual_seed(0)
    CLIPVisionModel(CLIPVisionConfig(**VISION)).save_pretrained(directory)
    save_processor(directory)
    return directory


def reference_features(model_dir: Path, image_path: Path, feature: str) -> np.ndarray:
    """Features of one image computed directly with the processor and the model."""
    processor = CLIPImageProcessor.from_pretrained(model_dir)
    model = CLIPVisionModel.from_pretrained(model_dir).eval()
    pixels = processor(images=[Image.open(image_path).convert("RGB")], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        output = model(pixel_values=pixels)
    return (output.last_hidden_state if feature == "patches" else output.pooler_output[:, None])[0].numpy()


@pytest.mark.parametrize(("feature", "regions"), [("pooled", 1), ("patches", 1 + (16 // 8) ** 2)])
def test_extraction_writes_a_precomp_directory(raw_dir, vision_dir, tmp_path, feature, regions):
    out = tmp_path / "precomp"
    shapes = extract_features(
        raw_dir, out, str(vision_dir), feature=feature, batch_size=3, num_shards=2, cache_dir=tmp_path / "cache"
    )
    assert shapes == {"train": (7, regions, 16), "dev": (11, regions, 16), "test": (11, regions, 16)}
    split = load_precomp_split(out, "train", cache_dir=tmp_path / "arrow")
    assert split.num_images == 7 and split.captions_per_image == 2 and split.region_shape == (regions, 16)
    assert split.captions[:3] == ["train image 0 view 0", "train image 0 view 1", "train image 1 view 0"]
    features = np.load(out / "train_ims.npy")
    for i in (0, 4, 6):  # first shard, second shard, last image
        expected = reference_features(vision_dir, raw_dir / "train" / f"{i:03d}.png", feature)
        np.testing.assert_allclose(features[i], expected, rtol=0, atol=1e-5)


def test_pooled_features_of_a_dual_encoder_are_its_image_embeddings(raw_dir, tmp_path):
    directory = tmp_path / "clip"
    torch.manual_seed(0)
    text = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2, vocab_size=32)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=VISION, projection_dim=8)).eval()
    model.save_pretrained(directory)
    save_processor(directory)
    extractor = ImageFeatureExtractor(str(directory), "pooled")
    image = Image.open(raw_dir / "test" / "001.png")
    pixels = CLIPImageProcessor.from_pretrained(directory)(
        images=[image.convert("RGB")], return_tensors="pt"
    )["pixel_values"]
    with torch.no_grad():
        expected = model.visual_projection(model.vision_model(pixel_values=pixels).pooler_output)
    np.testing.assert_allclose(extractor([image]), expected[:, None].numpy(), rtol=0, atol=1e-5)


def test_a_killed_extraction_resumes_from_the_cached_shards(raw_dir, vision_dir, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = extract_features(raw_dir, tmp_path / "a", str(vision_dir), batch_size=2, num_shards=3, cache_dir=cache)
    shard_files = sorted((cache / "features").glob("train-*-00001-of-00003.arrow"))
    assert len(shard_files) == 1
    shard_files[0].unlink()  # as if the run had been killed while extracting shard 1 of train
    seen: list[int] = []
    original = ImageFeatureExtractor.__call__
    monkeypatch.setattr(
        ImageFeatureExtractor, "__call__", lambda self, images: seen.append(len(images)) or original(self, images)
    )
    second = extract_features(raw_dir, tmp_path / "b", str(vision_dir), batch_size=2, num_shards=3, cache_dir=cache)
    assert first == second
    # one probe image per split, then only the 2 images of train's shard 1 (7 images in 3 contiguous shards: 3, 2, 2)
    assert sum(seen) == 3 + 2
    for split in ("train", "dev", "test"):
        np.testing.assert_array_equal(
            np.load(tmp_path / "a" / f"{split}_ims.npy"), np.load(tmp_path / "b" / f"{split}_ims.npy")
        )


def test_unequal_caption_counts_name_the_split_and_row(vision_dir, tmp_path):
    root = write_imagefolder(tmp_path / "raw", {"train": 3})
    metadata = root / "train" / "metadata.jsonl"
    rows = [json.loads(line) for line in metadata.read_text().splitlines()]
    rows[2]["captions"] = ["only one"]
    metadata.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DataFormatError, match=r"split 'train' row 2 has 1 captions, earlier rows 2"):
        extract_features(root, tmp_path / "out", str(vision_dir), cache_dir=tmp_path / "cache")
    with pytest.raises(DataFormatError, match=r"no caption column 'text'"):
        extract_features(root, tmp_path / "out", str(vision_dir), caption_column="text", cache_dir=tmp_path / "cache")


def test_cli_extract(raw_dir, vision_dir, tmp_path, capsys):
    status = cli.main(
        ["extract", str(raw_dir), str(tmp_path / "out"), "--model", str(vision_dir),
         "--cache-dir", str(tmp_path / "cache")]
    )
    assert status == 0
    assert "train: 7 images x 1 x 16 features" in capsys.readouterr().out
    assert cli.main(["extract", str(raw_dir), str(tmp_path / "o"), "--model", str(tmp_path / "missing")]) == 1
    assert "missing': it is not a local directory" in capsys.readouterr().err


def test_extracted_features_train_like_precomp_data(raw_dir, vision_dir, tmp_path):
    data_dir = tmp_path / "precomp"
    extract_features(raw_dir, data_dir, str(vision_dir), feature="patches", cache_dir=tmp_path / "cache")
    config = tiny_config(tmp_path / "run", ["vsepp"], epochs=2, warmup_epochs=0, batch_size=4, lr_decay_epochs=[])
    result = run_experiment(DataArguments(data_dir=str(data_dir)), config, ModelArguments(embed_dim=8, word_dim=8))
    assert set(result["test"]) >= {"rsum", "i2t_r1", "t2i_r1"}
    assert (tmp_path / "run" / "best" / "model.safetensors").is_file()


def _fake_hub(monkeypatch, vision_dir: Path, commits: dict[str, str]) -> list[str]:
    """A Hub where ``user/tiny-vision`` resolves ``revision`` to ``commits[revision]`` and loads ``vision_dir``."""
    from huggingface_hub import HfApi, ResolvedRevision
    from transformers import AutoImageProcessor, AutoModel

    loaded = []

    def resolve(self, repo_id, *, revision=None, local_files_only=False, **kwargs):
        return ResolvedRevision(commits[revision or "main"], initial=revision, repo_id=repo_id)

    def loader(original):
        def load(name, revision=None, **kwargs):
            assert name == "user/tiny-vision"
            loaded.append(revision.resolved)
            return original(str(vision_dir), **kwargs)

        return load

    monkeypatch.setattr(HfApi, "resolve_revision", resolve)
    monkeypatch.setattr(AutoModel, "from_pretrained", loader(AutoModel.from_pretrained))
    monkeypatch.setattr(AutoImageProcessor, "from_pretrained", loader(AutoImageProcessor.from_pretrained))
    return loaded


def test_a_hub_model_is_loaded_at_its_resolved_commit_which_keys_the_cache(vision_dir, monkeypatch):
    loaded = _fake_hub(monkeypatch, vision_dir, {"main": "a" * 40, "v2": "b" * 40})
    main = ImageFeatureExtractor("user/tiny-vision")
    assert loaded == ["a" * 40, "a" * 40], "processor and model come from the commit resolved once"
    tagged = ImageFeatureExtractor("user/tiny-vision", revision="v2")
    assert main.identity()["commit"] == "a" * 40 and tagged.identity()["commit"] == "b" * 40
    assert main.identity() != tagged.identity(), "features of another commit are not read from the cache"


def test_an_unresolvable_hub_model_is_a_clear_error(monkeypatch):
    from huggingface_hub import HfApi

    def offline(self, repo_id, **kwargs):
        raise OSError("no cached revision")

    monkeypatch.setattr(HfApi, "resolve_revision", offline)
    with pytest.raises(
        OSError, match=r"'user/absent': it is not a local directory, .* revision 'main' cannot be resolved"
    ):
        ImageFeatureExtractor("user/absent")
