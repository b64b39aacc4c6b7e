"""Plugins use only the trainer view: read from their source, every module of ``plugins/``.

A plugin may read or call a member of ``trainer`` only if :class:`hfncl.trainer_view.TrainerView`
declares it (and of ``trainer.ledger`` only what :class:`LedgerView` declares), touches no
private (``_name``) attribute of anything, imports no private name of hfncl and nothing of
``hfncl.engine`` (the trainer's internals).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hfncl.plugin_check import violations
from hfncl.trainer_view import VIEW_MEMBERS, LedgerView, declared_members

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_FILES = sorted((ROOT / "plugins").glob("*.py")) + sorted((ROOT / "tests" / "toy_plugin").rglob("*.py"))


TRAINER_MEMBERS, LEDGER_MEMBERS = VIEW_MEMBERS, declared_members(LedgerView)


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda path: path.name)
def test_plugins_use_only_the_trainer_view(path: Path) -> None:
    assert violations(path.read_text()) == [], path


def test_the_check_catches_each_kind_of_violation() -> None:
    source = """
from hfncl.engine.distributed import gather
from hfncl.equations.division import _private_helper
import hfncl.engine.trainer

def loss(trainer, outputs):
    step = trainer.state.global_step
    column = trainer.ledger.columns["x"]
    return trainer.model._networks, trainer.forward(0, {}), trainer.ledger.get("x")
"""
    found = "\n".join(violations(source))
    for expected in (
        "imports hfncl.engine.distributed",
        "imports private hfncl.equations.division._private_helper",
        "imports hfncl.engine.trainer",
        "trainer.state is not in TrainerView",
        "trainer.ledger.columns is not in LedgerView",
        "private attribute trainer.model._networks",
    ):
        assert expected in found, found
    assert "forward" not in found and "get" not in found


def test_the_trainer_implements_the_view(tiny_data_dir, tmp_path) -> None:
    from conftest import noisy_trainer, tiny_config

    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"], epochs=1, warmup_epochs=0))
    assert all(hasattr(trainer, name) for name in TRAINER_MEMBERS), TRAINER_MEMBERS - set(dir(trainer))
    assert all(hasattr(trainer.ledger, name) for name in LEDGER_MEMBERS | {"__contains__"})


READS_OUTSIDE = '''
from hfncl.hookspecs import hookimpl

@hookimpl
def warmup_loss(trainer, outputs):
    return {"x": trainer.task.noise_rate * outputs.sims.sum()}
'''
READS_OUTSIDE_BY_NAME = '''
from hfncl.hookspecs import hookimpl

MEMBER = "task"

@hookimpl
def warmup_loss(trainer, outputs):
    return {"x": getattr(trainer, MEMBER).noise_rate * outputs.sims.sum()}
'''
SETS_A_MEMBER = '''
from hfncl.hookspecs import hookimpl
import torch

@hookimpl
def epoch_start(trainer, epoch):
    trainer.epoch = 7
'''


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (READS_OUTSIDE_BY_NAME, "trainer.task is not part of the plugin contract"),
        (SETS_A_MEMBER, "trainer.epoch cannot be set by a plugin"),
    ],
    ids=["reads trainer.task by name", "sets trainer.epoch"],
)
def test_a_hook_that_leaves_the_contract_fails_at_once_naming_the_member(
    source, expected, tiny_data_dir, tmp_path, tmp_path_factory, monkeypatch
) -> None:
    from conftest import noisy_trainer, tiny_config
    from test_batch_plan import install

    install("outside", source, tmp_path_factory.mktemp("outside"), monkeypatch)
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp", "outside"], epochs=1, warmup_epochs=1))
    with pytest.raises(AttributeError, match=expected) as raised:
        trainer.train()
    assert "hfncl.trainer_view.TrainerView" in str(raised.value)


def test_a_member_outside_the_contract_in_the_source_is_refused_when_the_run_sets_its_plugins_up(
    tmp_path, tmp_path_factory, monkeypatch
) -> None:
    from conftest import tiny_config
    from test_batch_plan import install

    from hfncl.plugin_setup import run_plugins
    from hfncl.plugins import PluginError

    install("outside", READS_OUTSIDE, tmp_path_factory.mktemp("outside"), monkeypatch)
    config = tiny_config(tmp_path, ["vsepp", "outside"], epochs=1, warmup_epochs=1)
    with pytest.raises(PluginError, match=r"'outside' .*hfncl_test_outside\.py line 6: trainer\.task is not in"):
        run_plugins(config)


def test_the_view_reads_every_member_of_the_contract_through_and_nothing_else(tiny_data_dir, tmp_path) -> None:
    from conftest import noisy_trainer, tiny_config

    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"], epochs=1, warmup_epochs=0))
    view = trainer.view
    assert view.config is trainer.config and view.ledger is trainer.ledger and view.divisions is trainer.divisions
    assert view.num_train == trainer.num_train and view.noise_rate == trainer.noise_rate
    with pytest.raises(AttributeError, match=r"trainer\.optimizer is not part .*did you mean optimize"):
        _ = view.optimizer
    with pytest.raises(AttributeError, match="trainer._hidden_masks is not part of the plugin contract"):
        _ = view._hidden_masks
    assert sorted(dir(view)) == sorted(TRAINER_MEMBERS)
