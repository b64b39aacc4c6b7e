"""What the trainer calls while it trains: the batch plan, the division, the rectified targets, the loss
terms, a step of its own, and the epoch and pass events (:mod:`hfncl.hookspecs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hfncl.hookspecs.markers import hookspec

if TYPE_CHECKING:
    import torch

    from hfncl.trainer_view import TrainerView
    from hfncl.types import Batch, BatchPlan, Division, PairOutputs


@hookspec(firstresult=True)
def batch_plan(trainer: "TrainerView", epoch: int, networks: list[int]) -> "BatchPlan | None":
    """Choose the batches of a pass over the training data from this epoch's division (first result).

    Called at the start of each pass (after ``divide``, and again when a run resumes in
    the pass's middle, so it must depend only on what a checkpoint keeps: the epoch, the
    pass and ``trainer.divisions``). ``None`` keeps the default, one seeded shuffle of
    every training sample. A :class:`hfncl.types.BatchPlan` names parts, each a mask of
    samples: the pass is one shuffle of the first part, and every other part gives a
    batch beside each of its batches, cycling through shuffles of its own (a method's
    clean set with a batch of its noisy set beside each clean batch). Each part's batch
    is a step of its own (rectify, forward, loss, optimiser step, in the order of the
    parts), with ``trainer.batch_part`` naming the part; a later part's batch on which
    no plugin returns a loss term takes no step. Its terms are logged as
    ``NAME/PART`` (the first part's as ``NAME``).

    When: at the start of every pass over the training data (warmup epochs included), after ``divide`` and the
        previous pass's ``pass_end``; again when a run resumes in the middle of the pass.
    Arguments: ``trainer``, ``epoch`` (``int``), ``networks`` (``list[int]``, the networks the pass trains).
    Built-in methods: NCR (``ncr.noisy_batch = "separate"``, the default) trains each network on its division's
        clean set with a batch of the noisy set beside each clean batch, as the authors' loop does; the others
        keep the default.
    """


@hookspec(firstresult=True)
def divide(trainer: "TrainerView", epoch: int) -> "list[Division] | Division | None":
    """Split the training set into clean and noisy pairs, once per epoch (first result).

    Called after warmup, before the epoch's first batch. Return one :class:`Division`
    per network (a single one is shared by all). Per-sample statistics come from
    ``trainer.collect`` (a pass over the training set, gathered over processes) or
    from ``trainer.ledger`` (values recorded during the previous epoch's steps); the
    result must be identical on every process.

    When: once per epoch after the warmup epochs, before the epoch's first batch.
    Arguments: ``trainer``, ``epoch`` (``int``).
    Built-in methods: NCR fits a GMM on the per-sample loss of the *peer* network (co-divide); UGNCL divides
        into clean, noisy and hard sets from Dirichlet uncertainty and belief; GSC divides from the indicators
        its ledger recorded; DMCM fits a Beta mixture on the per-sample loss.
    """


@hookspec(firstresult=True)
def rectify(trainer: "TrainerView", batch: "Batch", net: int, division: "Division | None") -> dict[str, Any] | None:
    """Turn the division into this batch's training targets for network ``net`` (first result).

    Runs before the network's forward pass. Targets are whatever ``loss`` needs (soft
    correspondence labels, margins, mixed inputs); a rectifier may run gradient-free
    forward passes of any network with ``trainer.forward(k, batch, grad=False)``, which predicts in eval mode.
    The returned dict reaches ``loss`` as ``targets``; if it holds a batch under
    ``"inputs"`` (e.g. noisy samples mixed with clean ones), the network is trained on
    that batch instead of the loaded one.

    When: for every batch after warmup, once per network of the pass, before that network's forward pass (not
        called when ``train_step`` takes over the batch).
    Arguments: ``trainer``, ``batch`` (``Batch``, this process's slice), ``net`` (``int``), ``division``
        (``Division | None``, the division for ``net``). Under a batch plan, ``trainer.batch_part`` names the
        part the batch comes from.
    Built-in methods: NCR slices the division for the batch and predicts the correspondence with the peer
        network (co-rectify); UGNCL turns its three sets into per-pair targets; DMCM mixes noisy samples with
        clean ones and returns the mixed batch, which its ``loss`` encodes with a second forward pass.
    """


@hookspec
def loss(
    trainer: "TrainerView", batch: "Batch", outputs: "PairOutputs", targets: dict[str, Any] | None, net: int
) -> "dict[str, torch.Tensor] | None":
    """Return named loss terms for network ``net`` on this batch after warmup.

    Every active plugin may contribute terms; the trainer sums all of them and logs
    each by name. Per-sample statistics for the next division can be stored here with
    ``trainer.ledger.record(outputs.index, name, values)`` (never by ``batch['index']``,
    which is this process's slice of the batch). Under a :func:`batch_plan`,
    ``trainer.batch_part`` names the batch's part, and on a later part's batch no plugin
    need answer (the batch then takes no step).

    When: for every batch after warmup, once per network of the pass, after the forward pass.
    Arguments: ``trainer``, ``batch`` (``Batch``), ``outputs`` (``PairOutputs`` of network ``net``, global
        batch), ``targets`` (what ``rectify`` returned, or ``None``), ``net`` (``int``).
    Built-in methods: NCR's soft-margin triplet loss; VSE++'s hardest-negative triplet loss; GSC's y-weighted
        InfoNCE plus its intra-modal term (``gsc_intra`` adds that term alone to another method).
    """


@hookspec
def warmup_loss(
    trainer: "TrainerView", batch: "Batch", outputs: "PairOutputs", net: int
) -> "dict[str, torch.Tensor] | None":
    """Return named loss terms for network ``net`` during the warmup epochs.

    Warmup trains on all pairs before any division exists (``config.warmup_epochs``).
    A plugin without this hook contributes nothing during warmup.

    When: for every batch of the warmup epochs (``epoch < config.warmup_epochs``), once per network of the pass,
        after the forward pass; no division exists yet and ``rectify`` is not called.
    Arguments: ``trainer``, ``batch`` (``Batch``), ``outputs`` (``PairOutputs``), ``net`` (``int``).
    Built-in methods: NCR warms both networks up with the triplet loss over all negatives; UGNCL trains every
        pair as determined-clean.
    """


@hookspec(firstresult=True)
def train_step(trainer: "TrainerView", batch: "Batch", networks: list[int]) -> dict[str, float] | None:
    """Replace the whole optimisation step for this batch (first result).

    For methods whose step is not one forward and one backward (e.g. a second
    objective optimised several times after a fresh forward pass). The implementation
    uses ``trainer.forward``, ``trainer.optimize`` and the other public trainer
    methods, and returns the metrics to log. Returning ``None`` keeps the default step.
    Start from ``trainer.compute_loss(batch, networks)`` (every active plugin's terms)
    so that plugins combined with this one keep training, and draw per-sample
    randomness with ``trainer.sample_uniform`` so that it does not depend on the
    number of processes.

    When: for every batch, before the default step; if it returns metrics, the default step (rectify, forward,
        loss, backward) is skipped for that batch.
    Arguments: ``trainer``, ``batch`` (``Batch``), ``networks`` (``list[int]``, the networks of the pass).
    Built-in methods: TcVSE augments the batch, takes one update on ``compute_loss``, then optimises a
        consistency objective on a fresh forward pass several times per batch.
    """


@hookspec
def epoch_start(trainer: "TrainerView", epoch: int) -> None:
    """Called at the start of every epoch, before division.

    When: at the start of every epoch, warmup epochs included, before ``divide``.
    Arguments: ``trainer``, ``epoch`` (``int``).
    Built-in methods: none.
    """


@hookspec
def pass_end(trainer: "TrainerView", epoch: int, networks: list[int]) -> None:
    """Called after each pass of ``training_passes`` over the data, before the next pass.

    For a method whose networks train in turn and label each other within an epoch: it
    may fold what ``networks`` recorded and set ``trainer.divisions[k]`` of a network
    ``k`` that trains in a later pass of the same epoch (the epoch's record reports the
    divisions as they stand after the last pass).

    When: after each pass of ``training_passes`` over the data, before the next pass (and before ``epoch_end``
        after the last one).
    Arguments: ``trainer``, ``epoch`` (``int``), ``networks`` (``list[int]``, the networks the pass trained).
    Built-in methods: GSC folds network A's estimate after A's pass, so that B trains in epoch t on A's estimate
        of epoch t (its Algorithm 1).
    """


@hookspec
def epoch_end(trainer: "TrainerView", epoch: int) -> None:
    """Called at the end of every epoch's training, before validation.

    For example, fold the statistics recorded in ``trainer.ledger`` into the labels the
    next epoch will use.

    When: at the end of every epoch's training, before validation.
    Arguments: ``trainer``, ``epoch`` (``int``).
    Built-in methods: none (GSC folds its recorded statistics into the next labels in ``pass_end``, after each
        network's pass).
    """
