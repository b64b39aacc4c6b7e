"""Region features from raw images with a (tiny, random) DETR-family detector, into a precomp directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_imagefolder
from PIL import Image
from scipy.ndimage import map_coordinates
from transformers import (
    DetrConfig,
    DetrForObjectDetection,
    DetrImageProcessor,
    ResNetConfig,
    RTDetrConfig,
    RTDetrForObjectDetection,
    RTDetrImageProcessor,
    RTDetrResNetConfig,
)

from hfncl import cli
from hfncl.data import load_precomp_split
from hfncl.data.extract import extract_features
from hfncl.data.extractors import RegionFeatureExtractor

QUERIES, CHANNELS = 8, 32


@pytest.fixture(scope="module")
def detector_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random DETR (ResNet backbone, C5 of 32 channels, 8 queries) and its image processor, saved."""
    directory = tmp_path_factory.mktemp("tiny_detr")
    torch.manual_seed(0)
    backbone = ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16, 16, CHANNELS], depths=[1, 1, 1, 1], out_features=["stage4"]
    )
    config = DetrConfig(
        backbone_config=backbone, d_model=16, encoder_layers=1, decoder_layers=1, encoder_ffn_dim=16,
        decoder_ffn_dim=16, encoder_attention_heads=2, decoder_attention_heads=2, num_queries=QUERIES, num_labels=3,
    )
    model = DetrForObjectDetection(config)
    with torch.no_grad():  # at DETR's initialisation every query predicts the same central box: spread them
        for name, weight in model.named_parameters():
            if weight.dim() > 1 and name.startswith(("model.decoder", "bbox_predictor", "class_labels_classifier")):
                torch.nn.init.normal_(weight, std=0.5)
        torch.nn.init.normal_(model.model.query_position_embeddings.weight, std=2.0)
    model.save_pretrained(directory)
    DetrImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def rt_detr_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random RT-DETR (queries from encoder proposals; a fixed-size input with no pixel mask), saved."""
    directory = tmp_path_factory.mktemp("tiny_rt_detr")
    torch.manual_seed(0)
    backbone = RTDetrResNetConfig(
        embedding_size=8,
        hidden_sizes=[8, 16, 16, CHANNELS],
        depths=[1, 1, 1, 1],
        out_features=["stage2", "stage3", "stage4"],
    )
    config = RTDetrConfig(
        backbone_config=backbone, encoder_in_channels=[16, 16, CHANNELS], encoder_hidden_dim=16, d_model=16,
        decoder_in_channels=[16, 16, 16], encoder_ffn_dim=16, decoder_ffn_dim=16, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, num_queries=QUERIES, num_labels=3,
    )
    RTDetrForObjectDetection(config).save_pretrained(directory)
    RTDetrImageProcessor(size={"height": 64, "width": 64}).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def raw_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_imagefolder(tmp_path_factory.mktemp("raw"), {"train": 5, "test": 2})


@pytest.mark.parametrize("num_regions", [3, QUERIES + 2])
def test_region_features_are_padded_to_r_with_the_count_recorded(raw_dir, detector_dir, tmp_path, num_regions):
    out = tmp_path / "precomp"
    shapes = extract_features(
        raw_dir, out, str(detector_dir), feature="regions", num_regions=num_regions, box_geometry=True,
        batch_size=2, num_shards=2, cache_dir=tmp_path / "cache",
    )
    assert shapes == {"train": (5, num_regions, CHANNELS + 5), "test": (2, num_regions, CHANNELS + 5)}
    regions, counts = np.load(out / "train_ims.npy"), np.load(out / "train_num_regions.npy")
    assert counts.shape == (5,) and counts.dtype == np.int64
    assert ((counts >= 1) & (counts <= min(num_regions, QUERIES))).all()
    assert counts.max() > 1, "the boxes differ"
    for features, count in zip(regions, counts, strict=True):
        assert not features[count:].any() and features[:count].any(axis=1).all()
        boxes, area = features[:count, -5:-1], features[:count, -1]
        assert ((boxes >= 0) & (boxes <= 1)).all() and (boxes[:, 2:] >= boxes[:, :2]).all()
        np.testing.assert_allclose(area, (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), atol=1e-6)
    split = load_precomp_split(out, "train", cache_dir=tmp_path / "arrow")
    assert split.region_shape == (num_regions, CHANNELS + 5) and split.captions_per_image == 2


@pytest.mark.parametrize("detector", ["detector_dir", "rt_detr_dir"])
def test_each_region_is_the_mean_of_bilinear_samples_over_its_box(raw_dir, detector, request):
    extractor = RegionFeatureExtractor(
        str(request.getfixturevalue(detector)), num_regions=4, box_geometry=True, pool_size=3
    )
    images = [Image.open(raw_dir / "train" / f"{i:03d}.png") for i in (0, 4)]  # 20 and 24 rows: DETR pads the first
    regions, counts = extractor(images)
    assert counts.max() > 1, "the boxes differ"
    feature_map = extractor._feature_map.numpy()
    inputs = extractor.processor(images=[image.convert("RGB") for image in images], return_tensors="pt")
    height, width = inputs["pixel_values"].shape[-2:]
    masks = inputs.get("pixel_mask", torch.ones(len(images), height, width))
    steps = (np.arange(3) + 0.5) / 3
    for index, mask in enumerate(masks):
        image_h, image_w = int(mask.any(dim=1).sum()), int(mask.any(dim=0).sum())
        fmap = feature_map[index]
        for region in regions[index, : counts[index]]:
            x1, y1, x2, y2 = region[-5:-1]
            rows = (y1 + (y2 - y1) * steps) * image_h / height * fmap.shape[1] - 0.5  # index space: centres at integers
            cols = (x1 + (x2 - x1) * steps) * image_w / width * fmap.shape[2] - 0.5
            grid = np.stack(np.meshgrid(rows, cols, indexing="ij")).reshape(2, -1)
            expected = [map_coordinates(channel, grid, order=1, mode="grid-constant").mean() for channel in fmap]
            np.testing.assert_allclose(region[:-5], expected, rtol=1e-4, atol=1e-5)


def test_region_extraction_is_deterministic_and_resumes_after_a_killed_shard(
    raw_dir, detector_dir, tmp_path, monkeypatch
):
    cache = tmp_path / "cache"
    options = dict(feature="regions", num_regions=4, batch_size=2, num_shards=3)
    extract_features(raw_dir, tmp_path / "a", str(detector_dir), cache_dir=cache, **options)
    extract_features(raw_dir, tmp_path / "fresh", str(detector_dir), cache_dir=tmp_path / "other", **options)
    shard_files = sorted((cache / "features").glob("train-*-00001-of-00003.arrow"))
    assert len(shard_files) == 1
    shard_files[0].unlink()  # as if the run had been killed while extracting shard 1 of train
    seen: list[int] = []
    original = RegionFeatureExtractor.__call__
    monkeypatch.setattr(
        RegionFeatureExtractor, "__call__", lambda self, images: seen.append(len(images)) or original(self, images)
    )
    extract_features(raw_dir, tmp_path / "b", str(detector_dir), cache_dir=cache, **options)
    assert sum(seen) == 2 + 2, "one probe image per split, then the 2 images of train's shard 1 (5 images: 2, 2, 1)"
    for name in ("train_ims.npy", "train_num_regions.npy", "test_ims.npy", "test_num_regions.npy"):
        for other in ("b", "fresh"):
            np.testing.assert_array_equal(np.load(tmp_path / "a" / name), np.load(tmp_path / other / name))


def test_cli_extract_regions(raw_dir, detector_dir, tmp_path, capsys):
    arguments = ["extract", str(raw_dir), str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    assert cli.main([*arguments, "--feature", "regions", "--detector", str(detector_dir), "--num-regions", "4"]) == 0
    assert f"train: 5 images x 4 x {CHANNELS} features" in capsys.readouterr().out
    assert cli.main([*arguments, "--feature", "regions", "--model", str(detector_dir)]) == 1
    assert "--feature regions takes --detector" in capsys.readouterr().err


def test_a_model_that_is_not_a_detector_is_a_clear_error(tmp_path):
    from transformers import ResNetModel

    ResNetModel(ResNetConfig(embedding_size=8, hidden_sizes=[8], depths=[1])).save_pretrained(tmp_path)
    DetrImageProcessor().save_pretrained(tmp_path)
    with pytest.raises(OSError, match=r"Cannot load the detector or its image processor from '.*'"):
        RegionFeatureExtractor(str(tmp_path))
