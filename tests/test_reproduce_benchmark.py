"""benchmarks/reproduce.py: the papers' numbers read from docs/reproduction.md, and a recipe run beside them."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import BENCHMARKS, benchmark_module


@pytest.fixture()
def reproduce():
    return benchmark_module("reproduce")


def test_every_recipe_line_of_the_doc_gives_its_numbers(reproduce):
    numbers = reproduce.paper_numbers()
    assert numbers["ncr_f30k"] == {0.0: 502.7, 0.2: 496.7, 0.5: 482.8}
    assert numbers["gsc_coco"] == {0.2: 525.7, 0.4: 519.9, 0.6: 511.7}
    assert numbers["ncr_cc152k"] == {None: 355.6} and numbers["tcvse_f30k"] == {0.0: 509.3}
    assert numbers["ugncl_f30k"] == {0.2: 505.6, 0.5: 488.9, 0.7: 470.8}
    assert numbers["gsc_cc152k"] == {None: 375.1} and numbers["ugncl_cc152k"] == {None: 373.1}
    assert numbers["tcvse_coco"] == {0.0: 526.3} and numbers["tcvse_f30k_bert"] == {0.0: 523.7}
    assert numbers["tcvse_coco_bert"] == {0.0: 533.9}
    assert numbers["vsepp_f30k"] == {} and numbers["dmcm_wiki"] == {}  # mAP, no rSum
    assert numbers["ncr_scan_f30k"] == {}  # NCR-SCAN: a plot only


def test_a_line_in_no_known_form_is_refused(reproduce, tmp_path):
    doc = tmp_path / "reproduction.md"
    doc.write_text("## recipes/x.py\n\nPaper's reported numbers: rSum 500 somewhere.\n")
    with pytest.raises(ValueError, match="x: no rSum in a known form"):
        reproduce.paper_numbers(doc)
    doc.write_text("## recipes/x.py\n\nPaper's reported numbers: rSum: 500.0 / 490.0 at 20% noise.\n")
    with pytest.raises(ValueError, match="2 rSum values for 1 noise ratios"):
        reproduce.paper_numbers(doc)


def test_runs_a_recipe_and_prints_its_rsum_beside_the_papers(reproduce, tiny_data_dir, tmp_path, capsys):
    recipe_args = ["--similarity", "cosine", "--embed-dim", "32", "--word-dim", "16", "--epochs", "2"]
    recipe_args += ["--warmup-epochs", "1", "--lr-decay-epochs", "1", "--batch-size", "32", "--no-progress"]
    argv = ["--recipe", "ncr_f30k", "--data-dir", str(tiny_data_dir), "--noise-ratio", "0.5", "--launcher", "python"]
    assert reproduce.main(argv + ["--output-dir", str(tmp_path), "--", *recipe_args]) == 0
    rsum = json.loads((tmp_path / "ncr_f30k_50" / "results.json").read_text())["test"]["rsum"]
    assert f"| ncr_f30k | 50% | 482.8 | {rsum:.1f} | {rsum - 482.8:+.1f} |" in capsys.readouterr().out
    (row,) = json.loads((tmp_path / "reproduction.json").read_text())
    assert row["paper_rsum"] == 482.8 and row["command"][:2] == [
        sys.executable,
        str(BENCHMARKS.parent / "recipes" / "ncr_f30k.py"),
    ]
