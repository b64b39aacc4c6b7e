"""``hfncl audit``: find the wrong pairs in your own image-text data.

    import hfncl
    from hfncl.audit import estimated_noise_rate

    table = hfncl.audit("my_precomp", output_dir="audit")     # a datasets.Dataset
    print(estimated_noise_rate(table))                       # 12.3% (95% interval ...)
    table.sort("rank").select(range(20))                     # the 20 most suspicious pairs

Trains a method that divides the training pairs into clean and wrong ones (by default the one
installed plugin that declares the ``audit_settings`` hook) on the data as they are (no noise
added), reads every network's last division and the trained model, and writes the verdict on
each pair (:func:`~hfncl.audit.table.audit_table`) with the files of
:mod:`hfncl.audit.report`. The data are a precomp directory (:mod:`hfncl.data.precomp`);
other formats are not read yet.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from hfncl.audit.report import (
    TABLE_FILES,
    NoiseRate,
    check_split_name,
    estimated_noise_rate,
    wilson_interval,
    write_clean_split,
    write_table,
)
from hfncl.audit.table import audit_table
from hfncl.audit.training import (
    MODEL_FOLDER,
    AuditError,
    audit_settings,
    default_plugins,
    load_trained,
    read_split,
    save_trained,
    train_method,
)
from hfncl.tasks.pairs import ModelArguments


def audit(
    data_dir: str | Path,
    plugins: list[str] | None = None,
    output_dir: str | Path = "audit",
    epochs: int | None = None,
    *,
    split: str = "train",
    write_clean: str | None = None,
    model: str | Path | None = None,
    model_args: ModelArguments | None = None,
    training: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
) -> datasets.Dataset:
    """Train ``plugins`` (default: :func:`~hfncl.audit.training.default_plugins`, the one installed plugin that
    declares ``audit_settings``) on split ``split`` of the precomp directory ``data_dir`` and return
    the audit table (one row per pair; :func:`~hfncl.audit.table.audit_table`), also written to ``output_dir`` as
    ``audit.parquet``, ``audit.csv`` and ``audit.html``.

    The method trains with its own ``audit_settings`` or else ``demo_settings`` (cut to ``epochs`` when given),
    under ``training`` (:class:`~hfncl.config.TrainConfig` fields, e.g. ``batch_size``), on the model of
    ``model_args`` (default: the papers' encoder). With ``write_clean`` NAME, the unflagged pairs are also written
    to ``output_dir`` as the precomp split NAME, one image row per pair (:func:`~hfncl.audit.report.write_clean_split`).
    The trained model is saved in ``output_dir/model``.

    With ``model`` (a checkpoint directory: a run's ``best/``, an earlier audit's ``model/``), nothing trains: that
    model scores the pairs, and the table has no method columns (``clean_prob``, ``agree``).

    Raises (before training, in one line):
        AuditError: no method named and not exactly one installed plugin declaring ``audit_settings``, a method
            that makes no division, too few epochs, a model that reads raw images, ``model`` with ``plugins``, or
            a ``model`` trained on other data (:func:`~hfncl.audit.training.load_trained`).
        ValueError: a ``write_clean`` that is no split name, or settings ``TrainConfig`` refuses.
        DataFormatError: no such directory or split, or an empty or malformed one (naming the file).
        PluginError: a plugin that is not installed, or options it refuses.
    """
    if write_clean is not None:
        check_split_name(write_clean)
    output = Path(output_dir)
    if model is not None:
        if plugins:
            raise AuditError("give a trained model or the plugins to train, not both")
        trained = load_trained(model, data_dir, split)
        pairs = trained.split
        table = audit_table(trained)
    else:
        plugins = list(plugins or default_plugins())
        model_args = model_args or ModelArguments()
        config = audit_settings(plugins, epochs, seed, progress, training)
        pairs = read_split(data_dir, split, model_args, plugins)
        trained = train_method(pairs, config, model_args)
        table = audit_table(trained)
        save_trained(trained, output / MODEL_FOLDER)
    write_table(table, output)
    if write_clean is not None:
        write_clean_split(pairs, np.asarray(table["flagged"]), output, write_clean)
    return table


def audit_summary(table: datasets.Dataset, output_dir: str | Path, write_clean: str | None = None) -> list[str]:
    """What ``hfncl audit`` prints: the pairs, the flagged ones, the estimated noise rate and where the files are."""
    output = Path(output_dir)
    lines = [
        f"{len(table)} pairs, {sum(table['flagged'])} flagged: estimated noise rate {estimated_noise_rate(table)}",
        "table: " + ", ".join(str(output / name) for name in TABLE_FILES),
    ]
    if write_clean is not None:
        files = ", ".join(str(output / f"{write_clean}_{suffix}") for suffix in ("ims.npy", "caps.txt"))
        lines.append(f"cleaned split {write_clean!r} (one image row per kept pair): {files}")
    return lines


class _CallableModule(types.ModuleType):
    """This package, callable as :func:`audit`: importing ``hfncl.audit`` makes ``hfncl.audit`` the package (the
    import system sets the attribute), so ``hfncl.audit(...)`` calls the function either way."""

    def __call__(self, *args: Any, **kwargs: Any) -> datasets.Dataset:
        return audit(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = [
    "AuditError",
    "NoiseRate",
    "audit",
    "audit_summary",
    "estimated_noise_rate",
    "wilson_interval",
    "write_clean_split",
]
