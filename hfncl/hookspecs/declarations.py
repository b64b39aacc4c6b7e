"""What a method declares about itself, asked before anything is trained: its options, citation and
settings, the data it learns from, the fields its division provides and reads, its model defaults, and the
networks and passes it trains (:mod:`hfncl.hookspecs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hfncl.hookspecs.markers import hookspec

if TYPE_CHECKING:
    from hfncl.config import TrainConfig
    from hfncl.options import MethodOptions


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
