"""Argument parsing shared by the scripts in ``recipes/``: one method x one dataset each.

Every recipe (and ``hfncl train``) also reads ``--config FILE``, a YAML or JSON mapping of
any of its fields (a flag's name, aliases included); the recipe's defaults yield to the
file and the file to the flags. A run saves its effective configuration as
``OUTPUT_DIR/run_config.yaml``, which ``--config`` reads back to repeat it.

The arguments are parsed and checked, the plugin names against the installed entry points too,
before the training code (torch, Accelerate, transformers, the plugins) is imported: ``--help``
and a wrong flag, value or plugin name answer at once. A recipe that names its plugins imports
them first, for the kind of data they learn from; ``hfncl train``, which names none, parses the
pairs task's arguments.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

import yaml

from hfncl.arguments import ARGUMENTS_OF_KIND, DataArguments, ModelArguments
from hfncl.config import RUN_ONLY_FIELDS, HeadOptionValues, PluginOptions, TrainConfig, one_line
from hfncl.dataclass_parser import DataclassArgumentParser
from hfncl.model_settings import FLAT_HEAD_FIELDS
from hfncl.plugin_setup import run_plugins
from hfncl.plugins import PluginError, check_plugin_names
from hfncl.training_aliases import add_field_aliases, alias_value

NOT_GIVEN = "(not given)"
"""What ``--print-config`` prints for a required field the command line and ``--config`` leave out."""


class OneLineErrorParser(DataclassArgumentParser):
    """A :class:`~hfncl.dataclass_parser.DataclassArgumentParser` whose errors (a flag's value of the wrong type, a
    missing required flag) are a ``ValueError`` the recipe prints on one line, like the dataclasses' own checks,
    instead of its usage."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with the description's own line breaks (recipes' command examples) and each option's
    default once: not appended where the help text already says its default, nor for ``None``."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text.lower() or action.default is None or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


def argument_types(plugins: list[str], listed: bool = False) -> tuple[type[Any], type[Any]]:
    """The data and model argument dataclasses of the task of the data the ``plugins`` learn from
    (:func:`hfncl.tasks.task_of_plugins`, which imports the plugins); the pairs task's, without importing
    anything, when no plugin is named. With ``listed`` (for ``--help``), the kind is read from the cached plugin
    listing (:func:`hfncl.plugin_listing.listed_plugins`), which imports neither the plugins nor torch once built.

    Raises:
        PluginError: a plugin cannot be imported, or answers a data kind no task handles.
    """
    if not plugins:
        return DataArguments, ModelArguments
    if listed:
        from hfncl.plugin_listing import listed_plugins

        kinds = {info.name: info.data_kind for info in listed_plugins() if info.error is None}
        if all(name in kinds for name in plugins) and kinds[plugins[0]] in ARGUMENTS_OF_KIND:
            return ARGUMENTS_OF_KIND[kinds[plugins[0]]]
    from hfncl.tasks import task_of_plugins

    task = task_of_plugins(plugins)
    return task.data_arguments, task.model_arguments


def run_recipe(
    description: str,
    plugins: list[str],
    defaults: dict[str, Any],
    argv: Sequence[str] | None = None,
    prog: str | None = None,
    paper: str | None = None,
) -> int:
    """Parse ``argv`` into data, training and model arguments with the recipe's defaults; train; print results.

    The data and model arguments are those of the task of the data the ``plugins`` learn
    from (:func:`hfncl.tasks.task_of_plugins`): image-caption pairs, or category-labelled
    features. ``defaults`` are values of those arguments and of TrainConfig that the recipe
    fixes unless the command line overrides them (the paper's settings for that dataset). Its
    ``options`` are plugin options the recipe sets, and its ``head_options`` the similarity head's: ``--options``
    and ``--head_options`` (or a ``--config`` file's) add to them and override them by name, rather than replacing
    them all. ``paper`` names the dataset the
    defaults are the paper's schedule for (a key of :data:`hfncl.data.check.EXPECTED`): training data under a
    tenth of its size starts with a line saying the schedule will not learn there, and the demo's settings that do.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    data_arguments, model_arguments = argument_types(plugins, listed="-h" in args or "--help" in args)
    parser = OneLineErrorParser(
        (data_arguments, TrainConfig, model_arguments),
        description=description,
        prog=prog,
        formatter_class=HelpFormatter,
    )
    parser.set_defaults(plugins=plugins, **defaults)
    add_field_aliases(parser)
    parser.add_argument(
        "--print-config",
        action="store_true",
        default=argparse.SUPPRESS,
        help="Print the effective settings (data, training, model, head and plugin options) as JSON and exit; needs "
        "no data.",
    )
    printing = "--print-config" in args
    if printing:
        args.remove("--print-config")
        for action in parser._actions:
            if action.required:  # printed as not given (the dataclass's type check refuses None for a string)
                action.required, action.default = False, NOT_GIVEN
    try:
        data_args, config, model_args = parse_with_config_file(parser, args)
        config.options = PluginOptions({**defaults.get("options", {}), **config.options})
        if defaults.get("head_options") and hasattr(model_args, "head_options"):
            model_args.head_options = HeadOptionValues({**defaults["head_options"], **(model_args.head_options or {})})
        check_plugin_names(config.plugins)  # before the plugins and the frameworks are imported
        if printing:
            print(json.dumps(effective_settings(data_args, config, model_args), indent=1, sort_keys=True))
            return 0
        if paper is not None and os.environ.get("RANK", "0") == "0":  # once under accelerate launch
            warning = small_data_warning(data_args, config.plugins, paper)
            if warning is not None:
                print(warning, flush=True)
        from hfncl.experiment import run_experiment, summary_line

        result = run_experiment(data_args, config, model_args)
    except (PluginError, ValueError, OSError) as error:  # a DataFormatError is a ValueError
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    print(summary_line(result, config.output_dir))
    return 0


def small_data_warning(data_args: Any, plugins: list[str], paper: str) -> str | None:
    """:func:`hfncl.data.check.paper_size_warning` of the run's training split, followed by the flags of the
    plugins' quick-demo settings (:data:`hfncl.demo.QUICK`), the schedule that learns on a few hundred images."""
    from hfncl.data.check import paper_size_warning

    line = paper_size_warning(data_args.data_dir, data_args.train_split, paper)
    if line is None:
        return None
    from hfncl.demo import QUICK, demo_runs, planned_runs

    try:
        (run, *_) = planned_runs(demo_runs(plugins=plugins[:1]), QUICK)
    except PluginError:
        return f"{line}; see hfncl demo --help for settings that learn on small data"
    flags = " ".join(f"--{name.replace('_', '-')} {_flag_value(value)}" for name, value in run.settings.items())
    return f"{line}; the demo's settings do (hfncl demo --plugins {run.plugin} trains them): {flags}"


def _flag_value(value: Any) -> str:
    """A setting as the command line takes it: a list space-separated, a mapping as quoted JSON."""
    if isinstance(value, dict):
        return f"'{json.dumps(value)}'"
    if isinstance(value, (list, tuple)):
        return " ".join(str(item) for item in value)
    return str(value)


def effective_settings(data_args: Any, config: TrainConfig, model_args: Any) -> dict[str, Any]:
    """What a run with these arguments trains with: data and training fields, the model's fields (for pairs, the
    plugins' ``model_defaults`` under explicit arguments), every option of the similarity head (declared defaults
    under ``--head_options``) and every plugin option (declared defaults under ``--options``)."""
    from hfncl.tasks import task_of_arguments

    plugins = run_plugins(config)
    model = task_of_arguments(data_args).model_settings(model_args, plugins)
    return {
        "data": asdict(data_args),
        "training": config.to_dict(),
        "model": model,
        "head_options": model.pop("head_options", {}),
        "options": plugins.options,
    }


def parse_with_config_file(parser: DataclassArgumentParser, argv: Sequence[str] | None = None) -> tuple[Any, ...]:
    """The parser's dataclasses from ``argv`` (default ``sys.argv[1:]``), with ``--config FILE``'s values as
    defaults that the other flags override. A mapping (``options``, ``head_options``) given in both is updated key
    by key (:func:`updated_mappings`): ``--config RUN/run_config.yaml --options '{"ncr.alpha": 0.3}'`` changes that
    one option and keeps the file's others, as a recipe's options are kept.

    Raises:
        ValueError: the file does not exist or is not a YAML or JSON mapping, names a field the parser does not
            have, or it or the command line gives one field under two names (``--batch_size`` and
            ``--per_device_train_batch_size``).
    """
    parser.add_argument(
        "--config",
        default=argparse.SUPPRESS,
        help="YAML or JSON file of any of these fields (e.g. a run's run_config.yaml); flags override it.",
    )
    before = argparse.ArgumentParser(add_help=False)
    before.add_argument("--config")
    known, rest = before.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    flags = [token.split("=", 1)[0].lstrip("-") for token in rest if token.startswith("--")]
    _refuse_two_names(flags, option_actions(parser), "the command line")
    if known.config is not None:
        values = config_file_values(parser, known.config)
        for action in parser._actions:
            if action.dest in values:
                action.required = False
        parser.set_defaults(**values)
        return updated_mappings(parser.parse_args_into_dataclasses(args=rest), values)
    return parser.parse_args_into_dataclasses(args=rest)


def updated_mappings(parsed: tuple[Any, ...], file_values: dict[str, Any]) -> tuple[Any, ...]:
    """``parsed`` with each mapping field the configuration file set updated by the command line's keys, in
    place: ``{**file, **flag}`` (unchanged where no flag was given, the parsed value then being the file's)."""
    for arguments in parsed:
        for name, value in vars(arguments).items():
            given = file_values.get(name)
            if isinstance(value, dict) and isinstance(given, dict):
                setattr(arguments, name, type(value)({**given, **value}))
    return parsed


def config_file_values(parser: argparse.ArgumentParser, path: str | Path) -> dict[str, Any]:
    """The values of a YAML or JSON configuration file, by the parser's destination names.

    A key is a flag's name without its dashes (``epochs``, ``num_train_epochs``, ``data-dir``).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--config {path}: no such file" + (" (it is a directory)" if path.is_dir() else ""))
    if path.suffix not in (".yaml", ".yml", ".json"):
        raise ValueError(f"--config {path}: expected a .yaml, .yml or .json file")
    text = path.read_text()
    try:
        content = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise ValueError(f"--config {path}: not valid {path.suffix[1:].upper()}: {one_line(error)}") from error
    if not isinstance(content, dict):
        raise ValueError(f"--config {path}: expected a mapping of field names to values, got {type(content).__name__}")
    content = _without_flat_head_fields(path, content)
    actions = option_actions(parser)
    unknown = [str(key) for key in content if str(key).replace("-", "_") not in actions]
    if unknown:
        raise ValueError(f"--config {path}: unknown field(s) {_with_suggestions(sorted(unknown), list(actions))}")
    _refuse_two_names([str(key) for key in content], actions, f"--config {path}")
    values = {}
    for key, value in content.items():
        action = actions[str(key).replace("-", "_")]
        try:
            values[action.dest] = alias_value(action, value)
        except ValueError as error:
            raise ValueError(f"--config {path}: {error}") from None
    return _without_run_only_fields(path, values)


def _without_flat_head_fields(path: Path, content: dict[Any, Any]) -> dict[Any, Any]:
    """``content`` without the heads' flat fields of a configuration written before ``head_options``
    (:data:`~hfncl.model_settings.FLAT_HEAD_FIELDS`), each left unset (``null``) there.

    Raises:
        ValueError: one of them is set; its value belongs in ``head_options`` under the head's name.
    """
    given = sorted(str(key) for key, value in content.items() if key in FLAT_HEAD_FIELDS and value is not None)
    if given:
        raise ValueError(
            f"--config {path}: field(s) {', '.join(given)} are a head's options now: give them as head_options, "
            f"e.g. head_options: {{\"sgr.sim_dim\": 256}} (`hfncl plugins --heads` lists each head's)"
        )
    return {key: value for key, value in content.items() if key not in FLAT_HEAD_FIELDS}


def option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's actions by long flag name without dashes (``epochs``, ``num_train_epochs``, ``bf16``); not
    ``--help``, ``--config`` nor the ``--no_X`` complements of boolean fields."""
    return {
        option.lstrip("-").replace("-", "_"): action
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._StoreFalseAction)) and action.dest != "config"
        for option in action.option_strings
        if option.startswith("--")
    }


def _refuse_two_names(names: Sequence[str], actions: dict[str, argparse.Action], where: str) -> None:
    """Refuse one field given under two of its names in ``where`` (``--epochs`` and ``--num_train_epochs``,
    ``--bf16`` and ``--fp16``): which one should win is not for hfncl to guess."""
    by_field: dict[str, list[str]] = {}
    for name in dict.fromkeys(name.replace("-", "_") for name in names):
        if name in actions:
            by_field.setdefault(actions[name].dest, []).append(name)
    for field_name, given in by_field.items():
        if len(given) > 1:
            raise ValueError(
                f"{where} gives {field_name} twice, as {' and '.join(given)}: give one of them "
                "(TrainingArguments' names are aliases of hfncl's fields)"
            )


def _with_suggestions(unknown: list[str], known: Sequence[str]) -> str:
    """``unknown`` field names, each with the closest known one (``'epochz' (did you mean 'epochs'?)``)."""
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name.replace("-", "_"), known, n=1)
        named.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ", ".join(named) + "; the fields are the flags of --help"


def _without_run_only_fields(path: Path, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without the fields of :data:`hfncl.config.RUN_ONLY_FIELDS` at their defaults (a run_config.yaml
    written before they were left out holds them so).

    Raises:
        ValueError: the file sets one (``overwrite_output_dir: true``): a file that repeats a run never replaces or
            resumes a directory; that is the command line's to ask.
    """
    for name in RUN_ONLY_FIELDS:
        if values.get(name) not in (None, False):
            flag = name if name != "resume_from_checkpoint" else f"{name} {values[name]}"
            raise ValueError(
                f"--config {path}: {name} is not a setting of the run but of one command: give --{flag} on the "
                "command line instead"
            )
        values.pop(name, None)
    return values
