"""The retrieval entry point: encode, rank, per-query uncertainty, loading a checkpoint."""

from __future__ import annotations

import pytest
import torch

import hfncl.plugins as plugins
from hfncl import registry
from hfncl.data import Vocabulary
from hfncl.models import NCLConfig, NCLModel
from hfncl.retrieval import Retriever

CAPTIONS = ["a dog runs on the beach", "two men play chess", "a red car", "a cat sleeps"]


def _model(**overrides) -> NCLModel:
    torch.manual_seed(0)
    fields = dict(image_dim=8, embed_dim=16, word_dim=6, vocab_size=30) | overrides
    return NCLModel(NCLConfig(**fields)).eval()


def _vocab() -> Vocabulary:
    return Vocabulary.build(CAPTIONS, min_count=1)


def test_rank_orders_by_the_model_similarity() -> None:
    model = _model(vocab_size=len(_vocab()))
    retriever = Retriever(model, _vocab())
    images = retriever.encode_images(torch.randn(3, 5, 8))
    texts = retriever.encode_texts(CAPTIONS)
    assert images.shape == (1, 3, 16) and texts.shape == (1, 4, 16)
    similarity = model.similarity(images, texts)
    ranking = retriever.rank(images, texts, direction="i2t", top_k=2)
    assert torch.equal(ranking.indices, similarity.argsort(dim=1, descending=True)[:, :2])
    assert torch.allclose(ranking.scores, similarity.sort(dim=1, descending=True).values[:, :2])
    assert ranking.uncertainty is None
    t2i = retriever.rank(images, texts, direction="t2i", top_k=10)
    assert t2i.indices.shape == (4, 3)
    assert torch.equal(t2i.indices, similarity.t().argsort(dim=1, descending=True))


def test_uncertainty_comes_from_the_training_plugin() -> None:
    model = _model(vocab_size=len(_vocab()), image_views=2, plugins=["ugncl"])
    retriever = Retriever(model, _vocab())
    images = retriever.encode_images(torch.randn(3, 5, 8))
    texts = retriever.encode_texts(CAPTIONS)
    ranking = retriever.rank(images, texts, direction="t2i", top_k=3)
    assert ranking.uncertainty.shape == (4,)
    assert ((ranking.uncertainty > 0) & (ranking.uncertainty < 1)).all()


def test_bad_inputs_are_named() -> None:
    retriever = Retriever(_model())
    with pytest.raises(ValueError, match=r"\(N, R, 8\)"):
        retriever.encode_images(torch.randn(3, 8))
    with pytest.raises(ValueError, match="vocabulary"):
        retriever.encode_texts(CAPTIONS)
    with pytest.raises(ValueError, match="direction"):
        retriever.rank(torch.zeros(1, 2, 16), torch.zeros(1, 2, 16), direction="both")


def test_a_checkpoint_needs_its_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "installed_entry_points", lambda: {})
    with pytest.raises(plugins.PluginError, match="ugncl"):
        Retriever(_model(plugins=["ugncl"]))


def test_from_pretrained_reads_model_and_vocabulary(tmp_path) -> None:
    model = _model(vocab_size=len(_vocab()))
    model.save_pretrained(tmp_path)
    _vocab().save_json(tmp_path / "vocab.json")
    retriever = Retriever.from_pretrained(tmp_path)
    texts = retriever.encode_texts(CAPTIONS[:2])
    assert torch.allclose(texts, Retriever(model, _vocab()).encode_texts(CAPTIONS[:2]), atol=1e-6)
