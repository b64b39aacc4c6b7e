"""Tokenizer and SCAN vocabulary."""

from __future__ import annotations

import json

import pytest
from _shared_data import published_file

from hfncl.data import DataFormatError, Vocabulary, tokenize


def test_tokenize_splits_words_and_punctuation():
    assert tokenize("A dog, running.") == ["a", "dog", ",", "running", "."]


def test_tokenize_follows_treebank_conventions():
    text = "He said \"don't\" -- it's a T-shirt... 3.5 in the U.S. (ok)"
    assert tokenize(text) == [
        "he", "said", "``", "do", "n't", "''", "--", "it", "'s", "a", "t-shirt", "...",
        "3.5", "in", "the", "u.s.", "(", "ok", ")",
    ]  # fmt: skip


def test_build_applies_threshold_and_orders_by_count_then_alphabet():
    captions = ["b a c", "b a c", "b a z", "b y"]
    vocab = Vocabulary.build(captions, min_count=2)
    assert vocab.idx2word == ["<pad>", "<start>", "<end>", "<unk>", "b", "a", "c"]
    assert len(vocab) == 7
    assert Vocabulary.build(captions, min_count=1).idx2word[4:] == ["b", "a", "c", "y", "z"]
    with pytest.raises(ValueError, match="min_count"):
        Vocabulary.build(captions, min_count=0)


def test_encode_adds_start_end_and_maps_unknown_words():
    vocab = Vocabulary(["a", "dog", ","])
    assert vocab.encode("A dog, running") == [1, 4, 5, 6, 3, 2]
    assert vocab.decode([1, 4, 5, 6, 3, 2, 0, 0]) == "a dog , <unk>"
    with pytest.raises(ValueError, match="id 99"):
        vocab.decode([99])


def test_json_roundtrip_uses_scan_format(tmp_path):
    vocab = Vocabulary.build(["a red dog", "a red cat", "a dog"], min_count=1)
    path = tmp_path / "vocab.json"
    vocab.save_json(path)
    data = json.loads(path.read_text())
    assert data["idx"] == len(vocab)
    assert data["idx2word"]["0"] == "<pad>" and data["word2idx"]["<unk>"] == 3
    assert Vocabulary.from_json(path) == vocab


def test_from_dict_accepts_integer_keys():
    words = ["<pad>", "<start>", "<end>", "<unk>", "dog"]
    data = {"idx2word": dict(enumerate(words)), "word2idx": {w: i for i, w in enumerate(words)}, "idx": 5}
    assert Vocabulary.from_dict(data).idx2word == words


def _vocab_dict() -> dict:
    words = ["<pad>", "<start>", "<end>", "<unk>", "dog"]
    return {
        "idx2word": {str(i): w for i, w in enumerate(words)},
        "word2idx": {w: i for i, w in enumerate(words)},
        "idx": 5,
    }


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d.pop("idx2word"), "missing field 'idx2word'"),
        (lambda d: d.pop("word2idx"), "missing field 'word2idx'"),
        (lambda d: d.pop("idx"), "missing field 'idx'"),
        (lambda d: d.update(idx2word=["<pad>"]), "'idx2word' must be a JSON object"),
        (lambda d: d.update(idx="5"), "'idx' must be an integer"),
        (lambda d: d.update(idx=6), "ids 0..idx-1"),
        (lambda d: d["idx2word"].update({"x": "cat"}), "key 'x' is not an integer"),
        (lambda d: d["idx2word"].update({"3": "<oov>"}), "expected '<unk>'"),
        (lambda d: d["word2idx"].update(dog=7), r"word2idx\['dog'\] is 7"),
        (lambda d: d["word2idx"].update(cat=5), "word2idx has 6 entries"),
    ],
)
def test_from_json_names_the_invalid_field(tmp_path, mutate, match):
    data = _vocab_dict()
    mutate(data)
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DataFormatError, match=match) as info:
        Vocabulary.from_json(path)
    assert str(path) in str(info.value)


def test_from_json_rejects_missing_and_malformed_files(tmp_path):
    with pytest.raises(DataFormatError, match="not found"):
        Vocabulary.from_json(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"idx2word": {')
    with pytest.raises(DataFormatError, match="invalid JSON at line 1"):
        Vocabulary.from_json(bad)
    bad.write_text("[]")
    with pytest.raises(DataFormatError, match="expected a JSON object"):
        Vocabulary.from_json(bad)


@pytest.mark.parametrize("name", ["f30k", "coco", "cc152k"])
def test_published_vocabularies_load(name):
    path = published_file(f"{name}_precomp_vocab.json")
    vocab = Vocabulary.from_json(path)
    assert len(vocab) == json.loads(path.read_text())["idx"]
    assert vocab.idx2word[:4] == ["<pad>", "<start>", "<end>", "<unk>"]
    ids = vocab.encode("A man in a red shirt is riding a bike down the street.")
    assert vocab.unk_id not in ids
