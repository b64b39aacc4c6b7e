"""Tasks: everything a run does that depends on its kind of data, one class per kind.

:func:`hfncl.experiment.run_experiment` runs any :class:`ExperimentTask` the same way: it
asks the task for the data and the model config, trains with it, tests the best checkpoint
and records. A task is the trainer's task (:class:`hfncl.engine.tasks.Task`: batches,
encoding, outputs, validation metric, hidden clean masks) and owns, for its kind of data:

======================  ===================================================================
``data_arguments``      the dataclass of its data flags (recipes parse it).
``model_arguments``     the dataclass of its model flags.
``metric_columns``      (header, test metric key, digits) of the demo's table.
``demo_model``          the model arguments of ``hfncl demo``.
``demo_training``       the TrainConfig values ``hfncl demo`` trains this kind with.
``prepare``             the data on disk -> a typed result (:class:`~hfncl.tasks.pair_data.PairData`, ...).
``unread_files``        which files under the data paths hold splits the run does not read (its fingerprint
                        leaves them out: other runs may write them while it trains).
``model_config``        that result and the model arguments -> the model's config.
``model_settings``      the model fields a run would use, for ``--print-config``.
``for_run``             the task the run's trainer gets: this one told the run's noise rate.
``model_report``        lines printed before training (e.g. a tower's parameter counts).
``save_companions``     files a checkpoint needs besides its weights (a vocabulary, ...).
``test``                the best model -> its test metrics.
``results_header``      the data and noise fields that open ``results.json``.
``description``         the data section of the model card, or ``None``.
``card_texts``          the sentences of the card (registered with :mod:`hfncl.hub.card` by model type).
``demo_data``           the generated benchmark of ``hfncl demo``.
``demo_arguments``      the demo's data arguments on it.
======================  ===================================================================

:data:`PAIRS` (:class:`hfncl.tasks.pairs.PairTask`) is image-caption pairs with noisy correspondence;
:data:`LABELS` (:class:`hfncl.tasks.labels.CategoryTask`) is category-labelled samples with noisy labels.
:data:`TASKS` lists them, the only list of the kinds of data.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import PretrainedConfig

from hfncl.data.synthetic import SyntheticConfig
from hfncl.engine.tasks import Task
from hfncl.hub import DataDescription
from hfncl.hub.card import CardTexts
from hfncl.plugin_setup import RunPlugins
from hfncl.plugins import PluginError, first_answer
from hfncl.tasks.labels import LABELS
from hfncl.tasks.pairs import PAIRS


class ExperimentTask(Task, Protocol):
    """The data-dependent part of a whole run, training included (see the module docstring)."""

    data_arguments: type[Any]
    model_arguments: type[Any]
    metric_columns: tuple[tuple[str, str, int], ...]
    demo_model: Any
    demo_training: dict[str, Any]

    def prepare(self, args: Any, model_args: Any, plugins: RunPlugins, output_dir: str | Path) -> Any: ...

    def unread_files(self, args: Any) -> Callable[[Path], bool] | None: ...

    def model_config(self, data: Any, model_args: Any, plugins: RunPlugins) -> PretrainedConfig: ...

    def model_settings(self, model_args: Any, plugins: RunPlugins) -> dict[str, Any]: ...

    def for_run(self, args: Any, data: Any) -> ExperimentTask: ...

    def model_report(self, model_config: PretrainedConfig, model: torch.nn.Module) -> list[str]: ...

    def save_companions(self, data: Any, directory: Path) -> None: ...

    def test(
        self,
        args: Any,
        data: Any,
        model: Any,
        *,
        batch_size: int,
        device: torch.device | str,
        hook: Any,
        progress: bool,
    ) -> dict[str, float]: ...

    def results_header(self, args: Any, data: Any, num_processes: int) -> dict[str, Any]: ...

    def description(self, args: Any, data: Any) -> DataDescription | None: ...

    def card_texts(self, config: PretrainedConfig, model_id: str) -> CardTexts: ...

    def demo_data(self, directory: Path, size: SyntheticConfig, seed: int) -> Path: ...

    def demo_arguments(self, data_path: Path, noise_ratio: float, seed: int) -> Any: ...


TASKS: dict[str, ExperimentTask] = {PAIRS.kind: PAIRS, LABELS.kind: LABELS}
"""The tasks by data kind, in the order the demo prints their tables."""


def task_of_arguments(args: Any) -> ExperimentTask:
    """The task whose data arguments ``args`` are.

    Raises:
        TypeError: ``args`` are no task's data arguments.
    """
    for task in TASKS.values():
        if isinstance(args, task.data_arguments):
            return task
    names = ", ".join(task.data_arguments.__name__ for task in TASKS.values())
    raise TypeError(f"data arguments must be one of {names}, got {type(args).__name__}")


def task_of_plugins(plugins: list[str]) -> ExperimentTask:
    """The task of the data the plugins learn from (their ``data_kind``; pairs when none answers or none is named).

    Raises:
        PluginError: a plugin answers a kind no task handles.
    """
    if not plugins:
        return PAIRS
    kind = first_answer(plugins, "data_kind") or PAIRS.kind
    if kind not in TASKS:
        raise PluginError(f"data_kind must return one of {sorted(TASKS)}, got {kind!r}")
    return TASKS[kind]


__all__ = ["LABELS", "PAIRS", "TASKS", "ExperimentTask", "task_of_arguments", "task_of_plugins"]
