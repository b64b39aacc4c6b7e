"""The trainer as a plugin sees it: everything a hook may call or read, and nothing else.

Hooks that take a ``trainer`` (:mod:`hfncl.hookspecs`) receive a :class:`ContractView` of the
run's :class:`hfncl.engine.trainer.Trainer`: a proxy with exactly the members of
:class:`TrainerView`, so that reading or setting anything else fails at once with a message
naming the member and the contract. ``tests/test_plugin_contract.py`` also reads every built-in
plugin and fails on any other attribute of the trainer, on any private (``_name``) attribute and
on an import of the engine's modules.
"""

from __future__ import annotations

import ast
import difflib
import inspect
from collections.abc import Callable
from pathlib import Path
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

    def forward(self, net: int, batch: "Batch", *, grad: bool = True, network: "torch.nn.Module | None" = None) -> Any:
        """Network ``net`` on ``batch``, gathered over processes: ``PairOutputs`` or ``CategoryOutputs``.

        ``grad=False`` predicts in eval mode (no dropout, BatchNorm running statistics read, not moved).
        ``network``: a copy of network ``net`` (a look-ahead model a method steps itself) to run in its place."""

    def samples(self, index: "torch.Tensor") -> "Batch":
        """The training samples at dataset positions ``index``, collated as a training batch, on the device."""

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


def declared_members(protocol: type) -> frozenset[str]:
    """The public attributes, properties and methods a Protocol class declares."""
    declared = set(protocol.__dict__.get("__annotations__", {}))
    declared |= {name for name in vars(protocol) if not name.startswith("_")}
    return frozenset(declared)


VIEW_MEMBERS = declared_members(TrainerView)
"""The members a hook may use of ``trainer`` (:class:`TrainerView`'s)."""


class ContractView:
    """The trainer as hooks receive it: :class:`TrainerView`'s members of ``trainer``, read through, and nothing else.

    A member outside the contract raises ``AttributeError`` naming it, the nearest members of the
    contract and where the contract is written; no attribute can be set (a hook changes the run
    through the contract's methods and mutable members, such as ``divisions[k]``).
    """

    __slots__ = ("_trainer",)

    def __init__(self, trainer: object) -> None:
        object.__setattr__(self, "_trainer", trainer)

    def __getattr__(self, name: str) -> Any:
        if name in VIEW_MEMBERS:
            return getattr(object.__getattribute__(self, "_trainer"), name)
        raise AttributeError(_outside(name, "read"))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(_outside(name, "set"))

    def __dir__(self) -> list[str]:
        return sorted(VIEW_MEMBERS)

    def __repr__(self) -> str:
        return f"ContractView({object.__getattribute__(self, '_trainer')!r})"


def _outside(name: str, action: str) -> str:
    if action == "set":
        what = f"trainer.{name} cannot be set by a plugin"
    else:
        what = f"trainer.{name} is not part of the plugin contract"
    close = difflib.get_close_matches(name, sorted(VIEW_MEMBERS), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return (
        f"{what}{hint}: hooks use only the members of hfncl.trainer_view.TrainerView "
        f"({', '.join(sorted(VIEW_MEMBERS))}); see docs/plugins.md"
    )


LEDGER_MEMBERS = declared_members(LedgerView)


def violations(source: str) -> list[str]:
    """What a plugin's ``source`` uses beyond the contract, one line per use (``line N: ...``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            owner = node.value
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                    found.append(f"line {node.lineno}: private attribute {ast.unparse(node)}")
            if isinstance(owner, ast.Name) and owner.id == "trainer" and node.attr not in VIEW_MEMBERS:
                found.append(f"line {node.lineno}: trainer.{node.attr} is not in TrainerView")
            if ast.unparse(owner) == "trainer.ledger" and node.attr not in LEDGER_MEMBERS:
                found.append(f"line {node.lineno}: trainer.ledger.{node.attr} is not in LedgerView")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hfncl"):
            module = node.module or ""
            if module.startswith("hfncl.engine") or any(part.startswith("_") for part in module.split(".")):
                found.append(f"line {node.lineno}: imports {module}")
            private = [alias.name for alias in node.names if alias.name.startswith("_")]
            found += [f"line {node.lineno}: imports private {module}.{name}" for name in private]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name.startswith("hfncl.engine")]
    return found


def source_files(plugin: Any) -> list[Path]:
    """The Python files of a plugin: its module's file, or every file of its package."""
    module = inspect.getmodule(plugin) or plugin
    path = Path(inspect.getsourcefile(module) or "")
    return sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]


def view_violations(plugin: Any) -> list[str]:
    """What a loaded plugin's files use beyond the contract (:func:`violations`), each line led by the file's name."""
    return [f"{path.name} {use}" for path in source_files(plugin) for use in violations(path.read_text())]
