"""benchmarks/audit.py: the audited method and its schedule from the command line."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import benchmark_module, untrained_model

from hfncl.audit.training import (
    audit_settings,
    default_plugins,
    method_settings,
    read_split,
    save_trained,
    train_scorer,
)
from hfncl.data import read_captions


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
    # the default audit is the measured one: `hfncl audit` alone trains GSC for the 20 epochs of the proxy's rows
    assert audit_settings(default_plugins(), None, 0, False, None).to_dict() == config.to_dict()


def test_the_oracles_of_the_same_noise_score_the_copy_and_other_noise_is_refused(
    audit_benchmark, tiny_data_dir, tmp_path
):
    from oracle import clean_caption_mask  # benchmarks/ is on the path once benchmark_module imported the script

    copy = tmp_path / "run" / "data"
    wrong = audit_benchmark.noisy_copy(tiny_data_dir, copy, 0.5, seed=0)
    captions = list(read_captions(tiny_data_dir / "train_caps.txt"))
    dim = np.load(tiny_data_dir / "train_ims.npy", mmap_mode="r").shape[-1]
    oracles = tmp_path / "accuracy"
    for name in ("oracle_noise50_seed0", "oracle_(gsc)_noise50_seed0", "oracle_noise50_seed1", "oracle_noise20_seed0"):
        untrained_model(oracles / name / "best", captions, dim)
    rows = audit_benchmark.oracle_rows(oracles, tiny_data_dir, copy, 0.5, 0, wrong)
    assert [row["row"] for row in rows] == ["oracle (gsc)", "oracle (vsepp)"]  # of this ratio and seed only
    for row in rows:
        assert 0 <= row["estimate"] <= 1 and row["flagged"] == round(row["estimate"] * len(wrong))
        assert 0 <= row["precision_at_true"] <= 1 and row["train_s"] is None
    table = audit_benchmark.markdown([{**row, "benchmark": "tiny", "true_rate": 0.5} for row in rows], "header")
    assert "| tiny | 50.0% | oracle (gsc) |" in table and table.count("\n") == len(rows) + 3
    # the hidden mask the oracle's split was cut by, line for line
    clean = clean_caption_mask(tiny_data_dir, 0.5, 0)
    assert np.array_equal(~clean[audit_benchmark.noisy_lines(len(wrong) // 5, 5, 0.5, 0)], wrong)
    with pytest.raises(ValueError, match="trained on other pairs than"):
        audit_benchmark.oracle_rows(oracles, tiny_data_dir, copy, 0.5, 1, wrong)  # seed 1's oracles, seed 0's copy


def test_the_refit_row_trains_the_named_plugins_on_the_pairs_the_saved_audit_model_keeps(
    audit_benchmark, tiny_data_dir, tmp_path
):
    args = audit_benchmark.parse_args(["--refit", "vsepp", "--refit-settings", '{"epochs": 1}'])
    assert args.refit == ["vsepp"] and args.refit_settings == {"epochs": 1}
    run_dir = tmp_path / "run"
    wrong = audit_benchmark.noisy_copy(tiny_data_dir, run_dir / "data", 0.5, seed=0)
    model = audit_benchmark.QUICK_MODEL
    fast = {"batch_size": 32, "learning_rate": 2e-3}
    audited = train_scorer(read_split(run_dir / "data", "train", model, ["vsepp"]),
                           method_settings(["vsepp"], 3, 0, False, fast), model)
    save_trained(audited, run_dir / "model")  # stands for the audited model the run saved
    row = audit_benchmark.refit_row(run_dir, wrong, model, ["ncr"], ["vsepp"], 1, 0, fast)
    assert row["row"] == "audit (ncr), refit (vsepp)" and 0 <= row["estimate"] <= 1
    assert row["flagged"] == round(row["estimate"] * len(wrong)) and row["train_s"] > 0
    saved = np.load(run_dir / "refit_vsepp_p_values.npz")
    assert saved["wrong"].tolist() == wrong.tolist() and 0 < saved["first_flagged"].sum() < len(wrong)
    assert (run_dir / "training" / "refit_vsepp").is_dir()  # the refit's checkpoints, for --resume
