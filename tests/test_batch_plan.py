"""A method-chosen batch plan (the ``batch_plan`` hook): a pass over a lead part with batches of later parts beside.

A test plugin plans the even dataset positions as the lead part and 70 odd positions as a
later part (two batches of 32 per shuffle, so it cycles within a pass) and records what every
``loss`` call saw.
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from importlib.metadata import EntryPoint

import numpy as np
import pytest
import torch
from conftest import Interrupted, noisy_trainer, tiny_config
from safetensors.torch import load_file

from hfncl import plugins, registry
from hfncl.engine.batches import CyclingBatchSampler, GlobalBatchSampler, local_slice
from hfncl.engine.trainer import Trainer
from hfncl.types import BatchPlan

PLANNER = '''
import torch

from hfncl.hookspecs import hookimpl
from hfncl.equations.losses import triplet_hardest_negative
from hfncl.types import BatchPlan

SEEN = []
"""(epoch, pass, part, dataset positions) of every loss call."""
KEEP_LAST = False


@hookimpl
def batch_plan(trainer, epoch, networks):
    if trainer.in_warmup:
        return None
    position = torch.arange(trainer.num_train)
    return BatchPlan({"even": position % 2 == 0, "odd": (position % 2 == 1) & (position < 140)}, keep_last=KEEP_LAST)


def terms(trainer, outputs):
    SEEN.append((trainer.epoch, trainer.pass_index, trainer.batch_part, outputs.index.tolist()))
    if trainer.batch_part == "odd" and trainer.epoch == 1:
        return None  # a later part's batch without terms takes no step
    return {"hardest": triplet_hardest_negative(outputs.similarity).sum()}


@hookimpl
def warmup_loss(trainer, outputs):
    return terms(trainer, outputs)


@hookimpl
def loss(trainer, outputs):
    return terms(trainer, outputs)
'''
BATCH, LEAD_BATCHES, ODD = 32, 400 // 32, 70


def install(name, source, directory, monkeypatch):
    """Install ``source`` as plugin ``name`` (module ``hfncl_test_NAME``) beside the built-in plugins; return the
    module."""
    module = f"hfncl_test_{name}"
    (directory / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(directory))
    monkeypatch.delitem(sys.modules, module, raising=False)
    installed = registry.installed_entry_points()
    point = EntryPoint(name, module, plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "installed_entry_points", lambda: {**installed, name: point})
    return importlib.import_module(module)


@pytest.fixture
def planner(tmp_path_factory, monkeypatch):
    """The planning plugin, installed as ``planner``; its module (for ``SEEN``)."""
    module = install("planner", PLANNER, tmp_path_factory.mktemp("planner"), monkeypatch)
    module.SEEN.clear()
    return module


def test_a_cycling_sampler_gives_full_batches_each_shuffle_drawing_every_sample_at_most_once():
    subset = np.arange(1, 140, 2)  # 70 samples: two batches of 32 per shuffle, 6 left out of each
    sampler = CyclingBatchSampler(subset, 32, seed=5, num_batches=7)
    batches = [np.asarray(batch) for batch in sampler]
    assert len(batches) == len(sampler) == 7 and all(len(batch) == 32 for batch in batches)
    for cycle in range(3):
        drawn = np.concatenate(batches[2 * cycle : 2 * cycle + 2])
        assert len(set(drawn.tolist())) == 64 and set(drawn.tolist()) <= set(subset.tolist())
    assert not np.array_equal(batches[0], batches[2]), "each cycle is a new shuffle"
    again = [np.asarray(batch) for batch in CyclingBatchSampler(subset, 32, seed=5, num_batches=7)]
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))
    other = [np.asarray(batch) for batch in CyclingBatchSampler(subset, 32, seed=6, num_batches=7)]
    assert not all(np.array_equal(a, b) for a, b in zip(batches, other, strict=True))
    resumed = [np.asarray(batch) for batch in CyclingBatchSampler(subset, 32, seed=5, num_batches=7, start_batch=3)]
    assert all(np.array_equal(a, b) for a, b in zip(batches[3:], resumed, strict=True))
    halves = [CyclingBatchSampler(subset, 32, seed=5, num_batches=7, rank=rank, world_size=2) for rank in (0, 1)]
    for batch, first, second in zip(batches, *halves, strict=True):
        assert first + second == batch.tolist() and first == local_slice(batch, 0, 2).tolist()


def test_with_keep_last_each_shuffle_ends_with_its_partial_batch_unless_it_is_smaller_than_min_size():
    subset = np.arange(1, 140, 2)  # 70 samples: 32 + 32 + 6 per shuffle
    sampler = CyclingBatchSampler(subset, 32, seed=5, num_batches=7, keep_last=True, min_size=2)
    batches = [np.asarray(batch) for batch in sampler]
    assert [len(batch) for batch in batches] == [32, 32, 6, 32, 32, 6, 32]
    assert sorted(np.concatenate(batches[:3]).tolist()) == subset.tolist(), "a shuffle draws every sample once"
    full = [np.asarray(batch) for batch in CyclingBatchSampler(subset, 32, seed=5, num_batches=2)]
    assert all(np.array_equal(a, b) for a, b in zip(full, batches[:2], strict=True)), "the same shuffles"
    resumed = [np.asarray(batch) for batch in CyclingBatchSampler(subset, 32, seed=5, num_batches=7, start_batch=4,
                                                                  keep_last=True, min_size=2)]
    assert all(np.array_equal(a, b) for a, b in zip(batches[4:], resumed, strict=True))
    # a last batch of one sample (65 = 2 x 32 + 1) is dropped: BatchNorm cannot train on it
    odd = CyclingBatchSampler(np.arange(65), 32, seed=5, num_batches=3, keep_last=True, min_size=2)
    assert [len(batch) for batch in odd] == [32, 32, 32]
    lead = GlobalBatchSampler(100, 16, seed=3, drop_last=False, subset=np.arange(0, 100, 2), min_size=2)
    assert len(lead) == 4 and [len(batch) for batch in lead] == [16, 16, 16, 2]
    assert len(GlobalBatchSampler(100, 16, seed=3, drop_last=False, subset=np.arange(49), min_size=2)) == 3


def test_a_plan_that_keeps_the_last_batch_trains_every_lead_sample_and_cycles_with_partial_batches(
    planner, tiny_data_dir, tmp_path
):
    planner.KEEP_LAST = True
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["planner"], epochs=2, warmup_epochs=1))
    trainer.train()
    seen = [(part, index) for e, _, part, index in planner.SEEN if e == 1]
    lead = [index for part, index in seen if part == "even"]
    assert [len(index) for index in lead] == [BATCH] * LEAD_BATCHES + [400 - LEAD_BATCHES * BATCH]
    assert sorted(i for index in lead for i in index) == list(range(0, 800, 2)), "every lead sample trains once"
    beside = [len(index) for part, index in seen if part == "odd"]
    assert beside == ([BATCH, BATCH, ODD - 2 * BATCH] * 5)[: LEAD_BATCHES + 1]


def test_a_subset_sampler_draws_each_sample_of_the_subset_once_and_all_samples_as_the_default_order():
    subset = np.arange(0, 100, 2)
    batches = GlobalBatchSampler(100, 16, seed=3, drop_last=True, subset=subset).global_batches()
    drawn = np.concatenate(batches).tolist()
    assert len(batches) == 3 and len(set(drawn)) == 48 and set(drawn) <= set(subset.tolist())
    whole = GlobalBatchSampler(100, 16, seed=3, drop_last=True, subset=np.arange(100)).global_batches()
    default = GlobalBatchSampler(100, 16, seed=3, drop_last=True).global_batches()
    assert all(np.array_equal(a, b) for a, b in zip(whole, default, strict=True))


def test_a_plan_is_checked():
    with pytest.raises(ValueError, match="at least one part"):
        BatchPlan({})
    with pytest.raises(ValueError, match=r"BatchPlan.parts\['clean'\] must be an \(N,\) boolean mask"):
        BatchPlan({"clean": torch.ones(4)})
    with pytest.raises(ValueError, match="without '/'"):
        BatchPlan({"a/b": torch.ones(4, dtype=torch.bool)})


def test_the_pass_leads_with_each_sample_of_the_first_part_once_and_a_cycling_batch_of_the_second_beside(
    planner, tiny_data_dir, tmp_path
):
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["planner"], epochs=3, warmup_epochs=1))
    history = trainer.train()["history"]
    for epoch in (1, 2):
        seen = [(part, index) for e, _, part, index in planner.SEEN if e == epoch]
        assert [part for part, _ in seen] == ["even", "odd"] * LEAD_BATCHES, (
            "one batch of each part per step, lead first"
        )
        lead = [i for part, index in seen if part == "even" for i in index]
        assert len(lead) == len(set(lead)) == LEAD_BATCHES * BATCH and all(i % 2 == 0 for i in lead)
        beside = [index for part, index in seen if part == "odd"]
        assert all(len(index) == BATCH and all(i % 2 == 1 and i < 140 for i in index) for index in beside)
        for cycle in range(LEAD_BATCHES // 2):  # two full batches of the 70 odd samples per shuffle
            assert len(set(beside[2 * cycle]) | set(beside[2 * cycle + 1])) == 2 * BATCH
    assert [len(index) for e, _, part, index in planner.SEEN if e == 0] == [BATCH] * (800 // BATCH)
    assert "train/hardest/odd" not in history[1] and history[2]["train/hardest/odd"] > 0
    # optimiser steps: 25 in warmup, 12 (the odd batches of epoch 1 took none), 2 x 12 in epoch 2
    steps = {int(state["step"]) for state in trainer.optimizer.state.values()}
    assert steps == {800 // BATCH + LEAD_BATCHES + 2 * LEAD_BATCHES}
    assert trainer.state.global_step == 800 // BATCH + 2 * LEAD_BATCHES


def test_a_plan_is_the_same_with_the_same_seed_and_another_with_another(planner, tiny_data_dir, tmp_path):
    noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "a", ["planner"], epochs=2)).train()
    first = list(planner.SEEN)
    planner.SEEN.clear()
    noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "b", ["planner"], epochs=2)).train()
    assert planner.SEEN == first
    planner.SEEN.clear()
    noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "c", ["planner"], epochs=2, seed=1)).train()
    assert [s for s in planner.SEEN if s[0] == 1] != [s for s in first if s[0] == 1]


def test_a_run_killed_in_the_middle_of_a_planned_pass_resumes_to_the_same_batches_and_weights(
    planner, tiny_data_dir, tmp_path, monkeypatch
):
    reference = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "ref", ["planner"], save_steps=4))
    expected = reference.train()
    reference_seen = list(planner.SEEN)
    planner.SEEN.clear()
    original_step = Trainer._step
    calls = {"n": 0}

    def dying_step(self, batch, networks):
        calls["n"] += 1
        if calls["n"] == 25 + 2 * 12 + 8:  # epoch 2: the odd batch of its 4th step, after the checkpoint at step 40
            raise Interrupted
        return original_step(self, batch, networks)

    monkeypatch.setattr(Trainer, "_step", dying_step)
    with pytest.raises(Interrupted):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "run", ["planner"], save_steps=4)).train()
    monkeypatch.setattr(Trainer, "_step", original_step)
    planner.SEEN.clear()
    resumed = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "run", ["planner"], save_steps=4, resume=True))
    result = resumed.train()
    assert len(planner.SEEN) == 2 * (LEAD_BATCHES - 3) and planner.SEEN[0][:3] == (2, 0, "even")
    assert planner.SEEN == reference_seen[-len(planner.SEEN) :]
    assert json.dumps(result["history"], sort_keys=True) == json.dumps(expected["history"], sort_keys=True)
    ref_weights = load_file(str(tmp_path / "ref" / "best" / "model.safetensors"))
    run_weights = load_file(str(tmp_path / "run" / "best" / "model.safetensors"))
    assert all(torch.equal(ref_weights[k], run_weights[k]) for k in ref_weights)


def test_a_plan_that_does_not_cover_the_training_set_is_refused_naming_the_part(tiny_data_dir, tmp_path, monkeypatch):
    source = PLANNER.replace("BatchPlan({", "BatchPlan({'short': torch.ones(5, dtype=torch.bool), ")
    install("short_planner", source, tmp_path, monkeypatch)
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "run", ["short_planner"], epochs=2))
    with pytest.raises(plugins.PluginError, match="batch_plan's part 'short' masks 5 samples for 800"):
        trainer.train()
    assert trainer.state.history[0]["epoch"] == 1 and trainer.state.global_step == 800 // BATCH
