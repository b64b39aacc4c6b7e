"""CRCL (Qin et al., NeurIPS 2023): ACL's active and complementary terms, SCC's momentum update, a run."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import noisy_trainer, tiny_config

from hfncl.experiment import DataArguments, run_experiment
from hfncl_plugins import crcl, rcl
from hfncl_plugins.crcl import CORRESPONDENCE, CRCLOptions


def _softmax_rows(matrix):
    rows = []
    for row in matrix:
        weights = [math.exp(value) for value in row]
        rows.append([weight / sum(weights) for weight in weights])
    return rows


def _probabilities(similarity, tau):
    """p^{i2t} (rows: images) and p^{t2i} (rows: captions), written out."""
    b = len(similarity)
    scaled = [[float(similarity[i, j]) / tau for j in range(b)] for i in range(b)]
    transposed = [[scaled[j][i] for j in range(b)] for i in range(b)]
    return _softmax_rows(scaled), _softmax_rows(transposed)


def _loop_acl(similarity, labels, tau, weight, q=None):
    """mean_i y_i (-log p^{i2t}_ii - log p^{t2i}_ii), lambda mean_i sum_{j != i} tan p_ij / (sum_j tan p_ij)^{q_i}."""
    b = len(similarity)
    i2t, t2i = _probabilities(similarity, tau)
    active, complementary = 0.0, 0.0
    for i in range(b):
        y = float(labels[i])
        exponent = 1 - y if q is None else q
        active += y * (-math.log(i2t[i][i]) - math.log(t2i[i][i]))
        for probabilities in (i2t, t2i):
            row = [math.tan(p) for p in probabilities[i]]
            complementary += sum(row[j] for j in range(b) if j != i) / sum(row) ** exponent
    return active / b, weight * complementary / b


@pytest.mark.parametrize("q", [None, 0.0, 0.6, 1.0])
def test_acl_terms_against_a_loop(q):
    generator = torch.Generator().manual_seed(0)
    similarity = torch.rand(6, 6, generator=generator, dtype=torch.float64) * 2 - 1
    labels = torch.tensor([1.0, 0.0, 0.3, 0.8, 0.55, 0.1], dtype=torch.float64)
    settings = CRCLOptions.read({"crcl.tau": 0.2, "crcl.complementary_weight": 3.0, "crcl.q": q})
    terms = crcl.acl_terms(similarity, labels, settings)
    active, complementary = _loop_acl(similarity, labels, 0.2, 3.0, q)
    assert float(terms["active"]) == pytest.approx(active, rel=1e-9)
    assert float(terms["complementary"]) == pytest.approx(complementary, rel=1e-9)


def test_complementary_term_at_q_0_is_rcl_s_and_at_q_1_a_share_of_the_row():
    """q = 0: RCL's complementary loss with phi = tan; q = 1: 1 - phi(p_ii) / sum_j phi(p_ij) per direction."""
    generator = torch.Generator().manual_seed(1)
    similarity = torch.rand(5, 5, generator=generator, dtype=torch.float64)
    plain = crcl.normalised_complementary_loss(similarity, torch.zeros(5, dtype=torch.float64), tau=0.1)
    rcl_loss = rcl.complementary_contrastive_loss(similarity, 0.1, "tan")
    assert plain.tolist() == pytest.approx(rcl_loss.tolist(), rel=1e-12)
    normalised = crcl.normalised_complementary_loss(similarity, torch.ones(5, dtype=torch.float64), tau=0.1)
    i2t, t2i = rcl.matching_probabilities(similarity, 0.1)
    expected = sum(1 - p.tan().diagonal() / p.tan().sum(dim=1) for p in (i2t, t2i))
    assert normalised.tolist() == pytest.approx(expected.tolist(), rel=1e-12)
    assert (normalised < 2).all()  # bounded: each direction's share is below 1


def test_active_term_is_the_y_weighted_infonce():
    """Against torch's cross entropy, both directions: y_i (CE(row i, i) + CE(column i, i))."""
    generator = torch.Generator().manual_seed(2)
    similarity = torch.rand(7, 7, generator=generator)
    labels = torch.rand(7, generator=generator)
    target = torch.arange(7)
    logits = similarity / 0.05
    expected = labels * (
        torch.nn.functional.cross_entropy(logits, target, reduction="none")
        + torch.nn.functional.cross_entropy(logits.t(), target, reduction="none")
    )
    assert crcl.active_loss(similarity, labels, 0.05).tolist() == pytest.approx(expected.tolist(), rel=1e-5)


def test_positive_probability_is_the_mean_of_both_diagonals():
    similarity = torch.tensor([[1.0, 0.0], [0.5, 0.2]])
    # row 0: e^1 / (e^1 + 1); column 0: e^1 / (e^1 + e^0.5); tau = 1
    first = (math.e / (math.e + 1) + math.e / (math.e + math.exp(0.5))) / 2
    second = (math.exp(0.2) / (math.exp(0.5) + math.exp(0.2)) + math.exp(0.2) / (1 + math.exp(0.2))) / 2
    assert crcl.positive_probability(similarity, 1.0).tolist() == pytest.approx([first, second], rel=1e-6)


def test_scc_update_by_hand_with_its_floor():
    previous = torch.tensor([1.0, 0.5, float("nan"), 0.1])
    current = torch.tensor([0.0, 0.9, 0.2, 0.0])
    refined = crcl.refined_correspondence(previous, current, alpha=0.8, floor=0.1)
    assert refined.tolist() == pytest.approx([0.8, 0.58, 0.84, 0.0])  # 0.8 * 0.1 = 0.08 < 0.1: set to 0


def test_scc_converges_geometrically_to_a_constant_estimate():
    """With the same p every epoch, y after n updates is alpha^n y_0 + (1 - alpha^n) p (no floor)."""
    y, p = torch.tensor([1.0, 0.2]), torch.tensor([0.3, 0.9])
    for _ in range(7):
        y = crcl.refined_correspondence(y, p, alpha=0.7, floor=0.0)
    expected = 0.7**7 * torch.tensor([1.0, 0.2]) + (1 - 0.7**7) * p
    assert y.tolist() == pytest.approx(expected.tolist(), rel=1e-6)


class _Ledger:
    def __init__(self, size):
        self.column = torch.full((size,), float("nan"))
        self.recorded = False

    def record(self, index, name, values):
        assert name == CORRESPONDENCE
        self.column[index] = values.float()
        self.recorded = True

    def get(self, name):
        return self.column

    def __contains__(self, name):
        return self.recorded


def _stub_trainer(epoch, warmup_epochs=2, options=None, size=10):
    settings = CRCLOptions.read(options or {})
    return SimpleNamespace(
        options_of=lambda _: settings,
        epoch=epoch,
        config=SimpleNamespace(warmup_epochs=warmup_epochs),
        ledger=_Ledger(size),
        num_train=size,
    )


def test_hooks_warm_up_with_y_1_seed_y_with_p_then_refine_it_by_momentum():
    generator = torch.Generator().manual_seed(3)
    similarity = torch.rand(4, 4, generator=generator)
    outputs = SimpleNamespace(similarity=similarity, index=torch.tensor([7, 2, 5, 0]))
    settings = CRCLOptions.read({})
    p = crcl.positive_probability(similarity, settings.tau)
    trainer = _stub_trainer(epoch=0)
    warm = crcl.warmup_loss(trainer, {}, outputs, 0)
    assert CORRESPONDENCE not in trainer.ledger  # only the last warmup epoch records
    ones = crcl.acl_terms(similarity, torch.ones(4), settings)
    assert all(float(warm[name]) == pytest.approx(float(ones[name])) for name in ones)
    trainer.epoch = 1
    crcl.warmup_loss(trainer, {}, outputs, 0)
    assert trainer.ledger.column[outputs.index].tolist() == pytest.approx(p.tolist())
    assert crcl.divide(trainer, 2).clean_prob[[1, 3]].tolist() == [1.0, 1.0]  # never trained: y = 1
    trainer.epoch = 2
    terms = crcl.loss(trainer, {}, outputs, None, 0)
    refined = crcl.refined_correspondence(p, p, settings.alpha, settings.confidence_floor)
    assert trainer.ledger.column[outputs.index].tolist() == pytest.approx(refined.tolist())
    expected = crcl.acl_terms(similarity, refined, settings)
    assert all(float(terms[name]) == pytest.approx(float(expected[name])) for name in expected)


def test_without_momentum_y_is_the_current_estimate():
    similarity = torch.eye(3) * 0.5
    outputs = SimpleNamespace(similarity=similarity, index=torch.tensor([0, 1, 2]))
    trainer = _stub_trainer(epoch=3, options={"crcl.momentum": False}, size=3)
    trainer.ledger.record(torch.arange(3), CORRESPONDENCE, torch.zeros(3))
    crcl.loss(trainer, {}, outputs, None, 0)
    assert trainer.ledger.column.tolist() == pytest.approx(crcl.positive_probability(similarity, 0.05).tolist())


@pytest.mark.parametrize(("name", "value"), [("crcl.alpha", 1.5), ("crcl.penalty", "gce"), ("crcl.q", -0.1)])
def test_a_bad_option_is_refused_by_name(tiny_data_dir, tmp_path, name, value):
    with pytest.raises(Exception, match=name):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["crcl"], options={name: value}))


@pytest.mark.slow
def test_crcl_trains_and_its_first_y_ranks_the_noise(tiny_data_dir, tmp_path):
    """At small scale what the paper's Fig. 1 shows (the corrected correspondences of noisy pairs fall below the clean
    ones): on the tiny benchmark with 70% noise, 1 warmup + 3 epochs, the first y (the warmed-up network's p_i)
    ranks the noisy pairs below the clean ones, and both ACL terms stay finite. (At this scale y then falls under
    the floor for most pairs: docs/methods/crcl.md.)"""
    data = DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.7)
    result = run_experiment(data, tiny_config(tmp_path, ["crcl"], epochs=4, lr_decay_epochs=[]))
    history = result["history"]
    assert all(math.isfinite(record["train/active"] + record["train/complementary"]) for record in history)
    assert "division/auc" not in history[0] and history[1]["division/auc"] > 0.6
