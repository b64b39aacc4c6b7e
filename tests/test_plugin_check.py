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
    assert lines == [
        f"ok    {name}" for name in ("import", "hooks", "trainer view", "options", "data kind", "settings")
    ]


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


OPTIONS_AS_A_DICT = '''
from hfncl.hookspecs import hookimpl

@hookimpl
def options():
    return {"weight": 1.0}
'''
SETTINGS_AS_A_NUMBER = '''
from hfncl.hookspecs import hookimpl

@hookimpl
def demo_settings():
    return 0.5
'''
DIVISION_OF_THE_WRONG_TYPE = '''
from hfncl.hookspecs import hookimpl

@hookimpl
def divide(trainer, epoch):
    return {"clean": 1.0}.clean_prob
'''


def test_a_declaration_of_the_wrong_type_names_the_plugin_the_hook_and_the_type_expected(
    tmp_path_factory, monkeypatch, capsys, tmp_path
) -> None:
    install("dict_options", OPTIONS_AS_A_DICT, tmp_path_factory.mktemp("dict_options"), monkeypatch)
    install("float_settings", SETTINGS_AS_A_NUMBER, tmp_path_factory.mktemp("float_settings"), monkeypatch)
    checks = {check.name: check.problem for check in check_plugin("dict_options")}
    assert checks["hooks"] == (
        "PluginError: Plugin 'dict_options': hook options() returned dict {'weight': 1.0}, expected a MethodOptions "
        "subclass (the class itself) or None"
    )
    checks = {check.name: check.problem for check in check_plugin("float_settings")}
    assert checks["hooks"] == (
        "PluginError: Plugin 'float_settings': hook demo_settings() returned float 0.5, expected a dict of "
        "TrainConfig fields or None"
    )
    capsys.readouterr()
    assert cli.main(["train", "--plugins", "dict_options", "--data-dir", str(tmp_path), "--output-dir",
                     str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Plugin 'dict_options': hook options() returned dict" in err
    assert "Traceback" not in err


def test_a_training_hook_that_fails_on_a_type_names_the_plugin_the_hook_and_what_it_returns(
    tiny_data_dir, tmp_path, tmp_path_factory, monkeypatch
) -> None:
    import pytest
    from conftest import noisy_trainer, tiny_config

    from hfncl.plugins import PluginError

    install("wrong_division", DIVISION_OF_THE_WRONG_TYPE, tmp_path_factory.mktemp("wrong_division"), monkeypatch)
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp", "wrong_division"], epochs=2,
                                                       warmup_epochs=1))
    with pytest.raises(PluginError, match=r"hook divide of plugin 'wrong_division' failed with AttributeError: "
                                          r".*returns list\[Division\] \| Division \| None") as raised:
        trainer.train()
    assert isinstance(raised.value, AttributeError)  # still the error it was
