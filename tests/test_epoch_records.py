"""What an epoch's record and a run's results say: per-network loss means, the noise ratio of a noise file."""

from __future__ import annotations

import json

import pytest
from conftest import TINY_MODEL, tiny_config

from hfncl.engine.trainer import Trainer
from hfncl.experiment import DataArguments, run_experiment
from hfncl.tasks.pair_data import effective_noise_ratio, prepare_data


def test_each_network_s_loss_is_the_mean_over_its_own_pass(micro_data_dir, tmp_path, monkeypatch):
    """Two networks trained in turn (GSC): each term is averaged over its network's steps, not both networks'."""
    logged: list[dict[str, float]] = []
    original_step = Trainer._step

    def recording_step(self, batch, networks):
        values = original_step(self, batch, networks)
        logged.append(values)
        return values

    monkeypatch.setattr(Trainer, "_step", recording_step)
    result = run_experiment(
        DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.4),
        tiny_config(tmp_path, ["gsc"], epochs=1, warmup_epochs=1, lr_decay_epochs=[], batch_size=16),
        TINY_MODEL,
    )
    [epoch] = result["history"]
    assert len(logged) == 10  # 80 pairs / 16 = 5 steps per network
    for name in ("gsc_cross_modal/net0", "gsc_cross_modal/net1", "gsc_intra_modal/net1"):
        values = [step[name] for step in logged if name in step]
        assert len(values) == 5
        assert epoch[f"train/{name}"] == pytest.approx(sum(values) / 5)


def _index_file(data_dir, tmp_path, ratio: float) -> str:
    prepare_data(DataArguments(data_dir=str(data_dir), noise_ratio=ratio), tmp_path / f"made-{ratio}")
    return str(tmp_path / f"made-{ratio}" / "noise_index.npy")


def test_a_noise_file_s_measured_ratio_is_recorded_and_a_disagreeing_ratio_refused(micro_data_dir, tmp_path):
    noise_file = _index_file(micro_data_dir, tmp_path, 0.4)
    alone = DataArguments(data_dir=str(micro_data_dir), noise_file=noise_file)
    data = prepare_data(alone, tmp_path / "alone")
    measured = float(1.0 - data.train.clean_mask.mean())
    assert 0.3 < measured <= 0.4
    assert effective_noise_ratio(alone, data.train) == measured
    agreeing = DataArguments(data_dir=str(micro_data_dir), noise_file=noise_file, noise_ratio=round(measured, 2))
    assert effective_noise_ratio(agreeing, prepare_data(agreeing, tmp_path / "agree").train) == measured
    with pytest.raises(ValueError, match=r"noise_ratio 0\.2 disagrees with noise_file .*wrong pairs"):
        prepare_data(
            DataArguments(data_dir=str(micro_data_dir), noise_file=noise_file, noise_ratio=0.2), tmp_path / "no"
        )
    generated = DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.2)
    assert effective_noise_ratio(generated, prepare_data(generated, tmp_path / "gen").train) == 0.2


def test_results_json_records_the_noise_file_and_its_ratio(micro_data_dir, tmp_path):
    noise_file = _index_file(micro_data_dir, tmp_path, 0.4)
    result = run_experiment(
        DataArguments(data_dir=str(micro_data_dir), noise_file=noise_file),
        tiny_config(tmp_path / "run", ["vsepp"], epochs=1, warmup_epochs=0, lr_decay_epochs=[], batch_size=16),
        TINY_MODEL,
    )
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["noise_file"] == noise_file
    assert saved["noise_ratio"] == result["true_noise_ratio"] > 0.3
