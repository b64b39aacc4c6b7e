"""CaptionStore: captions in one UTF-8 buffer, and the flat token store of EncodedCaptions."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from hfncl.data import EncodedCaptions, Vocabulary
from hfncl.data.captions import CaptionStore

CAPTIONS = ["a dog runs", "", "zwei Männer spielen Schach 😀", "a cat"]


def test_a_store_gives_back_every_caption_like_a_list():
    store = CaptionStore(CAPTIONS)
    assert len(store) == 4 and list(store) == CAPTIONS and store == CAPTIONS
    assert store[2] == CAPTIONS[2] and store[-1] == "a cat" and store[1] == ""
    assert store[1:3] == CAPTIONS[1:3] and store[::-2] == CAPTIONS[::-2]
    assert store != CAPTIONS[:3] and store != "a dog runs"
    with pytest.raises(IndexError, match="caption index 4 is outside 0..3"):
        store[4]
    with pytest.raises(IndexError):
        store[-5]
    assert pickle.loads(pickle.dumps(store)) == store


def test_a_store_holds_the_text_and_its_offsets_only():
    store = CaptionStore(CAPTIONS)
    text = sum(len(c.encode("utf-8")) for c in CAPTIONS)
    assert store.nbytes == text + 8 * (len(CAPTIONS) + 1)
    assert CaptionStore([]) == [] and len(CaptionStore([])) == 0


def test_encoded_captions_store_ids_in_the_smallest_type_the_vocabulary_needs():
    small = Vocabulary(["a", "dog", "runs", "cat"])
    encoded = EncodedCaptions(CaptionStore(["a dog runs", "a cat"]), small)
    assert encoded.tokens.dtype == np.uint16
    assert encoded[0].tolist() == small.encode("a dog runs") and encoded[1].tolist() == small.encode("a cat")
    assert encoded.offsets.tolist() == [
        0,
        len(small.encode("a dog runs")),
        len(small.encode("a dog runs")) + len(small.encode("a cat")),
    ]
    large = Vocabulary(f"w{i}" for i in range(70000))
    wide = EncodedCaptions(["w69999 w3"], large)
    assert wide.tokens.dtype == np.int32 and wide[0].tolist() == large.encode("w69999 w3")
    assert max(wide[0].tolist()) >= 65536
