"""UGNCL's evidence, subjective logic, division and losses against independent computations."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Dirichlet, kl_divergence

from hfncl.config import TrainConfig
from hfncl.equations import evidential, losses
from hfncl.equations.losses import triplet_hardest_negative
from hfncl.models import NCLConfig, NCLModel
from hfncl_plugins import ugncl


def _dempster_brute_force(mass_a: dict, mass_b: dict) -> dict:
    """Dempster's rule over focal sets (frozensets) by enumerating every pair of focal sets."""
    combined: dict = {}
    conflict = 0.0
    for set_a, m_a in mass_a.items():
        for set_b, m_b in mass_b.items():
            meet = set_a & set_b
            if meet:
                combined[meet] = combined.get(meet, 0.0) + m_a * m_b
            else:
                conflict += m_a * m_b
    return {focal: value / (1 - conflict) for focal, value in combined.items()}


def _masses(belief: torch.Tensor, uncertainty: float) -> dict:
    frame = frozenset(range(len(belief)))
    masses = {frozenset([k]): float(b) for k, b in enumerate(belief)}
    masses[frame] = float(uncertainty)
    return masses


def test_evidence_is_exp_softplus_over_tau() -> None:
    similarity = torch.tensor([[0.0, 1.0], [-1.0, 0.5]])
    expected = torch.tensor(
        [[math.exp(math.log(2) / 0.1), math.exp(math.log1p(math.e) / 0.1)],
         [math.exp(math.log1p(math.exp(-1)) / 0.1), math.exp(math.log1p(math.exp(0.5)) / 0.1)]]
    )
    assert torch.allclose(evidential.softplus_evidence(similarity, 0.1), expected, rtol=1e-5)


def test_excess_evidence_is_eq3_less_its_floor_by_hand() -> None:
    score = torch.tensor([-30.0, -2.0, 0.0, 3.0], dtype=torch.float64)
    expected = [(1 + math.exp(v)) ** (1 / 0.1) - 1 for v in score.tolist()]
    excess = evidential.softplus_evidence(score, 0.1, excess=True)
    assert excess.tolist() == pytest.approx(expected, rel=1e-9)
    assert excess[0].item() == pytest.approx(10 * math.exp(-30), rel=1e-6)  # no support: evidence -> 0
    capped = evidential.softplus_evidence(torch.tensor([1e4], dtype=torch.float64), 0.1)
    assert capped.item() == pytest.approx(math.exp(evidential.SOFTPLUS_EVIDENCE_CAP)) and math.isfinite(capped.item())


def test_eq3_floor_bounds_u_by_a_third_whatever_the_score() -> None:
    """Eq. 3's evidence is >= 1, so Eq. 4's pair evidence >= 2 and u = K / L <= 1/3 per view, lower fused;
    its excess lets u pass p = 0.5 when no candidate is supported."""
    scores = torch.full((2, 4, 4), -20.0, dtype=torch.float64)
    _, raw_u = ugncl.pair_opinions(evidential.softplus_evidence(scores, 0.1))
    _, one_view_u = evidential.opinion(evidential.bidirectional_evidence(evidential.softplus_evidence(scores[0], 0.1)))
    assert one_view_u.tolist() == pytest.approx([1 / 3] * 4, rel=1e-6)
    assert (raw_u <= 1 / 5 + 1e-12).all()  # fused: u1 u2 / (1 - C) <= 1 / (1 / u1 + 1 / u2 - 1)
    _, excess_u = ugncl.pair_opinions(evidential.softplus_evidence(scores, 0.1, excess=True))
    assert (excess_u > 0.99).all()


def test_view_evidence_reads_the_raw_score_or_the_similarity() -> None:
    scores = torch.tensor([[[-3.0, 1.0], [0.5, 2.0]]])
    similarity = torch.sigmoid(scores)
    raw = torch.exp(torch.nn.functional.softplus(scores.double()) / 0.2)
    torch.testing.assert_close(ugncl.view_evidence(scores, similarity, 0.2, "raw"), raw)
    torch.testing.assert_close(ugncl.view_evidence(scores, similarity, 0.2, "excess"), raw - 1)
    printed = torch.exp(torch.nn.functional.softplus(similarity.double()) / 0.2)
    torch.testing.assert_close(ugncl.view_evidence(scores, similarity, 0.2, "printed"), printed)


def test_bidirectional_evidence_adds_row_and_column() -> None:
    e = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert torch.equal(evidential.bidirectional_evidence(e), torch.tensor([[2.0, 5.0], [5.0, 8.0]]))


def test_opinion_by_hand() -> None:
    belief, uncertainty = evidential.opinion(torch.tensor([1.0, 2.0, 3.0]))
    assert torch.allclose(belief, torch.tensor([1 / 9, 2 / 9, 3 / 9]))
    assert uncertainty.item() == pytest.approx(3 / 9)
    assert (belief.sum() + uncertainty).item() == pytest.approx(1.0)


def test_combination_matches_dempsters_rule_on_the_power_set() -> None:
    generator = torch.Generator().manual_seed(0)
    evidence_a, evidence_b = torch.rand(2, 4, generator=generator).double() * 5
    (belief_a, u_a), (belief_b, u_b) = evidential.opinion(evidence_a), evidential.opinion(evidence_b)
    belief, uncertainty = evidential.combine_opinions(belief_a, u_a, belief_b, u_b)
    expected = _dempster_brute_force(_masses(belief_a, u_a), _masses(belief_b, u_b))
    for k in range(4):
        assert belief[k].item() == pytest.approx(expected[frozenset([k])], rel=1e-10)
    assert uncertainty.item() == pytest.approx(expected[frozenset(range(4))], rel=1e-10)
    fused_belief, fused_u = evidential.fused_opinion(torch.stack([evidence_a, evidence_b]))
    assert torch.allclose(fused_belief, belief) and torch.allclose(fused_u, uncertainty)


def test_joint_alpha_inverts_a_single_opinion() -> None:
    """Eq. 7 applied to one view's opinion gives back alpha = e + 1."""
    e = torch.tensor([[0.5, 4.0, 2.0], [3.0, 0.0, 1.0]], dtype=torch.float64)
    assert torch.allclose(evidential.joint_alpha(*evidential.opinion(e)), e + 1)


def test_least_squares_risk_matches_monte_carlo() -> None:
    alpha = torch.tensor([3.0, 1.5, 0.7, 2.2], dtype=torch.float64)
    target = torch.tensor([0.8, 0.0, 0.0, 0.0], dtype=torch.float64)
    samples = Dirichlet(alpha).sample(torch.Size([400_000]))
    monte_carlo = ((target - samples) ** 2).sum(dim=1).mean()
    assert evidential.least_squares_risk(alpha, target).item() == pytest.approx(monte_carlo.item(), abs=2e-3)


def test_kl_term_matches_torch_distributions() -> None:
    alpha = torch.tensor([[3.0, 1.5, 0.7, 2.2], [1e4, 2e3, 5.0, 1.0]], dtype=torch.float64)
    target = torch.tensor([[1.0, 0, 0, 0], [0.3, 0, 0, 0]], dtype=torch.float64)
    adjusted = target + (1 - target) * alpha
    expected = kl_divergence(Dirichlet(adjusted), Dirichlet(torch.ones_like(alpha)))
    assert torch.allclose(evidential.kl_to_uniform(alpha, target), expected, rtol=1e-9)


def test_evidential_loss_of_one_view_by_rows_and_columns() -> None:
    similarity = torch.tensor([[0.6, 0.1, -0.2], [0.0, 0.4, 0.3], [0.2, -0.5, 0.7]])
    labels = torch.tensor([1.0, 0.0, 0.4])
    e = evidential.softplus_evidence(similarity.double(), 0.1)
    expected = []
    for i in range(3):
        target = torch.zeros(3, dtype=torch.float64)
        target[i] = labels[i]
        total = 0.0
        for alpha in (e[i] + 1, e[:, i] + 1):
            mean = alpha / alpha.sum()
            risk = ((target - mean) ** 2 + mean * (1 - mean) / (alpha.sum() + 1)).sum()
            kl = kl_divergence(Dirichlet(target + (1 - target) * alpha), Dirichlet(torch.ones(3, dtype=torch.float64)))
            total += risk + 0.1 * kl
        expected.append(total)
    loss = ugncl.evidential_loss(e.unsqueeze(0), labels, 0.1)
    assert torch.allclose(loss, torch.stack(expected), rtol=1e-8)


def test_uncertainty_division_by_hand() -> None:
    division = ugncl.uncertainty_division(
        uncertainty=torch.tensor([0.1, 0.2, 0.9, 0.7, 0.5]),
        own_belief=torch.tensor([0.9, 0.1, 0.6, 0.3, 0.5]),
        own_is_argmax=torch.tensor([True, False, False, True, True]),
        threshold=0.5,
        epsilon=0.5,
    )
    expected_sets = [ugncl.CLEAN, ugncl.NOISY, ugncl.HARD_CLEAN, ugncl.HARD_NOISY, ugncl.HARD_NOISY]
    assert division.extras["sets"].tolist() == expected_sets
    assert torch.allclose(division.clean_prob, torch.tensor([1.0, 0.0, 0.6, 0.3, 0.5]))
    assert division.clean.tolist() == [True, False, True, False, False]
    assert division.extras["set/hard_clean"].tolist() == [False, False, True, False, False]


def test_trusted_margin_by_hand_and_below_the_soft_margin() -> None:
    soft = torch.tensor([0.2, 0.2, 0.1, 0.1])
    u = torch.tensor([0.6, 0.5, 0.6, 0.9])
    hard_clean = torch.tensor([True, True, False, False])
    margin = evidential.uncertainty_scaled_margin(soft, u, hard_clean, 10.0)
    expected = torch.tensor(
        [0.2 / (1 + (0.4 / 0.6) ** -10), 0.1, 0.1 / (1 + (0.6 / 0.4) ** -10), 0.1 / (1 + 9.0**-10)]
    )
    assert torch.allclose(margin, expected, rtol=1e-5)
    assert (margin <= soft).all() and (margin[:3] < soft[:3]).all()
    assert losses.soft_margin(torch.tensor([1.0, 0.0, 0.5]), 0.2, 10.0).tolist() == pytest.approx(
        [0.2, 0.0, 0.2 * (math.sqrt(10) - 1) / 9]
    )


def test_number_of_hardest_negatives_rounds_down() -> None:
    assert ugncl.num_hardest(128, 0, 0.025, 5) == 127
    assert ugncl.num_hardest(128, 100, 0.025, 5) == 125  # floor(125.5), as the authors' int()
    assert ugncl.num_hardest(128, 10, 0.25, 5) == 125
    assert ugncl.num_hardest(128, 4920, 0.025, 5) == 5
    assert ugncl.num_hardest(128, 100_000, 0.025, 5) == 5


def test_top_hardest_triplet_by_brute_force() -> None:
    generator = torch.Generator().manual_seed(3)
    similarity = torch.rand(5, 5, generator=generator) * 2 - 1
    margins = torch.rand(5, generator=generator) * 0.2
    for hardest in (1, 2, 4):
        result = losses.triplet_top_k_negatives(similarity, margins, hardest)
        for i in range(5):
            row = sorted((similarity[i, j].item() for j in range(5) if j != i), reverse=True)[:hardest]
            col = sorted((similarity[j, i].item() for j in range(5) if j != i), reverse=True)[:hardest]
            d = similarity[i, i].item()
            m = margins[i].item()
            expected = sum(max(0, m - d + s) for s in row) / hardest + sum(max(0, m - d + s) for s in col) / hardest
            assert result[i].item() == pytest.approx(expected, abs=1e-6)
    assert torch.allclose(
        losses.triplet_top_k_negatives(similarity, margins, 1), triplet_hardest_negative(similarity, margins), atol=1e-6
    )


def test_query_uncertainty_of_a_model_is_the_fused_u_over_the_gallery() -> None:
    torch.manual_seed(0)
    model = NCLModel(NCLConfig(image_dim=8, embed_dim=16, word_dim=6, vocab_size=20, image_views=2)).eval()
    image_embeds = model.encode_image(torch.randn(3, 4, 8))
    captions = torch.randint(1, 20, (6, 5))
    text_embeds = model.encode_text(captions, torch.full((6,), 5))
    i2t = ugncl.query_uncertainty(model=model, image_embeds=image_embeds, text_embeds=text_embeds, direction="i2t")
    t2i = ugncl.query_uncertainty(model=model, image_embeds=image_embeds, text_embeds=text_embeds, direction="t2i")
    assert i2t.shape == (3,) and t2i.shape == (6,)
    assert ((i2t > 0) & (i2t < 1)).all() and ((t2i > 0) & (t2i < 1)).all()
    views = model.networks[0].view_similarity(image_embeds[0], text_embeds[0]).double()
    _, expected = evidential.fused_opinion(evidential.softplus_evidence(views[:, 1:2, :], 0.1, excess=True))
    assert i2t[1].item() == pytest.approx(expected.item(), rel=1e-5)


def test_ugncl_trains_with_two_views_and_reports_its_sets(tiny_data_dir, tmp_path) -> None:
    from conftest import TINY_MODEL, tiny_config

    from hfncl.experiment import DataArguments, run_experiment

    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4),
        tiny_config(tmp_path, ["ugncl"], epochs=2, options={"ugncl.xi1": 0.0}),
        TINY_MODEL,
    )
    last = result["history"][-1]
    shares = [last[f"division/{name}_share"] for name in ugncl.SET_NAMES.values()]
    assert sum(shares) == pytest.approx(1.0)
    # Eq. 8 on a cosine head: even less its floor, evidence is at least ~22 per candidate, u < p, all determined.
    assert last["division/clean_share"] + last["division/noisy_share"] == pytest.approx(1.0)
    assert result["test"]["rsum"] > 0
    assert NCLConfig.from_pretrained(tmp_path / "best").image_views == 2


def test_ugncl_ensemble_trains_networks_on_their_own_divisions(tiny_data_dir, tmp_path) -> None:
    from conftest import TINY_MODEL, tiny_config

    from hfncl.experiment import DataArguments, run_experiment

    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4),
        tiny_config(tmp_path, ["ugncl"], epochs=2, options={"ugncl.xi1": 0.0, "ugncl.ensemble": 2}),
        TINY_MODEL,
    )
    last = result["history"][-1]
    assert {"division/net0/clean_share", "division/net1/clean_share"} <= set(last)
    assert NCLConfig.from_pretrained(tmp_path / "best").num_networks == 2


@pytest.mark.parametrize("networks", [0, 1.5, True])
def test_ugncl_ensemble_size_is_checked(networks) -> None:
    with pytest.raises(ValueError, match="ugncl.ensemble"):
        ugncl.num_networks(TrainConfig(options={"ugncl.ensemble": networks}))


def test_batch_statistics_are_the_opinions_the_division_reads() -> None:
    evidence = evidential.softplus_evidence(
        torch.randn(2, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3)), 0.1
    )
    belief, uncertainty = ugncl.pair_opinions(evidence)
    statistics = ugncl.batch_statistics(evidence, "share")
    torch.testing.assert_close(statistics[:, 0], uncertainty)
    torch.testing.assert_close(statistics[:, 1], belief.diagonal() / (1 - uncertainty))
    assert statistics[:, 2].tolist() == [float(belief[i].argmax() == i) for i in range(5)]
    torch.testing.assert_close(ugncl.batch_statistics(evidence, "belief")[:, 1], belief.diagonal())


def _division_trainer(data_dir, output_dir, statistics: str, callbacks: list):
    from conftest import tiny_config

    from hfncl.engine.trainer import Trainer
    from hfncl.experiment import DataArguments
    from hfncl.plugin_setup import run_plugins
    from hfncl.tasks.pair_data import prepare_data
    from hfncl.tasks.pairs import PAIRS

    options = {"ugncl.xi1": 0.0, "ugncl.division_statistics": statistics}
    config = tiny_config(output_dir, ["ugncl"], lr_decay_epochs=[], plot_divisions=False, options=options)
    data = prepare_data(DataArguments(data_dir=str(data_dir), noise_ratio=0.4), config.output_dir)
    model = NCLConfig(image_dim=data.image_dim, vocab_size=len(data.vocab), embed_dim=32, word_dim=16, image_views=2)
    return Trainer(config, model, data.train, None, task=PAIRS, callbacks=callbacks, plugins=run_plugins(config))


@pytest.mark.parametrize("statistics", ["steps", "pass"])
def test_division_from_the_steps_reads_the_opinions_they_recorded_and_makes_no_pass(
    tiny_data_dir, tmp_path, statistics
):
    passes, checked = [], []

    class Check:
        def __getattr__(self, name):
            return lambda *args, **kwargs: None

        def on_division(self, trainer, epoch, divisions, true_clean):
            if statistics == "steps":
                recorded = trainer.ledger.get(ugncl.STEP_STATISTICS.format(0))
                expected = ugncl.uncertainty_division(
                    recorded[:, 0].double(), recorded[:, 1].double(), recorded[:, 2] > 0.5, 0.5, 0.5
                )
                torch.testing.assert_close(divisions[0].extras["soft_label"], expected.extras["soft_label"])
                assert torch.equal(divisions[0].extras["sets"], expected.extras["sets"])
            checked.append(epoch)

    trainer = _division_trainer(tiny_data_dir, tmp_path, statistics, [Check()])
    collect = trainer.collect
    trainer.collect = lambda *args, **kwargs: passes.append(trainer.epoch) or collect(*args, **kwargs)
    trainer.train()
    assert checked == [1, 2]
    assert passes == ([] if statistics == "steps" else [1, 2])
    assert (ugncl.STEP_STATISTICS.format(0) in trainer.ledger) == (statistics == "steps")
