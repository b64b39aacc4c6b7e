"""``hfncl check-plugin NAME``: the contract checks a plugin's author runs on an installed plugin.

Each check gives one line, ``ok`` or ``FAIL`` with what is wrong:

- **import**: the entry point loads (:func:`hfncl.plugins.load_plugin`);
- **hooks**: it registers alone against the hook specification (names and signatures);
- **trainer view**: its source uses only :class:`hfncl.trainer_view.TrainerView`'s members of ``trainer``
  (and :class:`~hfncl.trainer_view.LedgerView`'s of ``trainer.ledger``), no private attribute and no
  module of ``hfncl.engine`` (:func:`hfncl.trainer_view.violations`, read from its files; every run checks it too);
- **options**: its declared options resolve with their defaults (:func:`hfncl.plugins.resolve_options`);
- **data kind**: ``data_kind`` answers a kind some task trains on;
- **settings**: ``demo_settings`` and ``audit_settings`` are valid :class:`~hfncl.config.TrainConfig` fields;
- **training** (``--train``): a short run on the task's generated micro benchmark, warmup and a divided epoch,
  every hook called through the contract view, so a member outside the contract fails here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hfncl.config import TrainConfig, one_line
from hfncl.data.synthetic import SyntheticConfig
from hfncl.demo import DemoRun, run_demo, shortened_settings
from hfncl.plugins import build_plugin_manager, load_plugin, resolve_options
from hfncl.tasks import TASKS
from hfncl.trainer_view import source_files, violations

MICRO_DATA = SyntheticConfig(num_train=48, num_dev=12, num_test=12, num_concepts=8, num_regions=6, feature_dim=8)


@dataclass(frozen=True)
class Check:
    """One check of :func:`check_plugin`: its name and ``None`` when it passed, else what is wrong."""

    name: str
    problem: str | None

    def line(self) -> str:
        return f"ok    {self.name}" if self.problem is None else f"FAIL  {self.name}: {self.problem}"


def _checked(name: str, check: Callable[[], Any]) -> tuple[Check, Any]:
    """The check's line and what ``check()`` returned (``None`` when it raised)."""
    try:
        answer = check()
    except Exception as error:
        return Check(name, f"{type(error).__name__}: {one_line(error)}"), None
    return Check(name, None), answer


def check_plugin(name: str, *, train: bool = False) -> list[Check]:
    """Run the contract checks (see the module docstring) on installed plugin ``name``; stop at the first that
    leaves nothing to check further (an import or a hook specification failing)."""
    loaded, plugin = _checked("import", lambda: load_plugin(name))
    if loaded.problem is not None:
        return [loaded]
    hooks, manager = _checked("hooks", lambda: build_plugin_manager([name]))
    if hooks.problem is not None:
        return [loaded, hooks]
    hook = manager.hook
    found = [f"{path.name} {use}" for path in source_files(plugin) for use in violations(path.read_text())]
    checks = [loaded, hooks, Check("trainer view", "; ".join(found) if found else None)]
    checks.append(_checked("options", lambda: resolve_options(hook, [name], {}))[0])

    def data_kind() -> None:
        kinds = [kind for kind in hook.data_kind() if kind is not None]
        if kinds and kinds[0] not in TASKS:
            raise ValueError(f"data_kind must return one of {sorted(TASKS)}, got {kinds[0]!r}")

    checks.append(_checked("data kind", data_kind)[0])

    def settings() -> None:
        for declared in (hook.demo_settings(), hook.audit_settings()):
            if declared is not None:
                TrainConfig(**{"plugins": [name], **declared})

    checks.append(_checked("settings", settings)[0])
    if train:
        checks.append(_checked("training", lambda: _train_briefly(name, hook))[0])
    return checks


def _train_briefly(name: str, hook: Any) -> None:
    """Two epochs (one of warmup when the plugin warms up) on the generated micro benchmark of its task."""
    kinds = [kind for kind in hook.data_kind() if kind is not None]
    task = TASKS[kinds[0]] if kinds else next(iter(TASKS.values()))
    settings = shortened_settings(dict(hook.demo_settings() or {}), 2)
    run = DemoRun(name, 0.4, {**settings, "batch_size": 16, "progress": False, "plot_divisions": False}, task)
    with tempfile.TemporaryDirectory() as directory:
        run_demo(Path(directory), (run,), data=MICRO_DATA, progress=False)
