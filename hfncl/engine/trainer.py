"""The Accelerate training loop that runs whatever the active plugins define.

The trainer knows no method: it asks the plugins how many networks to build, which to
train in each pass, how to divide, rectify and score, and it supplies the shared
machinery -- global batches across processes, per-sample statistics passes, resumable
checkpoints, validation, division diagnostics against the hidden clean mask. What
depends on the kind of data (image-caption pairs, or category-labelled samples) comes
from a task (the contract :class:`hfncl.engine.tasks.Task`, one class per kind in
:mod:`hfncl.tasks`): the model, batches, outputs, evaluation metric and hidden masks.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import pickle
import platform
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import load as accelerate_load
from accelerate.utils import set_seed
from safetensors.torch import load_file, save_file

from hfncl.config import LATEST, TrainConfig, one_line
from hfncl.engine.callbacks import EpochLine, TrainerCallback, library_progress_bars, progress_bar
from hfncl.engine.distributed import fewer_processes_warning, gather, world
from hfncl.engine.fingerprint import check_fingerprint, run_fingerprint, save_fingerprint
from hfncl.engine.initial_weights import load_initial_weights
from hfncl.engine.ledger import Ledger
from hfncl.engine.randomness import derived_seed, per_sample_uniform, purpose_key
from hfncl.engine.sampler import CyclingBatchSampler, GlobalBatchSampler, batch_count
from hfncl.engine.tasks import Task
from hfncl.evaluation import division_quality, partition_report
from hfncl.hub import RunRecord, save_trained_model
from hfncl.integrity import (
    IntegrityError,
    atomic_write_text,
    replace_directory,
    verify_manifest,
    write_manifest,
    writing,
)
from hfncl.options import OptionsT
from hfncl.plugins import PluginError, RunPlugins, hook_error, run_plugins
from hfncl.trainer_view import ContractView
from hfncl.types import Batch, BatchPlan, Division

CHECKPOINT_PREFIX = "step-"


def _accelerator(config: TrainConfig) -> Accelerator:
    """The run's accelerator, in ``config.mixed_precision``; a warning when it runs fewer processes than the launch
    asked for (:func:`hfncl.engine.distributed.fewer_processes_warning`).

    Accelerate keeps one precision per process; a run after one in another precision in the same
    process (a benchmark comparing them, a test suite) resets that shared state first, as
    transformers' ``TrainingArguments`` does, keeping the process group.
    """
    shared = AcceleratorState._shared_state
    if shared and shared.get("_mixed_precision", config.mixed_precision) != config.mixed_precision:
        AcceleratorState._reset_state()
    accelerator = Accelerator(
        mixed_precision=config.mixed_precision, log_with=config.log_with or None, project_dir=config.output_dir
    )
    fewer = fewer_processes_warning(accelerator.num_processes)
    if fewer is not None and accelerator.is_main_process:
        warnings.warn(fewer, stacklevel=3)
    return accelerator


@dataclass
class TrainerState:
    """Where training stands; saved as JSON with every checkpoint."""

    epoch: int = 0
    pass_index: int = 0
    batch_in_pass: int = 0
    global_step: int = 0
    network_steps: int = 0  # optimiser steps summed over the networks each step trained
    best_score: float = -math.inf
    best_epoch: int = -1
    epoch_loss_sums: dict[str, float] = field(default_factory=dict)
    epoch_loss_counts: dict[str, int] = field(default_factory=dict)
    epoch_steps: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


def finished_checkpoints(output_dir: Path) -> list[Path]:
    """The finished checkpoint directories of ``OUTPUT_DIR/checkpoints/``, newest first."""
    root = output_dir / "checkpoints"
    found = [p for p in root.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir() and not p.name.endswith((".tmp", ".old"))]
    return sorted(found, reverse=True)


def resume_candidates(output_dir: Path) -> tuple[list[Path], list[str]]:
    """The checkpoint ``OUTPUT_DIR/checkpoints/latest`` names, then the others newest first; and what is
    wrong with the pointer.

    The pointer is followed only to a checkpoint directly inside ``checkpoints/``; one
    that names anything else is reported and the checkpoints there are tried.
    """
    root = output_dir / "checkpoints"
    pointer = root / LATEST
    found = finished_checkpoints(output_dir)
    if not pointer.exists():
        return found, []
    name = pointer.read_text().strip()
    if name.startswith(CHECKPOINT_PREFIX) and Path(name).name == name and (root / name) in found:
        return [root / name] + [p for p in found if p.name != name], []
    return found, [f"{pointer} names {name!r}, not a checkpoint directory of {root}"]


def checkpoint_to_resume(config: TrainConfig) -> Path | None:
    """The checkpoint a resume of ``config`` tries first (``None``: none to resume), before verifying it."""
    wanted = config.resume_from_checkpoint
    if wanted is None:
        return None
    if wanted != LATEST:
        return Path(wanted)
    candidates, _ = resume_candidates(Path(config.output_dir))
    return candidates[0] if candidates else None


def _check_random_states(source: Path) -> None:
    """Read the checkpoint's RNG state files with accelerate's weights-only loader before accelerate does: it
    reads them inside a catch-all and goes on without them, so a file that cannot be read safely (a pickle
    that would run code) is refused here instead of ignored.

    Raises:
        IntegrityError: naming the file.
    """
    for path in sorted(source.glob("random_states_*.pkl")):
        try:
            accelerate_load(path)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as error:
            raise IntegrityError(
                f"{source}: accelerate's state files cannot be loaded safely ({path.name}: {type(error).__name__}, "
                "refused by the weights-only unpickler: not an RNG state that accelerate saved)"
            ) from error


class PassSteps:
    """The steps of a pass: per step, ``(part, batch)`` for each part's loader, in order (``None``: no plan).

    The first loader leads; the others yield exactly as many batches (the plan's later parts).
    """

    def __init__(self, loaders: dict[str | None, Any]) -> None:
        self.loaders = loaders
        self.lead = next(iter(loaders))

    def __len__(self) -> int:
        return len(self.loaders[self.lead])

    def __iter__(self) -> Iterator[list[tuple[str | None, Batch]]]:
        for batches in zip(*self.loaders.values(), strict=True):
            yield list(zip(self.loaders, batches, strict=True))


class Trainer:
    """Train a model with the plugins named in ``config.plugins``.

    ``task`` says what the data are: with :class:`hfncl.tasks.pairs.PairTask` (e.g. ``hfncl.tasks.PAIRS``),
    ``model_config`` is an :class:`hfncl.models.NCLConfig`, ``train_data`` a
    :class:`hfncl.data.NoisyPairDataset` and ``val_split`` a
    :class:`hfncl.engine.encoding.RetrievalSplit`; with a
    :class:`hfncl.tasks.labels.CategoryTask`, a :class:`hfncl.models.CategoryConfig`,
    a :class:`hfncl.data.noisy_labels.NoisyLabelledDataset` and a :class:`hfncl.data.LabelledSplit`.
    The training data's hidden clean mask(s) are used only to report division quality,
    never handed to a plugin. ``callbacks`` (:class:`hfncl.engine.callbacks.TrainerCallback`)
    follow the run's events after the built-in epoch line. ``fingerprint``
    (:mod:`hfncl.engine.fingerprint`, default: the training settings of ``config``) is saved with
    every checkpoint, and a resume refuses a checkpoint whose fingerprint differs. ``plugins`` are the
    run's plugins set up once (:func:`hfncl.plugins.run_plugins`, as :func:`hfncl.experiment.run_experiment`
    hands them down; default: set up here from ``config``).
    """

    def __init__(
        self,
        config: TrainConfig,
        model_config: Any,
        train_data: Any,
        val_split: Any = None,
        *,
        task: Task,
        accelerator: Accelerator | None = None,
        callbacks: list[TrainerCallback] | None = None,
        fingerprint: dict[str, Any] | None = None,
        plugins: RunPlugins | None = None,
    ) -> None:
        self.config = config
        self.fingerprint = fingerprint if fingerprint is not None else run_fingerprint(config)
        self.continued_across: list[str] = []  # fingerprint fields a resume continued across on purpose
        self.callbacks = [EpochLine(), *(callbacks or [])]
        self.task = task
        if plugins is not None and list(plugins.names) != list(config.plugins):
            raise ValueError(f"plugins were set up for {list(plugins.names)}, config.plugins names {config.plugins}")
        self.plugins = plugins if plugins is not None else run_plugins(config)
        self.view = ContractView(self)  # what hooks receive: the members of the plugin contract only
        self.hook = self.plugins.hook
        self._check_data_kind()
        self.options = self.plugins.options
        if len(train_data) < config.batch_size:
            raise ValueError(
                f"TrainConfig.batch_size {config.batch_size} exceeds the {len(train_data)} training samples: "
                "every epoch would take zero optimisation steps; lower batch_size"
            )
        self.accelerator = accelerator or _accelerator(config)
        set_seed(config.seed)
        self.num_networks = self.plugins.num_networks
        self.passes = self.plugins.passes
        model_config.num_networks = self.num_networks
        model_config.plugins = list(config.plugins)
        model_config.plugin_options = dict(self.options)
        self.model = self.task.build_model(model_config)
        if config.init_weights:
            load_initial_weights(self.model, config.init_weights)
        self.train_data = train_data
        self.val_split = val_split
        self.num_train = len(train_data)
        self._hidden_masks = self.task.clean_masks(train_data)
        self._true_clean = np.concatenate(list(self._hidden_masks.values()))
        optimizer_class = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
        self.optimizer = optimizer_class(
            self._parameter_groups(), lr=config.learning_rate, weight_decay=config.weight_decay
        )
        prepared = self.accelerator.prepare(*self.model.networks, self.optimizer)
        self.wrapped_networks, self.optimizer = list(prepared[:-1]), prepared[-1]
        self.rank, self.world_size = world()
        self.divisions: list[Division | None] = [None] * self.num_networks
        self.ledger = Ledger(self.num_train)
        self.state = TrainerState()
        self.epoch = 0
        self.in_warmup = True
        self.batch_part: str | None = None
        self._later_part = False  # the batch is a plan's later part: it may take no step
        self.output_dir = Path(config.output_dir)
        if config.log_with:
            name = config.run_name or self.output_dir.resolve().name
            self.accelerator.init_trackers(
                "hfncl",
                config={k: str(v) for k, v in config.to_dict().items()},
                init_kwargs={"wandb": {"name": name}, "mlflow": {"run_name": name}, "trackio": {"name": name}},
            )

    # ----------------------------------------------------------------- plugin API
    def option(self, name: str) -> Any:
        """The value of a plugin option (declared default, overridden by ``config.options``)."""
        if name not in self.options:
            raise KeyError(f"Unknown option {name!r}; declared by the active plugins: {sorted(self.options)}")
        return self.options[name]

    def forward(self, net: int, batch: Batch, *, grad: bool = True, network: torch.nn.Module | None = None) -> Any:
        """Network ``net`` on ``batch``, gathered into the global batch of every process.

        The outputs are the task's dataclass: :class:`hfncl.types.PairOutputs` for pairs,
        :class:`hfncl.types.CategoryOutputs` for category-labelled samples. The encoders and the
        similarity head run under the accelerator's autocast (``mixed_precision``); scores are float32.

        ``grad=False`` is a prediction, not a training step: the network runs in eval mode (no
        dropout, BatchNorm on its running statistics, which the call leaves unchanged) and goes back
        to its mode afterwards, so the same batch gives the same prediction however often it is asked
        (NCR's peer prediction in co-rectify, as the authors' code predicts it; Co-teaching's selector).

        ``network`` runs a copy of network ``net`` in its place (a look-ahead model a plugin steps itself,
        NPC's siamese model); it is not wrapped for data parallelism.
        """
        own = network is None
        network = self.model.networks[net] if network is None else network
        module = self.wrapped_networks[net] if grad and own else network
        was_training = network.training
        if not grad:
            network.eval()
        try:
            with torch.set_grad_enabled(grad), self.accelerator.autocast():
                encoded = self.task.encode(module, batch)
                gathered = tuple(gather(tensor.float()) for tensor in encoded)
                return self.task.outputs(network, gathered, gather(batch["index"]))
        finally:
            network.train(was_training)

    def samples(self, index: torch.Tensor) -> Batch:
        """The training samples at dataset positions ``index`` (this process's), collated as a training batch, on the
        device: what a method that pairs each sample with others of the training set (memory entries) trains on."""
        items = [self.train_data[int(position)] for position in index.tolist()]
        return {k: v.to(self.accelerator.device) for k, v in self.task.collate(items).items()}

    def optimize(self, loss: torch.Tensor, networks: list[int]) -> None:
        """One optimiser step on ``loss`` for the given networks (clip, step, zero).

        In the first ``freeze_text_tower_epochs`` epochs the pretrained text encoder's gradients
        are dropped before clipping, so the optimiser neither moves those weights nor updates
        their moments (as if they did not require gradients).
        """
        self.optimizer.zero_grad(set_to_none=True)
        self.accelerator.backward(loss)
        if self.epoch < self.config.freeze_text_tower_epochs:
            for parameter in self._pretrained_text:
                parameter.grad = None
        self._clip(networks)
        self.optimizer.step()
        self.state.network_steps += len(networks)

    def sample_uniform(self, index: torch.Tensor, shape: tuple[int, ...], purpose: str) -> torch.Tensor:
        """Uniform draws in [0, 1), (len(index), *shape), one block per sample of this process's batch.

        Each sample's block depends only on the run's seed, the epoch, the pass, ``purpose``
        and the sample's dataset index (:mod:`hfncl.engine.randomness`), so per-sample
        randomness (augmentation, a plugin's masks) is the same with 1 or 2 processes and
        after a resume in mid-epoch.
        """
        stream = (self.config.seed, self.epoch, self.state.pass_index, purpose_key(purpose))
        return per_sample_uniform(index, shape, stream)

    def compute_loss(self, batch: Batch, networks: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
        """The default objective of one step: per network, rectify, forward, and every active plugin's terms.

        Returns the sum over ``networks`` of all terms (``warmup_loss`` in warmup, ``loss``
        after it) and each term's value by name (suffixed ``/netK`` with several networks).
        A ``train_step`` override starts from it so that plugins combined with the
        overriding one keep contributing their terms. On the batch of a batch plan's later
        part, where no plugin may answer, it returns a zero and no terms (no step to take).
        """
        logged: dict[str, float] = {}
        losses: list[torch.Tensor] = []
        for net in networks:
            targets = None
            if not self.in_warmup:
                targets = self._call_hook("rectify", batch=batch, net=net, division=self.divisions[net])
            inputs = targets.get("inputs", batch) if targets else batch
            outputs = self.forward(net, inputs)
            if self.in_warmup:
                answers = self._call_hook("warmup_loss", batch=inputs, outputs=outputs, net=net)
            else:
                answers = self._call_hook("loss", batch=inputs, outputs=outputs, targets=targets, net=net)
            terms = self._merge_terms(answers)
            if terms:
                losses.append(functools.reduce(operator.add, terms.values()))
            suffix = f"/net{net}" if self.num_networks > 1 else ""
            logged.update({f"{name}{suffix}": float(value.detach()) for name, value in terms.items()})
        if not losses:
            return torch.zeros((), device=self.accelerator.device), logged
        return functools.reduce(operator.add, losses), logged

    def collect(
        self,
        statistic: Callable[[Batch], dict[str, torch.Tensor]],
        description: str = "statistics",
        *,
        batch_size: int | None = None,
        seed: int | None = None,
    ) -> dict[str, torch.Tensor]:
        """Run ``statistic`` over the training set and assemble (N, ...) tensors by dataset index.

        ``statistic(batch)`` gets this process's slice of a global batch and returns
        per-sample values of the global batch, in the order of
        ``trainer.forward(...).index`` (which it is expected to use). The result is the
        same on every process. Networks are in eval mode while it runs.

        Batches hold ``batch_size`` pairs (default ``config.eval_batch_size``) in dataset
        order, or in a permutation drawn from ``seed`` for statistics that compare a pair
        with the rest of its batch and should not see one image's captions side by side.
        """
        batch_size = batch_size or self.config.eval_batch_size
        loader = self._loader(seed=seed, drop_last=False, batch_size=batch_size)
        columns: dict[str, torch.Tensor] = {}
        self.model.eval()
        try:
            with torch.no_grad():
                for batch in self._progress(loader, description):
                    batch = {k: v.to(self.accelerator.device) for k, v in batch.items()}
                    index = gather(batch["index"]).cpu()
                    for name, values in statistic(batch).items():
                        values = values.detach().float().cpu()
                        if name not in columns:
                            columns[name] = torch.full((self.num_train, *values.shape[1:]), float("nan"))
                        columns[name][index] = values
        finally:
            self.model.train()
        return columns

    # ------------------------------------------------------------------ training
    def train(self) -> dict[str, Any]:
        """Train to ``config.epochs`` (resuming if asked), keep the best model, return a summary."""
        if self.config.resume_from_checkpoint is not None:
            self.resume()
        self.model.train()
        self._train_started = time.perf_counter()
        self._event("on_train_begin")
        with library_progress_bars(self.config.progress):
            while self.state.epoch < self.config.epochs and not self.stops_early():
                self._train_epoch(self.state.epoch)
        self.accelerator.wait_for_everyone()
        self.accelerator.end_training()
        summary = {
            "best_metric": self.task.best_metric,
            "best_score": self.state.best_score,
            "best_epoch": self.state.best_epoch + 1 if self.state.best_epoch >= 0 else None,
            "history": self.state.history,
        }
        self._event("on_train_end", summary)
        return summary

    _train_started: float | None = None
    """When :meth:`train` started in this process (``time.perf_counter``)."""

    def _compute(self) -> dict[str, Any]:
        """What trains the run, for the card's Compute section (:attr:`hfncl.hub.RunRecord.compute`): processes,
        device, mixed precision and the seconds since this process started training (``None`` outside ``train``)."""
        device = self.accelerator.device
        host = platform.processor() or platform.machine()
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else host
        started = self._train_started
        return {
            "processes": self.accelerator.num_processes,
            "device": f"{device.type} ({name})" if name else device.type,
            "mixed_precision": self.config.mixed_precision,
            "seconds": None if started is None else round(time.perf_counter() - started, 1),
        }

    def stops_early(self) -> bool:
        """Whether early stopping ends the run before the next epoch: ``early_stopping_patience`` epochs trained
        since the best validation score, and at least ``early_stopping_min_epochs`` epochs trained (read from the
        saved state only, so a resumed run stops where the uninterrupted one would)."""
        patience, trained = self.config.early_stopping_patience, self.state.epoch
        if not patience or self.val_split is None or self.state.best_epoch < 0:
            return False
        return trained >= self.config.early_stopping_min_epochs and trained - 1 - self.state.best_epoch >= patience

    def _train_epoch(self, epoch: int) -> None:
        started = time.perf_counter()
        self._event("on_epoch_begin", epoch)
        self.epoch = epoch
        self.in_warmup = epoch < self.config.warmup_epochs
        self._set_learning_rate(epoch)
        record: dict[str, Any] = {"epoch": epoch + 1, "warmup": self.in_warmup}
        starting = self.state.pass_index == 0 and self.state.batch_in_pass == 0
        if starting:
            self._call_hook("epoch_start", epoch=epoch)
            if not self.in_warmup:
                self.divisions = self._divide(epoch)
                self._event("on_division", epoch, list(self.divisions), self._true_clean)
        sums, counts = self.state.epoch_loss_sums, self.state.epoch_loss_counts
        while self.state.pass_index < len(self.passes):
            networks = self.passes[self.state.pass_index]
            steps = self._pass_steps(epoch, networks)
            stage = "warmup" if self.in_warmup else f"networks {networks}"
            description = f"{'+'.join(self.config.plugins)} epoch {epoch + 1}/{self.config.epochs} {stage}"
            bar = self._progress(steps, description)
            for parts in bar:
                for part, batch in parts:
                    self.batch_part, self._later_part = part, part != steps.lead
                    tail = f"/{part}" if self._later_part else ""
                    for name, value in self._step(batch, networks).items():
                        sums[name + tail] = sums.get(name + tail, 0.0) + value
                        counts[name + tail] = counts.get(name + tail, 0) + 1
                self.batch_part, self._later_part = None, False
                self.state.epoch_steps += 1
                bar.set_postfix(loss=f"{sum(sums.values()) / self.state.epoch_steps:.4f}", refresh=False)
                self.state.batch_in_pass += 1
                self.state.global_step += 1
                if self.config.save_steps and self.state.global_step % self.config.save_steps == 0:
                    self.save_checkpoint()
            self._call_hook("pass_end", epoch=epoch, networks=networks)
            self.state.pass_index += 1
            self.state.batch_in_pass = 0
        division_report = {} if self.in_warmup else self._division_report()
        record.update(division_report)
        record["steps_per_network"] = self.state.network_steps / self.num_networks
        self._call_hook("epoch_end", epoch=epoch)
        # each term's mean over the steps that computed it (a network trained in its own pass: its pass's steps)
        record.update({f"train/{k}": v / max(counts.get(k, self.state.epoch_steps), 1) for k, v in sums.items()})
        if self.val_split is not None:
            metrics = self.evaluate(self.val_split)
            record.update({f"val/{k}": v for k, v in metrics.items()})
            score = metrics[self.task.best_metric]
            if score > self.state.best_score:
                self.state.best_score, self.state.best_epoch = score, epoch
                self._save_best(metrics, division_report)
        self.state.history.append(record)
        self._event("on_epoch_end", record, time.perf_counter() - started)
        self.accelerator.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=epoch)
        self.state.epoch += 1
        self.state.pass_index = 0
        self.state.epoch_loss_sums, self.state.epoch_loss_counts, self.state.epoch_steps = {}, {}, 0
        self.save_checkpoint()

    def _step(self, batch: Batch, networks: list[int]) -> dict[str, float]:
        batch = {k: v.to(self.accelerator.device) for k, v in batch.items()}
        overridden = self._call_hook("train_step", batch=batch, networks=networks)
        if overridden is not None:
            return dict(overridden)
        total, logged = self.compute_loss(batch, networks)
        if logged:
            self.optimize(total, networks)
        return logged

    def _merge_terms(self, answers: list[dict[str, torch.Tensor] | None]) -> dict[str, torch.Tensor]:
        terms: dict[str, torch.Tensor] = {}
        for answer in answers:
            for name, value in (answer or {}).items():
                if name in terms:
                    raise PluginError(f"Two active plugins return a loss term named {name!r}; rename one of them.")
                terms[name] = value
        if not terms and not self._later_part:
            stage = "warmup_loss" if self.in_warmup else "loss"
            raise PluginError(
                f"No active plugin ({', '.join(self.config.plugins)}) returned a loss term from `{stage}` "
                f"in epoch {self.epoch + 1}; name a plugin that trains in this stage."
            )
        return terms

    def _divide(self, epoch: int) -> list[Division | None]:
        result = self._call_hook("divide", epoch=epoch)
        if result is None:
            return [None] * self.num_networks
        divisions = result if isinstance(result, list) else [result] * self.num_networks
        if len(divisions) != self.num_networks:
            raise PluginError(f"divide returned {len(divisions)} divisions for {self.num_networks} networks")
        for division in divisions:
            if len(division) != self._true_clean.size:
                raise PluginError(
                    f"divide returned a division of {len(division)} units for {self._true_clean.size} "
                    f"({' + '.join(f'{len(v)} {k}' for k, v in self._hidden_masks.items())})"
                )
        return divisions

    def _division_report(self) -> dict[str, float]:
        report: dict[str, float] = {}
        for net, division in enumerate(self.divisions):
            if division is None:
                continue
            quality = division_quality(division.clean_prob, division.clean, self._true_clean)
            prefix = f"division/net{net}" if self.num_networks > 1 else "division"
            report.update({f"{prefix}/{k}": float(v) for k, v in quality.items()})
            if len(self._hidden_masks) > 1:
                report.update(self._part_reports(division, prefix))
            for name, share, purity in partition_report(division.extras, self._true_clean):
                report[f"{prefix}/{name}_share"], report[f"{prefix}/{name}_purity"] = share, purity
        return report

    def _part_reports(self, division: Division, prefix: str) -> dict[str, float]:
        """Division quality of each part of the units (e.g. each modality), as ``{prefix}/{part}/{metric}``."""
        report: dict[str, float] = {}
        start = 0
        for part, mask in self._hidden_masks.items():
            units = slice(start, start + len(mask))
            start += len(mask)
            quality = division_quality(division.clean_prob[units], division.clean[units], mask)
            report.update({f"{prefix}/{part}/{k}": float(v) for k, v in quality.items()})
        return report

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, split: Any) -> dict[str, float]:
        """The task's metrics on an evaluation split (pairs: R@1/5/10, rSum, medr, meanr; labels: mAP), under the
        autocast of ``mixed_precision`` as training runs."""
        with self.accelerator.autocast():
            return self.task.evaluate(
                self.model,
                split,
                batch_size=self.config.eval_batch_size,
                device=self.accelerator.device,
                hook=self.hook,
                progress=self._show_progress,
            )

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Save everything needed to resume (accelerate state, trainer state, divisions, ledger).

        The checkpoint is written under ``NAME.tmp``, gets its manifest (:mod:`hfncl.integrity`)
        and only then is renamed to ``NAME`` and named by ``checkpoints/latest``; the previous
        checkpoint is kept, to fall back to if this one is found damaged.

        Raises:
            hfncl.integrity.DiskFullError: the disk filled up while writing (one line naming the file).
        """
        root = self.output_dir / "checkpoints"
        target = root / f"{CHECKPOINT_PREFIX}{self.state.global_step:08d}-epoch-{self.state.epoch:04d}"
        staging = target.with_name(f"{target.name}.tmp")
        if self.accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        with writing(root, f"checkpoint {target.name}"):
            self.accelerator.save_state(str(staging))
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            with writing(root, f"checkpoint {target.name}"):
                self._write_trainer_files(staging)
            replace_directory(staging, target)
            atomic_write_text(root / LATEST, target.name)
            previous = [p for p in self._checkpoints() if p.name < target.name][:1]
            leftovers = [p for p in root.glob(f"{CHECKPOINT_PREFIX}*.tmp") if p.is_dir()]
            for old in [p for p in self._checkpoints() if p != target and p not in previous] + leftovers:
                shutil.rmtree(old, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        return target

    def _write_trainer_files(self, staging: Path) -> None:
        """The trainer's part of a checkpoint (ledger and divisions, state, run fingerprint), then its manifest."""
        tensors = self.ledger.state()
        for net, division in enumerate(self.divisions):
            if division is not None:
                tensors.update(division.state(f"division.{net}"))
        save_file(tensors, str(staging / "trainer_tensors.safetensors"))
        (staging / "trainer_state.json").write_text(json.dumps(asdict(self.state), indent=1))
        save_fingerprint(staging, self.fingerprint, self.continued_across)
        write_manifest(staging)

    def resume(self) -> bool:
        """Load the checkpoint ``config.resume_from_checkpoint`` names, verified against its manifest.

        ``latest`` (the default): the checkpoint ``checkpoints/latest`` names, or, when that
        one is damaged (or the pointer names nothing inside ``checkpoints/``), the newest
        complete one, with a warning naming what was damaged. The checkpoint's run fingerprint
        must be this run's (:func:`hfncl.engine.fingerprint.check_fingerprint`; with
        ``resume_ignore_mismatch`` the fields that differ go to :attr:`continued_across`). Returns
        whether a checkpoint was loaded (``False``: the output directory has none).

        Raises:
            IntegrityError: no checkpoint passes verification.
            hfncl.engine.fingerprint.ResumeMismatchError: the checkpoint was trained on other data,
                noise or settings, and ``resume_ignore_mismatch`` is not set.
        """
        wanted = self.config.resume_from_checkpoint or LATEST
        candidates, problems = self._resume_candidates() if wanted == LATEST else ([Path(wanted)], [])
        if not candidates and not problems:
            return False
        for source in candidates:
            try:
                verify_manifest(source)
            except IntegrityError as error:
                problems.append(str(error))
                continue
            if problems:
                warnings.warn(f"resuming from {source} instead: {'; '.join(problems)}", stacklevel=2)
            ignore = self.config.resume_ignore_mismatch
            self.continued_across = check_fingerprint(source, self.fingerprint, ignore_mismatch=ignore)
            self._load_checkpoint(source)
            return True
        raise IntegrityError(f"no complete checkpoint to resume from: {'; '.join(problems)}")

    def _load_checkpoint(self, source: Path) -> None:
        _check_random_states(source)
        try:  # accelerate unpickles its state files with torch's weights-only unpickler: code in them never runs
            self.accelerator.load_state(str(source))
        except (pickle.UnpicklingError, RuntimeError) as error:
            message = one_line(error) or type(error).__name__
            raise IntegrityError(f"{source}: accelerate's state files cannot be loaded safely ({message})") from error
        saved = json.loads((source / "trainer_state.json").read_text())
        if "best_rsum" in saved:  # checkpoints written before the best metric was the task's
            saved["best_score"] = saved.pop("best_rsum")
        self.state = TrainerState(**saved)
        tensors = load_file(str(source / "trainer_tensors.safetensors"))
        self.ledger.load_state(tensors)
        self.divisions = [
            Division.from_state(tensors, f"division.{net}") if f"division.{net}.clean" in tensors else None
            for net in range(self.num_networks)
        ]

    def _checkpoints(self) -> list[Path]:
        """The finished checkpoint directories of ``checkpoints/``, newest first."""
        return finished_checkpoints(self.output_dir)

    def _resume_candidates(self) -> tuple[list[Path], list[str]]:
        return resume_candidates(self.output_dir)

    def _save_best(self, metrics: dict[str, float], division_report: dict[str, float]) -> None:
        """Save ``OUTPUT_DIR/best``: the model, the run record of this epoch and the card generated from it
        (a full disk: :class:`hfncl.integrity.DiskFullError`)."""
        if self.accelerator.is_main_process:
            record = RunRecord(
                training=self.config.to_dict(),
                best_epoch=self.epoch + 1,
                validation=dict(metrics),
                division=dict(division_report),
                compute=self._compute(),
            )
            staging = self.output_dir / "best.tmp"
            shutil.rmtree(staging, ignore_errors=True)
            with writing(self.output_dir, "best/"):
                save_trained_model(self.model, staging, record, self.plugins.provenance)
                write_manifest(staging)
            replace_directory(staging, self.output_dir / "best")

    # ------------------------------------------------------------------ internals
    def _call_hook(self, name: str, **arguments: Any) -> Any:
        """Call the plugins' hook ``name`` (one of ``TRAINING_HOOKS``) with this trainer's contract view
        (:class:`hfncl.trainer_view.ContractView`) and ``arguments``, between the callbacks' ``on_hook_begin`` and
        ``on_hook_end``."""
        self._event("on_hook_begin", name)
        try:
            return getattr(self.hook, name)(trainer=self.view, **arguments)
        except (TypeError, AttributeError) as error:  # a value of the wrong type: named by plugin and hook
            raise hook_error(self.hook, name, error) from error
        finally:
            self._event("on_hook_end", name)

    def _event(self, event: str, *arguments: Any) -> None:
        """Call method ``event`` of every callback, in order, with this trainer and ``arguments``."""
        for callback in self.callbacks:
            getattr(callback, event)(self, *arguments)

    def _check_data_kind(self) -> None:
        """Refuse plugins that train on another kind of data than this run's task."""
        kinds = self.hook.data_kind()
        names = [impl.plugin_name for impl in reversed(self.hook.data_kind.get_hookimpls())]
        wrong = [name for name, kind in zip(names, kinds, strict=True) if kind != self.task.kind]
        wrong += [name for name in self.config.plugins if name not in names and self.task.kind != "pairs"]
        if wrong:
            raise PluginError(
                f"Plugin(s) {wrong} do not train on {self.task.kind!r} data, which this run has "
                "(see each plugin's data_kind hook); name methods for this kind of data."
            )

    def _pass_steps(self, epoch: int, networks: list[int]) -> PassSteps:
        """The current pass's steps from ``batch_in_pass`` on: one shuffle of all, or the ``batch_plan`` parts."""
        seed, start = derived_seed(self.config.seed, epoch, self.state.pass_index), self.state.batch_in_pass
        plan = self._call_hook("batch_plan", epoch=epoch, networks=networks)
        if plan is None:
            loader = self._loader(seed=seed, drop_last=True, batch_size=self.config.batch_size, start_batch=start)
            return PassSteps({None: loader})
        if not isinstance(plan, BatchPlan):
            raise PluginError(f"batch_plan must return a hfncl.types.BatchPlan or None, got {type(plan).__name__}")
        subsets = {}
        for name, mask in plan.parts.items():
            if mask.numel() != self.num_train:
                raise PluginError(f"batch_plan's part {name!r} masks {mask.numel()} samples for {self.num_train}")
            subsets[name] = mask.cpu().nonzero().squeeze(1).numpy()
        lead = subsets.pop(plan.lead)
        if not len(lead):
            return PassSteps({plan.lead: []})
        size, drop_last, min_size = min(self.config.batch_size, len(lead)), not plan.keep_last, 2 * self.world_size
        num_batches = batch_count(len(lead), size, drop_last, min_size)
        loaders: dict[str | None, Any] = {
            plan.lead: self._loader(
                seed=seed, drop_last=drop_last, batch_size=size, start_batch=start, subset=lead, min_size=min_size
            )
        }
        for position, (name, subset) in enumerate(subsets.items(), start=1):
            if len(subset):
                part_seed = derived_seed(self.config.seed, epoch, self.state.pass_index, position)
                sampler = CyclingBatchSampler(
                    subset, min(self.config.batch_size, len(subset)), seed=part_seed, num_batches=num_batches,
                    rank=self.rank, world_size=self.world_size, start_batch=start, keep_last=plan.keep_last,
                    min_size=min_size,
                )
                loaders[name] = self._data_loader(sampler)
        return PassSteps(loaders)

    def _loader(
        self,
        *,
        seed: int | None,
        drop_last: bool,
        batch_size: int,
        start_batch: int = 0,
        subset: np.ndarray | None = None,
        min_size: int = 1,
    ) -> torch.utils.data.DataLoader:
        sampler = GlobalBatchSampler(
            self.num_train,
            batch_size,
            seed=seed,
            drop_last=drop_last,
            rank=self.rank,
            world_size=self.world_size,
            start_batch=start_batch,
            subset=subset,
            min_size=min_size,
        )
        return self._data_loader(sampler)

    def _data_loader(self, sampler: torch.utils.data.Sampler) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(
            self.train_data, batch_sampler=sampler, collate_fn=self.task.collate, num_workers=self.config.num_workers
        )

    @property
    def _show_progress(self) -> bool:
        return self.config.progress and self.accelerator.is_local_main_process

    def _progress(self, loader, description: str):
        return progress_bar(loader, description, self._show_progress)

    def _clip(self, networks: list[int]) -> None:
        if self.config.grad_clip > 0:
            params = [p for net in networks for p in self.model.networks[net].parameters() if p.grad is not None]
            if params:
                self.accelerator.clip_grad_norm_(params, self.config.grad_clip)

    def _parameter_groups(self) -> list[dict[str, Any]]:
        """The optimiser's parameter groups: one for the whole model, or, with a text-tower lr scale or freeze, the
        pretrained text encoder's weights in a group of their own whose ``lr_scale`` multiplies the rate.

        Raises:
            ValueError: a text-tower lr scale or freeze asked for where the model has no pretrained text encoder.
        """
        self._pretrained_text = self.task.pretrained_text_parameters(self.model)
        scale, frozen = self.config.text_tower_lr_scale, self.config.freeze_text_tower_epochs
        if scale == 1.0 and frozen == 0:
            return [{"params": list(self.model.parameters()), "lr_scale": 1.0}]
        if not self._pretrained_text:
            raise ValueError(
                f"TrainConfig.text_tower_lr_scale ({scale}) and freeze_text_tower_epochs ({frozen}) act on a "
                "pretrained text tower, and this model has none (give --text_tower a BERT-family or CLIP text encoder)"
            )
        text = {id(parameter) for parameter in self._pretrained_text}
        rest = [parameter for parameter in self.model.parameters() if id(parameter) not in text]
        return [{"params": rest, "lr_scale": 1.0}, {"params": self._pretrained_text, "lr_scale": scale}]

    def _set_learning_rate(self, epoch: int) -> None:
        """Every group's rate: the base rate, decayed at each of ``lr_decay_epochs`` reached, times its ``lr_scale``."""
        decays = sum(epoch >= e for e in self.config.lr_decay_epochs)
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.learning_rate * self.config.lr_decay_factor**decays * group.get("lr_scale", 1.0)

    # ------------------------------------------------------------------ the rest of the plugin view
    # (hfncl.trainer_view.TrainerView lists every member a plugin may use)
    @property
    def global_step(self) -> int:
        """Optimisation steps taken since the start of training, warmup included."""
        return self.state.global_step

    @property
    def pass_index(self) -> int:
        """The position in ``passes`` of the pass being trained (or just ended, in ``pass_end``)."""
        return self.state.pass_index

    @property
    def noise_rate(self) -> float | None:
        """The share of training pairs (or labels) the run corrupted, as its task states it; ``None`` when unknown."""
        return self.task.noise_rate

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """A tensor of this process's batch slice gathered into the global batch (``forward(...).index`` order)."""
        return gather(tensor)

    def options_of(self, options_class: type[OptionsT]) -> OptionsT:
        """A plugin's checked options object (:mod:`hfncl.options`): ``trainer.options_of(NCROptions).alpha``."""
        return options_class.read(self.options)
