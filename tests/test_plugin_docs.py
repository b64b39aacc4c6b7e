"""docs/plugins.md: every Python example runs, and the trainer view and toolkit tables are complete.

The ``# my_package/...`` examples are written into a package installed under the entry points of the
page's ``pyproject.toml`` example and trained on the micro benchmark; the one that records per-sample
statistics in the ledger also with two CPU processes (accelerate, as tests/test_recipes.py launches).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import tomllib
import types
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from conftest import noisy_trainer, tiny_config
from test_plugin_contract import violations

from hfncl import plugins, registry
from hfncl.engine.trainer import Trainer
from hfncl.equations import toolkit
from hfncl.trainer_view import LedgerView, TrainerView, declared_members

REPO = Path(__file__).resolve().parents[1]
DOCS = (REPO / "docs" / "plugins.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOCS, re.S)
MODULES = {block.split("\n", 1)[0][2:]: block for block in BLOCKS if block.startswith("# my_package/")}
TEST_MODULES = [block for block in BLOCKS if block.startswith("# tests/")]
SNIPPETS = [block for block in BLOCKS if block not in MODULES.values() and block not in TEST_MODULES]
PACKAGE_TOML = next(block for block in re.findall(r"```toml\n(.*?)```", DOCS, re.S) if "entry-points" in block)
ENTRY_POINTS = tomllib.loads(PACKAGE_TOML)["project"]["entry-points"]["hfncl"]
SMALL_LOSS = dict(epochs=2, warmup_epochs=1, plot_divisions=False)
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1", "--mixed_precision", "no"]
ACCELERATE += ["--dynamo_backend", "no", "--multi_gpu", "--num_processes", "2"]
TWO_PROCESS_RUN = """
import json, os, sys
from importlib.metadata import EntryPoint
from pathlib import Path

package, tests, data, out, settings = sys.argv[1:]
sys.path[:0] = [package, tests]
from hfncl import plugins, registry

installed = registry.installed_entry_points
doc_plugin = EntryPoint("smallloss", "my_package.small_loss", plugins.ENTRY_POINT_GROUP)
registry.installed_entry_points = lambda: {**installed(), "smallloss": doc_plugin}
from conftest import noisy_trainer, tiny_config

history = noisy_trainer(Path(data), tiny_config(Path(out), ["smallloss"], **json.loads(settings))).train()["history"]
Path(out, f"history-{os.environ['RANK']}.json").write_text(json.dumps(history))
"""


@pytest.fixture(scope="module")
def doc_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding ``my_package`` with the page's modules."""
    root = tmp_path_factory.mktemp("doc_package")
    (root / "my_package").mkdir()
    (root / "my_package" / "__init__.py").write_text("")
    for path, source in MODULES.items():
        (root / path).write_text(source)
    return root


def install(monkeypatch: pytest.MonkeyPatch, doc_package: Path) -> None:
    """Serve the page's modules as installed plugins, under the entry points its pyproject.toml declares."""
    monkeypatch.syspath_prepend(str(doc_package))
    installed = registry.installed_entry_points()
    documented = {name: EntryPoint(name, value, plugins.ENTRY_POINT_GROUP) for name, value in ENTRY_POINTS.items()}
    monkeypatch.setattr(registry, "installed_entry_points", lambda: {**installed, **documented})


@pytest.fixture
def installed(doc_package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, doc_package)


def train(data_dir: Path, output_dir: Path, name: str, **settings) -> list[dict]:
    return noisy_trainer(data_dir, tiny_config(output_dir, [name], **settings)).train()["history"]


@pytest.fixture(scope="module")
def small_loss_history(doc_package: Path, micro_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list:
    """The recording example trained in this process: a warmup epoch, then an epoch with its division."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        install(monkeypatch, doc_package)
        return train(micro_data_dir, tmp_path_factory.mktemp("small_loss"), "smallloss", **SMALL_LOSS)


def test_every_python_example_is_one_the_tests_run():
    assert set(MODULES) == {"my_package/my_method.py", "my_package/small_loss.py", "my_package/co_teaching.py"}
    assert {value.replace(".", "/") + ".py" for value in ENTRY_POINTS.values()} == set(MODULES)
    assert len(TEST_MODULES) == 1 and len(SNIPPETS) == 1 and "TrainConfig(" in SNIPPETS[0]


@pytest.mark.parametrize("path", sorted(MODULES))
def test_the_examples_use_only_the_trainer_view(path):
    assert violations(MODULES[path]) == []


def test_the_trainer_view_table_lists_every_member_and_the_trainer_has_them(micro_data_dir, tmp_path):
    section = re.search(r"^## The trainer view$(.*?)^## ", DOCS, re.M | re.S).group(1)
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    trainer_names = {m.group(1) for row in rows if (m := re.search(r"`trainer\.(\w+)", row)) and "ledger." not in row}
    ledger_names = {m.group(1) for row in rows if (m := re.search(r"`trainer\.ledger\.(\w+)", row))}
    ledger_names |= {"__contains__"} if any("in trainer.ledger" in row for row in rows) else set()
    assert trainer_names == declared_members(TrainerView)
    assert ledger_names == declared_members(LedgerView) | {"__contains__"}
    trainer = noisy_trainer(micro_data_dir, tiny_config(tmp_path, ["vsepp"], epochs=1, warmup_epochs=0))
    assert all(hasattr(trainer, name) for name in trainer_names) and callable(Trainer.collect)
    assert all(hasattr(trainer.ledger, name) for name in ledger_names)


def test_every_toolkit_function_is_documented():
    functions = [
        name for name, f in inspect.getmembers(toolkit, inspect.isfunction) if f.__module__ == "hfncl.equations.toolkit"
    ]
    assert functions and [name for name in functions if f"`{name}(" not in DOCS] == []


def test_the_first_example_trains_with_the_option_the_docs_set(installed, micro_data_dir, tmp_path):
    namespace: dict = {}
    exec(SNIPPETS[0], namespace)
    documented = namespace["config"]
    settings = {field: getattr(documented, field) for field in ("plugins", "options", "epochs", "warmup_epochs")}
    trainer = noisy_trainer(micro_data_dir, tiny_config(tmp_path, **settings))
    history = trainer.train()["history"]
    options_class = plugins.load_plugin("mymethod").MyOptions
    assert trainer.options_of(options_class).temperature == 0.05 and "train/my_infonce" in history[-1]


def test_the_recording_example_trains_and_divides(small_loss_history, micro_data_dir):
    last = small_loss_history[-1]
    assert 0.0 <= last["division/auc"] <= 1.0 and "train/weighted_triplet" in last


def test_the_co_teaching_example_trains_two_networks_each_with_its_peers_division(installed, micro_data_dir, tmp_path):
    history = train(micro_data_dir, tmp_path, "coteach", epochs=2, warmup_epochs=1, plot_divisions=False)
    assert {"division/net0/auc", "division/net1/auc", "train/clean_triplet/net1"} <= set(history[-1])


@pytest.mark.slow
def test_the_recording_example_divides_alike_with_two_processes(
    small_loss_history, doc_package, micro_data_dir, tmp_path
):
    """Two CPU processes record, divide and train as one did (values computed from outputs, by outputs.index)."""
    script = tmp_path / "two_processes.py"
    script.write_text(TWO_PROCESS_RUN)
    arguments = [str(doc_package), str(REPO / "tests"), str(micro_data_dir), str(tmp_path), json.dumps(SMALL_LOSS)]
    environment = dict(os.environ, ACCELERATE_USE_CPU="true", OMP_NUM_THREADS="1")
    completed = subprocess.run([*ACCELERATE, str(script), *arguments], capture_output=True, text=True, env=environment)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for rank in (0, 1):
        two = json.loads((tmp_path / f"history-{rank}.json").read_text())
        assert len(two) == len(small_loss_history)
        for one_epoch, two_epoch in zip(small_loss_history, two, strict=True):
            assert set(two_epoch) == set(one_epoch)
            for key, value in one_epoch.items():
                assert two_epoch[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key


def test_the_docs_test_module_passes(installed, tmp_path):
    module = types.ModuleType("test_my_method")
    exec(TEST_MODULES[0], module.__dict__)
    tests = [function for name, function in vars(module).items() if name.startswith("test_")]
    assert len(tests) == 3
    for number, test in enumerate(tests):
        test(**({"tmp_path": tmp_path / str(number)} if "tmp_path" in inspect.signature(test).parameters else {}))


def test_the_hook_reference_is_generated_from_the_hook_specifications() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import hook_reference
    finally:
        sys.path.pop(0)
    assert hook_reference.updated(DOCS) == DOCS, (
        "docs/plugins.md's hook reference is stale: python scripts/hook_reference.py"
    )
    for name in plugins.hook_names():
        assert f"\n### {name}\n\n`{name}(" in DOCS, name
        assert "- **When:**" in DOCS.split(f"\n### {name}\n", 1)[1].split("\n### ", 1)[0], f"{name} says when it runs"
