"""The papers' headline behaviour, reproduced at small scale on the generated benchmark.

NCR (Huang et al. 2021, Table 1 and Fig. 3b): under 50% caption-level noise, a
hardest-negative triplet baseline collapses while NCR keeps most of its accuracy,
because the per-sample loss after warmup separates clean from noisy pairs.
"""

from __future__ import annotations

import pytest

from hfncl.data.synthetic import SyntheticConfig
from hfncl.demo import demo_runs, run_demo

SMALL_BENCHMARK = SyntheticConfig(num_train=1500, num_dev=300, num_test=500)


@pytest.mark.slow
def test_hard_negatives_collapse_under_noise_while_ncr_holds(tmp_path):
    runs = demo_runs((0.0, 0.5), ["vsepp"]) + demo_runs((0.5,), ["ncr"])
    results = {(r["label"], r["noise_ratio"]): r for r in run_demo(tmp_path, runs, SMALL_BENCHMARK, progress=False)}
    clean = results[("vsepp", 0.0)]["test"]["rsum"]
    vsepp = results[("vsepp", 0.5)]["test"]["rsum"]
    ncr = results[("ncr", 0.5)]
    print({"vsepp clean": clean, "vsepp 50%": vsepp, "ncr 50%": ncr["test"]["rsum"]})
    assert vsepp <= 0.7 * clean, "the hardest-negative baseline should lose at least 30% of its clean rSum"
    assert ncr["test"]["rsum"] >= vsepp + 0.15 * clean, "NCR should beat the baseline by a wide margin"
    warmup = runs[-1].settings["warmup_epochs"]
    first_division = ncr["history"][warmup]
    assert first_division["division/net0/auc"] >= 0.9 and first_division["division/net1/auc"] >= 0.9
