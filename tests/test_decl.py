"""DECL's evidence, uncertainty, alignment labels and losses against independent computations."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.special import digamma, gammaln
from torch.distributions import Dirichlet, kl_divergence

from hfncl.config import TrainConfig
from hfncl.models import NCLConfig, NCLModel
from hfncl_plugins import decl


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_evidence_is_exp_of_the_score_over_tau_by_hand() -> None:
    score = torch.tensor([[0.0, 0.5], [-1.0, 1.0]])
    expected = [[1.0, math.exp(5.0)], [math.exp(-10.0), math.exp(10.0)]]
    values = decl.evidence(score, 0.1)
    assert values.dtype == torch.float64 and values.flatten().tolist() == pytest.approx(sum(expected, []), rel=1e-12)


def test_the_tanh_reading_squashes_the_raw_score_and_the_similarity_reading_keeps_the_head_s() -> None:
    raw = torch.tensor([[[2.0, -3.0], [0.0, 0.5]], [[0.0, 1.0], [4.0, -0.5]]])
    similarity = torch.sigmoid(raw).mean(dim=0)
    tanh = decl.matching_scores(raw, similarity, "tanh")
    expected = [[(math.tanh(2.0) + 0.0) / 2, (math.tanh(-3.0) + math.tanh(1.0)) / 2],
                [(0.0 + math.tanh(4.0)) / 2, (math.tanh(0.5) + math.tanh(-0.5)) / 2]]
    assert tanh.flatten().tolist() == pytest.approx(sum(expected, []), rel=1e-6, abs=1e-7)
    assert decl.matching_scores(raw, similarity, "similarity") is similarity


def test_uncertainty_is_k_over_the_dirichlet_strength_per_row_and_per_column() -> None:
    evidence = torch.tensor([[3.0, 1.0, 0.0], [0.0, 0.0, 0.0], [2.0, 2.0, 5.0]], dtype=torch.float64)
    u_i2t, u_t2i = decl.uncertainties(evidence)
    assert u_i2t.tolist() == pytest.approx([3 / 7, 3 / 3, 3 / 12])
    assert u_t2i.tolist() == pytest.approx([3 / 8, 3 / 6, 3 / 8])


def test_alignment_label_is_the_argmax_of_the_bidirectional_evidence_by_hand() -> None:
    # rows + columns: [[2, 1+0, 0+4], [0+1, 6, 1+0], [4+0, 0+1, 2]] -> argmax 2, 1, 0; only pair 1 is its own.
    evidence = torch.tensor([[1.0, 1.0, 0.0], [0.0, 3.0, 1.0], [4.0, 0.0, 1.0]], dtype=torch.float64)
    labels, share = decl.alignment_labels(evidence)
    assert labels.tolist() == [False, True, False]
    assert share.tolist() == pytest.approx([2 / 7, 6 / 8, 2 / 7])


def _least_squares_by_monte_carlo(alpha: torch.Tensor, target: torch.Tensor, draws: int = 400_000) -> float:
    probabilities = Dirichlet(alpha).sample((draws,))
    return ((target - probabilities) ** 2).sum(dim=1).mean().item()


def test_l_m_is_the_expected_squared_error_under_the_dirichlet_by_monte_carlo() -> None:
    """Supp. Eq. 1: L_m = E_{p ~ Dir(alpha)} ||y - p||^2, for a clean target and a noisy (all-zero) one."""
    torch.manual_seed(0)
    evidence = torch.tensor([[4.0, 0.5, 1.0], [0.2, 2.0, 0.3], [1.0, 1.0, 6.0]], dtype=torch.float64)
    per_pair = decl.evidential_loss(evidence, torch.tensor([1.0, 0.0, 1.0]), lambda2=0.0)
    alpha, alpha_t = evidence + 1, evidence.t() + 1
    for i, clean in enumerate([1.0, 0.0, 1.0]):
        target = torch.zeros(3, dtype=torch.float64)
        target[i] = clean
        expected = _least_squares_by_monte_carlo(alpha[i], target) + _least_squares_by_monte_carlo(alpha_t[i], target)
        assert per_pair[i].item() == pytest.approx(expected, rel=5e-3)


def _kl_to_uniform_scipy(alpha: list[float]) -> float:
    """KL[Dir(alpha) || Dir(1)] written from the densities' log-normalisers and E[log p_j] = psi(a_j) - psi(S)."""
    strength = sum(alpha)
    log_norm = gammaln(strength) - sum(gammaln(a) for a in alpha) - gammaln(len(alpha))
    return float(log_norm + sum((a - 1) * (digamma(a) - digamma(strength)) for a in alpha))


def test_l_kl_removes_the_target_s_evidence_and_matches_torch_distributions_and_scipy() -> None:
    """Supp. Eq. 3-6: alpha~ = y + (1 - y) alpha; a noisy pair has y = 0: its whole Dirichlet is pulled to uniform."""
    evidence = torch.tensor([[4.0, 0.5, 1.0], [0.2, 2.0, 0.3], [1.0, 1.0, 6.0]], dtype=torch.float64)
    labels = torch.tensor([1.0, 0.0, 1.0])
    with_kl = decl.evidential_loss(evidence, labels, lambda2=0.1)
    without = decl.evidential_loss(evidence, labels, lambda2=0.0)
    for i, clean in enumerate(labels.tolist()):
        kl = 0.0
        for alpha in ((evidence + 1)[i], (evidence.t() + 1)[i]):
            removed = alpha.clone()
            if clean:
                removed[i] = 1.0
            reference = kl_divergence(Dirichlet(removed), Dirichlet(torch.ones(3, dtype=torch.float64))).item()
            assert reference == pytest.approx(_kl_to_uniform_scipy(removed.tolist()), rel=1e-10)
            kl += reference
        assert (with_kl[i] - without[i]).item() == pytest.approx(0.1 * kl, rel=1e-9)


def _rdh_loop(score: torch.Tensor, margin: float, hardest: int) -> list[float]:
    """The plain reading of RDH: per pair, the sorted hinge costs of its image query and of its caption query."""
    size = score.size(0)
    values = []
    for i in range(size):
        others = [j for j in range(size) if j != i]
        rows = sorted((max(0.0, margin - score[i, i].item() + score[i, j].item()) for j in others), reverse=True)
        columns = sorted((max(0.0, margin - score[i, i].item() + score[j, i].item()) for j in others), reverse=True)
        values.append((sum(rows[:hardest]) + sum(columns[:hardest])) / hardest)
    return values


@pytest.mark.parametrize("hardest", [1, 3, 6])
def test_robust_dynamic_hinge_matches_a_plain_loop(hardest: int) -> None:
    score = torch.tanh(torch.randn(7, 7, generator=_generator(hardest)))
    expected = _rdh_loop(score, 0.2, hardest)
    assert decl.robust_dynamic_hinge(score, 0.2, hardest).tolist() == pytest.approx(expected, rel=1e-6)


def test_hardness_falls_by_eta_per_step_to_mu_and_never_exceeds_the_negatives() -> None:
    """Algorithm 1, line 6 with Supp. Table 1's eta = 0.025, mu = 5 and K = 128."""
    assert decl.num_hardest(128, 1, 0.025, 5, 127) == 127  # int(127.975)
    assert decl.num_hardest(128, 40, 0.025, 5, 127) == 127
    assert decl.num_hardest(128, 41, 0.025, 5, 127) == 126
    assert decl.num_hardest(128, 4920, 0.025, 5, 127) == 5
    assert decl.num_hardest(128, 10**6, 0.025, 5, 127) == 5
    assert decl.num_hardest(128, 1, 0.025, 5, 31) == 31  # a smaller last batch


def test_the_division_is_clean_where_the_label_is_one_and_its_statistic_is_the_mean_uncertainty() -> None:
    share, uncertainty = torch.tensor([0.6, 0.1], dtype=torch.float64), torch.tensor([0.2, 0.8], dtype=torch.float64)
    division = decl.division_of(torch.tensor([True, False]), share, uncertainty)
    assert division.clean.tolist() == [True, False]
    assert division.clean_prob.tolist() == pytest.approx([0.6, 0.1])
    assert division.extras["statistic"].tolist() == pytest.approx([0.2, 0.8])


def test_options_default_to_the_supplement_s_table_1_and_bad_values_are_refused_by_name() -> None:
    settings = decl.DECLOptions.read({})
    assert (settings.tau, settings.lambda1, settings.lambda2, settings.eta, settings.mu) == (0.1, 0.8, 0.1, 0.025, 5)
    assert settings.margin == 0.2 and settings.score == "tanh"
    for name, value in (("decl.score", "cosine"), ("decl.tau", 0.0), ("decl.mu", 0)):
        with pytest.raises(ValueError, match=name):
            decl.DECLOptions.read(TrainConfig(options={name: value}).options)


def test_query_uncertainty_is_u_over_the_whole_gallery() -> None:
    torch.manual_seed(0)
    model = NCLModel(NCLConfig(image_dim=8, embed_dim=16, word_dim=6, vocab_size=20)).eval()
    image_embeds = model.encode_image(torch.randn(3, 4, 8))
    text_embeds = model.encode_text(torch.randint(1, 20, (6, 5)), torch.full((6,), 5))
    i2t = decl.query_uncertainty(model=model, image_embeds=image_embeds, text_embeds=text_embeds, direction="i2t")
    t2i = decl.query_uncertainty(model=model, image_embeds=image_embeds, text_embeds=text_embeds, direction="t2i")
    cosine = model.networks[0].similarity(image_embeds[0], text_embeds[0]).double()
    expected = 6 / (torch.exp(torch.tanh(cosine[1]) / 0.1) + 1).sum()
    assert i2t.shape == (3,) and t2i.shape == (6,)
    assert i2t[1].item() == pytest.approx(expected.item(), rel=1e-5)
    assert t2i[0].item() == pytest.approx((3 / (torch.exp(torch.tanh(cosine[:, 0]) / 0.1) + 1).sum()).item(), rel=1e-5)


def test_decl_trains_on_image_level_noise_and_logs_both_terms(micro_data_dir, tmp_path) -> None:
    from conftest import TINY_MODEL, tiny_config

    from hfncl.experiment import DataArguments, run_experiment

    result = run_experiment(
        DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.4, noise_kind="image"),
        tiny_config(tmp_path, ["decl"], epochs=2, batch_size=16, lr_decay_epochs=[], plot_divisions=False),
        TINY_MODEL,
    )
    warmup, trained = result["history"]
    assert "division/auc" not in warmup and "division/auc" in trained
    for record in (warmup, trained):
        assert math.isfinite(record["train/evidential"]) and math.isfinite(record["train/robust_dynamic_hinge"])
    assert 0.0 <= trained["division/predicted_clean_ratio"] <= 1.0 and result["test"]["rsum"] > 0


def test_the_alignment_labels_pick_a_clean_set_purer_than_the_data(tiny_data_dir, tmp_path) -> None:
    """After two warmup epochs at 40% image-level noise, the pairs whose own item holds the largest bidirectional
    evidence are clean more often than the 60% of the data, and the evidence share ranks clean above noisy."""
    from conftest import TINY_MODEL, tiny_config

    from hfncl.experiment import DataArguments, run_experiment

    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4, noise_kind="image"),
        tiny_config(
            tmp_path, ["decl"], epochs=3, warmup_epochs=2, learning_rate=5e-3, lr_decay_epochs=[],
            plot_divisions=False, options={"decl.eta": 2.0},
        ),
        TINY_MODEL,
    )
    divided = result["history"][2]
    assert divided["division/true_noise_ratio"] == pytest.approx(0.4)
    assert divided["division/precision"] > 0.68 and divided["division/auc"] > 0.57


def _plain_pair_statistics(raw: torch.Tensor, tau: float) -> list[list[float]]:
    """Per pair, by loops: (own item has the largest e_ij + e_ji in row i, its share of that row, (u_i2t + u_t2i) / 2)
    with s = mean over views of tanh(z), e = exp(s / tau) and u = K / (sum of the evidence + K)."""
    size = raw.size(1)
    s = [[sum(math.tanh(raw[w, i, j].item()) for w in range(raw.size(0))) / raw.size(0) for j in range(size)]
         for i in range(size)]
    e = [[math.exp(s[i][j] / tau) for j in range(size)] for i in range(size)]
    rows = []
    for i in range(size):
        both = [e[i][j] + e[j][i] for j in range(size)]
        u_i2t = size / (sum(e[i]) + size)
        u_t2i = size / (sum(e[j][i] for j in range(size)) + size)
        rows.append([float(max(range(size), key=both.__getitem__) == i), both[i] / sum(both), (u_i2t + u_t2i) / 2])
    return rows


def _steps_trainer(options: dict, num_train: int, batches: dict, calls: list[str], warmup_epochs: int = 2):
    """A stand-in trainer whose eval-mode forward returns ``batches[tuple(index)]`` and whose ``collect`` runs the
    statistic over those batches (and notes the call)."""
    from types import SimpleNamespace

    from hfncl.engine.ledger import Ledger

    def forward(net, batch, grad=True):
        calls.append(f"forward {batch['index'].tolist()}")
        return batches[tuple(batch["index"].tolist())]

    def collect(statistic, description, **loader):
        calls.append(description)
        columns = torch.full((num_train, 3), float("nan"))
        for index in batches:
            columns[list(index)] = statistic({"index": torch.tensor(index)})["statistics"].float()
        return {"statistics": columns}

    return SimpleNamespace(
        options_of=lambda kind: kind.read(options), ledger=Ledger(num_train), num_train=num_train,
        config=SimpleNamespace(seed=0, warmup_epochs=warmup_epochs, batch_size=3), global_step=0,
        in_warmup=True, epoch=warmup_epochs - 1, forward=forward, collect=collect,
        samples=lambda index: {"index": index},
    )


def _outputs(index: list[int], generator: torch.Generator):
    from types import SimpleNamespace

    raw = torch.randn(2, len(index), len(index), generator=generator) * 2
    return SimpleNamespace(view_scores=raw, similarity=torch.sigmoid(raw).mean(dim=0), index=torch.tensor(index))


def test_with_steps_the_training_steps_record_the_pass_s_statistics_and_divide_runs_no_pass() -> None:
    """``decl.division_statistics = "steps"``: the last warmup epoch's and every later epoch's steps record each
    pair's (label, share, mean u), the values a pass on the same outputs computes and a plain loop gives; the
    division reads them without a pass, then forgets them."""
    options = {"decl.division_statistics": "steps", "decl.eta": 1.0}
    generator = _generator(0)
    batches = {(4, 0, 2): _outputs([4, 0, 2], generator), (1, 5, 3): _outputs([1, 5, 3], generator)}
    calls: list[str] = []
    trainer = _steps_trainer(options, 6, batches, calls)
    trainer.epoch = 0  # an earlier warmup epoch records nothing: no division follows it
    decl.warmup_loss(trainer=trainer, batch={}, outputs=batches[(4, 0, 2)], net=0)
    assert decl.STEP_STATISTICS not in trainer.ledger
    trainer.epoch = 1
    for outputs in batches.values():
        decl.warmup_loss(trainer=trainer, batch={}, outputs=outputs, net=0)
    recorded = trainer.ledger.get(decl.STEP_STATISTICS).clone()
    assert recorded.shape == (6, 3) and torch.isfinite(recorded).all()
    for index, outputs in batches.items():
        expected = torch.tensor(_plain_pair_statistics(outputs.view_scores, 0.1), dtype=torch.float32)
        torch.testing.assert_close(recorded[list(index)], expected, rtol=1e-5, atol=1e-6)
    # the pass on the same outputs (eval-mode forward here returns them) computes the same statistics
    torch.testing.assert_close(decl.pass_statistics(trainer, epoch=2), recorded)
    calls.clear()
    division = decl.divide(trainer=trainer, epoch=2)
    assert calls == []
    assert division.clean.tolist() == (recorded[:, 0] > 0.5).tolist()
    torch.testing.assert_close(division.clean_prob, recorded[:, 1])
    torch.testing.assert_close(division.extras["uncertainty"], recorded[:, 2])
    assert torch.isnan(trainer.ledger.get(decl.STEP_STATISTICS)).all()  # read once: no record outlives its epoch
    # after warmup every epoch's steps record, through loss
    trainer.in_warmup, trainer.epoch = False, 2
    for outputs in batches.values():
        targets = {"clean": torch.tensor([1.0, 0.0, 1.0])}
        decl.loss(trainer=trainer, batch={}, outputs=outputs, targets=targets, net=0)
    torch.testing.assert_close(trainer.ledger.get(decl.STEP_STATISTICS), recorded)


def test_with_steps_the_pairs_the_steps_dropped_are_scored_as_one_batch_and_no_records_make_the_pass() -> None:
    """The last partial batch the steps drop (fewer pairs than a batch) is scored alone in eval mode; with more gaps
    (no records yet) the full pass runs; with ``"pass"`` (the default) the pass runs whatever the ledger holds."""
    generator = _generator(1)
    batches = {(4, 0, 2): _outputs([4, 0, 2], generator), (1, 5): _outputs([1, 5], generator),
               (3,): _outputs([3], generator)}
    calls: list[str] = []
    trainer = _steps_trainer({"decl.division_statistics": "steps"}, 6, batches, calls)
    for index in ((4, 0, 2), (1, 5)):
        decl.warmup_loss(trainer=trainer, batch={}, outputs=batches[index], net=0)
    calls.clear()
    division = decl.divide(trainer=trainer, epoch=2)
    assert calls == ["forward [3]"]
    # a batch of one pair: its own item holds all the evidence, u = 1 / (e + 1) both ways
    z = batches[(3,)].view_scores[:, 0, 0]
    e = math.exp(sum(math.tanh(v) for v in z.tolist()) / 2 / 0.1)
    assert division.clean[3] and division.clean_prob[3].item() == pytest.approx(1.0)
    assert division.extras["uncertainty"][3].item() == pytest.approx(1 / (e + 1), rel=1e-5)
    calls.clear()
    decl.divide(trainer=trainer, epoch=3)  # nothing recorded since: the pass
    assert calls == ["epoch 3 alignment labels"] + [f"forward {list(index)}" for index in batches]
    by_pass = _steps_trainer({}, 6, batches, calls)
    by_pass.ledger.record(torch.arange(6), decl.STEP_STATISTICS, torch.zeros(6, 3))
    calls.clear()
    decl.warmup_loss(trainer=by_pass, batch={}, outputs=batches[(4, 0, 2)], net=0)
    decl.divide(trainer=by_pass, epoch=2)
    assert calls[0] == "epoch 2 alignment labels" and torch.equal(by_pass.ledger.get(decl.STEP_STATISTICS),
                                                                   torch.zeros(6, 3))


def test_decl_divides_from_its_steps_without_a_pass_in_training(tiny_data_dir, tmp_path, monkeypatch) -> None:
    """A run with ``"steps"`` never calls the pass: batches of 30 leave a partial batch of the 800 pairs untrained
    each epoch, which the division scores on its own."""
    from conftest import TINY_MODEL, tiny_config

    from hfncl.experiment import DataArguments, run_experiment

    passes: list[int] = []
    monkeypatch.setattr(decl, "pass_statistics", lambda trainer, epoch: passes.append(epoch))
    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4, noise_kind="image"),
        tiny_config(tmp_path, ["decl"], epochs=3, warmup_epochs=1, batch_size=30, lr_decay_epochs=[],
                    plot_divisions=False, options={"decl.division_statistics": "steps"}),
        TINY_MODEL,
    )
    assert passes == []
    for record in result["history"][1:]:
        assert 0.0 <= record["division/predicted_clean_ratio"] <= 1.0 and math.isfinite(record["division/auc"])
