"""Typed plugin options (hfncl.options): types, bounds, choices and full names, checked by the core."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from hfncl.config import TrainConfig
from hfncl.options import MethodOptions, OptionError, option
from hfncl.plugin_setup import run_plugins
from hfncl.plugins import PluginError, build_plugin_manager, resolve_options


@dataclass(frozen=True)
class ExampleOptions(MethodOptions, namespace="example"):
    rate: float = option(0.5, minimum=0, exclusive_maximum=1)
    steps: int = option(3, minimum=1)
    switch: bool = True
    kind: str = option("a", choices=("a", "b"))
    known: float | None = None


def test_defaults_and_values_go_by_full_name():
    assert ExampleOptions.defaults() == {
        "example.rate": 0.5, "example.steps": 3, "example.switch": True, "example.kind": "a", "example.known": None,
    }
    read = ExampleOptions.read({"example.rate": 0, "example.kind": "b", "example.known": 2, "other.x": 1})
    assert read == ExampleOptions(rate=0.0, steps=3, switch=True, kind="b", known=2.0)
    assert isinstance(read.rate, float) and read.by_full_name()["example.kind"] == "b"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("example.rate", 1.0, "Option 'example.rate' must be < 1, got 1.0"),
        ("example.rate", "x", "Option 'example.rate' must be a finite number like its default 0.5, got 'x' (str)"),
        ("example.rate", True, "must be a finite number"),
        ("example.steps", 2.5, "Option 'example.steps' must be an integer like its default 3, got 2.5 (float)"),
        ("example.steps", 0, "Option 'example.steps' must be >= 1, got 0"),
        ("example.switch", 1, "Option 'example.switch' must be true or false"),
        ("example.kind", "c", "Option 'example.kind' must be one of ('a', 'b'), got 'c'"),
        ("example.known", "x", "Option 'example.known' must be a finite number, got 'x' (str)"),
    ],
)
def test_a_refused_value_names_the_option_the_value_and_what_was_expected(name, value, message):
    with pytest.raises(OptionError, match=re.escape(message)):
        ExampleOptions.read({name: value})


def test_the_core_checks_every_active_plugin_s_options_before_training():
    hook = build_plugin_manager(["ncr", "gsc_intra"]).hook
    resolved = resolve_options(hook, ["ncr", "gsc_intra"], {"ncr.alpha": 1, "gsc_intra.gamma": 0.5})
    assert resolved["ncr.alpha"] == 1.0 and resolved["ncr.curve"] == 10.0 and resolved["gsc_intra.gamma"] == 0.5
    with pytest.raises(PluginError, match=r"^Option 'ncr.division_statistics' must be one of \('pass', 'steps'\)"):
        resolve_options(hook, ["ncr"], {"ncr.division_statistics": "both"})
    with pytest.raises(PluginError, match=r"Unknown option\(s\) \['ncr.alfa'\]"):
        resolve_options(hook, ["ncr"], {"ncr.alfa": 0.2})


def test_an_option_that_a_setup_hook_reads_and_refuses_is_a_plugin_error_naming_it():
    """GSC's ``num_networks`` reads its options while the plugins are set up, before the options are resolved."""
    with pytest.raises(PluginError, match=r"gsc\.dual"):
        run_plugins(TrainConfig(plugins=["gsc"], options={"gsc.dual": "no"}))
