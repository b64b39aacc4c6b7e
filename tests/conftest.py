"""Fixtures shared by the end-to-end tests: a tiny generated benchmark and fast settings, a noisy copy of it, an
imagefolder of generated PNGs, a tiny CLIP (with an image processor), and the Hub offline."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import huggingface_hub.constants
import numpy as np
import pytest
import torch
from PIL import Image
from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

from hfncl.config import TrainConfig
from hfncl.data import Vocabulary, caption_level_noise, read_captions
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.engine.callbacks import TrainerCallback
from hfncl.engine.trainer import Trainer
from hfncl.experiment import DataArguments, ModelArguments
from hfncl.hub.checkpoint import save_image_processor
from hfncl.models import NCLConfig, NCLModel
from hfncl.plugin_setup import run_plugins
from hfncl.tasks.pair_data import prepare_data
from hfncl.tasks.pairs import PAIRS

TINY_DATA = SyntheticConfig(
    num_train=160, num_dev=40, num_test=40, num_concepts=16, num_regions=8, feature_dim=16, seed=1
)
TINY_MODEL = ModelArguments(embed_dim=32, word_dim=16)
MICRO_DATA = SyntheticConfig(
    num_train=16, num_dev=11, num_test=11, num_concepts=8, num_regions=6, feature_dim=8, seed=2
)
MICRO_HEAD_OPTIONS = {"sgr": {"sgr.sim_dim": 8, "sgr.reasoning_steps": 1}, "saf": {"saf.sim_dim": 8}, "scan": {}}
MICRO_LOCAL_MODELS = {
    name: ModelArguments(embed_dim=8, word_dim=8, similarity=name, head_options=options)
    for name, options in MICRO_HEAD_OPTIONS.items()
}
AUDIT_NOISE = 0.3
"""The share of the tiny training split's captions that ``noisy_data`` re-pairs."""
IMAGEFOLDER_SIZES = {"train": 7, "validation": 11, "test": 11}  # 11: the fewest images a split is scored on
TINY_CLIP_TEXT = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2, vocab_size=64)
TINY_CLIP_VISION = dict(
    hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2, image_size=16, patch_size=8
)


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread per pytest-xdist worker: the workers already share the cores."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Converted datasets go to a temporary cache, not the user's ~/.cache/hfncl."""
    os.environ["HFNCL_CACHE"] = str(tmp_path_factory.mktemp("hfncl_cache"))


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SCAN-format splits of 160/40/40 images x 5 captions with 8 x 16 region features."""
    return generate_precomp(tmp_path_factory.mktemp("tiny_precomp"), TINY_DATA)


@pytest.fixture(scope="session")
def micro_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16/11/11 images x 5 captions with 6 x 8 region features: a method on an SGR / SAF head trains an epoch in seconds
    (11: the fewest images a split is scored on, more than R@10's K)."""
    return generate_precomp(tmp_path_factory.mktemp("micro_precomp"), MICRO_DATA)


@pytest.fixture(scope="module")
def noisy_data(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A user's data: the tiny training split alone, its captions re-paired for 30% of the lines (the NCR protocol's
    caption-level index, written into the file), and the hidden mask of the wrong pairs, by line."""
    directory = tmp_path_factory.mktemp("user_data")
    shutil.copy(tiny_data_dir / "train_ims.npy", directory / "train_ims.npy")
    captions = list(read_captions(tiny_data_dir / "train_caps.txt"))
    k = len(captions) // TINY_DATA.num_train
    # index[c]: the image caption c is shown with
    index = caption_level_noise(TINY_DATA.num_train, k, AUDIT_NOISE, seed=0)
    lines = np.argsort(index, kind="stable")  # line p of the file: a caption whose image index[...] is p // k
    (directory / "train_caps.txt").write_text("".join(captions[c] + "\n" for c in lines), encoding="utf-8")
    return directory, lines // k != np.arange(len(lines)) // k


def save_processor(directory: Path) -> None:
    CLIPImageProcessor(size={"shortest_edge": 16}, crop_size={"height": 16, "width": 16}).save_pretrained(directory)


def write_imagefolder(root: Path, sizes: dict[str, int] = IMAGEFOLDER_SIZES, captions_per_image: int = 2) -> Path:
    """Split folders of generated PNGs (sizes vary) with a metadata.jsonl of k captions per image."""
    rng = np.random.default_rng(0)
    for split, count in sizes.items():
        folder = root / split
        folder.mkdir(parents=True)
        rows = []
        for i in range(count):
            pixels = rng.integers(0, 256, (20 + i, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:03d}.png")
            rows.append(
                {
                    "file_name": f"{i:03d}.png",
                    "captions": [f"{split} image {i} view {j}" for j in range(captions_per_image)],
                }
            )
        (folder / "metadata.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return root


@pytest.fixture(scope="module")
def raw_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """train / validation / test folders of 7 / 11 / 11 generated PNGs (sizes vary), 2 captions each."""
    return write_imagefolder(tmp_path_factory.mktemp("raw"))


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny dual CLIP checkpoint (CLIPModel: text_config + vision_config), saved."""
    directory = tmp_path_factory.mktemp("tiny_clip")
    torch.manual_seed(0)
    config = CLIPConfig(text_config=TINY_CLIP_TEXT, vision_config=TINY_CLIP_VISION, projection_dim=8)
    CLIPModel(config).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def tower_dir(tmp_path_factory: pytest.TempPathFactory, clip_dir: Path) -> Path:
    """The tiny dual CLIP of ``clip_dir`` with a 16 px image processor."""
    directory = shutil.copytree(clip_dir, tmp_path_factory.mktemp("clip_pixels") / "clip")
    save_processor(directory)
    return directory


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1: any HTTP request huggingface_hub would make raises instead."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def pip_installed(package: Path, directory: Path) -> dict[str, str]:
    """Install the package at ``package`` as a user would (pip, no network: ``--no-deps --no-build-isolation``) into
    ``directory / "site"``; return the environment that puts it on the path of a subprocess."""
    source, site = directory / "src", directory / "site"
    shutil.copytree(package, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--target", str(site)]
    subprocess.run([*pip, str(source)], check=True, capture_output=True)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def tiny_config(output_dir: Path, plugins: list[str], **overrides) -> TrainConfig:
    """Settings small enough for a unit-test budget (a few seconds per epoch)."""
    values = dict(
        plugins=plugins,
        output_dir=str(output_dir),
        epochs=3,
        warmup_epochs=1,
        batch_size=32,
        eval_batch_size=64,
        lr_decay_epochs=[2],
        progress=False,
    )
    values.update(overrides)
    return TrainConfig(**values)


def noisy_trainer(data_dir: Path, config: TrainConfig, callbacks: list[TrainerCallback] | None = None) -> Trainer:
    """A trainer on ``data_dir`` with 40% caption noise and the tiny model (and ``callbacks``, if given)."""
    data = prepare_data(DataArguments(data_dir=str(data_dir), noise_ratio=0.4), config.output_dir)
    model_config = NCLConfig(image_dim=data.image_dim, vocab_size=len(data.vocab), embed_dim=32, word_dim=16)
    return Trainer(
        config, model_config, data.train, data.val, task=PAIRS, callbacks=callbacks, plugins=run_plugins(config)
    )


class Interrupted(Exception):
    """Raised by a test to kill training at a chosen step."""


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_module(name: str) -> ModuleType:
    """``benchmarks/NAME.py``, loaded from its file with ``benchmarks/`` importable while it loads
    (the scripts import each other by their own directory)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def record_block_budgets(monkeypatch: pytest.MonkeyPatch, module: str) -> list[int]:
    """Patch ``plan_blocks`` where ``module`` (``hfncl.models.sgraf_nodes``, ``hfncl.models.scan``) calls it so that
    each call's block budget is appended to the returned list; the blocks are planned as before."""
    from hfncl.models.sgraf_kernels import plan_blocks

    budgets: list[int] = []

    def recording_plan(*args):
        budgets.append(args[-1])
        return plan_blocks(*args)

    monkeypatch.setattr(f"{module}.plan_blocks", recording_plan)
    return budgets


def local_nodes_of_regions(alpha, regions, words, weight, bias):
    """:func:`~hfncl.models.sgraf_kernels.local_nodes` with the regions' Gram matrices formed from them (under
    the caller's autocast, if any), as the heads form them once per image."""
    from hfncl.models.sgraf_kernels import local_nodes, region_gram

    return local_nodes(alpha, regions, region_gram(regions), words, weight, bias)


def untrained_model(
    directory: Path, captions: list[str], image_dim: int | None = None, tower: Path | None = None
) -> Path:
    """A checkpoint of an untrained model with a vocabulary of ``captions``: for ``image_dim`` region features, or
    with the pixel tower ``tower`` and its image processor."""
    vocab = Vocabulary.build(captions)
    pixels = {"image_tower": "transformer", "image_tower_name": str(tower)}
    image = {"image_dim": image_dim} if tower is None else pixels
    torch.manual_seed(0)
    NCLModel(NCLConfig(**image, vocab_size=len(vocab), embed_dim=8, word_dim=8)).save_pretrained(directory)
    vocab.save_json(directory / "vocab.json")
    if tower is not None:
        save_image_processor(CLIPImageProcessor.from_pretrained(tower), directory)
    return directory
