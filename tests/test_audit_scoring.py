"""The audit's one pass over a split's similarities (hfncl/audit/scoring.py), block by block, against a plain reference
that holds the whole (N, M) matrix and reads every pair one at a time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hfncl.audit import scoring
from hfncl.audit.scoring import score_pairs
from hfncl.models import NCLConfig, NCLModel
from hfncl.retrieval import Retriever


class LookupRetriever:
    """A retriever whose embeddings are item numbers (1, count, 1) and whose similarity in each direction is a fixed
    matrix: small integers, so that ties are many and exact."""

    def __init__(self, i2t: np.ndarray, t2i: np.ndarray) -> None:
        self.scores = {
            "i2t": torch.as_tensor(i2t, dtype=torch.float32),
            "t2i": torch.as_tensor(t2i, dtype=torch.float32),
        }

    def similarity(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor, direction: str) -> torch.Tensor:
        rows, columns = image_embeds[0, :, 0].long(), text_embeds[0, :, 0].long()
        return self.scores[direction][rows][:, columns]


def reference(i2t: np.ndarray, t2i: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Every pair read off the whole matrices, one at a time; ties go to the first item (``np.argmax``)."""
    n, m = t2i.shape
    out: dict[str, list] = {
        name: []
        for name in ("p_image", "p_caption", "sim_t2i", "sim_i2t", "image", "image_sim", "caption", "caption_sim")
    }
    for c in range(m):
        i = c // k
        column, row = t2i[:, c].astype(float), i2t[i].astype(float)
        others = np.delete(row, range(i * k, i * k + k))
        out["p_image"].append(np.count_nonzero(column >= column[i]) / n)
        out["p_caption"].append((1 + np.count_nonzero(others >= row[c])) / (m - k + 1))
        out["sim_t2i"].append(column[i])
        out["sim_i2t"].append(row[c])
        column[i], row[c] = -np.inf, -np.inf  # the pair's own image, its own caption
        out["image"].append(int(np.argmax(column)))
        out["image_sim"].append(column.max())
        out["caption"].append(int(np.argmax(row)))
        out["caption_sim"].append(row.max())
    return {name: np.asarray(values) for name, values in out.items()}


def fast(retriever, n: int, m: int, k: int) -> dict[str, np.ndarray]:
    scores = score_pairs(
        retriever,
        torch.arange(n, dtype=torch.float32).view(1, n, 1),
        torch.arange(m, dtype=torch.float32).view(1, m, 1),
        k,
    )
    p, r = scores.p_values, scores.repairings
    return {
        "p_image": p.image,
        "p_caption": p.caption,
        "sim_t2i": p.similarity_t2i,
        "sim_i2t": p.similarity_i2t,
        "image": r.image,
        "image_sim": r.image_similarity,
        "caption": r.caption,
        "caption_sim": r.caption_similarity,
    }


@pytest.mark.parametrize("block_scores", [1, 7, 40, 10**6])
def test_the_blocks_give_what_the_whole_matrix_gives_with_ties_and_a_similarity_per_direction(
    monkeypatch, block_scores
):
    monkeypatch.setattr(scoring, "CHUNK_SCORES", block_scores)  # one row or column a block, uneven blocks, one block
    rng = np.random.default_rng(0)
    n, k = 9, 3
    i2t, t2i = rng.integers(0, 4, (n, n * k)), rng.integers(0, 4, (n, n * k))
    i2t[2, 6] = i2t[2].max() + 1  # pair 6 is its image's best caption: its re-pairing is the second best
    expected, got = reference(i2t, t2i, k), fast(LookupRetriever(i2t, t2i), n, n * k, k)
    assert expected["caption"][6] != 6 and expected["caption"][7] == 6
    for name, values in expected.items():
        assert np.array_equal(got[name], values), name


def test_a_trained_models_pass_matches_its_whole_matrix(monkeypatch):
    monkeypatch.setattr(scoring, "CHUNK_SCORES", 50)  # blocks of 2 image rows, of 10 caption columns
    torch.manual_seed(0)
    n, k = 10, 5
    model = NCLModel(NCLConfig(image_dim=16, image_regions=8, vocab_size=50, embed_dim=8, word_dim=8))
    retriever = Retriever(model)
    regions = torch.randn(n, 8, 16)
    regions[3] = regions[1]  # two images alike: a tie for their captions' best other image
    tokens = torch.randint(1, 50, (n * k, 5))
    tokens[12] = tokens[2]  # a caption of image 2 repeated for image 0: a tie among image 0's best captions
    images = retriever.encode_images(regions)
    texts = model.join_embeddings([model.encode_text(tokens, torch.full((n * k,), 5))])
    with torch.no_grad():
        whole = model.similarity(images, texts).numpy()
    expected = reference(whole, whole, k)
    scores = score_pairs(retriever, images, texts, k)
    p, r = scores.p_values, scores.repairings
    assert np.array_equal(p.image, expected["p_image"]) and np.array_equal(p.caption, expected["p_caption"])
    assert np.array_equal(r.image, expected["image"]) and np.array_equal(r.caption, expected["caption"])
    for got, name in (
        (p.similarity_t2i, "sim_t2i"),
        (p.similarity_i2t, "sim_i2t"),
        (r.image_similarity, "image_sim"),
        (r.caption_similarity, "caption_sim"),
    ):
        assert got == pytest.approx(expected[name], abs=1e-6), name
