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

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

from hfncl.config import TrainConfig
from hfncl.engine.batches import PassSteps, TrainingBatches
from hfncl.engine.callbacks import EpochLine, TrainerCallback
from hfncl.engine.checkpoints import Checkpoints, TrainerState, compute_section
from hfncl.engine.distributed import run_accelerator, world
from hfncl.engine.fingerprint import run_fingerprint
from hfncl.engine.ledger import Ledger
from hfncl.engine.optimization import (
    LearningRateSchedule,
    load_initial_weights,
    parameter_groups,
    set_learning_rate,
)
from hfncl.engine.reports import division_report
from hfncl.engine.steps import TrainerSurface
from hfncl.engine.tasks import Task
from hfncl.hub import RunRecord
from hfncl.plugin_setup import RunPlugins, check_data_kind
from hfncl.plugins import PluginError
from hfncl.trainer_view import ContractView
from hfncl.types import Batch, Division


class Trainer(TrainerSurface):
    """Train a model with the plugins named in ``config.plugins``.

    ``task`` says what the data are: with :class:`hfncl.tasks.pairs.PairTask` (e.g. ``hfncl.tasks.PAIRS``),
    ``model_config`` is an :class:`hfncl.models.NCLConfig`, ``train_data`` a
    :class:`hfncl.data.NoisyPairDataset` and ``val_split`` a
    :class:`hfncl.engine.encoding.RetrievalSplit`; with a
    :class:`hfncl.tasks.labels.CategoryTask`, a :class:`hfncl.models.CategoryConfig`,
    a :class:`hfncl.data.noisy_labels.NoisyLabelledDataset` and a :class:`hfncl.data.LabelledSplit`.
    The training data's hidden clean mask(s) are used only to report division quality,
    never handed to a plugin. ``callbacks`` (:class:`hfncl.engine.callbacks.TrainerCallback`)
    follow the run's events after the built-in epoch line. ``plugins`` are the run's plugins, set up once
    (:func:`hfncl.plugin_setup.run_plugins`; :func:`hfncl.experiment.prepare_run` hands them down); the trainer
    builds no plugin manager, and refuses plugins of another kind of data than ``task``'s (``PluginError``).
    ``fingerprint`` (:mod:`hfncl.engine.fingerprint`, default: the training
    settings of ``config``) is saved with every checkpoint (:mod:`hfncl.engine.checkpoints`), and a resume
    refuses a checkpoint whose fingerprint differs.
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
        plugins: RunPlugins,
        fingerprint: dict[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.callbacks = [EpochLine(), *(callbacks or [])]
        self.task = task
        if list(plugins.names) != list(config.plugins):
            raise ValueError(f"plugins were set up for {list(plugins.names)}, config.plugins names {config.plugins}")
        check_data_kind(plugins.manager, list(plugins.names), task.kind)
        self.plugins = plugins
        self.view = ContractView(self)  # what hooks receive: the members of the plugin contract only
        self.hook = self.plugins.hook
        self.options = self.plugins.options
        if len(train_data) < config.batch_size:
            raise ValueError(
                f"TrainConfig.batch_size {config.batch_size} exceeds the {len(train_data)} training samples: "
                "every epoch would take zero optimisation steps; lower batch_size"
            )
        self.accelerator = accelerator or run_accelerator(config.mixed_precision, config.log_with, config.output_dir)
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
        needs_validation = [name for name in ("early_stopping_patience", "lr_decay_patience") if getattr(config, name)]
        if needs_validation and val_split is None:
            raise ValueError(f"TrainConfig.{needs_validation[0]} reads the validation score, and the run has no "
                             "validation split (give one, or set it to 0)")
        self.num_train = len(train_data)
        self._hidden_masks = self.task.clean_masks(train_data)
        self._true_clean = np.concatenate(list(self._hidden_masks.values()))
        optimizer_class = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
        self._pretrained_text = self.task.pretrained_text_parameters(self.model)
        self.optimizer = optimizer_class(
            parameter_groups(
                self.model,
                self._pretrained_text,
                text_lr_scale=config.text_tower_lr_scale,
                frozen_epochs=config.freeze_text_tower_epochs,
            ),
            lr=config.learning_rate,
            weight_decay=config.weight_decay,
        )
        prepared = self.accelerator.prepare(*self.model.networks, self.optimizer)
        self.wrapped_networks, self.optimizer = list(prepared[:-1]), prepared[-1]
        self.rank, self.world_size = world()
        self.batches = TrainingBatches(
            train_data, self.task.collate, batch_size=config.batch_size, seed=config.seed,
            num_workers=config.num_workers, rank=self.rank, world_size=self.world_size,
        )
        self.divisions: list[Division | None] = [None] * self.num_networks
        self.ledger = Ledger(self.num_train)
        self.state = TrainerState()
        self.epoch = 0
        self.in_warmup = True
        self.batch_part: str | None = None
        self._later_part = False  # the batch is a plan's later part: it may take no step
        self.output_dir = Path(config.output_dir)
        self.checkpoints = Checkpoints(
            self.output_dir,
            self.accelerator,
            run_fingerprint(config) if fingerprint is None else fingerprint,
            self.plugins.provenance,
            resume_from=config.resume_from_checkpoint,
            ignore_mismatch=config.resume_ignore_mismatch,
        )
        self.lr_schedule = LearningRateSchedule(
            config.learning_rate, tuple(config.lr_decay_epochs), config.lr_decay_factor
        )
        if config.log_with:
            name = config.run_name or self.output_dir.resolve().name
            self.accelerator.init_trackers(
                "hfncl",
                config={k: str(v) for k, v in config.to_dict().items()},
                init_kwargs={"wandb": {"name": name}, "mlflow": {"run_name": name}, "trackio": {"name": name}},
            )

    # ------------------------------------------------------------------ training
    def train(self) -> dict[str, Any]:
        """Train to ``config.epochs`` (resuming if asked), keep the best model, return a summary."""
        if self.config.resume_from_checkpoint is not None:
            self.resume()
        self.model.train()
        self._event("on_train_begin")
        while self.state.epoch < self.config.epochs and not self.stops_early():
            self._train_epoch(self.state.epoch)
        self.accelerator.wait_for_everyone()
        self.accelerator.end_training()
        summary = {
            "best_metric": self.task.best_metric,
            "best_score": self.state.best_score,
            "best_epoch": self.state.best_epoch + 1 if self.state.best_epoch >= 0 else None,
            "history": self.state.history,
            "train_seconds": self.state.train_seconds,
            "train_cpu_seconds": self.state.train_cpu_seconds,
            "untimed_epochs": self.state.epoch - self.state.timed_epochs,
        }
        self._event("on_train_end", summary)
        return summary

    _epoch_started: float | None = None
    """When the epoch in training started in this process (``time.perf_counter``); ``None`` between epochs."""

    def _compute(self) -> dict[str, Any]:
        """What trains the run (:func:`hfncl.engine.checkpoints.compute_section`); its seconds are those of the
        epochs trained before this one, over every process, and of this one so far (``None`` outside training, or
        when an earlier epoch's time was not kept)."""
        started, state = self._epoch_started, self.state
        seconds = None
        if started is not None and state.timed_epochs == state.epoch:
            seconds = state.train_seconds + time.perf_counter() - started
        return compute_section(
            self.accelerator.num_processes, self.accelerator.device, self.config.mixed_precision, seconds
        )

    def stops_early(self) -> bool:
        """Whether early stopping ends the run before the next epoch: ``early_stopping_patience`` epochs trained
        since the best validation score, and at least ``early_stopping_min_epochs`` epochs trained; with
        ``lr_decay_patience``, also that many epochs at the rate decayed on the plateau (read from the saved state
        only, so a resumed run stops where the uninterrupted one would)."""
        patience, trained = self.config.early_stopping_patience, self.state.epoch
        if not patience or self.val_split is None or self.state.best_epoch < 0:
            return False
        decayed = self.state.plateau_decay_epoch
        if self.config.lr_decay_patience and (decayed < 0 or trained - decayed < patience):
            return False
        return trained >= self.config.early_stopping_min_epochs and trained - 1 - self.state.best_epoch >= patience

    def _note_plateau(self, epoch: int) -> None:
        """Decay the rate from the next epoch once the validation score has not improved for ``lr_decay_patience``
        epochs (``epoch`` the one just validated), ``early_stopping_min_epochs`` trained."""
        patience, trained = self.config.lr_decay_patience, epoch + 1
        if (patience and self.state.plateau_decay_epoch < 0 and epoch - self.state.best_epoch >= patience
                and trained >= self.config.early_stopping_min_epochs):
            self.state.plateau_decay_epoch = epoch + 1

    def _train_epoch(self, epoch: int) -> None:
        started, cpu_started = time.perf_counter(), time.process_time()
        self._epoch_started = started
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
            self._note_plateau(epoch)
        self.state.history.append(record)
        seconds = time.perf_counter() - started
        self.state.train_seconds += seconds
        self.state.train_cpu_seconds += time.process_time() - cpu_started
        self.state.timed_epochs += 1
        self._event("on_epoch_end", record, seconds)
        self.accelerator.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=epoch)
        self.state.epoch += 1
        self.state.pass_index = 0
        self.state.epoch_loss_sums, self.state.epoch_loss_counts, self.state.epoch_steps = {}, {}, 0
        self.save_checkpoint()
        self._epoch_started = None

    def _step(self, batch: Batch, networks: list[int]) -> dict[str, float]:
        batch = {k: v.to(self.accelerator.device) for k, v in batch.items()}
        overridden = self._call_hook("train_step", batch=batch, networks=networks)
        if overridden is not None:
            return dict(overridden)
        total, logged = self.compute_loss(batch, networks)
        if logged:
            self.optimize(total, networks)
        return logged

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
        return division_report(self.divisions, self._hidden_masks, self._true_clean)

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
        """Save everything needed to resume (:meth:`hfncl.engine.checkpoints.Checkpoints.save`)."""
        return self.checkpoints.save(self.state, self.ledger, self.divisions)

    def resume(self) -> bool:
        """Load the checkpoint ``config.resume_from_checkpoint`` names
        (:meth:`hfncl.engine.checkpoints.Checkpoints.resume`); whether one was loaded."""
        restored = self.checkpoints.resume(self.num_networks)
        if restored is None:
            return False
        self.state, self.divisions = restored.state, restored.divisions
        self.ledger.load_state(restored.tensors)
        return True

    @property
    def continued_across(self) -> list[str]:
        """The fingerprint fields a resume continued across on purpose (``resume_ignore_mismatch``)."""
        return self.checkpoints.continued_across

    def _save_best(self, metrics: dict[str, float], division_report: dict[str, float]) -> None:
        """Save ``OUTPUT_DIR/best`` with the run record of this epoch (:meth:`Checkpoints.save_best`)."""
        if self.accelerator.is_main_process:
            record = RunRecord(
                training=self.config.to_dict(),
                best_epoch=self.epoch + 1,
                validation=dict(metrics),
                division=dict(division_report),
                compute=self._compute(),
            )
            self.checkpoints.save_best(self.model, record)

    # ------------------------------------------------------------------ internals
    def _pass_steps(self, epoch: int, networks: list[int]) -> PassSteps:
        """The current pass's steps from ``batch_in_pass`` on: one shuffle of all, or the ``batch_plan`` parts."""
        plan = self._call_hook("batch_plan", epoch=epoch, networks=networks)
        return self.batches.pass_steps(plan, epoch, self.state.pass_index, self.state.batch_in_pass)

    def _set_learning_rate(self, epoch: int) -> None:
        set_learning_rate(self.optimizer, self.lr_schedule, epoch, self.state.plateau_decay_epoch)

