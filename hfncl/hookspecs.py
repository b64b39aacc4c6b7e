"""The plugin contract: every hook a method can implement.

A method is a module (or any object) with functions marked ``@hfncl.hookimpl`` whose
names are the hooks below. It is installed through the ``hfncl`` entry-point group and
made active by naming it in ``TrainConfig.plugins``; only active plugins are registered
for a run, so stages of different methods combine by listing several names.

Training, as the trainer runs it::

    model = NCLConfig(model_defaults() | explicit model arguments)
    networks = num_networks(config)                 (default 1)
    for epoch:
        epoch_start(trainer, epoch)
        warm = epoch < config.warmup_epochs
        if not warm: trainer.divisions = divide(trainer, epoch)
        for networks_of_pass in training_passes(config, networks):   (default: all jointly)
            plan = batch_plan(trainer, epoch, networks_of_pass)      (default: one shuffle of all)
            for step of the plan: for batch of each part (trainer.batch_part names it):
                train_step(trainer, batch, networks_of_pass)         (override, if any)
                or, per network k of the pass:
                    targets = None if warm else rectify(trainer, batch, k, division_k)
                    outputs = trainer.forward(k, batch)
                    terms = warmup_loss(...) if warm else loss(...)  (all plugins, summed)
                backward, clip, step                                 (one per part's batch)
            pass_end(trainer, epoch, networks_of_pass)
        epoch_end(trainer, epoch)

Retrieval with a trained model (evaluation, :mod:`hfncl.retrieval`) asks the plugins the
model was trained with (``NCLConfig.plugins``)::

    inference_similarity(model, image_embeds, text_embeds, direction)   (default: model.similarity)
    query_uncertainty(model, image_embeds, text_embeds, direction)      (default: none)

Hooks marked *first result* stop at the first plugin that returns something other than
``None``; the other hooks collect every active plugin's answer. A hook's ``trainer`` is a
:class:`hfncl.trainer_view.TrainerView`: the members listed there are all a plugin may use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import torch

    from hfncl.config import TrainConfig
    from hfncl.models import NCLModel
    from hfncl.options import MethodOptions
    from hfncl.trainer_view import TrainerView
    from hfncl.types import Batch, BatchPlan, Division, PairOutputs

PROJECT = "hfncl"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def options() -> "type[MethodOptions] | None":
    """Return this plugin's options: a frozen dataclass deriving from :class:`hfncl.options.MethodOptions`.

    Its fields, with their types, defaults, ranges and choices, are the options; users set
    them as ``namespace.field`` in ``TrainConfig.options``. The core checks every value
    before training starts, and hooks read the checked object with
    ``trainer.options_of(TheClass)`` (at inference ``TheClass.read(model.config.plugin_options)``).
    An option no active plugin declares is rejected, so a typo never passes silently.

    When: when a run starts, before anything is trained; also by ``hfncl plugins`` and ``--print-config``.
    Arguments: none.
    Built-in methods: each declares its options this way (``NCROptions``, ``UGNCLOptions``, ``GSCOptions``,
        ``TcVSEOptions``, ``DMCMOptions``, ...).
    """


@hookspec
def option_defaults() -> dict[str, Any]:
    """Return options as a dict of names and defaults: the untyped form of :func:`options`.

    A value must have its default's type (a float takes an int; ``None`` takes anything);
    ``trainer.option(name)`` reads it.

    When: as ``options``.
    Arguments: none.
    Built-in methods: none (they use ``options``); ``tests/toy_plugin`` uses it.
    """


@hookspec
def citation() -> str | None:
    """Return the BibTeX of the paper(s) this method implements, for the model card.

    Called when a trained model is saved, for every plugin it was trained with; the
    entries are kept in the run record (``plugin_citations``) and shown in the card's
    Citation section. ``None`` (or no such hook) cites nothing, as for a baseline of
    one's own.

    When: when a trained model is saved (the best checkpoint of a run, ``push_to_hub`` of a model built in
        memory).
    Arguments: none.
    Built-in methods: each cites its paper from ``plugins/bibtex/*.bib`` (``gsc_intra`` cites GSC's); the
        ``prototype_ce`` baseline has no paper and cites nothing.
    """


@hookspec(firstresult=True)
def demo_settings() -> dict[str, Any] | None:
    """Return how this method trains on the generated benchmark of ``hfncl demo`` (first result).

    A dict of :class:`hfncl.config.TrainConfig` fields (``epochs``, ``warmup_epochs``,
    ``options``, ...). ``hfncl demo`` trains every installed plugin that answers, each
    alone, with the same data, noise and seed, and prints them side by side: with these
    settings under ``--full``, and by default shortened by the schedule of its data kind
    (``hfncl.demo.QUICK``: a plugin for image-caption pairs to at most 3 epochs, one for
    category labels to at most 10, each at 5 times its learning rate, warmup cut to leave
    an epoch that divides); a plugin that is only a stage to combine with others does not
    implement it.

    When: by ``hfncl demo``, before it trains anything; never during a normal run.
    Arguments: none.
    Built-in methods: every method but ``gsc_intra`` (a stage) declares its demo epochs.
    """


@hookspec(firstresult=True)
def audit_settings() -> dict[str, Any] | None:
    """Return how this method trains to audit a user's own pairs (``hfncl audit``), or ``None`` (first result).

    A dict of :class:`hfncl.config.TrainConfig` fields, as ``demo_settings``. Answering declares that the
    method's ``divide`` is meant as a verdict on each pair: ``hfncl audit`` without ``--plugins`` trains the one
    installed plugin that answers (and asks the user to name one when several do). A dividing plugin that does
    not answer can still be named; it then trains with its ``demo_settings``.

    When: by ``hfncl audit`` (and ``hfncl.audit.audit``), before it trains anything; never during a normal run.
    Arguments: none.
    Built-in methods: GSC (its demo settings for 20 epochs: it audits real text best, benchmarks/README.md); the
    others can be named with ``--plugins``.
    """


@hookspec
def data_kind() -> str | None:
    """Return the kind of training data this method learns from: ``"pairs"`` or ``"labels"``.

    ``"pairs"`` (the default, also for a plugin without this hook): image-caption pairs
    with noisy correspondence; outputs are :class:`hfncl.types.PairOutputs`.
    ``"labels"``: samples with a (possibly wrong) category label per modality; outputs
    are :class:`hfncl.types.CategoryOutputs` and divisions cover every (modality,
    sample) unit (:mod:`hfncl.engine.tasks`). The trainer refuses to run a plugin on
    data of another kind, and ``hfncl demo`` picks the benchmark by it.

    When: when a run starts (the trainer checks it against the run's data), and by ``hfncl demo`` to pick the
        benchmark.
    Arguments: none.
    Built-in methods: DMCM and the cross-entropy baseline ``prototype_ce`` return ``"labels"``.
    """


@hookspec
def division_fields(config: "TrainConfig") -> dict[str, list[str]] | None:
    """Declare the named values this plugin hands from one stage to the next, and reads.

    Keys (each optional): ``"division"``, the ``extras`` of the :class:`Division` its
    ``divide`` returns; ``"targets"``, the keys of the dict its ``rectify`` returns;
    ``"needs_division"``, the extras its ``rectify`` reads; ``"needs_targets"``, the
    target keys its ``loss`` reads. Before the first epoch the trainer checks that the
    active ``divide`` (and ``rectify``) provide what the active ``rectify`` (and every
    ``loss``) read, and refuses the combination naming the plugins and the missing
    fields. A plugin that does not implement this hook is not checked.

    When: when a run starts, before data are loaded.
    Arguments: ``config`` (``TrainConfig``).
    Built-in methods: NCR, UGNCL, GSC and DMCM declare theirs, so ``ncr + ugncl`` is refused at start.
    """


@hookspec
def model_defaults() -> dict[str, Any] | None:
    """Return the architecture this method needs, as :class:`hfncl.models.NCLConfig` fields.

    For example ``{"image_views": 2}`` for a multi-view method or ``{"text_pooling":
    "max"}``. A value the user sets explicitly (``--image-views``) wins; where two
    active plugins disagree, the one named first wins.

    When: when a run builds its model.
    Arguments: none.
    Built-in methods: UGNCL asks for W = 2 image views; TcVSE for max-pooled regions and words.
    """


@hookspec(firstresult=True)
def num_networks(config: "TrainConfig") -> int | None:
    """Return how many networks the method trains (first result; default 1).

    Co-teaching methods train two peers; branch methods train one network per branch.
    All of them live in one checkpoint, and inference averages their similarities.

    When: when the run starts, before the networks are built.
    Arguments: ``config`` (``TrainConfig``).
    Built-in methods: NCR and GSC train two co-teaching peers, TcVSE one network per branch (i2t, t2i), UGNCL
        ``ugncl.ensemble`` networks; VSE++ keeps the default of 1.
    """


@hookspec(firstresult=True)
def training_passes(config: "TrainConfig", num_networks: int) -> list[list[int]] | None:
    """Return which networks each pass over the training data updates (first result).

    ``[[0, 1]]`` (the default) trains all networks jointly in one pass; ``[[0], [1]]``
    trains them in turn, each on its own shuffle of the data, as co-teaching does.

    When: when the run starts, after ``num_networks``.
    Arguments: ``config`` (``TrainConfig``), ``num_networks`` (``int``).
    Built-in methods: NCR and GSC train A and B in turn; TcVSE states its joint pass (both branches on one
        batch); UGNCL's networks train jointly (the default).
    """


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


@hookspec(firstresult=True)
def inference_similarity(
    model: "NCLModel", image_embeds: "torch.Tensor", text_embeds: "torch.Tensor", direction: str
) -> "torch.Tensor | None":
    """Score images against captions for retrieval in one direction (first result).

    ``image_embeds`` (K, n, W * d) and ``text_embeds`` (K, m, d) come from
    ``model.encode_image`` / ``model.encode_text``; ``direction`` is ``"i2t"`` (images
    query captions) or ``"t2i"`` (captions query images). Return the (n, m) similarity
    to rank with; ``None`` keeps ``model.similarity`` (the mean over networks and
    views). Evaluation calls it on blocks of image rows, so a row's scores must not
    depend on the other rows. The options the model was trained with are in
    ``model.config.plugin_options``.

    When: whenever a trained model ranks: validation, test evaluation, and ``hfncl.retrieval`` on a loaded
        checkpoint (the plugins named in its ``config.json`` are registered).
    Arguments: ``model`` (``NCLModel``), ``image_embeds`` (K, n, W·d), ``text_embeds`` (K, m, d), ``direction``
        (``"i2t"``: images query captions, ``"t2i"``: captions query images).
    Built-in methods: TcVSE ranks with its i2t branch, its t2i branch or their ensemble.
    """


@hookspec(firstresult=True)
def query_uncertainty(
    model: "NCLModel", image_embeds: "torch.Tensor", text_embeds: "torch.Tensor", direction: str
) -> "torch.Tensor | None":
    """How unsure the model is of each query's ranking, in [0, 1] (first result).

    Same inputs as :func:`inference_similarity`; the candidates are all the other
    modality's embeddings given. Return (n,) for ``"i2t"`` (one value per image query)
    or (m,) for ``"t2i"``; ``None`` when the method has no uncertainty. Evidential
    methods return the Dirichlet uncertainty mass u = K / sum(alpha).

    When: when ``hfncl.retrieval`` ranks a set of queries against a gallery.
    Arguments: as ``inference_similarity``.
    Built-in methods: UGNCL and TcVSE return the Dirichlet uncertainty mass u = K / Σα.
    """
