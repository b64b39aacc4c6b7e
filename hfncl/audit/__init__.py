"""``hfncl audit``: find the wrong pairs in your own image-text data.

    import hfncl
    from hfncl.audit import estimated_noise_rate

    table = hfncl.audit("my_data", output_dir="audit")       # a datasets.Dataset
    print(estimated_noise_rate(table))                       # 12.3% (95% interval ...)
    table.sort("rank").select(range(20))                     # the 20 most suspicious pairs

Trains a method that divides the training pairs into clean and wrong ones (by default the one
installed plugin that declares the ``audit_settings`` hook) on the data as they are (no noise
added), reads every network's last division and the trained model, and writes the verdict on
each pair (:func:`~hfncl.audit.table.audit_table`) with the files of
:mod:`hfncl.audit.report`. The data are read in any format the project reads
(:mod:`hfncl.data.formats`, :mod:`hfncl.audit.data`): SCAN's precomp with ``.txt`` or CC152K's
``.tsv`` captions, an imagefolder of raw images (through the model's pixel tower; the page shows
them as thumbnails), or a format a package registers. A cleaned split is written in the format
read, where the format can write one (the built-in ones can).
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from hfncl.audit.cross_fitting import held_out_p_values, image_folds
from hfncl.audit.data import AuditError
from hfncl.audit.output import (
    TRAINING_FOLDER,
    check_clean_name_free,
    check_output_dir,
    check_split_name,
    owned_audit_dir,
    remove_training,
)
from hfncl.audit.refit import refit_p_values
from hfncl.audit.report import (
    TABLE_FILES,
    NoiseRate,
    estimated_noise_rate,
    table_column,
    wilson_interval,
    write_clean_split,
    write_table,
)
from hfncl.audit.table import Rescored, audit_table, fold_p_values, model_verdicts, pair_table, trained_scores
from hfncl.audit.training import (
    MODEL_FOLDER,
    TrainedMethod,
    audit_settings,
    default_plugins,
    load_trained,
    method_settings,
    read_split,
    save_trained,
    train_method,
    train_scorer,
)
from hfncl.choices import AUTO
from hfncl.tasks.pairs import ModelArguments


@dataclass(frozen=True)
class AuditResult:
    """What :func:`run_audit` made: the table and the files of the cleaned split (none without ``write_clean``)."""

    table: datasets.Dataset
    clean_files: list[Path]


def run_audit(
    data_dir: str | Path,
    plugins: list[str] | None = None,
    output_dir: str | Path = "audit",
    epochs: int | None = None,
    *,
    split: str = "train",
    data_format: str = AUTO,
    write_clean: str | None = None,
    model: str | Path | None = None,
    model_args: ModelArguments | None = None,
    training: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
    folds: int = 1,
    resume: bool = False,
    refit: bool | list[str] = False,
    refit_epochs: int | None = None,
    refit_training: dict[str, Any] | None = None,
    overwrite: bool = False,
    allow_output_in_data_dir: bool = False,
) -> AuditResult:
    """:func:`audit`, also returning the files of the cleaned split (what ``hfncl audit`` prints)."""
    if write_clean is not None:
        check_split_name(write_clean)
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 1:
        raise AuditError(f"folds must be a positive integer (1: no cross-fitting), got {folds!r}")
    output = Path(output_dir)
    if model is not None:
        if plugins:
            raise AuditError("give a trained model or the plugins to train, not both")
        if folds > 1:
            raise AuditError("cross-fitting (folds > 1) trains the method on each fold's complement: give no model")
        if refit:
            raise AuditError("a refit trains on the pairs the audited method keeps: give the plugins, not a model")
        check_output_dir(output, data_dir, allow_output_in_data_dir)
        with owned_audit_dir(output, overwrite=overwrite, resume=resume):
            if write_clean is not None:
                check_clean_name_free(output, write_clean)
            trained = load_trained(model, data_dir, split, data_format, write_clean)
            return _write_results(audit_table(trained), trained, output, write_clean)
    plugins = list(plugins or default_plugins())
    model_args = model_args or ModelArguments()
    config = audit_settings(plugins, epochs, seed, progress, training)
    if refit and folds > 1:
        raise AuditError("cross-fitting (folds > 1) and a refit both hold pairs out: choose one")
    refit_config = (
        method_settings(plugins if refit is True else list(refit), refit_epochs, seed, progress, refit_training)
        if refit
        else None
    )
    check_output_dir(output, data_dir, allow_output_in_data_dir)
    with owned_audit_dir(output, overwrite=overwrite, resume=resume):
        if write_clean is not None:
            check_clean_name_free(output, write_clean)
        data = read_split(data_dir, split, model_args, plugins, data_format, write_clean)
        if config.batch_size > data.split.num_captions:
            raise AuditError(
                f"batch size {config.batch_size} exceeds the {data.split.num_captions} pairs of split {split!r}: "
                f"every epoch would take no step; give --batch-size at most {data.split.num_captions}"
            )
        parts = image_folds(data.split.num_images, folds, seed) if folds > 1 else None  # refused before training
        checkpoints = output / TRAINING_FOLDER
        trained = train_method(data, config, model_args, checkpoints / "all", resume)
        rescored = None
        if parts is not None:
            held_out, _ = held_out_p_values(
                data,
                parts,
                lambda part, fold: train_method(part, config, model_args, checkpoints / f"fold{fold}", resume),
                fold_p_values,
            )
            rescored = Rescored.cross_fitted(held_out)
        scores = trained_scores(trained)
        if refit_config is not None:
            rescored = refit_p_values(
                trained,
                model_verdicts(scores.p_values)["flagged"],
                lambda kept: train_scorer(
                    kept, refit_config, model_args, checkpoints / "refit", resume, trained.data.split.captions
                ),
            )
        table = pair_table(trained, scores, rescored)
        save_trained(trained, output / MODEL_FOLDER)
        result = _write_results(table, trained, output, write_clean)
        remove_training(output)  # last: a kill before leaves the checkpoints a resume continues from
        return result


def _write_results(
    table: datasets.Dataset, trained: TrainedMethod, output: Path, write_clean: str | None
) -> AuditResult:
    """Write the table's files and, with ``write_clean``, the cleaned split into ``output``."""
    write_table(table, output, images=trained.data.image_reader())
    clean_files = []
    if write_clean is not None:
        clean_files = write_clean_split(trained.data, table_column(table, "flagged"), output, write_clean)
    return AuditResult(table, clean_files)


def audit(
    data_dir: str | Path,
    plugins: list[str] | None = None,
    output_dir: str | Path = "audit",
    epochs: int | None = None,
    *,
    split: str = "train",
    data_format: str = AUTO,
    write_clean: str | None = None,
    model: str | Path | None = None,
    model_args: ModelArguments | None = None,
    training: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
    folds: int = 1,
    resume: bool = False,
    refit: bool | list[str] = False,
    refit_epochs: int | None = None,
    refit_training: dict[str, Any] | None = None,
    overwrite: bool = False,
    allow_output_in_data_dir: bool = False,
) -> datasets.Dataset:
    """Train ``plugins`` (default: :func:`~hfncl.audit.training.default_plugins`, the one installed plugin that
    declares ``audit_settings``) on split ``split`` of ``data_dir`` and return the audit table (one row per pair;
    :func:`~hfncl.audit.table.audit_table`), also written to ``output_dir`` as ``audit.parquet``, ``audit.csv`` and
    ``audit.html``.

    The data are read in ``data_format`` (``"auto"``: the format that recognises them; :mod:`hfncl.data.formats`):
    precomputed region features for a region tower, raw images (an imagefolder) for a pixel tower
    (``model_args.image_tower``), whose images the page shows as thumbnails. The method trains with its own
    ``audit_settings`` or else ``demo_settings`` (cut to ``epochs`` when given), under ``training``
    (:class:`~hfncl.config.TrainConfig` fields, e.g. ``batch_size``), on the model of ``model_args`` (default: the
    papers' encoder). With ``write_clean`` NAME, the unflagged pairs are also written to ``output_dir`` as split
    NAME in the format read, one image per pair (:func:`~hfncl.audit.report.write_clean_split`: precomp files, the
    captions ``.txt`` or ``.tsv`` as read; an imagefolder ``NAME/`` whose split folder links the kept images).
    The trained model is saved in ``output_dir/model``.

    With ``folds`` K > 1 the p-values, ranks, flags and estimate are cross-fitted (:mod:`hfncl.audit.cross_fitting`):
    the images are dealt into K folds (``seed``) and each fold's pairs are scored by the method trained on the other
    folds' pairs, K trainings besides the one on all pairs (whose model, verdicts and re-pairings the table keeps),
    and the estimate is read at :data:`~hfncl.audit.calibration.HELD_OUT_LAMBDA`. In-sample (K = 1), a model that
    memorises its wrong pairs makes the estimate fall short; held out, right pairs it cannot match raise it.

    With ``refit`` (``True``: the audited method; or a list of plugins, e.g. a plain triplet model, which need make no
    division) the p-values, ranks, flags and estimate come from a second model (:mod:`hfncl.audit.refit`): trained
    with its own settings (:func:`~hfncl.audit.training.method_settings`, cut to ``refit_epochs``, under
    ``refit_training``) on the pairs the first verdict keeps, one image per pair, it scores every pair; the pairs the
    first verdict flagged are held out, and the estimate is read at
    :data:`~hfncl.audit.calibration.HELD_OUT_LAMBDA`. The table keeps the audited method's verdicts, model and
    re-pairings.

    An audit owns ``output_dir`` as a training run does (:mod:`hfncl.audit.output`): it takes its lock; an earlier
    audit's results there are refused unless ``overwrite`` (everything that audit wrote is removed first, its cleaned
    split included) or ``resume``; ``output_dir`` may not be ``data_dir`` or lie inside it unless
    ``allow_output_in_data_dir``; a ``write_clean`` NAME whose files or folder exist there is refused, and nothing the
    cleaned split writes may lie outside ``output_dir`` or replace a file there. Training checkpoints each epoch into
    ``output_dir/training``, removed last, once the table and the cleaned split are written. An audit that was killed
    continues from its latest checkpoint with ``resume`` (the same settings, model and pairs, else refused in one
    line).

    With ``model`` (a checkpoint directory: a run's ``best/``, an earlier audit's ``model/``), nothing trains: that
    model scores the pairs, and the table has no method columns (``clean_prob``, ``agree``).

    Raises (before training, in one line):
        AuditError: no method named and not exactly one installed plugin declaring ``audit_settings``, a method
            that makes no division, too few epochs, ``model`` with ``plugins`` or ``folds`` > 1, ``folds`` below 1 or
            more than half the images, ``refit`` with ``model`` or ``folds`` > 1, a ``model`` trained on other data
            (:func:`~hfncl.audit.training.load_trained`), ``write_clean`` for a format that cannot write a split or
            whose files exist in ``output_dir``, ``output_dir`` inside ``data_dir``, or a batch larger than the split.
        ValueError: a ``write_clean`` that is no split name, an unknown ``data_format``, or settings ``TrainConfig``
            refuses.
        DataFormatError: no such directory or split, an empty or malformed one (naming the file), data that do
            not fit the model's image tower (raw images for a region tower, features for a pixel tower), features
            whose squared norm overflows float32, a caption past the bound, a file of an imagefolder that is no image.
        OutputDirError: ``output_dir`` locked by a live run, or holding an earlier audit without ``overwrite`` or
            ``resume``.
        PluginError: a plugin that is not installed, or options it refuses.

    Raises (after training): :class:`~hfncl.audit.finite.DivergedError` (an ``AuditError``) for a non-finite loss,
    clean probability, similarity or p-value: no verdict is written.
    """
    return run_audit(
        data_dir, plugins, output_dir, epochs, split=split, data_format=data_format, write_clean=write_clean,
        model=model, model_args=model_args, training=training, seed=seed, progress=progress, folds=folds,
        resume=resume, refit=refit, refit_epochs=refit_epochs, refit_training=refit_training, overwrite=overwrite,
        allow_output_in_data_dir=allow_output_in_data_dir,
    ).table


def audit_summary(table: datasets.Dataset, output_dir: str | Path, clean_files: list[Path] | None = None) -> list[str]:
    """What ``hfncl audit`` prints: the pairs, the flagged ones, the estimated noise rate and where the files are
    (``clean_files``: those of the cleaned split, :func:`run_audit`)."""
    output = Path(output_dir)
    flagged = np.count_nonzero(table_column(table, "flagged"))
    lines = [
        f"{len(table)} pairs, {flagged} flagged: estimated noise rate {estimated_noise_rate(table)}",
        "table: " + ", ".join(str(output / name) for name in TABLE_FILES),
    ]
    if clean_files:
        lines.append("cleaned split (one image per kept pair): " + ", ".join(map(str, clean_files)))
    return lines


class _CallableModule(types.ModuleType):
    """This package, callable as :func:`audit`: importing ``hfncl.audit`` makes ``hfncl.audit`` the package (the
    import system sets the attribute), so ``hfncl.audit(...)`` calls the function either way."""

    def __call__(self, *args: Any, **kwargs: Any) -> datasets.Dataset:
        return audit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = [
    "AuditError",
    "AuditResult",
    "NoiseRate",
    "audit",
    "audit_summary",
    "estimated_noise_rate",
    "run_audit",
    "wilson_interval",
    "write_clean_split",
]
