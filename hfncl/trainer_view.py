"""The trainer as a plugin sees it: everything a hook may call or read, and nothing else.

Hooks that take a ``trainer`` (:mod:`hfncl.hookspecs`) receive the
:class:`hfncl.engine.trainer.Trainer` of the run, typed as :class:`TrainerView`. A
plugin uses only the members declared here; ``tests/test_plugin_contract.py`` reads
every built-in plugin and fails on any other attribute of the trainer, on any private
(``_name``) attribute and on an import of the engine's modules.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from hfncl.config import TrainConfig
    from hfncl.options import OptionsT
    from hfncl.types import Batch, Division

class LedgerView(Protocol):
    """Per-sample values recorded during training steps, by dataset index (saved with every checkpoint)."""

    def record(self, index: "torch.Tensor", name: str, values: "torch.Tensor") -> None:
        """Store ``values[j]`` as sample ``index[j]``'s value of ``name`` (use ``outputs.index``)."""

    def get(self, name: str) -> "torch.Tensor":
        """The (N, ...) column ``name``, NaN where nothing was recorded; ``KeyError`` if never recorded."""

    def __contains__(self, name: object) -> bool:
        """Whether a column ``name`` was ever recorded."""

    def clear(self) -> None:
        """Forget every column."""


class TrainerView(Protocol):
    """What a plugin may use of the trainer (:class:`hfncl.engine.trainer.Trainer` implements it)."""

    config: "TrainConfig"
    """The run's settings: ``epochs``, ``warmup_epochs``, ``batch_size``, ``seed``, ..."""
    model: Any
    """The model; ``model.networks[k]`` and ``model.config`` for a gradient-free look (train through ``forward``)."""
    ledger: LedgerView
    """Per-sample values recorded by the steps, by dataset index."""
    divisions: "list[Division | None]"
    """This epoch's division per network (``None`` before the first); ``pass_end`` may replace a later pass's."""
    num_networks: int
    """How many networks the method trains."""
    passes: list[list[int]]
    """The networks each pass over the training data updates."""
    num_train: int
    """N, the training units that divisions and ledger columns cover (2N for label data)."""
    epoch: int
    """The epoch being trained, from 0, warmup included."""
    in_warmup: bool
    """Whether this epoch is a warmup epoch (no division yet)."""
    batch_part: str | None
    """The part of the pass's ``BatchPlan`` the batch being trained comes from; ``None`` without a plan."""

    @property
    def global_step(self) -> int:
        """Training steps taken since the start of training, warmup included (with a batch plan, one per lead batch)."""

    @property
    def pass_index(self) -> int:
        """The position in ``passes`` of the pass being trained (or just ended, in ``pass_end``)."""

    @property
    def noise_rate(self) -> float | None:
        """The share of training data the run corrupted; ``None`` when unknown.

        Pairs: the configured noise ratio, or the share a noise file re-pairs; ``None`` for the
        data's own pairs (clean, or real noise of unknown rate). Labels: the generated noise's rate.
        """

    def options_of(self, options_class: "type[OptionsT]") -> "OptionsT":
        """A plugin's options (:mod:`hfncl.options`), checked: ``trainer.options_of(NCROptions).alpha``."""

    def option(self, name: str) -> Any:
        """One option's value by full name (the untyped form, for plugins that declare ``option_defaults``)."""

    def forward(self, net: int, batch: "Batch", *, grad: bool = True) -> Any:
        """Network ``net`` on ``batch``, gathered over processes: ``PairOutputs`` or ``CategoryOutputs``.

        ``grad=False`` predicts in eval mode (no dropout, BatchNorm running statistics read, not moved)."""

    def compute_loss(self, batch: "Batch", networks: list[int]) -> "tuple[torch.Tensor, dict[str, float]]":
        """The default objective of a step: every active plugin's terms, summed, and each term's value."""

    def optimize(self, loss: "torch.Tensor", networks: list[int]) -> None:
        """One optimiser step on ``loss`` for ``networks`` (backward, clip, step)."""

    def sample_uniform(self, index: "torch.Tensor", shape: tuple[int, ...], purpose: str) -> "torch.Tensor":
        """Uniform draws per sample of this process's batch, from the seed, epoch, pass, purpose and index only."""

    def collect(
        self,
        statistic: "Callable[[Batch], dict[str, torch.Tensor]]",
        description: str = "statistics",
        *,
        batch_size: int | None = None,
        seed: int | None = None,
    ) -> "dict[str, torch.Tensor]":
        """A gradient-free pass over the training set: ``{name: (N, ...) tensor}`` by dataset index."""

    def gather(self, tensor: "torch.Tensor") -> "torch.Tensor":
        """A tensor of this process's batch slice gathered into the global batch (``forward(...).index`` order)."""
