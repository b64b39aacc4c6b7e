"""Data: SCAN precomp, raw images (pixel splits), vocabularies, correspondence noise, PyTorch datasets;
labelled features and label noise.

Importing this package is light: each name below is imported from its module on first use, so that
``from hfncl.data import Vocabulary`` loads the vocabulary and not the readers (nor ``datasets``).
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "CaptionDataset": "hfncl.data.pairs",
    "CaptionTokenizer": "hfncl.data.vocab",
    "DataFormatError": "hfncl.data.errors",
    "EncodedCaptions": "hfncl.data.pairs",
    "FEATURE_DTYPES": "hfncl.choices",
    "ImageDataset": "hfncl.data.pairs",
    "LabelLayout": "hfncl.data.labelled",
    "LABEL_NOISE_KINDS": "hfncl.choices",
    "LabelNoise": "hfncl.data.label_noise",
    "LabelledDataset": "hfncl.data.labelled",
    "LabelledSplit": "hfncl.data.labelled",
    "NOISE_KINDS": "hfncl.choices",
    "NoisyPairDataset": "hfncl.data.pairs",
    "PairSplit": "hfncl.data.pairs",
    "PixelSplit": "hfncl.data.pixels",
    "PrecompSplit": "hfncl.data.precomp",
    "TokenizerVocabulary": "hfncl.data.vocab",
    "Vocabulary": "hfncl.data.vocab",
    "asymmetric_label_noise": "hfncl.data.label_noise",
    "caption_level_noise": "hfncl.data.noise",
    "caption_pairing": "hfncl.data.noise",
    "clean_mask": "hfncl.data.noise",
    "collate_captions": "hfncl.data.pairs",
    "collate_images": "hfncl.data.pairs",
    "collate_pairs": "hfncl.data.pairs",
    "image_level_noise": "hfncl.data.noise",
    "inject_label_noise": "hfncl.data.label_noise",
    "is_imagefolder": "hfncl.data.pixels",
    "iter_feature_chunks": "hfncl.data.precomp",
    "load_label_noise": "hfncl.data.label_noise",
    "load_labelled_arrays": "hfncl.data.labelled",
    "load_labelled_dataset": "hfncl.data.labelled",
    "load_noise_index": "hfncl.data.noise",
    "load_pixel_splits": "hfncl.data.pixels",
    "load_precomp_split": "hfncl.data.precomp",
    "make_noise": "hfncl.data.noise",
    "next_class_transition": "hfncl.data.label_noise",
    "read_captions": "hfncl.data.precomp",
    "save_noise_index": "hfncl.data.noise",
    "shuffle_subset": "hfncl.data.noise",
    "symmetric_label_noise": "hfncl.data.label_noise",
    "tokenize": "hfncl.data.vocab",
    "transition_array": "hfncl.data.label_noise",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hfncl.data' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return __all__
