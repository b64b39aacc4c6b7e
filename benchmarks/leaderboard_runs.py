"""How one run of the leaderboard (:mod:`leaderboard`, :mod:`clip_track`) trains, resumes and is labelled: the run
and its protocol, the plugin options it takes, whether a run on disk was trained as planned now, and the evaluation
modes of its finished model (one network, the mean of a co-trained method's networks, its network A alone, SGRAF)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import os
from pathlib import Path
from typing import Any

import torch
import yaml
from accuracy import Job, is_reference, train, train_config
from common import quiet

from hfncl.data.noise import protocol_names
from hfncl.demo import DemoRun
from hfncl.engine.fingerprint import training_defaults

PROTOCOL_KINDS = {protocol: kind for kind, protocol in protocol_names().items()}
HEADS = ("sgr", "saf")
SGRAF = "SGRAF: mean of an SGR and a SAF model"
NETWORK_A = "network A alone"
ONE_NETWORK = "one network"
TRAINING_FIELDS = ("plugins", "options", "epochs", "warmup_epochs", "batch_size", "learning_rate", "optimizer",
                   "weight_decay", "lr_decay_epochs", "lr_decay_factor", "lr_decay_patience", "early_stopping_patience",
                   "early_stopping_min_epochs", "seed")


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run of the leaderboard: an :class:`accuracy.Job` under a protocol, with a model override."""

    protocol: str
    job: Job
    model: dict[str, Any] | None = None

    def directory(self, root: Path) -> Path:
        return root / self.protocol

    @property
    def key(self) -> str:
        return f"{self.protocol}/{self.job.name}"


def head_row(method: str, head: str) -> str:
    """The row name of ``method`` trained with similarity head ``head`` (one half of its SGRAF pair)."""
    return f"{method} [{head}]"


def protocol_ratios(args: argparse.Namespace) -> dict[str, list[float]]:
    """The noise ratios of each protocol of the call (``--ncr-ratios``, ``--decl-ratios``), in its order."""
    return {protocol: args.ncr_ratios if protocol == "ncr-caption" else args.decl_ratios for protocol in args.protocols}


def asked_model_fields(plugins: list[str]) -> dict[str, Any]:
    """The model fields the plugins ask for now (their ``model_defaults``, the first named winning)."""
    from hfncl.plugin_setup import plugin_model_defaults
    from hfncl.plugins import build_plugin_manager

    return plugin_model_defaults(build_plugin_manager(plugins).hook)


@functools.cache
def declared_options(plugin: str) -> frozenset[str]:
    """The option names ``plugin`` declares (:func:`hfncl.plugins.resolve_options` with none set)."""
    from hfncl.plugins import build_plugin_manager, resolve_options

    return frozenset(resolve_options(build_plugin_manager([plugin]).hook, [plugin], {}))


def with_options(job: Job, options: dict[str, Any] | None) -> Job:
    """``job`` with those of ``options`` (``--options``) that its plugin declares (:func:`declared_options`) over its
    settings' options: ``{"npc.temperature": 0.1}`` sets NPC's temperature in NPC's runs and its own oracle's, and in
    no other run."""
    own = {key: value for key, value in (options or {}).items() if key in declared_options(job.run.plugin)}
    if not own:
        return job
    settings = {**job.run.settings, "options": {**job.run.settings.get("options", {}), **own}}
    return dataclasses.replace(job, run=DemoRun(job.run.plugin, job.run.noise_ratio, settings))


def cells_in_turn(ratios: dict[str, list[float]]) -> list[tuple[str, float]]:
    """The (protocol, ratio) cells of ``ratios`` (per protocol, its ratios in order), the protocols taking turns: the
    first ratio of each, then the second of each, so that a call stopped early leaves whole columns of every
    protocol."""
    columns = [[(protocol, ratio) for ratio in its_ratios] for protocol, its_ratios in ratios.items()]
    return [cell for row in itertools.zip_longest(*columns) for cell in row if cell]


def worker_setup(devices: Any, threads: int) -> None:
    """A worker process: its own GPU where there are several (taken from the ``devices`` queue), and ``threads``
    CPU threads."""
    if devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(devices.get())
    torch.set_num_threads(threads)
    quiet()


def saved_config(run_dir: Path) -> dict[str, Any] | None:
    """The configuration a run in ``run_dir`` started with (its ``run_config.yaml``), ``None`` for a run not started."""
    path = run_dir / "run_config.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else None


def stale_fields(run: Run, root: Path, quick: bool, model: dict[str, Any]) -> list[str]:
    """How the run already in ``run``'s directory (its ``run_config.yaml``) was trained otherwise than planned now:
    ``field was X, plan Y`` for each training field (:data:`TRAINING_FIELDS`, the training split, the model fields of
    ``model``) that differs, e.g. a method whose demo settings changed since, or an oracle whose convergence schedule
    grew with a method's steps; empty for a run not started."""
    run_dir = run.directory(root) / run.job.name
    saved = saved_config(run_dir)
    if saved is None:
        return []
    config = train_config(run.job, run_dir, quick)
    planned = {
        **{field: getattr(config, field) for field in TRAINING_FIELDS},
        "train_split": run.job.data.train_split,
        **model,
    }
    defaults = training_defaults()  # of a field added since the run was trained
    was = {field: saved.get(field, defaults.get(f"training.{field}")) for field in planned}
    stale = [f"{field} was {was[field]!r}, plan {value!r}" for field, value in planned.items() if was[field] != value]
    return stale + stale_model_defaults(run, run_dir, saved)


def stale_model_defaults(run: Run, run_dir: Path, saved: dict[str, Any]) -> list[str]:
    """The model fields the run's plugin asks for now (``model_defaults``) that its saved model (``best/config.json``,
    the resolved configuration) was built otherwise, where the run's configuration left the field to the plugin
    (``null``), e.g. Co-teaching's fresh heads asked for after its runs were trained; empty before a best model."""
    model_file = run_dir / "best" / "config.json"
    if not model_file.is_file():
        return []
    built = json.loads(model_file.read_text())
    asked = asked_model_fields(list(saved.get("plugins") or [run.job.run.plugin]))
    return [f"{field} (the plugin's model default) was {built.get(field)!r}, plan {value!r}"
            for field, value in asked.items() if saved.get(field) is None and field in built and built[field] != value]


def train_run(
    run: Run, root: Path, quick: bool, model: dict[str, Any] | None, report_only: bool
) -> dict[str, Any] | None:
    """Train ``run`` (or read its finished ``row.json``); the row, with its protocol, threads and device.

    A run trained otherwise than planned now (:func:`stale_fields`) trains again from the start; with
    ``report_only`` its row is kept, its differences under ``stale`` (the notes name it)."""
    directory = run.directory(root)
    overrides = {**(model or {}), **(run.model or {})}
    stale = stale_fields(run, root, quick, overrides)
    if stale and not report_only:  # its results go first: a retraining killed part way resumes as a run of the plan
        for name in ("row.json", "modes.json"):
            (directory / run.job.name / name).unlink(missing_ok=True)
    row = train(run.job, directory, quick, False, not stale, report_only, overrides)
    if row is not None and "batch_size" not in row:  # a row recorded before rows kept it: its steps per batch need it
        row["batch_size"] = (saved_config(directory / run.job.name) or {}).get("batch_size", 128)
    if row is not None and stale and report_only:
        return {**row, "stale": stale}
    if row is None or "protocol" in row:
        return row
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    row.update(protocol=run.protocol, threads=torch.get_num_threads(), device=device, model=run.model)
    (directory / run.job.name / "row.json").write_text(json.dumps(row, indent=1, default=float))
    return row


def model_mode(best: Path) -> tuple[str, int]:
    """How the model in ``best`` ranks when tested, and its number of networks."""
    from hfncl.plugins import build_plugin_manager

    config = json.loads((best / "config.json").read_text())
    networks = int(config.get("num_networks", 1))
    plugins = config.get("plugins") or []
    if plugins and build_plugin_manager(plugins).hook.inference_similarity.get_hookimpls():
        return f"{'+'.join(plugins)}'s own ranking ({networks} network{'s' * (networks > 1)})", networks
    return (ONE_NETWORK if networks == 1 else f"mean of {networks} networks"), networks


def mode_rows(rows: list[dict[str, Any]], root: Path, data_dir: Path) -> list[dict[str, Any]]:
    """Every measured row labelled with its evaluation mode, plus the ``network A`` row of each co-trained run and
    the SGRAF row of each method trained with both heads (scored once, cached in the run's ``modes.json``)."""
    from hfncl.tasks.checkpoints import evaluate_checkpoints

    out = []
    by_key = {(r["protocol"], r["method"], r["noise_ratio"], r["seed"]): r for r in rows}
    for row in rows:
        best = root / row["protocol"] / run_name(row) / "best"
        if is_reference(row["method"]) or not best.is_dir():
            out.append({**row, "mode": ONE_NETWORK})
            continue
        if row["method"].endswith(tuple(f" [{head}]" for head in HEADS)):
            continue
        mode, networks = model_mode(best)
        out.append({**row, "mode": mode})
        if networks > 1:
            test = _cached(best.parent / "modes.json", NETWORK_A,
                           lambda b=best: evaluate_checkpoints([b], data_dir, "test", network=0))
            out.append({**row, "mode": NETWORK_A, "test": test})
        pair = [
            by_key.get((row["protocol"], head_row(row["method"], h), row["noise_ratio"], row["seed"])) for h in HEADS
        ]
        if all(pair):
            dirs = [root / row["protocol"] / run_name(p) / "best" for p in pair if p]
            test = _cached(best.parent / "modes.json", SGRAF, lambda d=dirs: evaluate_checkpoints(d, data_dir, "test"))
            seconds = sum(p["seconds"] for p in pair if p)
            out.append({**row, "mode": SGRAF, "test": test, "seconds": seconds,
                        "epochs": pair[0]["epochs"] if pair[0] else 0})
    return out


def run_name(row: dict[str, Any]) -> str:
    return f"{row['method'].replace(' ', '_')}_noise{round(row['noise_ratio'] * 100)}_seed{row['seed']}"


def _cached(path: Path, mode: str, compute: Any) -> dict[str, float]:
    saved = json.loads(path.read_text()) if path.is_file() else {}
    if mode not in saved:
        saved[mode] = compute()
        path.write_text(json.dumps(saved, indent=1, default=float))
    return saved[mode]
