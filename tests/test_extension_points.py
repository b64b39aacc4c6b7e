"""Data formats and similarity heads are extension points: a package registers them in the ``hfncl.data_formats``
and ``hfncl.similarity_heads`` entry-point groups, and a run uses them by name, with no change to hfncl.

``tests/extension_package`` is such a package (an ``npz_pairs`` format and a ``bilinear`` head); the end-to-end
test installs it with pip, as a user would, and trains with both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import pip_installed

from hfncl import choices
from hfncl.choices import check_format_name
from hfncl.data.formats import detect_format, get_format
from hfncl.models import NCLConfig, NCLModel, heads

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "tests" / "extension_package"
INSTALLED_HEADS = heads.installed_heads()


def npz_benchmark(precomp_dir: Path, out: Path) -> Path:
    """The splits of a precomp directory rewritten as ``{split}.npz`` (regions and k captions per image)."""
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        regions = np.load(precomp_dir / f"{split}_ims.npy")
        captions = (precomp_dir / f"{split}_caps.txt").read_text().splitlines()
        np.savez(out / f"{split}.npz", regions=regions, captions=np.array(captions).reshape(len(regions), -1))
    return out


@pytest.fixture
def example_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example package importable and its two entry points served as installed (no pip)."""
    monkeypatch.syspath_prepend(str(PACKAGE))
    monkeypatch.setattr(
        choices,
        "installed_formats",
        lambda: {"npz_pairs": EntryPoint("npz_pairs", "hfncl_extension_example.formats:NPZ_PAIRS", "hfncl.data_formats")},
    )
    head = EntryPoint("bilinear", "hfncl_extension_example.heads:build_bilinear_head", "hfncl.similarity_heads")
    monkeypatch.setattr(heads, "installed_heads", lambda: {**INSTALLED_HEADS, "bilinear": head})


def test_unknown_names_are_refused_in_one_line_listing_what_there_is() -> None:
    with pytest.raises(ValueError, match=r"^DataArguments.data_format must be one of \('auto', 'precomp', 'imagefolder'"):
        check_format_name("parquet")
    with pytest.raises(heads.UnknownHeadError, match=r"^NCLConfig.similarity must be one of \('cosine', 'saf', 'scan', 'sgr'"):
        NCLConfig(similarity="bilinear")


def test_a_registered_format_is_detected_and_read_and_a_registered_head_scores(
    example_registered: None, micro_data_dir: Path, tmp_path: Path
) -> None:
    data_dir = npz_benchmark(micro_data_dir, tmp_path / "npz")
    assert detect_format(data_dir, "train") == "npz_pairs" and detect_format(micro_data_dir, "train") == "precomp"
    train = get_format("npz_pairs").load_split(data_dir, "train", feature_dtype="float32", image_processor=None, like=None)
    assert train.num_images == 16 and train.captions_per_image == 5 and train.image_shape == (6, 8)
    precomp = get_format("precomp").load_split(
        micro_data_dir, "train", feature_dtype="float32", image_processor=None, like=None
    )
    assert list(train.captions) == list(precomp.captions)
    np.testing.assert_array_equal(train.image_inputs([3, 0]), precomp.image_inputs([3, 0]))

    model = NCLModel(NCLConfig(similarity="bilinear", image_dim=8, vocab_size=20, embed_dim=8, word_dim=8))
    assert type(model.networks[0].head).__name__ == "BilinearHead"
    images = model.networks[0].encode_image(torch.rand(4, 6, 8, generator=torch.Generator().manual_seed(0)))
    assert images.shape == (4, 6, 9) and model.networks[0].head(images, images).shape == (4, 4)


def test_an_installed_package_adds_a_format_and_a_head_and_trains_with_them(micro_data_dir: Path, tmp_path: Path) -> None:
    env = pip_installed(PACKAGE, tmp_path)
    data_dir = npz_benchmark(micro_data_dir, tmp_path / "npz")
    trained = subprocess.run(
        [sys.executable, "-m", "hfncl.cli", "train", "--plugins", "vsepp", "--data-dir", str(data_dir)]
        + ["--data-format", "npz_pairs", "--similarity", "bilinear", "--output-dir", str(tmp_path / "run")]
        + ["--epochs", "1", "--batch-size", "8", "--embed-dim", "8", "--word-dim", "8", "--noise-ratio", "0.2"]
        + ["--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["history"][0]["val/rsum"] > 0 and results["test"]["rsum"] > 0
    config = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert config["similarity"] == "bilinear"
