"""DMCM: Dual-Mix for cross-modal retrieval with noisy labels (Ding et al., ICASSP 2024).

Category-labelled samples (``data_kind`` "labels"): a 3-layer MLP per modality into a
512-d common space and shared class prototypes (:class:`hfncl.models.CategoryModel`).
Warmup trains with the mixing loss L_m alone (NGCE + MAE on the prototype
probabilities, Eq. 2-3). Afterwards, every epoch, the per-sample L_m of every (modality,
sample) is fitted by a two-component Beta mixture and the most likely clean are the
clean set (Sec. 2.3, 3.2); in each batch every noisy sample is mixed with a random clean
one of its modality, inputs and one-hot targets (Eq. 6), and the objective is
beta L_m (on the mixed batch) + (1 - beta) L_c (the multimodal contrastive loss, Eq. 7,
on the batch as loaded), Eq. 8.

Reading choices where the paper leaves room (normalised embeddings, rho and lambda, one Beta
mixture for all modalities and the (1 - r) most likely clean, L_c on the un-mixed batch, seeded
mixing): ``docs/methods/dmcm.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hfncl.equations.beta_mixture import bmm_clean_probability, most_likely_clean
from hfncl.equations.label_losses import (
    ROBUST_TERMS,
    mix_with_clean,
    multimodal_contrastive_loss,
    ngce_mae,
    one_hot_targets,
    prototype_probabilities,
    robust_clustering_loss,
)
from hfncl.equations.toolkit import bibtex_citation, seeded_generator
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option
from hfncl.types import CategoryOutputs, Division

MODALITIES = ("image", "text")

# The paper's settings per dataset (Sec. 3.2): batch size, epochs, warmup epochs, beta.
PAPER_SETTINGS: dict[str, dict[str, Any]] = {
    "wikipedia": {"batch_size": 100, "epochs": 100, "warmup_epochs": 3, "beta": 0.85},
    "pascal_sentence": {"batch_size": 100, "epochs": 150, "warmup_epochs": 5, "beta": 0.7},
    "xmedianet": {"batch_size": 200, "epochs": 250, "warmup_epochs": 3, "beta": 0.3},
}


def paper_training(dataset: str) -> dict[str, Any]:
    """:class:`hfncl.config.TrainConfig` fields of the paper's run on ``dataset`` (a key of
    :data:`PAPER_SETTINGS`): Adam lr 1e-4 without decay or gradient clipping, the dataset's
    batch size, epochs, warmup and beta."""
    settings = PAPER_SETTINGS[dataset]
    return {
        "epochs": settings["epochs"],
        "warmup_epochs": settings["warmup_epochs"],
        "batch_size": settings["batch_size"],
        "learning_rate": 1e-4,
        "lr_decay_epochs": [],
        "grad_clip": 0.0,
        "options": {"dmcm.beta": settings["beta"]},
    }


@hookimpl
def data_kind() -> str:
    return "labels"


@hookimpl
def division_fields(config) -> dict[str, list[str]]:
    return {"division": ["statistic"], "targets": ["mixed", "targets"], "needs_targets": ["mixed", "targets"]}


@dataclass(frozen=True)
class DMCMOptions(MethodOptions, namespace="dmcm"):
    """tau1 (Eq. 2), tau2 (Eq. 7), rho (Eq. 3), lambda (Eq. 6), beta (Eq. 8), r and delta (Sec. 3.2, Eq. 4-5).

    ``robust_terms``: L_m of Eq. 3 as published ("ngce+mae"), or Table 3's ablations "ngce"
    (DMCM w/o MAE) and "mae" (DMCM w/o NGCE); the per-sample loss of the division is that L_m's.
    """

    tau1: float = option(1.0, exclusive_minimum=0)
    tau2: float = option(1.0, exclusive_minimum=0)
    rho: float = option(0.7, exclusive_minimum=0, maximum=1)
    lam: float = option(0.5, minimum=0, maximum=1)
    beta: float = option(0.85, minimum=0, maximum=1)
    noise_rate: float | None = option(None, minimum=0, exclusive_maximum=1)
    threshold: float = option(0.5, minimum=0, maximum=1)
    bmm_max_iter: int = option(10, minimum=1)
    robust_terms: str = option("ngce+mae", choices=ROBUST_TERMS)


@hookimpl
def options() -> type[DMCMOptions]:
    return DMCMOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    return {"epochs": 30, "warmup_epochs": 5, "learning_rate": 1e-4, "options": {"dmcm.beta": 0.7}}


def per_sample_losses(outputs: CategoryOutputs, labels: dict[str, torch.Tensor], opts: DMCMOptions) -> torch.Tensor:
    """(B, m) NGCE + MAE (``opts.robust_terms``) of every sample of each modality against its one-hot
    label (Eq. 3's summands)."""
    num_classes = outputs.prototypes.size(0)
    columns = []
    for modality in MODALITIES:
        probabilities = prototype_probabilities(outputs.embeds(modality), outputs.prototypes, opts.tau1)
        targets = one_hot_targets(labels[modality], num_classes)
        columns.append(ngce_mae(probabilities, targets, opts.rho, opts.robust_terms))
    return torch.stack(columns, dim=1)


def known_noise_rate(trainer) -> float | None:
    """r of Sec. 3.2: ``dmcm.noise_rate`` if set, else the rate the run's labels were corrupted with, if known."""
    rate = trainer.options_of(DMCMOptions).noise_rate
    return trainer.noise_rate if rate is None else float(rate)


def divide_units(
    losses: torch.Tensor, noise_rate: float | None, threshold: float, max_iter: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clean probability and clean set of every unit from (N, m) per-sample losses (Sec. 2.3, 3.2).

    One Beta mixture on all m * N losses; units in modality-major order (unit u is sample
    u % N of modality u // N). With ``noise_rate`` r, each modality's round((1 - r) N)
    most likely clean samples are clean; without it, those with w > ``threshold`` (Eq. 4-5).
    """
    units = losses.t().reshape(-1)
    clean_prob, _ = bmm_clean_probability(units, max_iter=max_iter)
    n = losses.size(0)
    if noise_rate is None:
        return clean_prob, clean_prob > threshold
    clean = torch.cat(
        [
            most_likely_clean_by_loss(clean_prob[i * n : (i + 1) * n], losses[:, i], noise_rate)
            for i in range(losses.size(1))
        ]
    )
    return clean_prob, clean


def most_likely_clean_by_loss(clean_prob: torch.Tensor, losses: torch.Tensor, noise_rate: float) -> torch.Tensor:
    """The round((1 - r) N) samples with the highest clean probability, ties broken by the smaller loss.

    The posterior saturates at 1 (float32) over much of the low-loss mode; among such
    ties the smaller loss is the more likely clean (the small-loss criterion), where
    :func:`hfncl.equations.beta_mixture.most_likely_clean` alone would take them in index order.
    """
    order = np.lexsort((losses.double().numpy(), -clean_prob.double().numpy()))
    ranked = torch.empty(len(order), dtype=torch.float64)
    ranked[torch.from_numpy(order)] = -torch.arange(len(order), dtype=torch.float64)
    return most_likely_clean(ranked, noise_rate)


@hookimpl
def divide(trainer, epoch) -> Division:
    opts = trainer.options_of(DMCMOptions)

    def statistic(batch) -> dict[str, torch.Tensor]:
        outputs = trainer.forward(0, batch, grad=False)
        labels = {m: trainer.gather(batch[f"{m}_label"]) for m in MODALITIES}
        return {"loss": per_sample_losses(outputs, labels, opts)}

    losses = trainer.collect(statistic, description=f"epoch {epoch} BMM division")["loss"]
    clean_prob, clean = divide_units(losses, known_noise_rate(trainer), opts.threshold, opts.bmm_max_iter)
    return Division(clean_prob, clean, {"statistic": losses.t().reshape(-1)}, "per-sample robust loss L_m (Eq. 3)")


def mix_batch(
    batch: dict[str, torch.Tensor],
    clean: dict[str, torch.Tensor],
    num_classes: int,
    lam: float,
    generator: torch.Generator,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Eq. 6 per modality: every noisy sample's features and one-hot label mixed with a random clean sample's.

    Returns the mixed batch (labels left as loaded; ``index`` unchanged) and the mixed
    targets q' per modality.
    """
    mixed = dict(batch)
    targets = {}
    for modality in MODALITIES:
        one_hot = one_hot_targets(batch[f"{modality}_label"], num_classes)
        mixed[modality], targets[modality], _ = mix_with_clean(
            batch[modality], one_hot, clean[modality], lam, generator=generator
        )
    return mixed, targets


@hookimpl
def rectify(trainer, batch, net, division) -> dict[str, Any]:
    """The batch's clean sets per modality (Eq. 4-5) and its mixed copy with mixed targets (Eq. 6).

    Mixing happens within this process's slice of the global batch.
    """
    n = trainer.num_train
    index = batch["index"].cpu()
    clean = {m: division.clean[i * n + index].to(batch["index"].device) for i, m in enumerate(MODALITIES)}
    generator = seeded_generator(trainer.config.seed, trainer.epoch, trainer.global_step, net)
    num_classes = trainer.model.config.num_classes
    mixed, targets = mix_batch(batch, clean, num_classes, trainer.options_of(DMCMOptions).lam, generator)
    return {"mixed": mixed, "targets": targets}


def mixing_loss(outputs: CategoryOutputs, targets: dict[str, torch.Tensor], opts: DMCMOptions) -> torch.Tensor:
    """L_m of Eq. 3 (its terms ``opts.robust_terms``) on ``outputs`` against per-modality (soft) targets."""
    probabilities = [prototype_probabilities(outputs.embeds(m), outputs.prototypes, opts.tau1) for m in MODALITIES]
    return robust_clustering_loss(probabilities, [targets[m] for m in MODALITIES], opts.rho, opts.robust_terms)


def _one_hot(trainer, batch, outputs: CategoryOutputs) -> dict[str, torch.Tensor]:
    """The global batch's noisy labels as one-hot rows, per modality."""
    num_classes = outputs.prototypes.size(0)
    return {m: one_hot_targets(trainer.gather(batch[f"{m}_label"]), num_classes) for m in MODALITIES}


@hookimpl
def warmup_loss(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    """L = L_m during warmup (Sec. 2.5)."""
    return {"mixing_loss": mixing_loss(outputs, _one_hot(trainer, batch, outputs), trainer.options_of(DMCMOptions))}


@hookimpl
def loss(trainer, batch, outputs, targets, net) -> dict[str, torch.Tensor]:
    """Eq. 8: beta L_m on the mixed batch (Eq. 3, 6) + (1 - beta) L_c on the loaded batch (Eq. 7)."""
    opts = trainer.options_of(DMCMOptions)
    mixed_outputs = trainer.forward(net, targets["mixed"])
    gathered_targets = {m: trainer.gather(targets["targets"][m]) for m in MODALITIES}
    contrastive = multimodal_contrastive_loss([outputs.embeds(m) for m in MODALITIES], opts.tau2)
    return {
        "mixing_loss": opts.beta * mixing_loss(mixed_outputs, gathered_targets, opts),
        "contrastive_loss": (1 - opts.beta) * contrastive,
    }


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "dmcm.bib")
