"""Data: SCAN precomp reading, vocabularies, correspondence noise and PyTorch datasets."""

from hfncl.data.noise import (
    NOISE_KINDS,
    caption_level_noise,
    caption_pairing,
    clean_mask,
    image_level_noise,
    load_noise_index,
    make_noise,
    save_noise_index,
    shuffle_subset,
)
from hfncl.data.pairs import (
    CaptionDataset,
    EncodedCaptions,
    ImageDataset,
    NoisyPairDataset,
    collate_captions,
    collate_images,
    collate_pairs,
)
from hfncl.data.precomp import (
    FEATURE_DTYPES,
    DataFormatError,
    PrecompSplit,
    iter_feature_chunks,
    load_precomp_split,
    read_captions,
)
from hfncl.data.vocab import Vocabulary, tokenize

__all__ = [
    "FEATURE_DTYPES",
    "NOISE_KINDS",
    "CaptionDataset",
    "DataFormatError",
    "EncodedCaptions",
    "ImageDataset",
    "NoisyPairDataset",
    "PrecompSplit",
    "Vocabulary",
    "caption_level_noise",
    "caption_pairing",
    "clean_mask",
    "collate_captions",
    "collate_images",
    "collate_pairs",
    "image_level_noise",
    "iter_feature_chunks",
    "load_noise_index",
    "load_precomp_split",
    "make_noise",
    "read_captions",
    "save_noise_index",
    "shuffle_subset",
    "tokenize",
]
