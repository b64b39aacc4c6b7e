"""Training splits that bound what a method can reach under noise, for benchmarks only.

A method never sees which training pairs are wrong. A benchmark does: it generated the
noise. From the same noise index that :func:`hfncl.tasks.pair_data.prepare_data` builds for a
ratio, seed and noise kind (:func:`hfncl.data.noise.make_noise`: NCR's caption level or
DECL's image level), this module writes two extra
training splits into the benchmark's precomp directory, beside ``train``:

- the **oracle** split ``train_oracle_<ratio>_seed<seed>`` (``train_oracle_image_...`` under
  image-level noise): exactly the clean pairs of the
  noisy training set, one caption per row (an image with c clean captions appears c
  times: within a batch, a repeated image is a negative of the other's caption, as two
  captions of one image already are in the full split);
- the **half-data control** ``train_images_<count>``: every caption of the first ``count``
  training images, chosen so that it holds as many clean pairs as the noisy set does
  (NCR's ablation control, the oracle without its choice of pairs).

Both reuse ``dev`` and ``test`` unchanged and share :func:`training_vocabulary`, the
vocabulary of the full training split, so the model is the same as the methods' model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hfncl.data.noise import make_noise
from hfncl.data.precomp import read_captions
from hfncl.data.vocab import Vocabulary


def _train_split(data_dir: Path) -> tuple[np.ndarray, list[str], int]:
    """The full training split: memory-mapped features, captions, captions per image."""
    images = np.load(data_dir / "train_ims.npy", mmap_mode="r", allow_pickle=False)
    captions = list(read_captions(data_dir / "train_caps.txt"))
    return images, captions, len(captions) // len(images)


def clean_caption_mask(data_dir: str | Path, ratio: float, seed: int, kind: str = "caption") -> np.ndarray:
    """``(n_captions,)`` bool: the training captions that the noise of ``kind`` (``"caption"``: NCR protocol,
    ``"image"``: DECL protocol) at ``ratio`` and ``seed`` leaves on their image."""
    images, captions, per_image = _train_split(Path(data_dir))
    return _clean_captions(len(images), per_image, ratio, seed, kind)


def _clean_captions(num_images: int, per_image: int, ratio: float, seed: int, kind: str = "caption") -> np.ndarray:
    pairing = make_noise(kind, num_images, per_image, ratio, seed)
    return pairing == np.arange(num_images * per_image) // per_image


def _write_split(data_dir: Path, name: str, images: np.ndarray, rows: np.ndarray, captions: list[str]) -> str:
    """Write split ``name`` (``images[rows]`` and ``captions``) once; its ``_ims.npy`` appears last, when complete."""
    target = data_dir / f"{name}_ims.npy"
    if not target.exists():
        (data_dir / f"{name}_caps.txt").write_text("\n".join(captions) + "\n", encoding="utf-8")
        partial = data_dir / f"{name}.partial.npy"
        np.save(partial, np.asarray(images[rows]))
        partial.replace(target)
    return name


def oracle_split(data_dir: str | Path, ratio: float, seed: int, kind: str = "caption") -> str:
    """Write (once) the split of exactly the clean training pairs at ``ratio``, ``seed`` and noise ``kind``; returns
    its name."""
    data_dir = Path(data_dir)
    images, captions, per_image = _train_split(data_dir)
    kept = np.flatnonzero(_clean_captions(len(images), per_image, ratio, seed, kind))
    name = f"train_oracle_{'' if kind == 'caption' else kind + '_'}{round(ratio * 100)}_seed{seed}"
    return _write_split(data_dir, name, images, kept // per_image, [captions[c] for c in kept])


def half_data_split(data_dir: str | Path, ratio: float) -> str:
    """Write (once) the split of the first ``round((1 - ratio) * n_images)`` training images with all their captions."""
    data_dir = Path(data_dir)
    images, captions, per_image = _train_split(data_dir)
    count = round((1.0 - ratio) * len(images))
    return _write_split(data_dir, f"train_images_{count}", images, np.arange(count), captions[: count * per_image])


def training_vocabulary(data_dir: str | Path) -> Path:
    """Write (once) the vocabulary that the methods build from the full training split; returns its path."""
    path = Path(data_dir) / "train_vocab.json"
    if not path.exists():
        Vocabulary.build(_train_split(Path(data_dir))[1]).save_json(path)
    return path
