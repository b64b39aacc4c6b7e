"""A seeded generator of category-labelled two-modality features, for tests, the demo and benchmarks.

Each class k has a centre mu_k in a latent space; sample j of class y_j has a latent
h_j = mu_{y_j} + ``sample_noise`` * e_j shared by its two modalities (so the image and
the text of a sample belong together beyond their class). Each modality m sees it
through its own fixed random map and non-linearity, x_j^m = tanh(A_m h_j) +
``modality_noise`` * e_j^m, in its own dimension. Classes overlap by the noise, so a
model that memorises wrong labels loses retrieval quality.

The splits are written as ``.npy`` files in the ``per_file`` layout that
:func:`hfncl.data.load_labelled_dataset` reads (``{split}_img.npy``, ``{split}_txt.npy``,
``{split}_img_lab.npy``, ``{split}_txt_lab.npy`` for ``train``, ``valid``, ``test``),
so generated data travel the same path as real feature files.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class LabelledSyntheticConfig:
    """Size and difficulty of the generated label-noise benchmark (samples per class and split)."""

    num_classes: int = 10
    train_per_class: int = 40
    valid_per_class: int = 10
    test_per_class: int = 20
    latent_dim: int = 16
    image_dim: int = 64
    text_dim: int = 48
    class_spread: float = 1.0
    sample_noise: float = 0.9
    modality_noise: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_classes < 2:
            raise ValueError(f"LabelledSyntheticConfig.num_classes must be >= 2, got {self.num_classes}")
        for name in ("train_per_class", "valid_per_class", "test_per_class", "latent_dim", "image_dim", "text_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"LabelledSyntheticConfig.{name} must be >= 1, got {getattr(self, name)}")


def generate_labelled_arrays(config: LabelledSyntheticConfig) -> dict[str, dict[str, np.ndarray]]:
    """Every split's ``img``, ``txt`` (float32) and ``img_lab`` / ``txt_lab`` (int64, equal) arrays."""
    rng = np.random.default_rng(config.seed)
    centres = rng.normal(0.0, config.class_spread, size=(config.num_classes, config.latent_dim))
    maps = {
        "img": rng.normal(0.0, 1.0 / np.sqrt(config.latent_dim), size=(config.latent_dim, config.image_dim)),
        "txt": rng.normal(0.0, 1.0 / np.sqrt(config.latent_dim), size=(config.latent_dim, config.text_dim)),
    }
    sizes = {"train": config.train_per_class, "valid": config.valid_per_class, "test": config.test_per_class}
    out = {}
    for split in SPLITS:
        labels = rng.permutation(np.repeat(np.arange(config.num_classes), sizes[split])).astype(np.int64)
        latent = centres[labels] + config.sample_noise * rng.normal(size=(labels.size, config.latent_dim))
        arrays: dict[str, np.ndarray] = {"img_lab": labels, "txt_lab": labels.copy()}
        for name, projection in maps.items():
            clean = np.tanh(latent @ projection)
            arrays[name] = (clean + config.modality_noise * rng.normal(size=clean.shape)).astype(np.float32)
        out[split] = arrays
    return out


def generate_labelled(directory: str | Path, config: LabelledSyntheticConfig = LabelledSyntheticConfig()) -> Path:
    """Write the benchmark to ``directory`` (``per_file`` layout, plus ``config.json``) and return it.

    Deterministic in ``config.seed``; an existing directory generated with the same
    config is reused as it is.
    """
    directory = Path(directory)
    marker = directory / "config.json"
    wanted = json.dumps(asdict(config), sort_keys=True)
    if marker.is_file() and marker.read_text() == wanted:
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    for split, arrays in generate_labelled_arrays(config).items():
        for name, array in arrays.items():
            np.save(directory / f"{split}_{name}.npy", array)
    marker.write_text(wanted)
    return directory
