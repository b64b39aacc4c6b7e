"""What several methods share around their equations: peers, ledger columns, batch views and plans, seeds, hooks.

Plain functions over the trainer view (:mod:`hfncl.trainer_view`) and tensors; none of
them knows a method. The shared equations live beside them in :mod:`hfncl.equations.losses`,
:mod:`hfncl.equations.evidential` and :mod:`hfncl.equations.division`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from hfncl.hookspecs import hookimpl
from hfncl.types import BatchPlan

if TYPE_CHECKING:
    from hfncl.trainer_view import LedgerView, TrainerView
    from hfncl.types import Batch, Division

EPOCH_STRIDE = 7919
"""A prime that spaces the seeds of consecutive epochs (:func:`epoch_seed`)."""


def peer(net: int, num_networks: int) -> int:
    """The co-teaching peer of network ``net``: ``(net + 1) % N`` (itself when it trains alone)."""
    return (net + 1) % num_networks


def ledger_column(ledger: "LedgerView", name: str, num_samples: int, fill: float = float("nan")) -> torch.Tensor:
    """A copy of the ledger's column ``name``, or an (N,) column of ``fill`` when nothing was recorded under it."""
    return ledger.get(name).clone() if name in ledger else torch.full((num_samples,), fill)


def complete_columns(ledger: "LedgerView", names: Iterable[str]) -> list[torch.Tensor] | None:
    """Copies of the columns ``names`` if every one of them has a value for every sample, else ``None``."""
    names = list(names)
    if any(name not in ledger or torch.isnan(ledger.get(name)).any() for name in names):
        return None
    return [ledger.get(name).clone() for name in names]


def fill_unrecorded(ledger: "LedgerView", name: str, values: torch.Tensor) -> None:
    """Record ``values`` (one row per sample, from a pass over the data) under ``name`` for the samples that have
    no value there yet, so that a division made from statistics recorded during the steps needs no pass next time."""
    column = ledger_column(ledger, name, values.shape[0])
    missing = torch.isnan(column.reshape(column.shape[0], -1)).any(dim=1).nonzero().squeeze(1)
    ledger.record(missing, name, values[missing])


def recorded_or_pass(
    trainer: "TrainerView",
    names: list[str],
    run_pass: Callable[[], list[torch.Tensor]],
    recorded: bool,
    current: bool = True,
) -> list[torch.Tensor]:
    """A division's per-sample statistics, one tensor per name of ``names``: the columns the training steps
    recorded under them when the method records (``recorded``), they are ``current`` and none has a gap; else
    ``run_pass()``'s, whose values then fill the records' gaps (:func:`fill_unrecorded`) when the method records.
    The trainer's ledger is read only when the method records."""
    columns = complete_columns(trainer.ledger, names) if recorded and current else None
    if columns is None:
        columns = run_pass()
        for name, values in zip(names, columns, strict=True) if recorded else ():
            fill_unrecorded(trainer.ledger, name, values)
    return columns


def forget_records(trainer: "TrainerView", names: Iterable[str]) -> None:
    """Every row of the ledger columns ``names`` back to unrecorded (NaN), after a division has read them: the next
    :func:`recorded_or_pass` then reads only what the steps record in between, never an older epoch's value."""
    for name in names:
        if name in trainer.ledger:
            column = trainer.ledger.get(name)
            trainer.ledger.record(torch.arange(column.shape[0]), name, torch.full_like(column, float("nan")))


def batch_index(trainer: "TrainerView", batch: "Batch") -> torch.Tensor:
    """The dataset index of the global batch (every process's slice, in ``forward(...).index`` order), on the CPU."""
    return trainer.gather(batch["index"]).cpu()


def batch_view(division: "Division", index: torch.Tensor, names: Iterable[str], device: Any) -> dict[str, torch.Tensor]:
    """The division's values of the samples ``index`` on ``device``: ``clean``, ``clean_prob`` or an extra, by name."""
    columns = {"clean": division.clean, "clean_prob": division.clean_prob, **division.extras}
    return {name: columns[name][index].to(device) for name in names}


def division_plan(division: "Division", noisy: bool = True, keep_last: bool = False) -> BatchPlan:
    """A ``batch_plan`` of a division: a pass over its clean set, with a batch of its noisy set beside each clean batch.

    The parts are named ``"clean"`` (the lead: every clean sample once per pass) and, with
    ``noisy``, ``"noisy"`` (cycling through shuffles of the noisy set), as co-training
    methods that train each set with its own loss draw them (NCR's authors' loop);
    ``keep_last`` trains each shuffle's last partial batch too (:class:`hfncl.types.BatchPlan`).
    """
    return BatchPlan({"clean": division.clean, **({"noisy": ~division.clean} if noisy else {})}, keep_last=keep_last)


def batch_parts(clean: torch.Tensor, with_noisy: bool = True) -> list[torch.Tensor]:
    """Positions of a batch's clean part and (``with_noisy``) of its noisy part, each left out when it has fewer than
    two pairs (a part of one pair has no negative)."""
    parts = [clean.nonzero().squeeze(1)] + ([(~clean).nonzero().squeeze(1)] if with_noisy else [])
    return [part for part in parts if part.numel() > 1]


def epoch_at_share(trainer: "TrainerView", share: float) -> int:
    """The epoch ``share`` of the way through the epochs after warmup: ``warmup + int((epochs - warmup) * share)``
    (when co-training methods let their noisy part join the loss)."""
    warmup = trainer.config.warmup_epochs
    return warmup + int((trainer.config.epochs - warmup) * share)


def epoch_seed(seed: int, epoch: int) -> int:
    """A seed of its own for each epoch of a run: ``seed + 7919 * (epoch + 1)``."""
    return seed + EPOCH_STRIDE * (epoch + 1)


def training_batches(trainer: "TrainerView", epoch: int) -> dict[str, int]:
    """:meth:`~hfncl.trainer_view.TrainerView.collect`'s loader arguments for a pass whose batches are drawn as
    training draws them: the training batch size, in the order of the epoch's seed (:func:`epoch_seed`).

    For statistics that compare a pair with the rest of its batch (a hinge over its negatives, evidence among
    its candidates): dataset order would put one image's captions side by side as each other's negatives.
    """
    return {"batch_size": trainer.config.batch_size, "seed": epoch_seed(trainer.config.seed, epoch)}


def seeded_generator(*keys: int) -> torch.Generator:
    """A torch generator seeded from ``keys`` (e.g. seed, epoch, step, network) through numpy's SeedSequence."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence(list(keys)).generate_state(1)[0]))


def same_terms_in_warmup(
    terms: Callable[["TrainerView", "Batch", Any, int], dict[str, torch.Tensor]],
) -> tuple[Callable[..., dict[str, torch.Tensor]], Callable[..., dict[str, torch.Tensor]]]:
    """``loss`` and ``warmup_loss`` hook implementations that both return ``terms(trainer, batch, outputs, net)``.

    For a method whose objective does not change after warmup: ``loss, warmup_loss = same_terms_in_warmup(f)``.
    """

    @hookimpl
    def loss(trainer: "TrainerView", batch: "Batch", outputs: Any, targets: Any, net: int) -> dict[str, torch.Tensor]:
        return terms(trainer, batch, outputs, net)

    @hookimpl
    def warmup_loss(trainer: "TrainerView", batch: "Batch", outputs: Any, net: int) -> dict[str, torch.Tensor]:
        return terms(trainer, batch, outputs, net)

    return loss, warmup_loss


def networks_in_turn() -> Callable[..., list[list[int]]]:
    """A ``training_passes`` implementation with each network in a pass of its own, as co-teaching trains them.

    ``training_passes = networks_in_turn()``: every network trains on its own shuffle of the data.
    """

    @hookimpl
    def training_passes(config: Any, num_networks: int) -> list[list[int]]:
        return [[net] for net in range(num_networks)]

    return training_passes


def bibtex_citation(path: str | Path) -> Callable[[], str]:
    """A ``citation`` hook implementation returning the BibTeX kept in the file ``path``.

    ``citation = bibtex_citation(Path(__file__).with_name("bibtex") / "ncr.bib")``: the
    entry stays a ``.bib`` file that reference managers read, and is read when a model is saved.
    """

    @hookimpl
    def citation() -> str:
        return Path(path).read_text()

    return citation
