"""Refit audits (``hfncl audit --refit``): every pair scored by a second model trained only on the pairs the first
verdict keeps, the estimate read at the held-out lambda; the pair subset, the held-out pairs, the refusals, and one
tiny audit end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL
from test_audit import AUDIT_TRAINING, EPOCHS
from test_audit_cross_fitting import FakeSplit

import hfncl.audit.refit as refit_module
from hfncl import cli
from hfncl.audit import AuditError, audit, estimated_noise_rate
from hfncl.audit.calibration import HELD_OUT_LAMBDA, PairPValues, storey_noise_rate
from hfncl.audit.data import AuditData
from hfncl.audit.refit import PairSubset, kept_pairs, refit_p_values
from hfncl.audit.table import model_verdicts

REFIT_EPOCHS = 6
REFIT_TRAINING = {"batch_size": 32, "learning_rate": 2e-3, "lr_decay_epochs": []}
"""A plain triplet model that learns the tiny benchmark's kept pairs in seconds."""


def test_a_pair_subset_is_a_split_of_those_pairs_with_one_image_each():
    subset = PairSubset(FakeSplit(5), np.array([1, 2, 7]))  # 2 captions per image: pairs 1, 2, 7 show images 0, 1, 3
    assert subset.num_images == subset.num_captions == 3 and subset.captions_per_image == 1
    assert list(subset.captions) == ["caption 1", "caption 2", "caption 7"]
    assert subset.image_inputs([2, 0, 1, 2])[:, 0, 0].tolist() == [3.0, 0.0, 1.0, 3.0]
    assert subset.image_shape == (1, 3) and subset.split == "train"


def test_the_kept_pairs_are_the_unflagged_ones_and_none_kept_is_refused():
    data = AuditData(FakeSplit(3), "precomp", None, None)  # type: ignore[arg-type]
    kept = kept_pairs(data, np.array([True, False, False, True, False, True]))
    assert kept.split.pairs.tolist() == [1, 2, 4] and kept.format_name == "precomp"
    with pytest.raises(AuditError, match="every pair of split 'train' is flagged: no pair is left to refit on"):
        kept_pairs(data, np.ones(6, dtype=bool))


def test_the_refit_trains_on_the_kept_pairs_and_scores_every_pair_holding_out_the_flagged(monkeypatch):
    split = FakeSplit(4)
    data = AuditData(split, "precomp", None, None)  # type: ignore[arg-type]
    flagged = np.array([False, True, False, False, True, True, False, False])
    trained_on: list[list[str]] = []

    def train(kept: AuditData) -> str:
        trained_on.append(list(kept.split.captions))
        return "refit model"

    def score(model: str, scored) -> PairPValues:
        assert model == "refit model" and scored is split  # every pair of the split, ranked among all of it
        value = np.linspace(0.1, 0.8, 8)
        return PairPValues(value, value + 0.1, -value, -value)

    monkeypatch.setattr(refit_module, "fold_p_values", score)
    trained = type("Trained", (), {"data": data})()
    rescored = refit_p_values(trained, flagged, train)  # type: ignore[arg-type]
    assert trained_on == [["caption 0", "caption 2", "caption 3", "caption 6", "caption 7"]]
    assert rescored.refit and rescored.read_as_held_out
    assert rescored.held_out.tolist() == flagged.tolist() and rescored.held_out is not flagged
    assert rescored.p_values.image.tolist() == np.linspace(0.1, 0.8, 8).tolist()


def test_a_refit_s_p_values_flag_at_the_held_out_lambda_though_only_some_pairs_are_held_out():
    image = np.array([0.9, 0.8, 0.6, 0.4, 0.3, 0.2, 0.1, 0.04, 0.03, 0.01])
    caption = np.array([0.7, 0.9, 0.55, 0.6, 0.1, 0.2, 0.02, 0.01, 0.02, 0.01])
    values = PairPValues(image, caption, -image, -caption)
    some = np.arange(10) < 3
    refit = model_verdicts(values, held_out=some, refit=True)
    # above 0.5: 3 image p-values and 4 caption ones; (3 + 4) / 2 / (10 * (1 - 0.5)) = 0.7 -> 7 pairs flagged
    assert refit["flagged"].sum() == 7 and refit["held_out"].tolist() == some.tolist() and refit["refit"].all()
    # some pairs held out, no refit: in-sample, lambda 0.05: (7 + 6) / 2 / 9.5 = 0.684 -> 7 pairs
    partly = model_verdicts(values, held_out=some)
    assert partly["flagged"].sum() == round(6.5 / 9.5 * 10) and not partly["refit"].any()
    assert refit["rank"].tolist() == partly["rank"].tolist()


def test_a_refit_with_a_trained_model_or_with_folds_is_refused_before_anything_runs(noisy_data, tmp_path, capsys):
    with pytest.raises(AuditError, match="a refit trains on the pairs the audited method keeps: give the plugins"):
        audit(tmp_path, output_dir=tmp_path / "out", model=tmp_path, refit=["vsepp"])
    with pytest.raises(AuditError, match="cross-fitting .* and a refit both hold pairs out: choose one"):
        audit(noisy_data[0], ["ncr"], tmp_path / "out", EPOCHS, model_args=TINY_MODEL, folds=2, refit=True)
    command = ["audit", "--data-dir", str(noisy_data[0]), "--output-dir", str(tmp_path / "out"), "--plugins", "ncr",
               "--folds", "2", "--refit"]
    assert cli.main(command) == 1
    err = capsys.readouterr().err
    assert "a refit both hold pairs out" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_the_command_line_passes_the_refit_on(monkeypatch, tmp_path):
    seen: list[dict] = []

    def run_audit(*args, **kwargs):
        seen.append(kwargs)
        raise AuditError("stop")

    monkeypatch.setattr("hfncl.audit.run_audit", run_audit)
    base = ["audit", "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "out")]
    for extra, refit, epochs in ([], False, None), (["--refit"], True, None), (["--refit", "vsepp", "--refit-epochs",
                                                                                "3"], ["vsepp"], 3):
        assert cli.main(base + extra) == 1
        assert seen[-1]["refit"] == refit and seen[-1]["refit_epochs"] == epochs


@pytest.mark.slow
def test_a_refit_audit_scores_every_pair_with_a_model_of_the_kept_pairs_and_finds_the_wrong_ones(
    noisy_data, tmp_path, monkeypatch
):
    import hfncl.audit as audit_package

    kept_captions: list[int] = []
    train_scorer = audit_package.train_scorer

    def recorded(kept, config, *args, **kwargs):
        kept_captions.append(kept.split.num_captions)
        assert config.plugins == ["vsepp"] and config.epochs == REFIT_EPOCHS and config.batch_size == 32
        return train_scorer(kept, config, *args, **kwargs)

    monkeypatch.setattr(audit_package, "train_scorer", recorded)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        table = audit(
            noisy_data[0], ["ncr"], tmp_path / "out", EPOCHS, model_args=TINY_MODEL, training=AUDIT_TRAINING,
            progress=False, refit=["vsepp"], refit_epochs=REFIT_EPOCHS, refit_training=REFIT_TRAINING,
        )
    finally:
        torch.set_num_threads(threads)
    wrong = noisy_data[1]
    held_out = np.asarray(table["held_out"])
    assert all(table["refit"]) and len(table) == len(wrong)
    assert kept_captions == [len(wrong) - held_out.sum()] and 0 < held_out.sum() < len(wrong)
    p_image, p_caption = np.asarray(table["p_image"]), np.asarray(table["p_caption"])
    assert estimated_noise_rate(table).rate == pytest.approx(storey_noise_rate(p_image, p_caption, HELD_OUT_LAMBDA))
    assert np.count_nonzero(table["flagged"]) == round(estimated_noise_rate(table).rate * len(wrong))
    assert wrong[held_out].mean() > wrong.mean() + 0.05  # the first verdict's flags, held out: 0.41 wrong here
    ranked_first = np.asarray(table["rank"]) <= wrong.sum()
    assert wrong[ranked_first].mean() >= 0.5  # 0.54 here, chance 0.30 (the tiny refit estimates 51% for 29.8%)
    assert "clean_prob" in table.column_names  # the audited method's verdicts stay
    assert not Path(tmp_path / "out" / "training").exists() and (tmp_path / "out" / "model").is_dir()
