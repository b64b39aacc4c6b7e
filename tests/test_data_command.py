"""``hfncl data``: a tiny dataset in the Hub's layouts prepared to an imagefolder and to precomp, checked; the
generated benchmark; the Hub path offline (issue 60)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import huggingface_hub
import numpy as np
import pytest
import torch
from PIL import Image
from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

from hfncl import cli
from hfncl.commands.data import GENERATOR_FLAGS
from hfncl.data import load_precomp_split
from hfncl.data.check import EXPECTED, check_precomp
from hfncl.data.hub_datasets import load_source
from hfncl.data.synthetic import SIZES, SyntheticConfig, generate_precomp

VISION = dict(
    hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=8
)
F30K_SPLITS = {"train": 4, "validation": 3, "test": 3}


def png(seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (18 + seed % 5, 20, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def write_flickr_layout(root: Path) -> Path:
    """``AnyModal/flickr30k``'s layout: data/{split}-00000-of-00001.parquet, a row per image, 5 captions in
    ``alt_text``, the Karpathy ``split`` column, ``filename`` and ``img_id``."""
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "alt_text": datasets.Sequence(datasets.Value("string")),
            "split": datasets.Value("string"),
            "img_id": datasets.Value("string"),
            "filename": datasets.Value("string"),
        }
    )
    (root / "data").mkdir(parents=True)
    seed = 0
    for split, count in F30K_SPLITS.items():
        rows: dict[str, list] = {name: [] for name in features}
        for i in range(count):
            seed += 1
            rows["image"].append(png(seed))
            rows["alt_text"].append([f"{split} photo {i} caption {j}" for j in range(5)])
            rows["split"].append("val" if split == "validation" else split)
            rows["img_id"].append(str(1000 + seed))
            rows["filename"].append(f"{1000 + seed}.jpg")
        dataset = datasets.Dataset.from_dict(rows, features=features)
        dataset.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


def write_coco_layout(root: Path) -> Path:
    """COCO Karpathy's layout: a row per caption (``sentences`` {``raw``}), rows of an image sharing ``cocoid``,
    Karpathy's ``split`` names (``restval`` trains); one image has 6 captions (COCO has such), kept to 5."""
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "sentences": {"raw": datasets.Value("string"), "sentid": datasets.Value("int32")},
            "cocoid": datasets.Value("int32"),
            "split": datasets.Value("string"),
        }
    )
    rows: dict[str, list] = {name: [] for name in features}
    images = [("train", 2), ("restval", 1), ("val", 1), ("test", 2)]
    cocoid = 0
    for split, count in images:
        for _ in range(count):
            cocoid += 1
            for j in range(6 if cocoid == 1 else 5):
                rows["image"].append(png(cocoid))
                rows["sentences"].append({"raw": f"coco {cocoid} says {j}", "sentid": j})
                rows["cocoid"].append(cocoid)
                rows["split"].append(split)
    (root / "data").mkdir(parents=True)
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(root / "data" / "train-00000-of-00001.parquet"))
    return root


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random CLIP vision encoder and its image processor, saved (as in test_extract)."""
    directory = tmp_path_factory.mktemp("tiny_clip")
    torch.manual_seed(0)
    CLIPVisionModel(CLIPVisionConfig(**VISION)).save_pretrained(directory)
    CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16}).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, clip_dir: Path) -> tuple[Path, Path, Path]:
    """The Flickr30K-layout source prepared through ``hfncl data prepare --features clip``: (source, imagefolder,
    precomp)."""
    root = tmp_path_factory.mktemp("prepare")
    source = write_flickr_layout(root / "hub_copy")
    out = root / "f30k"
    command = ["data", "prepare", "flickr30k", "--from", str(source), "--to", str(out), "--features", "clip"]
    command += ["--model", str(clip_dir), "--batch-size", "2", "--num-shards", "2", "--cache-dir", str(root / "cache")]
    assert cli.main([*command, "--no-progress"]) == 0
    return source, out, root / "f30k_precomp"


def test_prepare_keeps_the_karpathy_split_and_writes_an_imagefolder(prepared):
    source, imagefolder, _ = prepared
    assert sorted(path.name for path in imagefolder.iterdir()) == ["dev", "test", "train"]
    rows = [json.loads(line) for line in (imagefolder / "dev" / "metadata.jsonl").read_text().splitlines()]
    assert [row["file_name"] for row in rows] == ["0000000.png", "0000001.png", "0000002.png"]
    assert rows[1]["captions"] == [f"validation photo 1 caption {j}" for j in range(5)]
    assert rows[1]["source_id"] == "1006"  # img_id of the 6th image written: 4 train + 2nd of validation
    original = datasets.load_dataset(str(source))["validation"][1]["image"]
    assert np.array_equal(np.asarray(Image.open(imagefolder / "dev" / "0000001.png")), np.asarray(original))


def test_prepare_extracts_features_that_load_as_precomp(prepared, clip_dir, tmp_path):
    _, imagefolder, precomp = prepared
    split = load_precomp_split(precomp, "train", cache_dir=tmp_path / "arrow")
    assert (split.num_images, split.captions_per_image, split.region_shape) == (4, 5, (1 + (16 // 8) ** 2, 16))
    assert split.captions[:2] == ["train photo 0 caption 0", "train photo 0 caption 1"]
    processor = CLIPImageProcessor.from_pretrained(clip_dir)
    model = CLIPVisionModel.from_pretrained(clip_dir).eval()
    image = Image.open(imagefolder / "train" / "0000003.png").convert("RGB")
    with torch.no_grad():
        expected = model(pixel_values=processor(images=[image], return_tensors="pt")["pixel_values"])
    np.testing.assert_allclose(np.load(precomp / "train_ims.npy")[3], expected.last_hidden_state[0].numpy(), atol=1e-5)


def test_check_accepts_the_prepared_data_and_refuses_a_damaged_copy_in_one_line(prepared, tmp_path, capsys):
    precomp = prepared[2]
    assert cli.main(["data", "check", str(precomp)]) == 0
    out = capsys.readouterr().out
    assert "train: 4 images x 5 captions, features 5 x 16 float32" in out
    damaged = shutil.copytree(precomp, tmp_path / "damaged")
    np.save(damaged / "test_ims.npy", np.zeros((3, 5, 8), np.float32))
    assert cli.main(["data", "check", str(damaged)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"hfncl: error: {damaged / 'test_ims.npy'}: features 5 x 8, but dev_ims.npy has 5 x 16: every split needs "
        "the same\n"
    )
    (damaged / "test_ims.npy").write_bytes(b"not numpy")
    assert cli.main(["data", "check", str(damaged)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"hfncl: error: {damaged / 'test_ims.npy'}: not a readable .npy array")
    assert err.count("\n") == 1
    shutil.copy(precomp / "test_ims.npy", damaged / "test_ims.npy")
    lines = (damaged / "dev_caps.txt").read_text().splitlines()
    (damaged / "dev_caps.txt").write_text("\n".join(lines[:-1]) + "\n")
    assert cli.main(["data", "check", str(damaged)]) == 1
    assert capsys.readouterr().err == (
        f"hfncl: error: {damaged / 'dev_caps.txt'}: 14 captions for the 3 images of dev_ims.npy, expected k per image\n"
    )
    assert cli.main(["data", "check", str(precomp), "--expect", "f30k"]) == 1
    assert capsys.readouterr().err == (
        f"hfncl: error: {precomp / 'train_ims.npy'}: 4 images, Flickr30K's train split has 29000\n"
    )


def test_a_rerun_keeps_the_written_images(prepared, tmp_path):
    """A killed preparation resumes: images already written are kept, not read from the source again."""
    source, imagefolder, _ = prepared
    copy = shutil.copytree(imagefolder, tmp_path / "f30k")
    (copy / "train" / "metadata.jsonl").unlink()
    (copy / "train" / "0000002.png").unlink()
    stamp = (copy / "train" / "0000001.png").stat().st_mtime_ns
    assert cli.main(["data", "prepare", "flickr30k", "--from", str(source), "--to", str(copy), "--no-progress"]) == 0
    assert (copy / "train" / "0000001.png").stat().st_mtime_ns == stamp
    assert (copy / "train" / "0000002.png").read_bytes() == (imagefolder / "train" / "0000002.png").read_bytes()
    assert (copy / "train" / "metadata.jsonl").read_text() == (imagefolder / "train" / "metadata.jsonl").read_text()


def test_coco_rows_per_caption_join_their_image_restval_trains_and_the_test_split_is_testall(
    tmp_path, capsys, clip_dir
):
    source = write_coco_layout(tmp_path / "coco_copy")
    out = tmp_path / "coco"
    assert cli.main(["data", "prepare", "coco", "--from", str(source), "--to", str(out), "--no-progress"]) == 0
    assert capsys.readouterr().out.strip() == f"train 3, dev 1, test 2 images in {out}"
    train = [json.loads(line) for line in (out / "train" / "metadata.jsonl").read_text().splitlines()]
    assert [row["source_id"] for row in train] == ["1", "2", "3"]
    assert train[0]["captions"] == [f"coco 1 says {j}" for j in range(5)]  # the 6th caption is dropped
    command = ["data", "prepare", "coco", "--from", str(source), "--to", str(out), "--features", "clip-pooled"]
    assert cli.main([*command, "--model", str(clip_dir), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]) == 0
    assert "testall: 2 images x 1 x 16 features" in capsys.readouterr().out
    precomp = tmp_path / "coco_precomp"
    assert sorted(path.name for path in precomp.glob("test*")) == ["testall_caps.txt", "testall_ims.npy"]


def test_an_image_with_too_few_captions_is_one_line(tmp_path, capsys):
    source = tmp_path / "cc_copy"
    (source / "data").mkdir(parents=True)
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")})
    rows = {"image": [png(1), png(2)], "caption": ["a caption", ""]}
    parquet = source / "data" / "train-00000-of-00001.parquet"
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(parquet))
    capsys.readouterr()
    assert cli.main(["data", "prepare", "cc", "--from", str(source), "--to", str(tmp_path / "cc")]) == 1
    assert capsys.readouterr().err == (
        f"hfncl: error: --from {source}: image '1' (row 1, split train) has 0 non-empty captions in 'caption', "
        "cc keeps 1 per image\n"
    )


def test_the_hub_path_offline_fails_in_one_line_naming_hf_hub_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError) as raised:
        load_source("AnyModal/flickr30k", tmp_path / "cache")
    message = str(raised.value)
    assert "\n" not in message and "HF_HUB_OFFLINE is set" in message
    assert "hf download AnyModal/flickr30k --repo-type dataset --local-dir DIR" in message


def test_synthetic_writes_the_demo_benchmark_with_a_noise_index(tmp_path, capsys):
    out = tmp_path / "synthetic"
    assert cli.main(["data", "synthetic", str(out), "--size", "tiny", "--num-train", "30", "--noise-ratio", "0.4"]) == 0
    reference = generate_precomp(tmp_path / "reference", SyntheticConfig(num_train=30, num_dev=50, num_test=100))
    for name in ("train_ims.npy", "dev_caps.txt", "test_ims.npy"):
        assert (out / name).read_bytes() == (reference / name).read_bytes()
    noise = np.load(out / "train_noise_caption_0.4.npy")
    assert noise.shape == (150,) and np.mean(noise != np.arange(150) // 5) > 0.3
    assert f"--noise-file {out / 'train_noise_caption_0.4.npy'}" in capsys.readouterr().out
    assert cli.main(["data", "synthetic", str(tmp_path / "bad"), "--num-train", "0"]) == 1
    assert capsys.readouterr().err == "hfncl: error: --num-train must be >= 1, got 0\n"
    assert cli.main(["data", "check", str(out)]) == 0


def test_the_generator_flags_are_fields_of_its_config_and_the_sizes_the_demos():
    from hfncl.demo import DEMO_SIZES

    names = {field for field in SyntheticConfig.__dataclass_fields__}
    assert set(GENERATOR_FLAGS) <= names
    assert DEMO_SIZES is SIZES


def test_the_papers_sizes():
    assert EXPECTED["f30k"].images == {"train": 29000, "dev": 1014, "test": 1000}
    assert EXPECTED["coco"].images == {"train": 113287, "dev": 5000, "testall": 5000}
    assert (EXPECTED["cc152k"].images["train"], EXPECTED["cc152k"].captions_per_image) == (150000, 1)


def test_a_papers_sizes_are_named_without_expect(tmp_path):
    """A directory of Flickr30K's sizes (header-only features: zero-size regions are not read) is named."""
    for split, count in EXPECTED["f30k"].images.items():
        np.lib.format.open_memmap(tmp_path / f"{split}_ims.npy", mode="w+", dtype=np.float32, shape=(count, 1, 1))
        (tmp_path / f"{split}_caps.txt").write_text("a caption\n" * (5 * count))
    report = check_precomp(tmp_path)
    assert report.expected is EXPECTED["f30k"] and "fits recipes/*_f30k.py" in report.lines()[-1]


@pytest.mark.slow
def test_two_processes_of_accelerate_launch_prepare_what_one_does(prepared, clip_dir, tmp_path):
    """Each process writes its share of the images and extracts its share of the shards; the main one writes."""
    import os
    import subprocess
    import sys

    source, imagefolder, precomp = prepared
    out = tmp_path / "f30k"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "-m"]
    command += ["hfncl.cli", "data", "prepare", "flickr30k", "--from", str(source), "--to", str(out)]
    command += ["--features", "clip", "--model", str(clip_dir), "--batch-size", "2", "--num-shards", "2"]
    command += ["--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env=dict(os.environ, ACCELERATE_USE_CPU="true")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("train: 4 images x 5 x 16 features") == 1  # the main process reports
    for split in ("train", "dev", "test"):
        assert (out / split / "metadata.jsonl").read_text() == (imagefolder / split / "metadata.jsonl").read_text()
        np.testing.assert_allclose(
            np.load(tmp_path / "f30k_precomp" / f"{split}_ims.npy"), np.load(precomp / f"{split}_ims.npy"), atol=1e-6
        )
