"""``hfncl check-plugin``: the contract checks an author runs on an installed plugin, one line each."""

from __future__ import annotations

from test_batch_plan import install

from hfncl import cli
from hfncl.plugin_check import check_plugin

BREAKS_THE_VIEW = '''
from hfncl.hookspecs import hookimpl
from hfncl.engine.distributed import gather

@hookimpl
def option_defaults():
    return {"reader.weight": "heavy"}

@hookimpl
def demo_settings():
    return {"epochs": 2, "warmup_epochs": 1}

@hookimpl
def loss(trainer, outputs):
    return {"reader": trainer.task.noise_rate * outputs.similarity.sum()}

@hookimpl
def warmup_loss(trainer, outputs):
    return {"reader": outputs.similarity.diagonal().mean()}
'''
WRONG_SIGNATURE = '''
from hfncl.hookspecs import hookimpl

@hookimpl
def loss(trainer, outputs, epoch_of_the_moon):
    return None
'''


def test_a_built_in_method_passes_every_check_but_training_which_is_asked_for(capsys) -> None:
    assert cli.main(["check-plugin", "vsepp"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"ok    {name}" for name in ("import", "hooks", "trainer view", "options", "data kind", "settings")]


def test_each_broken_part_is_named_and_a_failed_check_exits_with_1(tmp_path_factory, monkeypatch, capsys) -> None:
    install("reader", BREAKS_THE_VIEW, tmp_path_factory.mktemp("reader"), monkeypatch)
    checks = {check.name: check.problem for check in check_plugin("reader", train=True)}
    assert "imports hfncl.engine.distributed" in checks["trainer view"]
    assert "trainer.task is not in TrainerView" in checks["trainer view"]
    assert checks["import"] is None and checks["hooks"] is None and checks["data kind"] is None
    assert checks["settings"] is None and checks["options"] is None
    # a run sets its plugins up with the same check, before it reads any data
    assert checks["training"].startswith("PluginError: Plugin 'reader' uses the trainer beyond its contract")
    assert cli.main(["check-plugin", "reader"]) == 1
    assert "FAIL  trainer view: " in capsys.readouterr().out


def test_a_hook_with_a_wrong_signature_stops_the_checks_at_the_hooks(tmp_path_factory, monkeypatch) -> None:
    install("signed", WRONG_SIGNATURE, tmp_path_factory.mktemp("signed"), monkeypatch)
    checks = check_plugin("signed")
    assert [check.name for check in checks] == ["import", "hooks"]
    assert "epoch_of_the_moon" in checks[1].problem


def test_an_unknown_plugin_fails_at_the_import() -> None:
    (check,) = check_plugin("no_such_method")
    assert check.name == "import" and "Unknown plugin 'no_such_method'" in check.problem
