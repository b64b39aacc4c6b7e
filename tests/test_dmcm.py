"""DMCM's pieces against hand-computed values: Eq. 6 mixing, Eq. 7 contrastive loss, the division, the CE baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _shared_data import shared_data_dir

from hfncl.config import TrainConfig
from hfncl.equations.label_losses import multimodal_contrastive_loss
from hfncl.experiment import run_experiment
from hfncl.options import OptionError
from hfncl.tasks.labels import CategoryModelArguments, LabelDataArguments
from hfncl.types import CategoryOutputs
from hfncl_plugins import dmcm, prototype_ce


def test_mixing_follows_eq6_with_the_only_clean_partner():
    # One clean sample per modality: every noisy sample's partner is forced, so x' and q' are known.
    batch = {
        "image": torch.tensor([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0]]),
        "text": torch.tensor([[3.0], [5.0], [7.0]]),
        "image_label": torch.tensor([0, 1, 2]),
        "text_label": torch.tensor([2, 2, 1]),
        "index": torch.tensor([10, 11, 12]),
    }
    clean = {"image": torch.tensor([True, False, False]), "text": torch.tensor([False, False, True])}
    mixed, targets = dmcm.mix_batch(batch, clean, num_classes=3, lam=0.25, generator=torch.Generator().manual_seed(0))
    # image: rows 1 and 2 mixed with row 0 (x = [1, 0], q = e0)
    assert torch.allclose(mixed["image"], torch.tensor([[1.0, 0.0], [0.75, 0.5], [1.75, 1.0]]))
    assert torch.allclose(targets["image"], torch.tensor([[1.0, 0, 0], [0.75, 0.25, 0], [0.75, 0, 0.25]]))
    # text: rows 0 and 1 mixed with row 2 (x = 7, q = e1)
    assert torch.allclose(mixed["text"], torch.tensor([[0.25 * 3 + 0.75 * 7], [0.25 * 5 + 0.75 * 7], [7.0]]))
    assert torch.allclose(targets["text"], torch.tensor([[0, 0.75, 0.25], [0, 0.75, 0.25], [0, 1.0, 0]]))
    assert torch.equal(mixed["index"], batch["index"]) and torch.equal(mixed["image_label"], batch["image_label"])


def test_lambda_one_leaves_the_batch_unchanged():
    batch = {"image": torch.randn(4, 3), "text": torch.randn(4, 2), "image_label": torch.tensor([0, 1, 0, 1])}
    batch["text_label"], batch["index"] = batch["image_label"].clone(), torch.arange(4)
    clean = {m: torch.tensor([True, False, True, False]) for m in ("image", "text")}
    mixed, targets = dmcm.mix_batch(batch, clean, 2, 1.0, torch.Generator().manual_seed(1))
    assert torch.equal(mixed["image"], batch["image"]) and torch.equal(mixed["text"], batch["text"])
    assert torch.equal(targets["image"].argmax(1), batch["image_label"])


def test_contrastive_loss_eq7_by_hand():
    # Identical orthonormal embeddings in both modalities, tau2 = 1: for each of the 4 anchors the
    # positives sum to 2e and all candidates to 2e + 2, so L_c = -(1/2) * 4 * log(e / (e + 1)).
    z = torch.eye(2)
    expected = -2.0 * math.log(math.e / (math.e + 1))
    assert multimodal_contrastive_loss([z, z], tau2=1.0).item() == pytest.approx(expected, rel=1e-6)


def test_contrastive_loss_eq7_against_the_written_sums():
    rng = np.random.default_rng(0)
    zs = [rng.normal(size=(3, 4)) for _ in range(2)]
    tau2 = 0.7
    total = 0.0
    for i in range(2):
        for j in range(3):
            numerator = sum(math.exp(zs[m][j] @ zs[i][j] / tau2) for m in range(2))
            denominator = sum(math.exp(zs[m][t] @ zs[i][j] / tau2) for m in range(2) for t in range(3))
            total += math.log(numerator / denominator)
    expected = -total / 3
    got = multimodal_contrastive_loss([torch.tensor(z) for z in zs], tau2=tau2).item()
    assert got == pytest.approx(expected, rel=1e-9)


def _losses(n: int = 50) -> torch.Tensor:
    """(n, 2) losses: per modality, the first 70% small (clean-looking), the rest large, shuffled."""
    rng = np.random.default_rng(3)
    columns = []
    for _ in range(2):
        small = rng.uniform(0.05, 0.3, size=int(0.7 * n))
        large = rng.uniform(1.2, 1.8, size=n - small.size)
        columns.append(rng.permutation(np.concatenate([small, large])))
    return torch.tensor(np.stack(columns, axis=1), dtype=torch.float32)


@pytest.mark.parametrize("rate", [0.2, 0.4, 0.6])
def test_division_with_known_rate_keeps_exactly_the_1_minus_r_most_likely_clean_per_modality(rate):
    losses = _losses()
    clean_prob, clean = dmcm.divide_units(losses, rate, threshold=0.5, max_iter=10)
    n = losses.size(0)
    assert clean_prob.shape == clean.shape == (2 * n,)
    for modality in range(2):
        units = slice(modality * n, (modality + 1) * n)
        chosen = clean[units]
        assert int(chosen.sum()) == round((1 - rate) * n)
        # the clean probability never rises with the loss, so the kept ones are the smallest losses
        kept, dropped = losses[:, modality][chosen], losses[:, modality][~chosen]
        assert kept.max() <= dropped.min()


def test_division_without_rate_thresholds_the_posterior():
    losses = _losses()
    clean_prob, clean = dmcm.divide_units(losses, None, threshold=0.5, max_iter=10)
    assert torch.equal(clean, clean_prob > 0.5)
    # the well separated modes are found: the small losses are the clean ones
    assert torch.equal(clean, losses.t().reshape(-1) < 1.0)


def test_per_sample_losses_are_ngce_plus_mae_by_hand():
    # z = c_0 for one sample, tau1 = 1, K = 2: p = softmax([1, 0]) = (e, 1) / (e + 1).
    outputs = CategoryOutputs(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]), torch.eye(2), torch.tensor([0]))
    labels = {"image": torch.tensor([0]), "text": torch.tensor([0])}
    rho = 0.5
    p_hi, p_lo = math.e / (math.e + 1), 1 / (math.e + 1)

    def by_hand(p_label: float, p_other: float) -> float:
        ngce = (1 - p_label**rho) / ((1 - p_label**rho) + (1 - p_other**rho))
        return ngce + 2 * (1 - p_label)

    got = dmcm.per_sample_losses(outputs, labels, dmcm.DMCMOptions.read({"dmcm.rho": rho}))
    assert got.shape == (1, 2)
    assert got[0, 0].item() == pytest.approx(by_hand(p_hi, p_lo), rel=1e-6)
    assert got[0, 1].item() == pytest.approx(by_hand(p_lo, p_hi), rel=1e-6)


def _ngce_and_mae_by_hand(p: list[float], y: list[float], rho: float) -> tuple[float, float]:
    """Eq. 3's summands for one sample, written from the printed formula (soft targets allowed)."""
    generalized = [(1 - pk**rho) / rho for pk in p]
    ngce = sum(yk * gk for yk, gk in zip(y, generalized, strict=True)) / (sum(y) * sum(generalized))
    return ngce, sum(abs(pk - yk) for pk, yk in zip(p, y, strict=True))


@pytest.mark.parametrize(("terms", "keep"), [("ngce+mae", (1, 1)), ("ngce", (1, 0)), ("mae", (0, 1))])
def test_table3_ablations_remove_exactly_one_term_of_eq3(terms, keep):
    # Two samples per modality, K = 2, prototypes e0, e1, tau1 = 1: p = softmax of the embedding itself.
    embeds = {"image": [[1.0, 0.0], [0.0, 1.0]], "text": [[0.0, 1.0], [0.5, 0.5]]}
    targets = {"image": [[1.0, 0.0], [0.25, 0.75]], "text": [[0.0, 1.0], [1.0, 0.0]]}
    outputs = CategoryOutputs(
        torch.tensor(embeds["image"], dtype=torch.float64), torch.tensor(embeds["text"], dtype=torch.float64),
        torch.eye(2, dtype=torch.float64), torch.tensor([0, 1]),
    )
    rho = 0.5
    ngce_total = mae_total = 0.0
    for modality in ("image", "text"):
        for z, y in zip(embeds[modality], targets[modality], strict=True):
            p = [math.exp(z[0]) / (math.exp(z[0]) + math.exp(z[1])), math.exp(z[1]) / (math.exp(z[0]) + math.exp(z[1]))]
            ngce, mae = _ngce_and_mae_by_hand(p, y, rho)
            ngce_total, mae_total = ngce_total + ngce / 2, mae_total + mae / 2  # mean over the 2 samples
    opts = dmcm.DMCMOptions.read({"dmcm.rho": rho, "dmcm.robust_terms": terms})
    got = dmcm.mixing_loss(outputs, {m: torch.tensor(t, dtype=torch.float64) for m, t in targets.items()}, opts)
    assert got.item() == pytest.approx(keep[0] * ngce_total + keep[1] * mae_total, rel=1e-12)
    # the division's per-sample loss drops the same term
    labels = {"image": torch.tensor([0, 1]), "text": torch.tensor([1, 0])}
    per_sample = dmcm.per_sample_losses(outputs, labels, opts)
    p_text_1 = [0.5, 0.5]
    ngce, mae = _ngce_and_mae_by_hand(p_text_1, [1.0, 0.0], rho)
    assert per_sample[1, 1].item() == pytest.approx(keep[0] * ngce + keep[1] * mae, rel=1e-12)


def test_robust_terms_option_names_the_choices():
    with pytest.raises(OptionError, match=r"'dmcm.robust_terms' must be one of \('ngce\+mae', 'ngce', 'mae'\)"):
        dmcm.DMCMOptions.read({"dmcm.robust_terms": "gce"})


def test_prototype_cross_entropy_by_hand():
    outputs = CategoryOutputs(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]), torch.eye(2), torch.tensor([0]))
    labels = {"image": torch.tensor([0]), "text": torch.tensor([0])}
    expected = math.log(1 + math.exp(-1)) + math.log(1 + math.exp(1))  # -log p of the label, image + text
    assert prototype_ce.prototype_cross_entropy(outputs, labels, 1.0).item() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="tau"):
        prototype_ce.prototype_cross_entropy(outputs, labels, 0.0)


def test_paper_settings_are_the_options_and_recipes_use():
    assert dmcm.PAPER_SETTINGS["wikipedia"] == {"batch_size": 100, "epochs": 100, "warmup_epochs": 3, "beta": 0.85}
    assert dmcm.PAPER_SETTINGS["xmedianet"]["beta"] == 0.3 and dmcm.PAPER_SETTINGS["pascal_sentence"]["epochs"] == 150
    defaults = dmcm.DMCMOptions.defaults()
    assert defaults["dmcm.tau1"] == defaults["dmcm.tau2"] == 1.0


def _pascal_run(method: str, output_dir, noise_ratio: float) -> float:
    data = shared_data_dir() / "pascal_sentence"
    if not (data / "labels.npy").is_file():
        pytest.skip(f"shared data {data} is not available")
    paper = dmcm.paper_training("pascal_sentence")
    if method != "dmcm":
        paper.update(warmup_epochs=0, options={})
    config = TrainConfig(
        plugins=[method],
        output_dir=str(output_dir / method),
        eval_batch_size=500,
        progress=False,
        plot_divisions=False,
        **dict(paper, epochs=30),
    )
    arguments = LabelDataArguments(
        image_features=str(data / "sentence_features.npy"),
        text_features=str(data / "sentence_features_doc2vec_bert_768.npy"),
        labels=str(data / "labels.npy"),
        noise_ratio=noise_ratio,
    )
    return run_experiment(arguments, config, CategoryModelArguments(hidden_dim=512))["test"]["mean_map"]


@pytest.mark.slow
def test_dmcm_degrades_gracefully_where_cross_entropy_collapses_on_pascal(tmp_path):
    """Paper, Table 2: at 80% symmetric noise on real features DMCM keeps its mAP, CE loses most of it.

    Measured (benchmarks/label_noise_pascal.py): CE 0.742 -> 0.264 and DMCM 0.775 -> 0.752 from 20% to 80%.
    """
    cross_entropy = _pascal_run("prototype_ce", tmp_path, 0.8)
    mixed = _pascal_run("dmcm", tmp_path, 0.8)
    assert mixed >= 0.65 and mixed - cross_entropy >= 0.25, (mixed, cross_entropy)


def test_the_split_fractions_of_an_unsplit_set_are_a_data_argument(tmp_path):
    """Pascal-Sentence as one unsplit set (20 classes x 50): DSCMR's 40 / 5 / 5 per class by default (100 test samples),
    and ``split_fractions`` 0.7 0.1 0.2 gives the 200 test samples of DMCM's Table 1 (10 per class)."""
    from hfncl.tasks.labels import load_labelled

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(20), 50)
    paths = {}
    for name, values in (
        ("image", rng.standard_normal((1000, 6))),
        ("text", rng.standard_normal((1000, 4))),
        ("labels", labels),
    ):
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], values)

    def sizes(**fields) -> tuple[int, int, int]:
        arguments = LabelDataArguments(
            image_features=str(paths["image"]), text_features=str(paths["text"]), labels=str(paths["labels"]), **fields
        )
        dataset = load_labelled(arguments)
        return len(dataset.train.labels("image")), len(dataset.valid.labels("image")), len(dataset.test.labels("image"))

    assert sizes() == (800, 100, 100)
    assert sizes(split_fractions=[0.7, 0.1, 0.2]) == (700, 100, 200)
    with pytest.raises(ValueError, match="split_fractions must be three fractions"):
        LabelDataArguments(labels=str(paths["labels"]), split_fractions=[0.8, 0.2])
