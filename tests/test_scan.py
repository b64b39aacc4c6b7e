"""SCAN similarity head (text-to-image): formulas against a per-pair, per-word loop, a case by hand,
memory blocks, the model's similarity and the config."""

from __future__ import annotations

import math

import pytest
import torch

from hfncl.models import NCLConfig, NCLModel
from hfncl.models.heads import pack_local
from hfncl.models.scan import ScanHead
from hfncl.models.sgraf_kernels import DEFAULT_BLOCK_BYTES
from tests.conftest import record_block_budgets


def _reference(image_embeds, text_embeds, smooth, pooling, lse_lambda, slope):
    """S(I, T) by loops over pairs, words and regions, from the equations of hfncl.models.scan's docstring."""
    rows = []
    for image in image_embeds:
        regions = [r[:-1] / r[:-1].norm() for r in image if r[-1] > 0.5]
        row = []
        for caption in text_embeds:
            words = [w[:-1] / w[:-1].norm() for w in caption if w[-1] > 0.5]
            cos = [[torch.dot(v, t) for v in regions] for t in words]  # s_ij, word i, region j
            clipped = [[torch.where(s > 0, s, slope * s) for s in line] for line in cos]
            relevances = []
            for i, t in enumerate(words):
                # sub-gradient 0 at 0
                norms = [torch.stack([line[j] for line in clipped]).norm() for j in range(len(regions))]
                logits = [smooth * clipped[i][j] / norms[j].clamp_min(1e-8) for j in range(len(regions))]  # 0 / 0 = 0
                total = sum(torch.exp(x) for x in logits)
                attended = sum(torch.exp(x) / total * v for x, v in zip(logits, regions, strict=True))
                relevances.append(torch.dot(t, attended) / (t.norm() * attended.norm()))
            if pooling == "avg":
                row.append(sum(relevances) / len(relevances))
            else:
                row.append(torch.log(sum(torch.exp(lse_lambda * r) for r in relevances)) / lse_lambda)
        rows.append(torch.stack(row))
    return torch.stack(rows)


def _packed(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    regions = torch.randn(4, 5, 6, generator=generator, dtype=torch.float64)
    region_mask = torch.ones(4, 5, dtype=torch.bool)
    region_mask[1, 3:] = False
    words = torch.randn(7, 6, 6, generator=generator, dtype=torch.float64)
    lengths = torch.tensor([6, 2, 6, 4, 1, 3, 4])
    word_mask = torch.arange(6)[None, :] < lengths[:, None]
    return pack_local(regions, region_mask), pack_local(words, word_mask)


@pytest.mark.parametrize("pooling", ["lse", "avg"])
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("slope", [0.0, 0.1])
def test_scores_and_gradients_match_a_per_pair_per_word_loop(pooling, training, slope):
    head = ScanHead(9.0, pooling, 6.0, slope, block_bytes=700).train(training)  # several blocks and groups
    images, texts = (x.requires_grad_(True) for x in _packed())
    weights = torch.randn(4, 7, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got = head(images, texts)
    got_grads = torch.autograd.grad((got * weights).sum(), (images, texts))
    expected = _reference(images, texts, 9.0, pooling, 6.0, slope)
    expected_grads = torch.autograd.grad((expected * weights).sum(), (images, texts))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-7)
    for g, e in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-7)


def test_one_region_by_hand():
    """One region v = (1, 0): alpha = 1, a_i = v, R_i = cos(t_i, v); words (1, 0) and (0.6, 0.8) give R = 1, 0.6."""
    images = pack_local(torch.tensor([[[2.0, 0.0]]], dtype=torch.float64), None)
    texts = pack_local(torch.tensor([[[1.0, 0.0], [3.0, 4.0]]], dtype=torch.float64), None)
    assert ScanHead(9.0, "avg")(images, texts).item() == pytest.approx(0.8)
    assert ScanHead(9.0, "lse", 6.0)(images, texts).item() == pytest.approx(math.log(math.exp(6) + math.exp(3.6)) / 6)


@pytest.mark.parametrize("block_bytes", [1, 500, 2**30])
def test_block_budgets_give_the_same_scores(block_bytes):
    images, texts = _packed(seed=4)
    reference = ScanHead(9.0, "lse", block_bytes=2**30)(images, texts)
    torch.testing.assert_close(ScanHead(9.0, "lse", block_bytes=block_bytes)(images, texts), reference)


def test_an_unset_block_budget_is_the_device_default(monkeypatch):
    budgets = record_block_budgets(monkeypatch, "hfncl.models.scan")
    images, texts = _packed(seed=4)
    ScanHead(9.0)(images, texts)
    ScanHead(9.0, block_bytes=500)(images, texts)
    assert budgets == [DEFAULT_BLOCK_BYTES, 500]


def _model(**overrides) -> NCLModel:
    torch.manual_seed(0)
    fields = {"image_dim": 6, "embed_dim": 8, "word_dim": 5, "vocab_size": 20, "similarity": "scan"}
    return NCLModel(NCLConfig(**(fields | overrides)))


def test_model_similarity_is_the_heads_score_without_a_sigmoid():
    model = _model(scan_pooling="avg").eval()
    generator = torch.Generator().manual_seed(1)
    images = torch.randn(3, 4, 6, generator=generator)
    captions = torch.randint(1, 20, (5, 6), generator=generator)
    lengths = torch.tensor([6, 3, 5, 1, 6])
    image_embeds, text_embeds = model.encode_image(images), model.encode_text(captions, lengths)
    got = model.similarity(image_embeds, text_embeds)
    expected = _reference(image_embeds[0], text_embeds[0], 9.0, "avg", 6.0, 0.0)
    torch.testing.assert_close(got, expected.to(got.dtype), rtol=1e-5, atol=1e-6)


def test_config_round_trip(tmp_path):
    model = _model(scan_pooling="avg", scan_lse_lambda=4.0)
    model.save_pretrained(tmp_path)
    loaded = NCLModel.from_pretrained(tmp_path)
    head = loaded.networks[0].head
    assert isinstance(head, ScanHead)
    assert (loaded.config.head_options["scan.pooling"], loaded.config.head_options["scan.lse_lambda"]) == ("avg", 4.0)
    assert (head.pooling, head.lse_lambda, head.smooth) == ("avg", 4.0, 9.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("scan.pooling", "max", "NCLConfig.head_options: Option 'scan.pooling' must be one of"),
     ("scan.lse_lambda", 0.0, "Option 'scan.lse_lambda' must be > 0")],
)
def test_bad_scan_settings_are_refused_in_one_line(field, value, message):
    with pytest.raises(ValueError, match=message) as error:
        NCLConfig(similarity="scan", head_options={field: value})
    assert "\n" not in str(error.value)
