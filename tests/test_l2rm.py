"""L2RM (Han et al., CVPR 2024): the partial transport plan, the rematching and warmup losses, a run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import tiny_config
from scipy.optimize import linprog

from hfncl.experiment import DataArguments, run_experiment
from hfncl_plugins import l2rm
from hfncl_plugins.l2rm import L2RMOptions


def _partial_ot_lp(cost: np.ndarray, mass: float, allowed: np.ndarray) -> float:
    """The unregularised partial OT value: min <C, pi> over pi >= 0 with row sums <= 1/n, column sums <= 1/m, total
    mass ``mass`` and pi = 0 where not ``allowed``, by scipy's linear programming."""
    n, m = cost.shape
    rows = np.kron(np.eye(n), np.ones((1, m)))
    columns = np.kron(np.ones((1, n)), np.eye(m))
    bounds = [(0, None) if ok else (0, 0) for ok in allowed.ravel()]
    solved = linprog(
        cost.ravel(), A_ub=np.vstack([rows, columns]), b_ub=np.concatenate([np.full(n, 1 / n), np.full(m, 1 / m)]),
        A_eq=np.ones((1, n * m)), b_eq=[mass], bounds=bounds, method="highs",
    )
    assert solved.success
    return float(solved.fun)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.filterwarnings("ignore:Sinkhorn did not converge")
def test_partial_plan_moves_rho_within_the_marginals_and_reaches_the_linear_programme_s_cost(masked):
    """As reg -> 0 the entropic plan's cost tends to the partial OT optimum; its mass is rho, no row or column gets
    more than its uniform share, and a masked diagonal receives no mass."""
    generator = torch.Generator().manual_seed(0)
    cost = torch.rand(6, 6, generator=generator, dtype=torch.float64)
    mask = ~torch.eye(6, dtype=torch.bool) if masked else None
    plan = l2rm.partial_transport_plan(cost, rho=0.5, reg=0.005, mask=mask, iterations=20000)
    allowed = mask.numpy() if masked else np.ones((6, 6), dtype=bool)
    assert float(plan.sum()) == pytest.approx(0.5, abs=1e-4)
    assert bool((plan.sum(dim=1) <= 1 / 6 + 1e-4).all()) and bool((plan.sum(dim=0) <= 1 / 6 + 1e-4).all())
    assert float((plan * cost).sum()) == pytest.approx(_partial_ot_lp(cost.numpy(), 0.5, allowed), abs=1e-2)
    if masked:
        assert float(plan.diagonal().abs().max()) < 1e-12


def test_partial_plan_of_the_default_regularisation_keeps_the_mass_and_masks_the_diagonal():
    """At the authors' reg 0.07 and rho 0.1 on a cost 1 - S of a batch: mass 0.1, nothing on the diagonal, and the
    mass goes to the low-cost cells (the plan's cost is below that of the same mass spread uniformly)."""
    generator = torch.Generator().manual_seed(1)
    similarity = torch.rand(16, 16, generator=generator)
    settings = L2RMOptions.read({})
    cost = l2rm.transport_cost(similarity)
    mask = ~torch.eye(16, dtype=torch.bool)
    plan = l2rm.partial_transport_plan(cost, settings.rho, settings.reg, mask)
    assert float(plan.sum()) == pytest.approx(0.1, rel=1e-4)
    assert float(plan.diagonal().max()) < 1e-12
    uniform = float(cost[mask].mean()) * 0.1
    assert float((plan * cost).sum()) < uniform


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * (math.log(a) - math.log(b)) for a, b in zip(p, q, strict=True))


def _softmax(values: list[float]) -> list[float]:
    exps = [math.exp(v) for v in values]
    return [e / sum(exps) for e in exps]


def test_symmetric_kl_against_a_loop():
    """(KL(Q||P) + KL(P||Q)) / 2 over the rows and over the columns, each averaged over its queries, written out."""
    similarity = torch.tensor([[0.9, 0.2, 0.4], [0.1, 0.7, 0.3], [0.5, 0.6, 0.2]], dtype=torch.float64)
    plan = torch.tensor([[0.0, 0.03, 0.01], [0.02, 0.0, 0.02], [0.01, 0.01, 0.0]], dtype=torch.float64)
    tau = 0.1
    total = 0.0
    for s, q in ((similarity.tolist(), plan.tolist()), (similarity.t().tolist(), plan.t().tolist())):
        for row_s, row_q in zip(s, q, strict=True):
            clipped = [max(v, 1e-10) for v in row_q]
            target = [v / sum(clipped) for v in clipped]
            predicted = _softmax([v / tau for v in row_s])
            total += (_kl(target, predicted) + _kl(predicted, target)) / len(s)
    assert float(l2rm.symmetric_kl(similarity, plan, tau)) == pytest.approx(total / 2, rel=1e-9)


def test_rce_against_a_loop():
    """(CE + RCE) / 2 of both directions: CE = -mean log p_ii, RCE = -mean sum_j p_ij log(delta_ij + 1e-7)."""
    similarity = torch.tensor([[0.8, 0.3], [0.6, 0.5]], dtype=torch.float64)
    tau = 0.05
    total = 0.0
    for s in (similarity.tolist(), similarity.t().tolist()):
        for i, row in enumerate(s):
            p = _softmax([v / tau for v in row])
            total += -math.log(p[i]) / 2
            total += -sum(p[j] * math.log((1.0 if j == i else 0.0) + 1e-7) for j in range(2)) / 2
    assert float(l2rm.rce_loss(similarity, tau)) == pytest.approx(total / 2, rel=1e-9)


def test_mean_hinge_is_each_pair_s_hinge_averaged_over_the_batch():
    similarity = torch.tensor([[0.5, 0.6], [0.1, 0.4]])
    # pair 0: row [0.2 - 0.5 + 0.6]_+ = 0.3, column [0.2 - 0.5 + 0.1]_+ = 0;
    # pair 1: row [0.2 - 0.4 + 0.1]_+ = 0, column [0.2 - 0.4 + 0.6]_+ = 0.4; each over b = 2 columns
    assert l2rm.mean_hinge(similarity, 0.2).tolist() == pytest.approx([0.15, 0.2])


@pytest.mark.slow
def test_l2rm_trains_divides_and_rematches(tiny_data_dir, tmp_path):
    """One RCE warmup epoch and one rematching epoch on 40% noise: every term stays finite, the noisy batches
    train, and the Beta mixture's division finds the noise better than chance."""
    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4), tiny_config(tmp_path, ["l2rm"], epochs=2)
    )
    history = result["history"]
    assert math.isfinite(history[0]["train/rce"])
    for record in history[1:]:
        assert math.isfinite(record["train/triplet_hardest"]) and math.isfinite(record["train/rematch_skl/noisy"])
        assert record["division/auc"] > 0.6
    assert 0.0 < result["test"]["rsum"] <= 600.0


@pytest.mark.parametrize(("weight", "parts"), [(1.0, ["clean", "noisy"]), (0.0, ["clean"])])
def test_rematch_weight_zero_leaves_the_noisy_pairs_out_of_the_pass(weight, parts):
    from types import SimpleNamespace

    from hfncl.types import Division

    clean = torch.tensor([True, False, True, False])
    trainer = SimpleNamespace(in_warmup=False, divisions=[Division(clean_prob=clean.float(), clean=clean)],
                              options_of=lambda _: L2RMOptions(rematch_weight=weight))
    plan = l2rm.batch_plan(trainer, [0])
    assert list(plan.parts) == parts
    assert torch.equal(plan.parts["clean"], clean)


def test_every_pair_clean_without_warmup_trains_exactly_as_vsepp(tiny_data_dir, tmp_path):
    """With ``l2rm.threshold`` 0 (every pair clean) and no warmup, L2RM's pass is VSE++'s: the max-violation triplet
    on the same batches, so the same seed gives the same validation rSum every epoch and the same test metrics (the
    control of ``docs/methods/l2rm.md``'s proxy table)."""
    data = DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4)
    runs = {
        plugins[0]: run_experiment(data, tiny_config(tmp_path / plugins[0], plugins, epochs=2, warmup_epochs=0,
                                                     options=options))
        for plugins, options in ((["vsepp"], {}), (["l2rm"], {"l2rm.threshold": 0.0}))
    }
    assert [h["val/rsum"] for h in runs["l2rm"]["history"]] == [h["val/rsum"] for h in runs["vsepp"]["history"]]
    assert runs["l2rm"]["test"] == runs["vsepp"]["test"]
    assert all(h["division/predicted_clean_ratio"] == 1.0 for h in runs["l2rm"]["history"])
