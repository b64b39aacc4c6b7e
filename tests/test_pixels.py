"""Training on raw images: pixel splits of an imagefolder, a CLIP vision tower (with and without LoRA), the
image processor saved with the checkpoint, and errors when the data do not fit the image tower.

Every model is a tiny random CLIP (hidden size 16, one layer, 16 px images, 8 px patches)
(``clip_dir`` / ``tower_dir`` of ``tests/conftest.py``); the images are its generated PNGs (``raw_dir``).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config, write_imagefolder
from PIL import Image
from test_towers import assert_round_trip, text_batch
from transformers import CLIPImageProcessor, CLIPVisionModel, HfArgumentParser

from hfncl import cli
from hfncl.data import (
    DataFormatError,
    ImageDataset,
    NoisyPairDataset,
    Vocabulary,
    collate_captions,
    collate_pairs,
    load_pixel_splits,
)
from hfncl.engine.encoding import RetrievalSplit, evaluate_retrieval
from hfncl.experiment import DataArguments, ModelArguments, run_experiment
from hfncl.hub import CheckpointError, checkpoint_files
from hfncl.hub.checkpoint import IMAGE_PROCESSOR_SUBFOLDER, load_image_processor
from hfncl.models import NCLConfig, NCLModel
from hfncl.retrieval import Retriever
from hfncl.tasks.pair_data import prepare_data

SPLITS = ["train", "dev", "test"]


def direct_pixels(tower_dir: Path, paths: list[Path]) -> np.ndarray:
    """The processor of ``tower_dir`` applied to the image files directly."""
    processor = CLIPImageProcessor.from_pretrained(tower_dir)
    return processor(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="np")["pixel_values"]


def test_a_pixel_split_gives_the_processors_pixel_values(raw_dir, tower_dir):
    splits = load_pixel_splits(raw_dir, SPLITS, str(tower_dir))
    train = splits["train"]
    assert (train.num_images, train.num_captions, train.captions_per_image) == (7, 14, 2)
    assert train.captions[:3] == ["train image 0 view 0", "train image 0 view 1", "train image 1 view 0"]
    assert splits["dev"].num_images == 11 and splits["dev"].captions[0] == "validation image 0 view 0"
    assert train.image_shape == (3, 16, 16)
    pixels = train.image_inputs(np.array([4, 1, 4]))
    assert pixels.dtype == np.float32
    expected = direct_pixels(tower_dir, [raw_dir / "train" / f"{i:03d}.png" for i in (4, 1, 4)])
    np.testing.assert_array_equal(pixels, expected)
    assert train.image_inputs([]).shape == (0, 3, 16, 16)
    with pytest.raises(IndexError, match=r"image index 7 is outside 0..6 of split 'train'"):
        train.image_inputs([0, 7])


def test_the_pair_datasets_batch_pixels_decoded_per_batch(raw_dir, tower_dir):
    train = load_pixel_splits(raw_dir, ["train"], str(tower_dir))["train"]
    assert train.images.data.column("image")[0]["bytes"].as_py() is None, "the Arrow table holds paths, not images"
    processed: list[int] = []
    processor = train.processor

    def counting(images, **kwargs):
        processed.append(len(images))
        return processor(images=images, **kwargs)

    train.processor = counting
    pairing = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 6, 5, 5, 6])  # captions 10 and 11 swap images 5 and 6
    data = NoisyPairDataset(train, Vocabulary.build(train.captions), pairing)
    batch = collate_pairs(data.__getitems__([11, 0, 10]))
    assert processed == [3], "one processor call for the batch's three images, none for the others"
    assert batch["images"].shape == (3, 3, 16, 16)
    expected = direct_pixels(tower_dir, [raw_dir / "train" / f"{i:03d}.png" for i in (5, 0, 6)])
    np.testing.assert_array_equal(batch["images"].numpy(), expected)
    images = ImageDataset(train).__getitems__([6])
    np.testing.assert_array_equal(images[0]["image"].numpy(), expected[2])


def test_a_dev_folder_is_the_dev_split_and_a_missing_split_is_named(tmp_path, tower_dir):
    root = write_imagefolder(tmp_path / "raw", {"train": 2, "dev": 2})
    splits = load_pixel_splits(root, ["train", "dev"], str(tower_dir), cache_dir=tmp_path / "cache")
    assert splits["dev"].captions[0] == "dev image 0 view 0"
    with pytest.raises(DataFormatError, match=rf"imagefolder {re.escape(str(root))} has no split 'test'"):
        load_pixel_splits(root, ["test"], str(tower_dir), cache_dir=tmp_path / "cache")


def test_data_that_do_not_fit_the_image_tower_are_clear_errors(raw_dir, tower_dir, tiny_data_dir, tmp_path):
    with pytest.raises(
        DataFormatError,
        match=rf"{re.escape(str(raw_dir))} is an imagefolder of raw images, .*NCLConfig.image_tower\) is 'regions'",
    ):
        prepare_data(DataArguments(data_dir=str(raw_dir)), tmp_path)
    regions = (
        rf"{re.escape(str(tiny_data_dir))} holds precomputed image features .* "
        r"NCLConfig.image_tower 'transformer' \(image_tower_name"
    )
    with pytest.raises(DataFormatError, match=regions):
        prepare_data(DataArguments(data_dir=str(tiny_data_dir)), tmp_path, image_processor=str(tower_dir))
    with pytest.raises(DataFormatError, match=regions):  # the training entry point checks before it trains
        config = tiny_config(tmp_path / "run", ["vsepp"])
        run_experiment(DataArguments(data_dir=str(tiny_data_dir)), config, ModelArguments(image_tower=str(tower_dir)))
    with pytest.raises(
        DataFormatError, match=rf"{re.escape(str(tiny_data_dir / 'train' / 'metadata.jsonl'))} does not exist"
    ):
        prepare_data(
            DataArguments(data_dir=str(tiny_data_dir), data_format="imagefolder"),
            tmp_path,
            image_processor=str(tower_dir),
        )


def test_model_arguments_expose_the_image_tower():
    parser = HfArgumentParser((ModelArguments, DataArguments))
    model, data = parser.parse_args_into_dataclasses(
        args=["--image-tower", "openai/clip-vit-base-patch32", "--lora-towers", "image", "--data-dir", "d",
              "--data-format", "imagefolder"]
    )
    assert model.explicit() == {
        "image_tower": "transformer",
        "image_tower_name": "openai/clip-vit-base-patch32",
        "lora_towers": ["image"],
    }
    assert ModelArguments(image_tower="regions").explicit() == {"image_tower": "regions"}
    assert data.data_format == "imagefolder"
    with pytest.raises(ValueError, match="data_format must be one of"):
        DataArguments(data_dir="d", data_format="hdf5")


def test_a_pixel_model_with_lora_adapters_reloads_to_identical_similarities(tower_dir, tmp_path):
    config = NCLConfig(
        embed_dim=8, vocab_size=64, image_tower="transformer", image_tower_name=str(tower_dir), lora_rank=2
    )
    model = NCLModel(config)
    with torch.no_grad():  # adapters that moved away from zero, so the round trip is not trivial
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_()
    _, captions, lengths = text_batch(64)
    pixels = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    assert_round_trip(model, tmp_path / "checkpoint", (pixels, captions, lengths))


def test_the_retriever_reads_images_only_with_a_pixel_tower_and_its_processor(tower_dir, raw_dir, tmp_path):
    images = [Image.open(raw_dir / "test" / f"{i:03d}.png") for i in range(2)]
    pixel_model = NCLModel(
        NCLConfig(embed_dim=8, vocab_size=64, image_tower="transformer", image_tower_name=str(tower_dir))
    )
    with pytest.raises(ValueError, match="needs the image processor the model was trained with"):
        Retriever(pixel_model).encode_images(images)
    with pytest.raises(TypeError, match="expects a sequence of images, got one image"):
        Retriever(pixel_model).encode_images(images[0])
    with pytest.raises(TypeError, match="reads precomputed region features"):
        Retriever(NCLModel(NCLConfig(image_dim=16, embed_dim=8, vocab_size=64))).encode_images(images)
    pixel_model.save_pretrained(tmp_path / "bare")  # a pixel checkpoint saved without its image processor
    with pytest.raises(CheckpointError, match=r"bare/image_processor.*needs the image processor it was trained with"):
        load_image_processor(tmp_path / "bare", pixel_model.config)
    processor = CLIPImageProcessor.from_pretrained(tower_dir)
    retriever = Retriever(pixel_model, image_processor=processor, batch_size=1)
    pixels = torch.from_numpy(direct_pixels(tower_dir, [raw_dir / "test" / f"{i:03d}.png" for i in range(2)]))
    torch.testing.assert_close(retriever.encode_images(images), retriever.encode_images(pixels), rtol=0, atol=1e-6)


def vision_weights(model: NCLModel) -> dict[str, torch.Tensor]:
    tower = model.networks[0].image_encoder.model
    return {k.replace(".base_layer", ""): v for k, v in tower.state_dict().items() if "lora_" not in k}


@pytest.mark.slow
@pytest.mark.parametrize("lora_rank", [0, 2])
def test_a_method_trains_on_raw_images_with_a_clip_vision_tower(
    lora_rank, raw_dir, tower_dir, tmp_path, offline, capsys
):
    source = shutil.copytree(tower_dir, tmp_path / "source")
    config = tiny_config(tmp_path / "run", ["vsepp"], epochs=2, warmup_epochs=0, batch_size=4, lr_decay_epochs=[])
    model_args = ModelArguments(
        embed_dim=8, word_dim=8, image_tower=str(source), image_pooling="pooler", lora_rank=lora_rank
    )
    result = run_experiment(DataArguments(data_dir=str(raw_dir), noise_ratio=0.3), config, model_args)
    printed = capsys.readouterr().out
    # head 16 -> 8 (136) trainable, plus rank-2 adapters on q_proj and v_proj (2 x (2 x 16 + 16 x 2)) with LoRA
    trainable = (
        136 + 128 if lora_rank else sum(p.numel() for p in CLIPVisionModel.from_pretrained(source).parameters()) + 136
    )
    assert f"net0.image: {trainable:,} trainable of" in printed
    best = tmp_path / "run" / "best"
    assert (best / IMAGE_PROCESSOR_SUBFOLDER / "preprocessor_config.json").is_file()
    assert any(p.parent.name == IMAGE_PROCESSOR_SUBFOLDER for p in checkpoint_files(best))
    trained = NCLModel.from_pretrained(best).eval()
    pretrained = CLIPVisionModel.from_pretrained(source).state_dict()
    moved = [name for name, w in vision_weights(trained).items() if not torch.equal(w, pretrained[name])]
    if lora_rank:  # the encoder is frozen, its adapters trained
        assert not moved
        assert any(torch.count_nonzero(p) for n, p in trained.named_parameters() if "lora_B" in n)
    else:
        assert moved

    test = load_pixel_splits(raw_dir, ["test"], str(tower_dir))["test"]
    vocab = Vocabulary.from_json(best / "vocab.json")
    assert evaluate_retrieval(trained, RetrievalSplit.from_precomp(test, vocab), batch_size=2) == result["test"]
    with torch.no_grad():
        image_embeds = trained.encode_image(torch.from_numpy(test.image_inputs(range(test.num_images))))
        batch = collate_captions(
            [{"caption": torch.tensor(vocab.encode(c)), "index": i} for i, c in enumerate(test.captions)]
        )
        text_embeds = trained.encode_text(batch["captions"], batch["lengths"])
    shutil.rmtree(source)  # the reload (offline) reads neither the tower's weights nor its processor from the source
    retriever = Retriever.from_pretrained(best)
    images = retriever.encode_images([Image.open(raw_dir / "test" / f"{i:03d}.png") for i in range(test.num_images)])
    texts = retriever.encode_texts(test.captions)
    assert torch.equal(images, image_embeds) and torch.equal(texts, text_embeds)
    assert torch.equal(retriever.similarity(images, texts), trained.similarity(image_embeds, text_embeds))
    capsys.readouterr()
    assert cli.main(["evaluate", str(best), "--data-dir", str(raw_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == pytest.approx(result["test"])
    assert cli.main(["evaluate", str(best), "--data-dir", str(tmp_path)]) == 1
    assert "image tower reads pixels" in capsys.readouterr().err


def test_a_pixel_checkpoint_needs_its_image_processor_and_push_to_hub_sends_it(tower_dir, tmp_path, monkeypatch):
    from test_hub import WORDS, FakeHub, make_checkpoint, tiny_model, tiny_record

    from hfncl.hub.checkpoint import save_image_processor

    hub = FakeHub(tmp_path / "hub_cache", monkeypatch)
    model = tiny_model(image_tower="transformer", image_tower_name=str(tower_dir), num_networks=1)
    checkpoint = tmp_path / "checkpoint"
    make_checkpoint(checkpoint, model)
    with pytest.raises(CheckpointError, match=r"image_processor does not exist: the model's image tower reads pixels"):
        checkpoint_files(checkpoint)
    processor = CLIPImageProcessor.from_pretrained(tower_dir)
    save_image_processor(processor, checkpoint)
    sent = {p.relative_to(checkpoint).as_posix() for p in checkpoint_files(checkpoint)}
    assert f"{IMAGE_PROCESSOR_SUBFOLDER}/preprocessor_config.json" in sent

    NCLModel.from_pretrained(checkpoint).push_to_hub("user/pixel-model")
    assert f"{IMAGE_PROCESSOR_SUBFOLDER}/preprocessor_config.json" in hub.commits[-1]["files"]

    vocabulary = Vocabulary(WORDS)
    with pytest.raises(CheckpointError, match=r"image processor \(image_processor/\).*pass image_processor="):
        model.push_to_hub("user/pixel-model", vocabulary=vocabulary, record=tiny_record())
    assert len(hub.commits) == 1, "nothing was sent"
    model.push_to_hub("user/pixel-model", vocabulary=vocabulary, record=tiny_record(), image_processor=processor)
    assert hub.commits[-1]["files"].keys() == hub.commits[0]["files"].keys()
    with pytest.raises(CheckpointError, match="takes no image_processor="):
        tiny_model().push_to_hub("user/other", vocabulary=vocabulary, record=tiny_record(), image_processor=processor)
