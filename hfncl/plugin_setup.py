"""Setting up the plugins of one run: :func:`run_plugins` builds the run's plugin manager once
(:func:`hfncl.plugins.build_plugin_manager`), checks the plugins' source against the trainer's contract, their data
kind, the combination and the options, and hands the result (:class:`RunPlugins`) down to the task and the
trainer, which check nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pluggy

from hfncl.options import OptionError
from hfncl.plugins import build_plugin_manager, resolve_options
from hfncl.registry import PluginError, PluginProvenance, plugin_provenance
from hfncl.trainer_view import view_violations


@dataclass(frozen=True)
class RunPlugins:
    """The plugins of one run, set up once by :func:`run_plugins` and handed to the task and the trainer.

    ``options`` are the resolved options by full name; ``num_networks`` and ``passes`` the
    networks the method trains and the networks each pass over the data updates.
    """

    names: tuple[str, ...]
    manager: pluggy.PluginManager
    options: dict[str, Any]
    num_networks: int
    passes: list[list[int]]
    provenance: PluginProvenance

    @property
    def hook(self) -> Any:
        """The manager's hook relay: ``plugins.hook.divide(...)``."""
        return self.manager.hook


def run_plugins(config: Any, data_kind: str | None = None) -> RunPlugins:
    """Set up the plugins ``config.plugins`` names for a run of ``config``: build the manager, check that their
    source uses only the trainer's contract (:func:`hfncl.trainer_view.view_violations`), that they train on
    ``data_kind`` (when given: the run's task's kind), that their division fields fit and that they agree on the number
    of networks and the passes, then resolve their options (:func:`hfncl.plugins.resolve_options`).

    Raises:
        PluginError: in one line, naming the plugin, option or hook at fault.
    """
    names = list(config.plugins)
    manager = build_plugin_manager(names)
    for name in names:
        found = view_violations(manager.get_plugin(name))
        if found:
            raise PluginError(f"Plugin {name!r} uses the trainer beyond its contract (TrainerView): {'; '.join(found)}")
    if data_kind is not None:
        check_data_kind(manager, names, data_kind)
    try:  # a hook that reads an option its declaration refuses: the same one-line error as resolve_options gives
        check_division_fields(manager, names, config)
        check_agreement(manager, names, "num_networks", config=config)
        num_networks = int(manager.hook.num_networks(config=config) or 1)
        check_agreement(manager, names, "training_passes", config=config, num_networks=num_networks)
        passes = manager.hook.training_passes(config=config, num_networks=num_networks) or [list(range(num_networks))]
    except OptionError as error:
        raise PluginError(str(error)) from error
    flat = [net for networks in passes for net in networks]
    if not flat or any(not 0 <= net < num_networks for net in flat):
        raise PluginError(f"training_passes {passes} must name networks in 0..{num_networks - 1}")
    options = resolve_options(manager.hook, names, config.options)
    return RunPlugins(
        names=tuple(names),
        manager=manager,
        options=options,
        num_networks=num_networks,
        passes=passes,
        provenance=plugin_provenance({name: manager.get_plugin(name) for name in names}),
    )


def check_data_kind(manager: pluggy.PluginManager, names: list[str], kind: str) -> None:
    """Refuse plugins that train on another kind of data than ``kind`` (a plugin without ``data_kind`` trains
    on pairs).

    Raises:
        PluginError: naming the plugins and the run's kind of data.
    """
    answers = hook_answers(manager, "data_kind")
    wrong = [name for name in names if (answers.get(name) or "pairs") != kind]
    if wrong:
        raise PluginError(
            f"Plugin(s) {wrong} do not train on {kind!r} data, which this run has "
            "(see each plugin's data_kind hook); name methods for this kind of data."
        )


def check_division_fields(manager: pluggy.PluginManager, names: list[str], config: Any) -> None:
    """Refuse plugins whose ``rectify`` or ``loss`` read fields the active ``divide`` / ``rectify`` do not provide.

    The active ``divide`` and ``rectify`` are those of the first named plugin implementing
    them (first result); fields come from the ``division_fields`` hook, and a stage whose
    provider does not declare its fields is not checked.

    Raises:
        PluginError: naming the reading plugin, the providing one and the missing fields.
    """
    fields: dict[str, Any] = {
        name: answer or {} for name, answer in hook_answers(manager, "division_fields", config=config).items()
    }

    def first(hook: str) -> str | None:
        implementing = {impl.plugin_name for impl in getattr(manager.hook, hook).get_hookimpls()}
        return next((name for name in names if name in implementing), None)

    def check(reader: str, hook: str, needs: str, provider: str | None, provided_by: str, kind: str) -> None:
        if reader not in fields or (provider is not None and provider not in fields):
            return
        have = set(fields[provider].get(kind, ())) if provider else set()
        missing = sorted(set(fields[reader].get(needs, ())) - have)
        if missing:
            source = f"the active {provided_by} ({provider}'s)" if provider else f"no active plugin's {provided_by}"
            raise PluginError(
                f"Plugins {' + '.join(names)} do not fit: {reader}'s {hook} reads {kind} field(s) {missing}, which "
                f"{source} does not provide; name {reader} first, or combine plugins that provide them"
            )

    divider, rectifier = first("divide"), first("rectify")
    if rectifier is not None:
        check(rectifier, "rectify", "needs_division", divider, "divide", "division")
    for impl in manager.hook.loss.get_hookimpls():
        check(impl.plugin_name, "loss", "needs_targets", rectifier, "rectify", "targets")


def hook_answers(manager: pluggy.PluginManager, hook: str, **kwargs: Any) -> dict[str, Any]:
    """Every registered plugin's own answer to ``hook`` called with ``kwargs``, by plugin name
    (also for a first-result hook, whose call would stop at the first answer)."""
    return {
        impl.plugin_name: impl.function(*[kwargs[arg] for arg in impl.argnames])
        for impl in getattr(manager.hook, hook).get_hookimpls()
    }


def check_agreement(manager: pluggy.PluginManager, names: list[str], hook: str, **kwargs: Any) -> None:
    """Refuse plugins that answer the first-result ``hook`` differently (``num_networks``, ``training_passes``).

    A first-result hook keeps the first named plugin's answer; a plugin that answered otherwise
    would run on a structure it does not expect (a joint update of every network on passes that
    train the networks in turn) and fail, or train wrongly, hours later.

    Raises:
        PluginError: naming the plugins and their answers.
    """
    answers = {name: answer for name, answer in hook_answers(manager, hook, **kwargs).items() if answer is not None}
    if len({repr(answer) for answer in answers.values()}) > 1:
        said = ", ".join(f"{name} {answers[name]!r}" for name in names if name in answers)
        raise PluginError(f"Plugins {' + '.join(names)} do not fit: they answer {hook} differently ({said})")


def plugin_model_defaults(hook: Any) -> dict[str, Any]:
    """The NCLConfig fields the active plugins ask for; where two disagree, the plugin named first wins."""
    merged: dict[str, Any] = {}
    for answer in reversed(hook.model_defaults()):
        merged.update(answer or {})
    return merged
