"""benchmarks/audit.py: the audited method and its schedule from the command line."""

from __future__ import annotations

import pytest
from conftest import benchmark_module

from hfncl.audit.training import audit_settings


@pytest.fixture(scope="module")
def audit_benchmark():
    return benchmark_module("audit")


def test_plugins_and_settings_name_the_audited_method_and_lengthen_its_schedule(audit_benchmark):
    args = audit_benchmark.parse_args(["--benchmark", "proxy", "--plugins", "gsc", "--settings", '{"epochs": 20}'])
    assert args.plugins == ["gsc"] and args.settings == {"epochs": 20}
    config = audit_settings(args.plugins, None, 0, False, args.settings)
    # GSC's demo settings (8 epochs, 2 of warmup, no decay) for 20 epochs, as `hfncl audit --plugins gsc --epochs 20`
    assert (config.plugins, config.epochs, config.warmup_epochs, config.lr_decay_epochs) == (["gsc"], 20, 2, [])
    assert audit_settings(["gsc"], 20, 0, False, None).to_dict() == config.to_dict()
    defaults = audit_benchmark.parse_args([])
    assert defaults.plugins is None and defaults.settings is None  # hfncl audit's default method, its own settings
