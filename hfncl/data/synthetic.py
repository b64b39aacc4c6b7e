"""A seeded generator of precomp-like image-text data for demos, tests and benchmarks.

Latent concepts generate both modalities. Each concept has a visual prototype and a
few words. An image holds ``concepts_per_image`` concepts; each concept appears in
``regions_per_concept`` region features (prototype + Gaussian noise, a per-image
appearance shift, and per-region clutter), and the remaining regions are background.
Each of the image's captions names ``concepts_per_caption`` of its concepts with one
of their words, among filler words, in random order. Retrieval is hard because
images share concepts and captions name only some of them.

The output is written in the SCAN precomp format (``{split}_ims.npy``,
``{split}_caps.txt``) so it travels the same path as real data.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SPLITS = ("train", "dev", "test")

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


@dataclass(frozen=True)
class SyntheticConfig:
    """Size and difficulty of the generated benchmark."""

    num_train: int = 3000
    num_dev: int = 300
    num_test: int = 500
    captions_per_image: int = 5
    num_concepts: int = 64
    concepts_per_image: int = 3
    concepts_per_caption: int = 2
    words_per_concept: int = 2
    num_fillers: int = 12
    fillers_per_caption: int = 2
    num_regions: int = 8
    regions_per_concept: int = 2
    feature_dim: int = 64
    region_noise: float = 0.4
    appearance_shift: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.concepts_per_image * self.regions_per_concept > self.num_regions:
            raise ValueError(
                f"SyntheticConfig: concepts_per_image * regions_per_concept = "
                f"{self.concepts_per_image * self.regions_per_concept} exceeds num_regions = {self.num_regions}"
            )
        if not 1 <= self.concepts_per_caption <= self.concepts_per_image <= self.num_concepts:
            raise ValueError("SyntheticConfig: need 1 <= concepts_per_caption <= concepts_per_image <= num_concepts")


SIZES = {
    "tiny": SyntheticConfig(num_train=200, num_dev=50, num_test=100),
    "quick": SyntheticConfig(num_train=600, num_dev=100, num_test=200),
    "small": SyntheticConfig(num_train=800, num_dev=200, num_test=500),
    "full": SyntheticConfig(),
}
"""The generated benchmarks by name: ``hfncl demo --size`` and ``hfncl data synthetic --size`` (quick: the demo's)."""


def _words(rng: np.random.Generator, count: int) -> list[str]:
    """Distinct pronounceable pseudo-words."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < count:
        syllables = rng.integers(2, 4)
        word = "".join(rng.choice(list(_CONSONANTS)) + rng.choice(list(_VOWELS)) for _ in range(syllables))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class _World:
    """The concepts shared by every split of one generated benchmark."""

    def __init__(self, config: SyntheticConfig, rng: np.random.Generator) -> None:
        self.config = config
        self.prototypes = rng.standard_normal((config.num_concepts, config.feature_dim)).astype(np.float32)
        self.background = rng.standard_normal((8, config.feature_dim)).astype(np.float32)
        words = _words(rng, config.num_concepts * config.words_per_concept + config.num_fillers)
        split_at = config.num_concepts * config.words_per_concept
        self.concept_words = np.array(words[:split_at]).reshape(config.num_concepts, config.words_per_concept)
        self.fillers = words[split_at:]

    def split(self, num_images: int, rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
        c = self.config
        images = np.empty((num_images, c.num_regions, c.feature_dim), dtype=np.float32)
        captions: list[str] = []
        for i in range(num_images):
            concepts = rng.choice(c.num_concepts, size=c.concepts_per_image, replace=False)
            shift = c.appearance_shift * rng.standard_normal(c.feature_dim)
            regions = [self.prototypes[k] + shift for k in concepts for _ in range(c.regions_per_concept)]
            while len(regions) < c.num_regions:
                regions.append(self.background[rng.integers(len(self.background))] + shift)
            noisy = np.stack(regions) + c.region_noise * rng.standard_normal((c.num_regions, c.feature_dim))
            images[i] = noisy[rng.permutation(c.num_regions)]
            for _ in range(c.captions_per_image):
                named = rng.choice(concepts, size=c.concepts_per_caption, replace=False)
                tokens = [self.concept_words[k, rng.integers(c.words_per_concept)] for k in named]
                tokens += [self.fillers[j] for j in rng.integers(len(self.fillers), size=c.fillers_per_caption)]
                captions.append(" ".join(tokens[j] for j in rng.permutation(len(tokens))))
        return images, captions


def generate_precomp(directory: str | Path, config: SyntheticConfig = SyntheticConfig()) -> Path:
    """Write train/dev/test splits in the SCAN precomp format; returns the directory.

    The same config always writes the same bytes; an existing directory written from
    the same config is reused.
    """
    directory = Path(directory)
    stamp = directory / "synthetic_config.json"

    wanted = json.dumps(asdict(config), sort_keys=True)
    if stamp.exists() and stamp.read_text() == wanted:
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(config.seed)
    world = _World(config, rng)
    sizes = {"train": config.num_train, "dev": config.num_dev, "test": config.num_test}
    for split in SPLITS:
        images, captions = world.split(sizes[split], rng)
        np.save(directory / f"{split}_ims.npy", images)
        (directory / f"{split}_caps.txt").write_text("\n".join(captions) + "\n")
    stamp.write_text(wanted)
    return directory
