"""The pair task's encoding: each distinct image once in eval mode, every row in training mode."""

from __future__ import annotations

import torch

from hfncl.engine.tasks import PairTask, distinct_images
from hfncl.models import NCLConfig, NCLModel


def _batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    image_index = torch.tensor([4, 4, 9, 4, 2, 9])
    table = torch.randn(10, 3, 8, generator=generator)
    captions = torch.randint(3, 20, (6, 5), generator=generator)
    return {
        "images": table[image_index],
        "captions": captions,
        "lengths": torch.tensor([5, 4, 5, 3, 2, 5]),
        "index": torch.arange(6),
        "image_index": image_index,
    }


def test_distinct_images_finds_each_images_first_row():
    batch = _batch()
    first, slot = distinct_images(batch["images"], batch["image_index"])
    assert first.tolist() == [4, 0, 2]  # images 2, 4, 9 first appear at rows 4, 0, 2
    assert slot.tolist() == [1, 1, 2, 1, 0, 2]
    assert torch.equal(batch["images"][first][slot], batch["images"])


def test_rows_of_one_index_with_different_inputs_are_not_merged():
    batch = _batch()
    changed = batch["images"].clone()
    changed[3, 0, 0] += 1.0  # an augmented copy of image 4
    assert distinct_images(changed, batch["image_index"]) is None
    assert distinct_images(batch["images"][:3], torch.tensor([0, 1, 2])) is None


def test_eval_encoding_of_distinct_images_equals_encoding_every_row():
    network = NCLModel(NCLConfig(image_dim=8, vocab_size=20, embed_dim=16, word_dim=8, image_views=2)).networks[0]
    batch, task = _batch(), PairTask()
    network.eval()
    with torch.no_grad():
        image_embeds, text_embeds = task.encode(network, batch)
        every_row = network(batch["images"], batch["captions"], batch["lengths"])
    torch.testing.assert_close(image_embeds, every_row[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(text_embeds, every_row[1], rtol=0, atol=0)


def test_training_mode_encodes_every_row(monkeypatch):
    network = NCLModel(NCLConfig(image_dim=8, vocab_size=20, embed_dim=16, word_dim=8)).networks[0]
    seen = []
    original = network.encode_image
    monkeypatch.setattr(network, "encode_image", lambda images: seen.append(len(images)) or original(images))
    network.train()
    PairTask().encode(network, _batch())
    network.eval()
    PairTask().encode(network, _batch())
    assert seen == [6, 3]
