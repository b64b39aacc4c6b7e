"""Noisy correspondence: which image each training caption is paired with.

Two protocols are in use, and their numbers are not comparable:

* **NCR protocol** (caption level; NCR, BiCro, UGNCL, GSC): a share of the captions is
  picked at random and the images of the picked captions are shuffled among them.
  The index has one entry per caption: ``index[c]`` is the image caption ``c`` is
  paired with; caption ``c`` truly describes image ``c // k``.
* **DECL/RCL protocol** (image level): a share of the images is picked and their
  targets are permuted among themselves, so all k captions of image ``i`` are paired
  with image ``index[i]``.

Both are seeded through ``np.random.default_rng(seed)`` and never touch a global RNG.
Index files are ``.npy`` int64 arrays of either length, so the files published with
BiCro (caption level) and RCL (image level) are read as they are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hfncl.choices import NOISE_KINDS
from hfncl.data.precomp import DataFormatError
from hfncl.registry import NOISE_PROTOCOLS, PluginError, registered_entry_points
from hfncl.types import NoiseProtocol


def protocol_names() -> dict[str, str]:
    """The registered protocol's name of each noise kind (group ``hfncl.noise_protocols``).

    Raises:
        PluginError: naming the entry point, for an object that is not a :class:`NoiseProtocol` of a known kind, or
            two protocols of one kind.
    """
    names: dict[str, str] = {}
    for name, entry_point in registered_entry_points(NOISE_PROTOCOLS, "Noise protocol").items():
        protocol = entry_point.load()
        if not isinstance(protocol, NoiseProtocol) or protocol.kind not in NOISE_KINDS:
            raise PluginError(
                f"noise protocol {name!r} ({entry_point.value}) must be a NoiseProtocol whose kind is one of "
                f"{NOISE_KINDS}, got {protocol!r}"
            )
        if protocol.kind in names:
            raise PluginError(
                f"noise protocols {names[protocol.kind]!r} and {name!r} both draw {protocol.kind!r} noise"
            )
        names[protocol.kind] = name
    missing = [kind for kind in NOISE_KINDS if kind not in names]
    if missing:
        raise PluginError(f"no noise protocol is registered in group {NOISE_PROTOCOLS!r} for kind(s) {missing}")
    return names


def caption_level_noise(num_images: int, captions_per_image: int, ratio: float, seed: int) -> np.ndarray:
    """NCR protocol: (num_images * k,) int64, entry ``c`` = the image caption ``c`` is paired with.

    Starts from the clean pairing ``arange(n_captions) // k``, picks
    ``int(ratio * n_captions)`` captions uniformly without replacement and shuffles their
    images among them. As in NCR's code, a picked caption may land on its own image by
    chance, so slightly fewer than ``int(ratio * n_captions)`` pairs end up wrong.
    """
    _check_sizes(num_images, captions_per_image)
    clean = np.arange(num_images * captions_per_image, dtype=np.int64) // captions_per_image
    index, _ = shuffle_subset(clean, ratio, seed)
    return index


def image_level_noise(num_images: int, ratio: float, seed: int) -> np.ndarray:
    """DECL/RCL protocol: (num_images,) int64, entry ``i`` = the image all captions of ``i`` are paired with.

    Picks ``int(ratio * num_images)`` images uniformly without replacement and permutes
    their targets among themselves (the result is a permutation of the images).
    """
    _check_sizes(num_images, 1)
    index, _ = shuffle_subset(np.arange(num_images, dtype=np.int64), ratio, seed)
    return index


def shuffle_subset(values: np.ndarray, ratio: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Shuffle ``int(ratio * len(values))`` randomly picked entries of ``values`` among themselves.

    Returns the shuffled copy and the sorted positions that were picked.
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"noise ratio must be in [0, 1], got {ratio}")
    rng = np.random.default_rng(seed)
    shuffled = np.array(values, dtype=np.int64)
    picked = np.sort(rng.choice(len(shuffled), size=int(ratio * len(shuffled)), replace=False))
    shuffled[picked] = rng.permutation(shuffled[picked])
    return shuffled, picked


def pairing_protocol(caption_to_image: np.ndarray, captions_per_image: int) -> str | None:
    """The protocol of a caption-level pairing (:func:`protocol_names`): the ``image`` kind's when every image's
    captions are paired with one image together, the ``caption`` kind's when some image's captions are split, ``None``
    when every pair is clean. With one caption per image the two kinds coincide: the ``caption`` kind's."""
    pairing = np.asarray(caption_to_image)
    if clean_mask(pairing, captions_per_image).all():
        return None
    together = (pairing.reshape(-1, captions_per_image) == pairing[::captions_per_image, None]).all()
    return protocol_names()["image" if together and captions_per_image > 1 else "caption"]


def make_noise(kind: str, num_images: int, captions_per_image: int, ratio: float, seed: int) -> np.ndarray:
    """Caption-level pairing of noise ``kind``: ``"caption"`` (NCR protocol) or ``"image"`` (DECL/RCL protocol)."""
    if kind == "caption":
        return caption_level_noise(num_images, captions_per_image, ratio, seed)
    if kind == "image":
        return caption_pairing(image_level_noise(num_images, ratio, seed), num_images, captions_per_image)
    raise ValueError(f"noise kind must be one of {NOISE_KINDS}, got {kind!r}")


def caption_pairing(
    index: np.ndarray, num_images: int, captions_per_image: int, *, source: str = "noise index"
) -> np.ndarray:
    """The caption-level pairing (num_images * k,) int64 of a caption- or image-level index.

    A length of ``num_images * k`` is caption level already; a length of ``num_images``
    is image level and each entry is repeated k times. Any other length, a non-integer
    dtype or an image index outside ``0..num_images - 1`` raises :class:`DataFormatError`
    (``source`` names the array in the message).
    """
    _check_sizes(num_images, captions_per_image)
    index = np.asarray(index)
    num_captions = num_images * captions_per_image
    if index.ndim != 1 or len(index) not in (num_captions, num_images):
        raise DataFormatError(
            f"{source}: shape {index.shape}, expected ({num_captions},) (caption level: {num_images} images x "
            f"{captions_per_image} captions) or ({num_images},) (image level)"
        )
    if index.dtype.kind not in "iu":
        raise DataFormatError(f"{source}: dtype {index.dtype}, expected integer image indices")
    outside = (index < 0) | (index >= num_images)
    if outside.any():
        position = int(np.flatnonzero(outside)[0])
        raise DataFormatError(
            f"{source}: entry {position} is {index[position]}, expected an image index in 0..{num_images - 1}"
        )
    index = index.astype(np.int64)
    if len(index) == num_captions:
        return index
    return np.repeat(index, captions_per_image)


def clean_mask(caption_to_image: np.ndarray, captions_per_image: int) -> np.ndarray:
    """Bool mask of the correctly paired captions: ``caption_to_image[c] == c // k``."""
    caption_to_image = np.asarray(caption_to_image)
    return caption_to_image == np.arange(len(caption_to_image)) // captions_per_image


def save_noise_index(path: str | Path, index: np.ndarray) -> Path:
    """Save ``index`` as an int64 ``.npy`` file (``np.save``; ``.npy`` is appended if missing).

    Returns the path written.
    """
    path = Path(path)
    if path.suffix != ".npy":
        path = path.with_name(path.name + ".npy")
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.asarray(index, dtype=np.int64), allow_pickle=False)
    return path


def load_noise_index(path: str | Path, num_images: int, captions_per_image: int) -> np.ndarray:
    """Read a caption- or image-level noise index file; return the caption-level pairing.

    Reads ours and the published BiCro (caption level) and RCL (image level) files as
    they are; see :func:`caption_pairing` for the accepted shapes.
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: noise index file not found")
    try:
        index = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise DataFormatError(f"{path}: not a readable .npy integer array ({err})") from None
    if not isinstance(index, np.ndarray):
        raise DataFormatError(f"{path}: expected a single .npy array, found {type(index).__name__}")
    return caption_pairing(index, num_images, captions_per_image, source=str(path))


def _check_sizes(num_images: int, captions_per_image: int) -> None:
    if num_images < 1 or captions_per_image < 1:
        raise ValueError(f"num_images and captions_per_image must be >= 1, got {num_images} and {captions_per_image}")
