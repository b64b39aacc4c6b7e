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

The hooks are declared by when they are asked: :mod:`hfncl.hookspecs.declarations` (what a method declares
about itself), :mod:`hfncl.hookspecs.training` (what the trainer calls) and :mod:`hfncl.hookspecs.retrieval`
(what retrieval with a trained model calls); ``__all__`` lists them in that order.
"""

from hfncl.hookspecs.declarations import (
    audit_settings,
    citation,
    data_kind,
    demo_settings,
    division_fields,
    model_defaults,
    num_networks,
    option_defaults,
    options,
    training_passes,
)
from hfncl.hookspecs.markers import PROJECT, hookimpl, hookspec
from hfncl.hookspecs.retrieval import (
    inference_similarity,
    query_uncertainty,
)
from hfncl.hookspecs.training import (
    batch_plan,
    divide,
    epoch_end,
    epoch_start,
    loss,
    pass_end,
    rectify,
    train_step,
    warmup_loss,
)

__all__ = [
    "PROJECT",
    "hookimpl",
    "hookspec",
    "options",
    "option_defaults",
    "citation",
    "demo_settings",
    "audit_settings",
    "data_kind",
    "division_fields",
    "model_defaults",
    "num_networks",
    "training_passes",
    "batch_plan",
    "divide",
    "rectify",
    "loss",
    "warmup_loss",
    "train_step",
    "epoch_start",
    "pass_end",
    "epoch_end",
    "inference_similarity",
    "query_uncertainty",
]
"""The markers, then every hook in the order of the contract: declarations, training, retrieval."""
