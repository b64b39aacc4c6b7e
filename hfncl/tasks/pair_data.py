"""The data of a pairs run: the splits read in their format, the vocabulary and the noisy training pairs
(:func:`prepare_data`, a :class:`PairData`), and the data's description for the model card.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hfncl.arguments import AUTO, DataArguments
from hfncl.data import (
    DataFormatError,
    NoisyPairDataset,
    TokenizerVocabulary,
    Vocabulary,
    caption_level_noise,
    caption_pairing,
    image_level_noise,
    load_noise_index,
    save_noise_index,
)
from hfncl.data.formats import detect_format, get_format
from hfncl.data.image_processor import image_processor_from_pretrained
from hfncl.data.noise import pairing_protocol, protocol_names
from hfncl.engine.encoding import RetrievalSplit
from hfncl.hub import DataDescription


def _noise_index(args: DataArguments, num_images: int, captions_per_image: int, output_dir: Path) -> np.ndarray:
    """The caption-level pairing of the training set: read from ``noise_file``, or generated and saved."""
    if args.noise_file:
        return load_noise_index(args.noise_file, num_images, captions_per_image)
    if args.noise_kind == "caption":
        index = caption_level_noise(num_images, captions_per_image, args.noise_ratio, args.noise_seed)
    else:
        index = image_level_noise(num_images, args.noise_ratio, args.noise_seed)
    output_dir.mkdir(parents=True, exist_ok=True)
    save_noise_index(output_dir / "noise_index.npy", index)
    return caption_pairing(index, num_images, captions_per_image)


def data_format(requested: str, data_dir: Path, split: str, image_tower_name: str | None) -> str:
    """The name of the data format (:mod:`hfncl.data.formats`) to read ``split`` of ``data_dir`` with, checked
    against the model's image tower.

    ``requested`` is ``DataArguments.data_format`` (``"auto"``: the first installed format, or the imagefolder,
    that recognises the split, else precomp); ``image_tower_name`` is the source of a pixel image tower, ``None``
    for the region tower.

    Raises:
        DataFormatError: naming the data directory and ``NCLConfig.image_tower`` when raw images meet a region
            tower or precomputed features a pixel tower.
    """
    chosen = detect_format(data_dir, split) if requested == AUTO else requested
    pixels = get_format(chosen).reads_pixels
    if pixels and image_tower_name is None:
        raise DataFormatError(
            f"{data_dir} is an {chosen} of raw images, but the model's image tower (NCLConfig.image_tower) is "
            "'regions', which reads precomputed features: train on pixels with a vision tower (--image-tower "
            f"<CLIP model>), or extract features first (hfncl extract {data_dir} OUT --model <image model>) "
            "and train on OUT"
        )
    if not pixels and image_tower_name is not None:
        raise DataFormatError(
            f"{data_dir} holds precomputed image features ({chosen}), but the model's image tower reads pixels: "
            f"NCLConfig.image_tower 'transformer' (image_tower_name {image_tower_name!r}): give an "
            "imagefolder of raw images (a folder per split with its images and a metadata.jsonl), or leave "
            "image_tower at 'regions'"
        )
    return chosen


@dataclass(frozen=True)
class PairData:
    """What a pairs run trains, validates and tests on (:func:`prepare_data`).

    Attributes:
        train: the training pairs, a share of them re-paired by the noise.
        val, test: the validation and test splits, encoded for retrieval.
        vocab: the SCAN word vocabulary, or the text tower's tokenizer.
        image_dim: size of a region feature; ``None`` when the image tower reads pixels.
        image_regions: regions per image; ``None`` when the image tower reads pixels.
        image_processor: the pixel image tower's image processor; ``None`` for region features.
        noise_ratio: the share of training pairs the noise corrupts (:func:`effective_noise_ratio`).
    """

    train: NoisyPairDataset
    val: RetrievalSplit
    test: RetrievalSplit
    vocab: Vocabulary | TokenizerVocabulary
    image_dim: int | None
    image_regions: int | None
    image_processor: Any | None
    noise_ratio: float


def prepare_data(
    args: DataArguments,
    output_dir: str | Path,
    tokenizer: str | None = None,
    image_processor: str | None = None,
) -> PairData:
    """Load the splits, the vocabulary and the noisy training pairs.

    With ``tokenizer`` (the Hub id or directory of a transformer text tower), captions are
    tokenised by its ``AutoTokenizer`` (:class:`~hfncl.data.TokenizerVocabulary`) instead
    of a word vocabulary. The splits are read in ``args.data_format`` (:mod:`hfncl.data.formats`;
    :func:`data_format`). With ``image_processor`` (the Hub id or directory of a pixel image
    tower), the data are raw images (an imagefolder) whose pixel values that source's
    ``AutoImageProcessor`` makes (:class:`~hfncl.data.PixelSplit`, the processor returned as
    ``image_processor``; ``image_dim`` is then ``None``); without it, precomputed features
    (precomp), of the dimension the training split holds.

    Raises:
        DataFormatError: a missing directory, malformed data, or data that do not fit the
            image tower (see :func:`data_format`).
    """
    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        raise DataFormatError(f"Data directory {str(data_dir)!r} does not exist or is not a directory")
    names = (args.train_split, args.val_split, args.test_split)
    chosen = get_format(data_format(args.data_format, data_dir, args.train_split, image_processor))
    processor = image_processor_from_pretrained(image_processor) if image_processor and chosen.reads_pixels else None
    dtype = args.feature_dtype
    train = chosen.load_split(data_dir, args.train_split, feature_dtype=dtype, image_processor=processor, like=None)
    val, test = (
        chosen.load_split(data_dir, split, feature_dtype=dtype, image_processor=processor, like=train)
        for split in names[1:]
    )
    regions, feature_dim = (None, None) if chosen.reads_pixels else train.image_shape
    vocab: Vocabulary | TokenizerVocabulary
    if tokenizer is not None:
        if args.vocab_file:
            raise ValueError(
                f"vocab_file {args.vocab_file!r} is for the GRU text tower; {tokenizer!r} has its own tokenizer"
            )
        vocab = TokenizerVocabulary.from_pretrained(tokenizer)
    else:
        vocab = Vocabulary.from_json(args.vocab_file) if args.vocab_file else Vocabulary.build(train.captions)
    pairing = _noise_index(args, train.num_images, train.captions_per_image, Path(output_dir))
    noisy = NoisyPairDataset(train, vocab, pairing)
    return PairData(
        train=noisy,
        val=RetrievalSplit.from_precomp(val, vocab),
        test=RetrievalSplit.from_precomp(test, vocab),
        vocab=vocab,
        image_dim=feature_dim,
        image_regions=regions,
        image_processor=processor,
        noise_ratio=effective_noise_ratio(args, noisy),
    )


NOISE_FILE_TOLERANCE = 0.01


def effective_noise_ratio(args: DataArguments, train: NoisyPairDataset) -> float:
    """The share of training pairs that the noise is meant to corrupt: ``noise_ratio``, or with ``noise_file`` the
    measured share of wrong pairs of the file's pairing.

    Raises:
        ValueError: a nonzero ``noise_ratio`` is given with a ``noise_file`` whose share differs by more than
            ``NOISE_FILE_TOLERANCE`` (the file decides the pairing; the two say different things).
    """
    if not args.noise_file:
        return args.noise_ratio
    measured = float(1.0 - train.clean_mask.mean())
    if args.noise_ratio and abs(measured - args.noise_ratio) > NOISE_FILE_TOLERANCE:
        raise ValueError(
            f"noise_ratio {args.noise_ratio:g} disagrees with noise_file {args.noise_file}, whose pairing has "
            f"{measured:.1%} wrong pairs; the file decides the noise: give the file alone, or the ratio alone"
        )
    return measured


GENERIC_DIRECTORY_NAMES = frozenset({"data", "dataset", "precomp", "features", "images"})


def dataset_name_of(data_dir: str | Path) -> str:
    """A data directory's name for the card: its own, or ``parent-name`` when its own is generic.

    ``runs/demo/data`` gives ``demo-data``; ``/data/f30k_precomp`` gives ``f30k_precomp``.
    """
    path = Path(data_dir).resolve()
    return f"{path.parent.name}-{path.name}" if path.name.lower() in GENERIC_DIRECTORY_NAMES else path.name


def describe_data(args: DataArguments, data: PairData) -> DataDescription:
    """The data and noise of a run, as its model card reports them (noise fields ``None`` with a noise file)."""
    train, test = data.train, data.test
    generated = args.noise_file is None
    return DataDescription(
        dataset=args.dataset_name or dataset_name_of(args.data_dir),
        train_split=args.train_split,
        val_split=args.val_split,
        test_split=args.test_split,
        train_pairs=len(train),
        train_images=train.num_images,
        captions_per_image=train.captions_per_image,
        test_images=test.num_images,
        noise_kind=args.noise_kind if generated else None,
        noise_ratio=args.noise_ratio if generated else None,
        noise_seed=args.noise_seed if generated else None,
        noise_file=args.noise_file,
        true_noise_ratio=float(1.0 - train.clean_mask.mean()),
        test_folds=args.test_folds,
        noise_protocol=noise_protocol(args, data),
    )


def noise_protocol(args: DataArguments, data: PairData) -> str | None:
    """The noise protocol's name (:func:`hfncl.data.noise.protocol_names`): of ``noise_kind`` for generated noise,
    read from the pairing for a noise file; ``None`` without noise."""
    if args.noise_file:
        return pairing_protocol(data.train.caption_to_image, data.train.captions_per_image)
    return protocol_names()[args.noise_kind] if args.noise_ratio > 0 else None
