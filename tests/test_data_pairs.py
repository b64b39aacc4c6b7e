"""Training pairs, evaluation datasets and their collate functions."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from hfncl.data import (
    CaptionDataset,
    DataFormatError,
    ImageDataset,
    NoisyPairDataset,
    Vocabulary,
    caption_level_noise,
    collate_captions,
    collate_images,
    collate_pairs,
    image_level_noise,
    load_precomp_split,
)

NUM_IMAGES, REGIONS, DIM, K = 6, 3, 8, 5
WORDS = ["a", "dog", "cat", "runs", "on", "the", "red", "grass"]


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    directory = tmp_path_factory.mktemp("data") / "f30k_precomp"
    directory.mkdir()
    rng = np.random.default_rng(0)
    np.save(directory / "train_ims.npy", rng.random((NUM_IMAGES, REGIONS, DIM), dtype=np.float32))
    captions = [" ".join(rng.choice(WORDS, size=1 + i % 7)) for i in range(NUM_IMAGES * K)]
    (directory / "train_caps.txt").write_text("\n".join(captions) + "\n")
    return load_precomp_split(directory, "train", cache_dir=directory.parent / "cache")


@pytest.fixture(scope="module")
def features(split):
    return np.load(split.data_dir / "train_ims.npy")


@pytest.fixture(scope="module")
def vocab(split):
    return Vocabulary.build(split.captions, min_count=1)


def test_clean_pairs(split, vocab, features):
    data = NoisyPairDataset(split, vocab)
    assert len(data) == NUM_IMAGES * K
    assert (data.num_images, data.captions_per_image) == (NUM_IMAGES, K)
    assert data.clean_mask.all()
    item = data[12]
    assert item["index"] == 12
    assert item["image"].dtype == torch.float32 and item["image"].shape == (REGIONS, DIM)
    np.testing.assert_array_equal(item["image"].numpy(), features[12 // K])
    assert item["caption"].dtype == torch.long
    assert item["caption"].tolist() == vocab.encode(split.captions[12])


@pytest.mark.parametrize("kind", ["caption", "image"])
def test_noisy_pairs_show_the_paired_image(split, vocab, features, kind):
    if kind == "caption":
        index = caption_level_noise(NUM_IMAGES, K, 0.6, seed=0)
        pairing = index
    else:
        index = image_level_noise(NUM_IMAGES, 0.6, seed=0)
        pairing = np.repeat(index, K)
    data = NoisyPairDataset(split, vocab, index)
    np.testing.assert_array_equal(data.clean_mask, pairing == np.arange(NUM_IMAGES * K) // K)
    assert not data.clean_mask.all()
    items = data.__getitems__([3, 29, 3, 17])
    assert [item["index"] for item in items] == [3, 29, 3, 17]
    for item in items:
        np.testing.assert_array_equal(item["image"].numpy(), features[pairing[item["index"]]])
        torch.testing.assert_close(item["caption"], data[item["index"]]["caption"])


def test_bad_pairing_and_index(split, vocab):
    with pytest.raises(DataFormatError, match="caption_to_image"):
        NoisyPairDataset(split, vocab, np.zeros(7, np.int64))
    data = NoisyPairDataset(split, vocab)
    with pytest.raises(IndexError, match="pair index 30"):
        data[30]


def test_dataloader_batches_follow_the_documented_layout(split, vocab, features):
    data = NoisyPairDataset(split, vocab, caption_level_noise(NUM_IMAGES, K, 0.5, seed=1))
    loader = torch.utils.data.DataLoader(
        data, batch_size=8, shuffle=True, collate_fn=collate_pairs, generator=torch.Generator().manual_seed(0)
    )
    seen = []
    for batch in loader:
        assert set(batch) == {"images", "captions", "lengths", "index", "image_index"}
        b = len(batch["index"])
        assert batch["images"].shape == (b, REGIONS, DIM) and batch["images"].dtype == torch.float32
        assert batch["captions"].shape == (b, int(batch["lengths"].max())) and batch["captions"].dtype == torch.long
        for row, i in enumerate(batch["index"].tolist()):
            np.testing.assert_array_equal(batch["images"][row].numpy(), features[data.caption_to_image[i]])
            assert batch["image_index"][row] == data.caption_to_image[i]
            assert batch["captions"][row, : batch["lengths"][row]].tolist() == vocab.encode(split.captions[i])
        seen += batch["index"].tolist()
    assert sorted(seen) == list(range(len(data)))


def test_collate_pads_with_zero():
    items = [
        {"image": torch.ones(2, 4), "caption": torch.tensor([1, 5, 2]), "index": 7, "image_index": 1},
        {"image": torch.zeros(2, 4), "caption": torch.tensor([1, 5, 6, 6, 2]), "index": 3, "image_index": 0},
    ]
    batch = collate_pairs(items)
    assert batch["captions"].tolist() == [[1, 5, 2, 0, 0], [1, 5, 6, 6, 2]]
    assert batch["lengths"].tolist() == [3, 5]
    assert batch["index"].tolist() == [7, 3]
    assert batch["image_index"].tolist() == [1, 0]
    assert batch["images"].shape == (2, 2, 4)
    assert collate_captions(items)["captions"].tolist() == batch["captions"].tolist()


def test_evaluation_datasets_cover_images_and_captions_in_order(split, vocab, features):
    images = ImageDataset(split)
    captions = CaptionDataset(split, vocab)
    assert (len(images), len(captions)) == (NUM_IMAGES, NUM_IMAGES * K)
    assert images.captions_per_image == captions.captions_per_image == K

    image_batches = list(torch.utils.data.DataLoader(images, batch_size=4, collate_fn=collate_images))
    np.testing.assert_array_equal(torch.cat([b["images"] for b in image_batches]).numpy(), features)
    assert torch.cat([b["index"] for b in image_batches]).tolist() == list(range(NUM_IMAGES))

    caption_batches = list(torch.utils.data.DataLoader(captions, batch_size=7, collate_fn=collate_captions))
    assert set(caption_batches[0]) == {"captions", "lengths", "index"}
    decoded = [
        vocab.decode(row[:length])
        for b in caption_batches
        for row, length in zip(b["captions"], b["lengths"], strict=True)
    ]
    assert decoded == [vocab.decode(vocab.encode(c)) for c in split.captions]
    with pytest.raises(IndexError):
        images[NUM_IMAGES]


def test_datasets_pickle_for_worker_processes(split, vocab):
    data = NoisyPairDataset(split, vocab, caption_level_noise(NUM_IMAGES, K, 0.5, seed=2))
    clone = pickle.loads(pickle.dumps(data))
    a, b = data[11], clone[11]
    torch.testing.assert_close(a["image"], b["image"])
    torch.testing.assert_close(a["caption"], b["caption"])
