"""What a plugin's hook calls on the trainer: the members of :class:`hfncl.trainer_view.TrainerView` that compute
(a network's forward pass, a step's default loss, an optimiser step, statistics passes over the training set,
per-sample randomness, options). :class:`hfncl.engine.trainer.Trainer` inherits them and runs the loop.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import torch
from accelerate import Accelerator

from hfncl.config import TrainConfig
from hfncl.engine.batches import TrainingBatches
from hfncl.engine.callbacks import TrainerCallback
from hfncl.engine.checkpoints import TrainerState
from hfncl.engine.distributed import gather
from hfncl.engine.progress import progress_bar
from hfncl.engine.randomness import per_sample_uniform, purpose_key
from hfncl.engine.tasks import Task
from hfncl.options import OptionsT
from hfncl.plugins import hook_error
from hfncl.registry import PluginError
from hfncl.types import Batch, Division


class TrainerSurface:
    """The computing members of the plugin contract, over the attributes :class:`hfncl.engine.trainer.Trainer`
    sets up."""

    config: TrainConfig
    task: Task
    model: Any
    accelerator: Accelerator
    wrapped_networks: list[torch.nn.Module]
    optimizer: torch.optim.Optimizer
    state: TrainerState
    batches: TrainingBatches
    options: dict[str, Any]
    hook: Any
    view: Any
    divisions: list[Division | None]
    num_networks: int
    num_train: int
    train_data: Any
    epoch: int
    in_warmup: bool
    _later_part: bool
    _pretrained_text: list[torch.nn.Parameter]
    callbacks: list[TrainerCallback]

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

    def _loader(self, *, seed: int | None, drop_last: bool, batch_size: int) -> torch.utils.data.DataLoader:
        return self.batches.loader(seed=seed, drop_last=drop_last, batch_size=batch_size)

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

    def _event(self, event: str, *arguments: Any) -> None:
        """Call method ``event`` of every callback, in order, with this trainer and ``arguments``."""
        for callback in self.callbacks:
            getattr(callback, event)(self, *arguments)
