"""hfncl.equations.toolkit and the equations methods share, each against a plain reference written out here."""

from __future__ import annotations

import math

import numpy as np
import torch

from hfncl.engine.ledger import Ledger
from hfncl.equations import evidential, losses, toolkit
from hfncl.types import Division


def test_peer_is_the_next_network_and_itself_alone():
    assert [toolkit.peer(net, 2) for net in (0, 1)] == [1, 0] and toolkit.peer(0, 1) == 0


def test_ledger_columns_are_copies_or_fills():
    ledger = Ledger(3)
    assert torch.equal(toolkit.ledger_column(ledger, "a", 3, 1.0), torch.ones(3))
    assert toolkit.complete_columns(ledger, ["a"]) is None
    ledger.record(torch.tensor([0, 2]), "a", torch.tensor([5.0, 7.0]))
    column = toolkit.ledger_column(ledger, "a", 3)
    assert column[0] == 5 and math.isnan(column[1]) and toolkit.complete_columns(ledger, ["a"]) is None
    column[0] = 0
    assert ledger.get("a")[0] == 5  # a copy
    ledger.record(torch.tensor([1]), "a", torch.tensor([6.0]))
    assert toolkit.complete_columns(ledger, ["a"])[0].tolist() == [5.0, 6.0, 7.0]


def test_fill_unrecorded_records_a_pass_only_where_the_steps_left_no_value():
    ledger = Ledger(3)
    toolkit.fill_unrecorded(ledger, "a", torch.tensor([1.0, 2.0, 3.0]))
    assert ledger.get("a").tolist() == [1.0, 2.0, 3.0]  # nothing recorded: all of the pass
    ledger.record(torch.tensor([0]), "rows", torch.tensor([[5.0, 6.0]]))
    ledger.record(torch.tensor([1]), "rows", torch.tensor([[float("nan"), 8.0]]))
    toolkit.fill_unrecorded(ledger, "rows", torch.zeros(3, 2))
    assert ledger.get("rows").tolist() == [[5.0, 6.0], [0.0, 0.0], [0.0, 0.0]]  # a row with any gap takes the pass's


def test_recorded_or_pass_reads_complete_current_records_and_fills_gaps_from_a_pass():
    from types import SimpleNamespace

    passes = []

    def run_pass():
        passes.append(1)
        return [torch.tensor([1.0, 2.0, 3.0])]

    ledger = Ledger(3)
    trainer = SimpleNamespace(ledger=ledger)
    ledger.record(torch.tensor([0, 2]), "a", torch.tensor([5.0, 7.0]))
    assert toolkit.recorded_or_pass(trainer, ["a"], run_pass, recorded=True)[0].tolist() == [1.0, 2.0, 3.0]
    assert ledger.get("a").tolist() == [5.0, 2.0, 7.0] and len(passes) == 1  # the gap filled, the records kept
    assert toolkit.recorded_or_pass(trainer, ["a"], run_pass, recorded=True)[0].tolist() == [5.0, 2.0, 7.0]
    assert len(passes) == 1  # complete records: no pass
    assert toolkit.recorded_or_pass(trainer, ["a"], run_pass, recorded=True, current=False)[0].tolist() == [
        1.0,
        2.0,
        3.0,
    ]
    assert toolkit.recorded_or_pass(SimpleNamespace(), ["a"], run_pass, recorded=False)[0].tolist() == [1.0, 2.0, 3.0]
    assert len(passes) == 3


def test_batch_view_gathers_the_division_rows_of_the_batch():
    division = Division(
        torch.tensor([0.1, 0.9, 0.6]), torch.tensor([False, True, True]), {"x": torch.tensor([1, 2, 3])}
    )
    view = toolkit.batch_view(division, torch.tensor([2, 0]), ["clean", "clean_prob", "x"], "cpu")
    assert view["clean"].tolist() == [True, False] and view["clean_prob"].tolist() == [
        0.6000000238418579,
        0.10000000149011612,
    ]
    assert view["x"].tolist() == [3, 1]
    trainer = type("T", (), {"gather": staticmethod(lambda tensor: torch.cat([tensor, tensor + 10]))})()
    assert toolkit.batch_index(trainer, {"index": torch.tensor([1, 2])}).tolist() == [1, 2, 11, 12]


def test_seeds():
    assert toolkit.epoch_seed(3, 0) == 3 + 7919 and toolkit.epoch_seed(3, 2) == 3 + 3 * 7919
    state = int(np.random.SeedSequence([1, 2, 3]).generate_state(1)[0])
    expected = torch.rand(4, generator=torch.Generator().manual_seed(state))
    assert torch.equal(torch.rand(4, generator=toolkit.seeded_generator(1, 2, 3)), expected)


def test_training_batches_are_the_training_batch_size_in_the_epoch_s_order():
    from types import SimpleNamespace

    trainer = SimpleNamespace(config=SimpleNamespace(batch_size=128, seed=3))
    assert toolkit.training_batches(trainer, 5) == {"batch_size": 128, "seed": 3 + 7919 * 6}


def test_hook_factories_answer_like_hand_written_hooks():
    loss, warmup_loss = toolkit.same_terms_in_warmup(lambda trainer, batch, outputs, net: {"t": outputs + net})
    assert loss(trainer=None, batch={}, outputs=1, targets=None, net=2) == warmup_loss(None, {}, 1, 2) == {"t": 3}
    assert toolkit.networks_in_turn()(config=None, num_networks=3) == [[0], [1], [2]]


def test_soft_margin_and_top_k_negatives_by_hand():
    labels = torch.tensor([0.0, 0.5, 1.0])
    expected = [(10**y - 1) / 9 * 0.2 for y in (0.0, 0.5, 1.0)]
    torch.testing.assert_close(losses.soft_margin(labels, 0.2, 10.0), torch.tensor(expected))
    s = torch.tensor([[0.9, 0.5, 0.1], [0.3, 0.8, 0.7], [0.6, 0.2, 0.4]])
    margins = torch.tensor([0.2, 0.1, 0.3])
    by_hand = []
    for i in range(3):
        rows = sorted((s[i, j].item() for j in range(3) if j != i), reverse=True)[:2]
        cols = sorted((s[j, i].item() for j in range(3) if j != i), reverse=True)[:2]
        hinge = [max(0.0, margins[i].item() - s[i, i].item() + v) for v in rows]
        hinge += [max(0.0, margins[i].item() - s[i, i].item() + v) for v in cols]
        by_hand.append((hinge[0] + hinge[2] + hinge[1] + hinge[3]) / 2)
    torch.testing.assert_close(losses.triplet_top_k_negatives(s, margins, 2), torch.tensor(by_hand))


def test_the_two_evidence_functions_and_the_fusion_by_hand():
    s = torch.tensor([[-1.0, 0.0], [0.5, 2.0]])
    torch.testing.assert_close(
        evidential.softplus_evidence(s, 0.5),
        torch.tensor([[math.exp(math.log1p(math.exp(v)) / 0.5) for v in row] for row in s.tolist()]),
    )
    torch.testing.assert_close(
        evidential.scaled_evidence(s, 0.5, "relu"), torch.tensor([[0.0, 0.0], [1.0, 4.0]], dtype=torch.float64)
    )
    torch.testing.assert_close(evidential.scaled_evidence(s, 0.5, "exp"), (s.double() * 2).exp())
    # two views of K = 2: Dempster's rule written out
    e1, e2 = torch.tensor([3.0, 1.0]), torch.tensor([1.0, 1.0])
    b1, u1 = e1 / 6, 2 / 6
    b2, u2 = e2 / 4, 2 / 4
    conflict = b1[0] * b2[1] + b1[1] * b2[0]
    belief = (b1 * b2 + b1 * u2 + b2 * u1) / (1 - conflict)
    fused_b, fused_u = evidential.fused_opinion(torch.stack([e1, e2]))
    torch.testing.assert_close(fused_b, belief)
    torch.testing.assert_close(fused_u, torch.tensor(u1 * u2 / (1 - conflict)))
    alpha = evidential.joint_alpha(fused_b, fused_u)
    torch.testing.assert_close(alpha, fused_b * 2 / fused_u + 1)
    target = torch.tensor([1.0, 0.0])
    strength = alpha.sum()
    risk = sum(
        (target[j] - alpha[j] / strength) ** 2 + alpha[j] * (strength - alpha[j]) / (strength**2 * (strength + 1))
        for j in range(2)
    )
    torch.testing.assert_close(evidential.least_squares_risk(alpha, target), risk)


def test_forget_records_makes_every_row_of_the_named_columns_unrecorded_and_leaves_the_others():
    from types import SimpleNamespace

    from hfncl.engine.ledger import Ledger

    ledger = Ledger(3)
    ledger.record(torch.tensor([0, 2]), "a", torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    ledger.record(torch.tensor([1]), "b", torch.tensor([5.0]))
    toolkit.forget_records(SimpleNamespace(ledger=ledger), ["a", "never recorded"])
    assert ledger.get("a").shape == (3, 2) and torch.isnan(ledger.get("a")).all()
    assert ledger.get("b")[1].item() == 5.0 and "never recorded" not in ledger
