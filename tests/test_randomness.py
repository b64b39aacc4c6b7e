"""Per-sample draws (hfncl.engine.randomness): a function of the sample's index, not of its batch."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from hfncl.engine.randomness import per_sample_uniform, purpose_key, sample_seed


def test_each_row_depends_only_on_the_stream_and_the_sample_index():
    index = torch.tensor([7, 3, 11, 0])
    whole = per_sample_uniform(index, (2, 3), (1, 2))
    assert whole.shape == (4, 2, 3)
    assert torch.equal(
        torch.cat([per_sample_uniform(index[:1], (2, 3), (1, 2)), per_sample_uniform(index[1:], (2, 3), (1, 2))]), whole
    )
    order = torch.tensor([2, 0, 3, 1])
    assert torch.equal(per_sample_uniform(index[order], (2, 3), (1, 2)), whole[order])
    assert not torch.equal(per_sample_uniform(index, (2, 3), (1, 3)), whole), "another stream, other draws"
    assert not torch.equal(whole[0], whole[1]), "other samples, other draws"


def test_draws_are_uniform_on_0_1():
    draws = per_sample_uniform(torch.arange(2000), (5,), (0, 0, purpose_key("test"))).flatten()
    assert ((draws >= 0) & (draws < 1)).all()
    assert stats.kstest(draws.numpy(), "uniform").pvalue > 1e-3


def test_seeds_and_purpose_keys_are_stable_and_distinct():
    assert purpose_key("tcvse.words") == purpose_key("tcvse.words") != purpose_key("tcvse.regions")
    seeds = {sample_seed((0, 1), i) for i in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < 2**63 for s in seeds)
    assert sample_seed((0, 1), 5) != sample_seed((1, 0), 5)


def test_empty_index_and_negative_stream():
    assert per_sample_uniform(torch.empty(0, dtype=torch.long), (3,), (0,)).shape == (0, 3)
    with pytest.raises(ValueError, match="non-negative"):
        per_sample_uniform(torch.arange(2), (3,), (0, -1))
