"""One training run from data on disk to test metrics, for any kind of data: :func:`prepare_run` makes a
:class:`Run` (plugins, task, data, model config, fingerprint) and :func:`train_and_test` trains and tests it; the
command line, recipes, the demo, the audit, ``check-plugin`` and the benchmarks all train this way.

The kind of data is the task's (:mod:`hfncl.tasks`), found from the data arguments' class:
:class:`hfncl.tasks.pairs.DataArguments` trains on image-caption pairs,
:class:`hfncl.tasks.labels.LabelDataArguments` on category-labelled features. The pairs
task's ``DataArguments`` and ``ModelArguments`` are importable from here too, beside
:func:`run_experiment` (the imports of the README's and ``docs/plugins.md``'s examples).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hfncl.config import RUN_CONFIG_FILE, TrainConfig, save_run_config
from hfncl.engine.callbacks import TrainerCallback
from hfncl.engine.checkpoints import checkpoint_to_resume
from hfncl.engine.fingerprint import NOISE_INDEX_FIELD, noise_fingerprint, refuse_mismatch, run_fingerprint
from hfncl.engine.ownership import owned_run_dir
from hfncl.engine.progress import library_progress_bars
from hfncl.engine.trainer import Trainer
from hfncl.hub import add_test_results
from hfncl.integrity import atomic_write_text, write_manifest
from hfncl.plot_callbacks import training_figures
from hfncl.plugin_setup import RunPlugins, run_plugins
from hfncl.tasks import ExperimentTask, task_of_arguments
from hfncl.tasks.pairs import DataArguments, ModelArguments


@dataclass
class Run:
    """One training run, prepared: its task, its plugins (set up and checked once), its settings, its data read
    with the noise applied, the model's config and the fingerprint its checkpoints carry.

    A prepared run owns its output directory (:mod:`hfncl.engine.ownership`) until :func:`train_and_test` ends it,
    or :meth:`close` gives it up (``with prepare_run(...) as run:`` closes it too).
    """

    task: ExperimentTask
    plugins: RunPlugins
    data_args: Any
    config: TrainConfig
    model_args: Any
    data: Any
    model_config: Any
    fingerprint: dict[str, Any]
    held: ExitStack = field(default_factory=ExitStack, repr=False)

    def trainer(self, callbacks: list[TrainerCallback] | None = None) -> Trainer:
        """The run's trainer: the task's model of :attr:`model_config` on the training data, its plugins handed
        down, its fingerprint saved with every checkpoint."""
        return Trainer(
            self.config,
            self.model_config,
            self.data.train,
            self.data.val,
            task=self.task.for_run(self.data_args, self.data),
            callbacks=callbacks,
            fingerprint=self.fingerprint,
            plugins=self.plugins,
        )

    def close(self) -> None:
        """Give up the output directory (and restore the libraries' progress bars)."""
        self.held.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def prepare_run(data_args: Any, config: TrainConfig, model_args: Any | None = None) -> Run:
    """Prepare a run of ``config`` on ``data_args``: everything that is checked before training, in the order
    that refuses a mistake before any work.

    ``data_args`` are the data arguments of a task (:func:`hfncl.tasks.task_of_arguments`), ``model_args`` its
    model arguments (default: theirs). The plugins are set up once (:func:`hfncl.plugin_setup.run_plugins`: names,
    hooks, trainer view, options, combination, data kind) before the output directory is taken
    (:mod:`hfncl.engine.ownership`); a resume's checkpoint must have been trained on the same data and settings
    before the data are read (:mod:`hfncl.engine.fingerprint`), and with the same noise before training.

    Raises:
        TypeError: ``data_args`` are no task's, or ``model_args`` are not that task's model arguments.
        hfncl.plugins.PluginError: in one line, naming the plugin, option or hook at fault.
    """
    task = task_of_arguments(data_args)
    model_args = task.model_arguments() if model_args is None else model_args
    if not isinstance(model_args, task.model_arguments):
        raise TypeError(
            f"{type(data_args).__name__} takes {task.model_arguments.__name__}, got {type(model_args).__name__}"
        )
    plugins = run_plugins(config, data_kind=task.kind)
    held = ExitStack()
    held.enter_context(owned_run_dir(config))
    held.enter_context(library_progress_bars(config.progress))
    try:
        resumed = checkpoint_to_resume(config.resume_from_checkpoint, config.output_dir)
        fingerprint = run_fingerprint(config, data_args, model_args, unread=task.unread_files(data_args),
                                      model_used=task.model_settings(model_args, plugins))
        if resumed is not None:  # before the data are read; the noise index is compared once it is made
            ignore = config.resume_ignore_mismatch
            refuse_mismatch(resumed, fingerprint, ignore_mismatch=ignore, skip=(NOISE_INDEX_FIELD,))
        data = task.prepare(data_args, model_args, plugins, config.output_dir)
        fingerprint.update(noise_fingerprint(config.output_dir))
        model_config = task.model_config(data, model_args, plugins)
    except BaseException:
        held.close()
        raise
    return Run(task, plugins, data_args, config, model_args, data, model_config, fingerprint, held)


def train_and_test(
    run: Run, model_cards_dir: str | Path | None = None, callbacks: list[TrainerCallback] | None = None
) -> dict[str, Any]:
    """Train a prepared run; evaluate the best checkpoint on the test split (without a validation split: the last
    epoch's model, with ``best_epoch`` None and no best validation score). Epochs in the results, as on the
    console, in the checkpoints' names, the card and the plots, count from 1.

    Writes ``OUTPUT_DIR/results.json`` (the task's data and noise fields, test metrics, the last division's
    quality, history); the test metrics and the task's data description are added to the best checkpoint's
    run record and its card (``OUTPUT_DIR/best/README.md``); with ``model_cards_dir`` the card is also written
    to ``model_cards_dir/<output dir name>.md``. ``callbacks`` follow the training (default: the figures of
    :func:`hfncl.plot_callbacks.training_figures`). A resume that continued across a difference
    (``resume_ignore_mismatch``) lists the fields that differed in ``results.json``'s
    ``resumed_across_mismatch``. The run gives up its output directory when this returns or raises.
    """
    with run:
        return _train_and_test(run, model_cards_dir, training_figures() if callbacks is None else callbacks)


def _train_and_test(run: Run, model_cards_dir: str | Path | None, callbacks: list[TrainerCallback]) -> dict[str, Any]:
    task, data, config, data_args = run.task, run.data, run.config, run.data_args
    trainer = run.trainer(callbacks)
    main = trainer.accelerator.is_main_process
    if main:
        save_run_config(Path(config.output_dir, RUN_CONFIG_FILE), data_args, config, run.model_args)
        for line in task.model_report(run.model_config, trainer.model):
            print(line)
    summary = trainer.train()
    best_dir = Path(config.output_dir) / "best"
    model = type(trainer.model).from_pretrained(str(best_dir)) if best_dir.exists() else trainer.model
    if main and best_dir.exists():
        task.save_companions(data, best_dir)
    test = task.test(
        data_args,
        data,
        model,
        batch_size=config.eval_batch_size,
        device=trainer.accelerator.device,
        hook=trainer.hook,
        progress=config.progress and trainer.accelerator.is_local_main_process,
    )
    divisions = [h for h in summary["history"] if any(k.startswith("division") for k in h)]
    result = {
        "plugins": config.plugins,
        **task.results_header(data_args, data, trainer.accelerator.num_processes),
        "test": test,
        "best_epoch": summary["best_epoch"],
        f"best_val_{task.best_metric}": summary["best_score"] if summary["best_epoch"] is not None else None,
        "division": {k: v for k, v in divisions[-1].items() if k.startswith("division")} if divisions else {},
        "history": summary["history"],
        "runtime": {key: summary[key] for key in ("train_seconds", "train_cpu_seconds", "untimed_epochs")},
    }
    if trainer.continued_across:
        result["resumed_across_mismatch"] = trainer.continued_across
    if main:
        atomic_write_text(Path(config.output_dir, "results.json"), json.dumps(result, indent=1, default=float))
        if best_dir.exists():
            add_test_results(best_dir, task.description(data_args, data), test, model_cards_dir=model_cards_dir)
            write_manifest(best_dir)  # now with the task's companion files, the test results and the card
    return result


def run_experiment(
    data_args: Any,
    config: TrainConfig,
    model_args: Any | None = None,
    model_cards_dir: str | Path | None = None,
) -> dict[str, Any]:
    """:func:`prepare_run` then :func:`train_and_test`: one run from data on disk to test metrics."""
    return train_and_test(prepare_run(data_args, config, model_args), model_cards_dir)


def summary_line(result: dict[str, Any], output_dir: str | Path) -> str:
    """The line a run ends with: the best epoch and its validation score, the test score, where the model and the
    results are (``result`` as :func:`run_experiment` returns it)."""
    metric = next(key for key in result if key.startswith("best_val_"))[len("best_val_"):]
    epochs, test = len(result["history"]), result["test"].get(metric)
    tested = f"test {metric} {test:.1f}" if metric == "rsum" else f"test {metric} {test:.3f}"
    if result["best_epoch"] is None:
        chosen = f"no validation split: the last epoch's model ({epochs}/{epochs})"
        model = f"its checkpoint in {Path(output_dir) / 'checkpoints'}"
    else:
        score = result[f"best_val_{metric}"]
        shown = f"{score:.1f}" if metric == "rsum" else f"{score:.3f}"
        chosen = f"best epoch {result['best_epoch']}/{epochs} (validation {metric} {shown})"
        model = f"model in {Path(output_dir) / 'best'}"
    return f"done: {chosen}, {tested}; {model}, results in {Path(output_dir) / 'results.json'}"


__all__ = [
    "DataArguments",
    "ModelArguments",
    "Run",
    "prepare_run",
    "run_experiment",
    "summary_line",
    "train_and_test",
]
