"""One training run from data on disk to test metrics, for any kind of data: what recipes, the demo and tests call.

The kind of data is the task's (:mod:`hfncl.tasks`), found from the data arguments' class:
:class:`hfncl.tasks.pairs.DataArguments` trains on image-caption pairs,
:class:`hfncl.tasks.labels.LabelDataArguments` on category-labelled features. The pairs
task's ``DataArguments`` and ``ModelArguments`` are importable from here too, beside
:func:`run_experiment` (the imports of the README's and ``docs/plugins.md``'s examples).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hfncl.config import RUN_CONFIG_FILE, TrainConfig, save_run_config
from hfncl.engine.callbacks import library_progress_bars
from hfncl.engine.fingerprint import NOISE_INDEX_FIELD, noise_fingerprint, refuse_mismatch, run_fingerprint
from hfncl.engine.ownership import owned_run_dir
from hfncl.engine.trainer import Trainer, checkpoint_to_resume
from hfncl.hub import add_test_results
from hfncl.integrity import atomic_write_text, write_manifest
from hfncl.plot_callbacks import training_figures
from hfncl.plugins import RunPlugins, run_plugins
from hfncl.tasks import ExperimentTask, task_of_arguments
from hfncl.tasks.pairs import DataArguments, ModelArguments


def run_experiment(
    data_args: Any,
    config: TrainConfig,
    model_args: Any | None = None,
    model_cards_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Train on ``data_args`` with ``config``; evaluate the best checkpoint on the test split (without a
    validation split: the last epoch's model, with ``best_epoch`` None and no best validation score). Epochs in
    the results, as on the console, in the checkpoints' names, the card and the plots, count from 1.

    ``data_args`` are the data arguments of a task (:func:`hfncl.tasks.task_of_arguments`),
    ``model_args`` its model arguments (default: theirs). Writes ``OUTPUT_DIR/results.json``
    (the task's data and noise fields, test metrics, the last division's quality, history);
    the test metrics and the task's data description are added to the best checkpoint's
    run record and its card (``OUTPUT_DIR/best/README.md``); with ``model_cards_dir`` the
    card is also written to ``model_cards_dir/<output dir name>.md``. The plugins are set up once
    (:func:`hfncl.plugins.run_plugins`: options and combination checked) and handed to the task and the
    trainer; they and the ownership of the output directory
    (:mod:`hfncl.engine.ownership`) are checked before anything is read or written; a resume's
    checkpoint must have been trained on the same data and settings before the data are read,
    and with the same noise before training (:mod:`hfncl.engine.fingerprint`). A resume that
    continued across a difference (``resume_ignore_mismatch``) lists the fields that differed in
    ``results.json``'s ``resumed_across_mismatch``.

    Raises:
        TypeError: ``data_args`` are no task's, or ``model_args`` are not that task's model arguments.
    """
    task = task_of_arguments(data_args)
    model_args = task.model_arguments() if model_args is None else model_args
    if not isinstance(model_args, task.model_arguments):
        raise TypeError(
            f"{type(data_args).__name__} takes {task.model_arguments.__name__}, got {type(model_args).__name__}"
        )
    plugins = run_plugins(config)  # set up and checked once, before any work, and handed down
    with owned_run_dir(config), library_progress_bars(config.progress):
        return _train_and_test(task, plugins, data_args, config, model_args, model_cards_dir)


def _train_and_test(
    task: ExperimentTask,
    plugins: RunPlugins,
    data_args: Any,
    config: TrainConfig,
    model_args: Any,
    model_cards_dir: str | Path | None,
) -> dict[str, Any]:
    fingerprint = run_fingerprint(config, data_args, model_args, unread=task.unread_files(data_args))
    resumed = checkpoint_to_resume(config)
    if resumed is not None:  # before the data are read; the noise index is compared once it is made
        refuse_mismatch(resumed, fingerprint, ignore_mismatch=config.resume_ignore_mismatch, skip=(NOISE_INDEX_FIELD,))
    data = task.prepare(data_args, model_args, plugins, config.output_dir)
    fingerprint.update(noise_fingerprint(config.output_dir))
    model_config = task.model_config(data, model_args, plugins)
    trainer = Trainer(
        config,
        model_config,
        data.train,
        data.val,
        task=task.for_run(data_args, data),
        callbacks=training_figures(),
        fingerprint=fingerprint,
        plugins=plugins,
    )
    main = trainer.accelerator.is_main_process
    if main:
        save_run_config(Path(config.output_dir, RUN_CONFIG_FILE), data_args, config, model_args)
        for line in task.model_report(model_config, trainer.model):
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
    }
    if trainer.continued_across:
        result["resumed_across_mismatch"] = trainer.continued_across
    if main:
        atomic_write_text(Path(config.output_dir, "results.json"), json.dumps(result, indent=1, default=float))
        if best_dir.exists():
            add_test_results(best_dir, task.description(data_args, data), test, model_cards_dir=model_cards_dir)
            write_manifest(best_dir)  # now with the task's companion files, the test results and the card
    return result


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


__all__ = ["DataArguments", "ModelArguments", "run_experiment", "summary_line"]
