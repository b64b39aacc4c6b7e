"""The label-noise recipes as users run them: --help, a clear error for a missing path, real Pascal features."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _shared_data import shared_data_dir

REPO = Path(__file__).resolve().parents[1]
# Each --help starts a Python with torch and transformers (seconds): one recipe in the fast suite.
RECIPES = (
    "dmcm_wiki.py",
    pytest.param("dmcm_pascal.py", marks=pytest.mark.slow),
    pytest.param("dmcm_xmedianet.py", marks=pytest.mark.slow),
)


def _recipe(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "recipes" / name), *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_help_names_the_data_and_noise_arguments(name):
    completed = _recipe(name, "--help")
    assert completed.returncode == 0
    for argument in ("--data-path", "--noise-ratio", "--noise-kind", "--label-base", "--resume", "--embed-dim"):
        assert argument in completed.stdout


def test_missing_feature_file_is_a_clear_error(tmp_path):
    completed = _recipe("dmcm_wiki.py", "--data-path", str(tmp_path / "nowhere.h5"), "--output-dir", str(tmp_path))
    assert completed.returncode == 2 and "nowhere.h5" in completed.stderr and "not found" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_wikipedia_recipe_tests_the_last_epoch_on_all_462_test_samples(tmp_path):
    """The paper's protocol: no validation split, the whole test split (462 for Wikipedia) tests."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(0)
    path = tmp_path / "wiki.h5"
    with h5py.File(path, "w") as handle:
        for split, n in (("train", 60), ("test", 462)):
            labels = np.arange(n) % 10
            handle[f"{split}_imgs_deep"] = rng.normal(size=(n, 8)).astype(np.float32) + labels[:, None]
            handle[f"{split}_texts"] = rng.normal(size=(n, 6)).astype(np.float32) + labels[:, None]
            handle[f"{split}_imgs_labels"] = handle[f"{split}_texts_labels"] = labels + 1
    completed = _recipe(
        "dmcm_wiki.py", "--data-path", str(path), "--label-base", "1", "--noise-ratio", "0.2",
        "--epochs", "2", "--warmup-epochs", "1", "--batch-size", "20", "--hidden-dim", "16", "--embed-dim", "8",
        "--no-progress", "--no-plot-divisions", "--output-dir", str(tmp_path / "run"),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads((tmp_path / "run" / "results.json").read_text())
    assert (result["best_epoch"], result["best_val_mean_map"]) == (None, None)
    assert not any(key.startswith("val/") for record in result["history"] for key in record)
    assert not (tmp_path / "run" / "best").exists() and 0 < result["test"]["mean_map"] <= 1


@pytest.mark.slow
def test_pascal_sentence_features_train_to_a_useful_map(tmp_path):
    """Real features (two text encoders' views of Pascal-Sentence, 20 classes) at 40% symmetric noise."""
    data = shared_data_dir() / "pascal_sentence"
    if not (data / "labels.npy").is_file():
        pytest.skip(f"shared data {data} is not available")
    completed = _recipe(
        "dmcm_pascal.py",
        "--image-features", str(data / "sentence_features.npy"),
        "--text-features", str(data / "sentence_features_doc2vec_bert_768.npy"),
        "--labels", str(data / "labels.npy"),
        "--noise-ratio", "0.4", "--epochs", "8", "--hidden-dim", "256", "--no-progress",
        "--output-dir", str(tmp_path),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["true_noise_ratio"] == {"image": 0.4, "text": 0.4}
    # 20 balanced classes: a random ranking scores about 0.05; the learned one far more.
    assert result["test"]["mean_map"] > 0.5, result["test"]
    assert result["division"]["division/auc"] > 0.7
