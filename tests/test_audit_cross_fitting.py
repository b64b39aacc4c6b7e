"""Cross-fitted audits (``hfncl audit --folds K``): each pair scored by a model that did not train on it, the
estimate read at the held-out lambda; the folds, the subsets and the refusals, and one tiny audit end to end."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from conftest import TINY_MODEL
from test_audit import AUDIT_TRAINING, EPOCHS

from hfncl import cli
from hfncl.audit import AuditError, audit, estimated_noise_rate
from hfncl.audit.calibration import HELD_OUT_LAMBDA, LAMBDA, PairPValues, storey_lambda
from hfncl.audit.cross_fitting import ImageSubset, held_out_p_values, image_folds
from hfncl.audit.data import AuditData
from hfncl.audit.table import model_verdicts


@dataclass
class FakeSplit:
    """A split of ``num_images`` images with 2 captions each; image i's input is filled with i."""

    num_images: int
    captions_per_image: int = 2
    split: str = "train"
    captions: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.captions = [f"caption {c}" for c in range(self.num_images * self.captions_per_image)]

    @property
    def num_captions(self) -> int:
        return len(self.captions)

    @property
    def image_shape(self) -> tuple[int, ...]:
        return (1, 3)

    def image_inputs(self, indices) -> np.ndarray:
        return np.asarray(indices, dtype=np.float32)[:, None, None] * np.ones((1, 1, 3), dtype=np.float32)


def test_an_image_subset_is_a_split_of_those_images_and_all_their_captions():
    subset = ImageSubset(FakeSplit(5), np.array([1, 3]))
    assert subset.num_images == 2 and subset.num_captions == 4 and subset.captions_per_image == 2
    assert subset.pairs.tolist() == [2, 3, 6, 7]
    assert list(subset.captions) == ["caption 2", "caption 3", "caption 6", "caption 7"]
    assert subset.image_inputs([1, 0, 1])[:, 0, 0].tolist() == [3.0, 1.0, 3.0]
    assert subset.image_shape == (1, 3) and subset.split == "train"


def test_folds_deal_every_image_once_in_near_equal_sorted_parts_the_same_way_for_a_seed():
    folds = image_folds(11, 3, seed=0)
    assert sorted(np.concatenate(folds).tolist()) == list(range(11))
    assert sorted(len(f) for f in folds) == [3, 4, 4] and all((np.diff(f) > 0).all() for f in folds)
    assert [f.tolist() for f in image_folds(11, 3, seed=0)] == [f.tolist() for f in folds]
    assert [f.tolist() for f in image_folds(11, 3, seed=1)] != [f.tolist() for f in folds]


@pytest.mark.parametrize(("images", "folds", "said"), [(10, 1, "at least 2 folds"), (5, 3, "5 images cannot")])
def test_folds_that_cannot_be_dealt_are_refused(images, folds, said):
    with pytest.raises(AuditError, match=said):
        image_folds(images, folds, seed=0)


def test_every_pair_is_scored_by_the_model_trained_on_all_the_other_folds():
    split = FakeSplit(9)
    data = AuditData(split, "precomp", None, None)  # type: ignore[arg-type]
    trained_on: list[set[int]] = []

    def train(part: AuditData, fold: int) -> int:
        assert fold == len(trained_on)  # the folds in order
        trained_on.append({int(i) for i in part.split.image_inputs(np.arange(part.split.num_images))[:, 0, 0]})
        return fold  # the fold's number stands for the trained method

    def score(model: int, fold: ImageSubset) -> PairPValues:
        images = set(fold.images.tolist())
        assert not images & trained_on[model] and images | trained_on[model] == set(range(9))
        value = np.full(fold.num_captions, float(model))
        return PairPValues(value, value + 10, value + 20, value + 30)

    p_values, models = held_out_p_values(data, image_folds(9, 3, seed=0), train, score)  # type: ignore[arg-type]
    assert models == [0, 1, 2]
    folds = image_folds(9, 3, seed=0)
    expected = np.empty(18)
    for number, fold in enumerate(folds):
        expected[(fold[:, None] * 2 + np.arange(2)).reshape(-1)] = number
    assert p_values.image.tolist() == expected.tolist() and p_values.caption.tolist() == (expected + 10).tolist()
    assert p_values.similarity_t2i.tolist() == (expected + 20).tolist()
    assert p_values.similarity_i2t.tolist() == (expected + 30).tolist()


def test_held_out_p_values_flag_by_storeys_estimate_at_the_held_out_lambda():
    image = np.array([0.9, 0.8, 0.6, 0.4, 0.3, 0.2, 0.1, 0.04, 0.03, 0.01])
    caption = np.array([0.7, 0.9, 0.55, 0.6, 0.1, 0.2, 0.02, 0.01, 0.02, 0.01])
    values = PairPValues(image, caption, -image, -caption)
    held = model_verdicts(values, held_out=True)
    # above 0.5: 3 image p-values and 4 caption ones; (3 + 4) / 2 / (10 * (1 - 0.5)) = 0.7 -> 7 pairs flagged
    assert HELD_OUT_LAMBDA == 0.5 and storey_lambda(True) == 0.5 and storey_lambda(False) == LAMBDA
    assert held["flagged"].sum() == 7 and held["held_out"].all()
    # in-sample, lambda 0.05: 7 image and 6 caption p-values exceed it; 6.5 / 9.5 = 0.684 -> 7 pairs
    in_sample = model_verdicts(values)
    assert in_sample["flagged"].sum() == round(6.5 / 9.5 * 10) and not in_sample["held_out"].any()
    assert held["rank"].tolist() == in_sample["rank"].tolist()  # the order is the p-values', whatever lambda


def test_folds_with_a_trained_model_or_below_one_are_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(AuditError, match="give no model"):
        audit(tmp_path, output_dir=tmp_path / "out", model=tmp_path, folds=2)
    with pytest.raises(AuditError, match="folds must be a positive integer"):
        audit(tmp_path, ["ncr"], tmp_path / "out", folds=0)
    command = ["audit", "--data-dir", str(tmp_path), "--output-dir", str(tmp_path / "out"), "--folds", "0"]
    assert cli.main(command) == 1
    err = capsys.readouterr().err
    assert err.startswith("hfncl: error: folds must be a positive integer") and err.count("\n") == 1


def test_more_folds_than_half_the_images_are_refused_before_training(noisy_data, tmp_path):
    with pytest.raises(AuditError, match="cannot be dealt into 1000 folds"):
        audit(noisy_data[0], ["ncr"], tmp_path / "out", EPOCHS, model_args=TINY_MODEL, folds=1000)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_cross_fitted_audit_holds_out_every_pair_and_finds_the_wrong_ones(noisy_data, tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        table = audit(
            noisy_data[0], ["ncr"], tmp_path / "out", EPOCHS, model_args=TINY_MODEL, training=AUDIT_TRAINING,
            progress=False, folds=2,
        )
    finally:
        torch.set_num_threads(threads)
    wrong = noisy_data[1]
    assert all(table["held_out"]) and len(table) == len(wrong)
    rate = estimated_noise_rate(table)
    assert rate.rate == pytest.approx(
        (np.mean(np.asarray(table["p_image"]) > 0.5) + np.mean(np.asarray(table["p_caption"]) > 0.5)) / 2 / 0.5
    )
    ranked_first = np.asarray(table["rank"]) <= wrong.sum()
    # each fold's tiny model trains on 80 images: the first ranks are 0.59 wrong here (in-sample 0.65), chance 0.30
    assert wrong[ranked_first].mean() >= 0.5
