"""GSC: Geometrical Structure Consistency (Zhao et al., CVPR 2024), Sec. 3 and 4.2.

Every training step of network k records, for each pair of its (global) batch, the
cross-modal indicator y_CM (Eq. 3) and the intra-modal structure similarity S_IM (Eq. 8,
structures weighted by network k's labels y) in ``trainer.ledger``: the mini-batch is the
paper's Monte Carlo relaxation, and no second pass over the data is made. After network
k's pass (``pass_end``) a two-component GMM on S_IM gives y_IM (Eq. 4), both indicators
are ensembled with the previous epoch's (Eq. 10), and y = min(y_CM, y_IM) (Eq. 5) labels
the network that k teaches: its peer (Algorithm 1, trained in turn) or, with
``gsc.dual = false``, itself. Training minimises the y-weighted InfoNCE L_CM (Eq. 6) plus
gamma * L_IM (Eq. 7, 9); Table 5's ablations are options (``gsc.momentum``, ``gsc.dual``,
``gsc.intra_loss``).

The method equation by equation, the reading choices where the paper leaves room and the
demo settings: ``docs/methods/gsc.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from hfncl.equations.division import gmm_clean_probability, threshold_division
from hfncl.equations.toolkit import bibtex_citation, ledger_column, networks_in_turn, peer, same_terms_in_warmup
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option
from hfncl.types import Division
from hfncl_plugins.gsc_intra import batch_labels, intra_modal_loss, intra_modal_similarity, structure_similarity

if TYPE_CHECKING:
    from hfncl.trainer_view import TrainerView
    from hfncl.types import PairOutputs


@dataclass(frozen=True)
class GSCOptions(MethodOptions, namespace="gsc"):
    """tau1, tau2 (Eq. 3, 6, 7), gamma (Eq. 9), beta1, beta2 (Eq. 10), Table 5's switches, the GMM of Eq. 4, and how
    <I_i, I_k>, <T_i, T_k> are scored (Sec. 3.5: by the similarity module, ``"head"``; ``"pooled"``: the cosine)."""

    tau1: float = option(0.07, exclusive_minimum=0)
    tau2: float = option(1.0, exclusive_minimum=0)
    gamma: float = option(0.01, minimum=0)
    beta1: float = option(0.7, minimum=0, maximum=1)
    beta2: float = option(0.7, minimum=0, maximum=1)
    momentum: bool = True
    dual: bool = True
    intra_loss: bool = True
    threshold: float = option(0.5, minimum=0, maximum=1)
    gmm_max_iter: int = option(10, minimum=1)
    gmm_reg_covar: float = option(5e-4, exclusive_minimum=0)
    structure: str = option("head", choices=("head", "pooled"))


# Ledger columns, per network k: the values recorded during this epoch's steps (NaN where
# not seen yet) and the ensembled indicators they fold into.
STEP_CM = "gsc.step_y_cm/net{}"
STEP_SIM = "gsc.step_s_im/net{}"
Y_CM = "gsc.y_cm/net{}"
Y_IM = "gsc.y_im/net{}"


def cross_modal_indicator(similarity: torch.Tensor, temperature: float = 0.07) -> torch.Tensor:
    """Eq. 3: y_CM^i, the mean of pair i's softmax share among image i's captions and among caption i's images."""
    logits = similarity / temperature
    to_text = logits.softmax(dim=1).diagonal()
    to_image = logits.softmax(dim=0).diagonal()
    return (to_text + to_image) / 2


def cross_modal_loss(similarity: torch.Tensor, labels: torch.Tensor, temperature: float = 0.07) -> torch.Tensor:
    """Eq. 6: L_CM, InfoNCE in both directions with each pair's term weighted by its label y.

    L_CM = -(1/2B) sum_i y_i log softmax_j(S_ij / tau)_i - (1/2B) sum_j y_j log softmax_i(S_ij / tau)_j.
    """
    b = similarity.size(0)
    if similarity.shape != (b, b) or labels.shape != (b,):
        raise ValueError(
            f"cross_modal_loss expects a (B, B) similarity and (B,) labels, got "
            f"{tuple(similarity.shape)} and {tuple(labels.shape)}"
        )
    logits = similarity / temperature
    positives = torch.arange(b, device=similarity.device)
    to_text = F.cross_entropy(logits, positives, reduction="none")
    to_image = F.cross_entropy(logits.t(), positives, reduction="none")
    return (labels.detach() * (to_text + to_image)).sum() / (2 * b)


def intra_modal_indicator(
    structure_scores: torch.Tensor, *, max_iter: int = 10, reg_covar: float = 5e-4, seed: int = 0
) -> torch.Tensor:
    """Eq. 4: y_IM, the posterior of the higher-mean component of a 2-component GMM on S_IM.

    The mixture is fitted on min-max normalised scores; the higher-mean component of S_IM
    is the lower-mean component of -S_IM, which :func:`gmm_clean_probability` returns.
    """
    return gmm_clean_probability(-structure_scores, max_iter=max_iter, reg_covar=reg_covar, seed=seed)


def temporal_ensemble(current: torch.Tensor, previous: torch.Tensor, beta: float) -> torch.Tensor:
    """Eq. 10: y[t] = beta * y[t] + (1 - beta) * y[t - 1]."""
    return beta * current + (1 - beta) * previous


def correspondence_labels(y_cm: torch.Tensor, y_im: torch.Tensor) -> torch.Tensor:
    """Eq. 5: y = min(y_CM, y_IM)."""
    return torch.minimum(y_cm, y_im)


@hookimpl
def division_fields(config) -> dict[str, list[str]]:
    return {"division": ["y_cm", "y_im", "statistic"]}


@hookimpl
def options() -> type[GSCOptions]:
    return GSCOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    """Two networks for 8 epochs, the first 2 with y = 1, no learning-rate decay (why: docs/methods/gsc.md)."""
    return {"epochs": 8, "warmup_epochs": 2, "lr_decay_epochs": []}


AUDIT_EPOCHS = 20
"""``hfncl audit``'s epochs: on real text (the whole proxy, 18000 pairs) 20 epochs estimate 50.9% of 50% wrong pairs
and flag them at precision 0.924, where NCR's audit says 64.3% at 0.712 (benchmarks/README.md, "The audit")."""


@hookimpl
def audit_settings() -> dict[str, Any]:
    """The demo settings for :data:`AUDIT_EPOCHS` epochs: GSC keeps the pairs it finds wrong out of its loss (Eq. 6),
    so their rank p-values stay near uniform, as the audit's estimate assumes."""
    return {**demo_settings(), "epochs": AUDIT_EPOCHS}


@hookimpl
def num_networks(config) -> int:
    return 2 if GSCOptions.read(config.options).dual else 1


training_passes = networks_in_turn()  # Algorithm 1, line 3


def _train_terms(trainer: "TrainerView", batch, outputs: "PairOutputs", net: int) -> dict[str, torch.Tensor]:
    """L_CM (Eq. 6) + gamma * L_IM (Eq. 7, 9) for network ``net``; records y_CM and S_IM of the batch in the ledger.

    y comes from the division of ``net``; in warmup every y = 1, and the statistics are recorded as in any epoch.
    """
    labels, similarity = batch_labels(trainer, outputs, net), outputs.similarity
    settings = trainer.options_of(GSCOptions)
    tau1 = settings.tau1
    image_structure, text_structure = structures(trainer, outputs, net)
    trainer.ledger.record(outputs.index, STEP_CM.format(net), cross_modal_indicator(similarity.detach(), tau1))
    trainer.ledger.record(
        outputs.index,
        STEP_SIM.format(net),
        structure_similarity(image_structure.detach(), text_structure.detach(), labels),
    )
    terms = {"gsc_cross_modal": cross_modal_loss(similarity, labels, tau1)}
    if settings.intra_loss:
        terms["gsc_intra_modal"] = settings.gamma * intra_modal_loss(
            image_structure, text_structure, labels, settings.tau2
        )
    return terms


loss, warmup_loss = same_terms_in_warmup(_train_terms)


def structures(trainer: "TrainerView", outputs: "PairOutputs", net: int) -> tuple[torch.Tensor, torch.Tensor]:
    """<I_i, I_k> and <T_i, T_k> of the batch (Eq. 7-8), (B, B) each, as ``gsc.structure`` reads them.

    ``"head"``: scored by network ``net``'s similarity module, the two extra forward passes of Sec. 3.5
    (``MatchingNetwork.within_similarity``; with a cosine head the cosine of the embeddings);
    ``"pooled"``: the cosine of the embeddings, of the masked means of an SGR / SAF / SCAN head's local features.
    """
    if trainer.options_of(GSCOptions).structure == "pooled":
        return intra_modal_similarity(outputs.image_embeds), intra_modal_similarity(outputs.text_embeds)
    network = trainer.model.networks[net]
    image_structure = network.within_similarity(outputs.image_embeds, "image")
    return image_structure, network.within_similarity(outputs.text_embeds, "text")


def fold_epoch(trainer: "TrainerView", net: int, epoch: int) -> None:
    """Algorithm 1, line 12: fold the epoch's recorded y_CM and S_IM of ``net`` into its ensembled indicators.

    Afterwards the step columns are reset to NaN, so that the next epoch records afresh.
    """
    if STEP_CM.format(net) not in trainer.ledger:
        return
    step_cm = trainer.ledger.get(STEP_CM.format(net))
    step_sim = trainer.ledger.get(STEP_SIM.format(net))
    seen = ~torch.isnan(step_cm)
    if not seen.any():
        return
    momentum = trainer.options_of(GSCOptions).momentum
    beta1 = trainer.options_of(GSCOptions).beta1 if momentum else 1.0
    beta2 = trainer.options_of(GSCOptions).beta2 if momentum else 1.0
    y_im_now = intra_modal_indicator(
        step_sim[seen],
        max_iter=trainer.options_of(GSCOptions).gmm_max_iter,
        reg_covar=trainer.options_of(GSCOptions).gmm_reg_covar,
        seed=trainer.config.seed + epoch,
    )
    y_cm = ledger_column(trainer.ledger, Y_CM.format(net), trainer.num_train, 1.0)
    y_im = ledger_column(trainer.ledger, Y_IM.format(net), trainer.num_train, 1.0)
    y_cm[seen] = temporal_ensemble(step_cm[seen], y_cm[seen], beta1)
    y_im[seen] = temporal_ensemble(y_im_now, y_im[seen], beta2)
    everyone = torch.arange(trainer.num_train)
    for name, values in ((Y_CM, y_cm), (Y_IM, y_im)):
        trainer.ledger.record(everyone, name.format(net), values)
    unseen = torch.full((trainer.num_train,), float("nan"))
    for name in (STEP_CM, STEP_SIM):
        trainer.ledger.record(everyone, name.format(net), unseen)


@hookimpl
def pass_end(trainer, epoch, networks) -> None:
    """Algorithm 1, lines 12-13: after network k's pass, fold its estimates and hand y[t] to the network it labels.

    With two networks, network B's pass of epoch t trains on A's estimate of epoch t; A's
    next pass (epoch t + 1) trains on B's of epoch t, given by :func:`divide` at that
    epoch's start. Labels handed over in warmup are not used (y = 1 there).
    """
    later = {k for networks_of_pass in trainer.passes[trainer.pass_index + 1 :] for k in networks_of_pass}
    for net in networks:
        fold_epoch(trainer, net, epoch)
        for user in range(trainer.num_networks):
            if user in later and peer(user, trainer.num_networks) == net and not trainer.in_warmup:
                trainer.divisions[user] = network_division(trainer, user)


def network_division(trainer: "TrainerView", net: int) -> Division:
    """Network ``net``'s labels y = min(y_CM, y_IM) (Eq. 5) from its label source's ensembled indicators.

    Before any epoch has been folded every y is 1. ``extras`` carries y_CM, y_IM and,
    once estimated, y itself as the plotted statistic (y depends on two indicators, so no
    single one of them draws the division).
    """
    source = peer(net, trainer.num_networks)  # its peer with two networks, itself with one
    y_cm = ledger_column(trainer.ledger, Y_CM.format(source), trainer.num_train, 1.0)
    y_im = ledger_column(trainer.ledger, Y_IM.format(source), trainer.num_train, 1.0)
    labels = correspondence_labels(y_cm, y_im)
    extras = {"y_cm": y_cm, "y_im": y_im}
    if Y_CM.format(source) in trainer.ledger:
        extras["statistic"] = labels.clone()
    division = threshold_division(labels, trainer.options_of(GSCOptions).threshold, **extras)
    return replace(division, statistic_name="correspondence label y = min(y_CM, y_IM) (Eq. 5)")


@hookimpl
def divide(trainer, epoch) -> list[Division]:
    """Each network's labels at the epoch's start (:func:`network_division`)."""
    return [network_division(trainer, net) for net in range(trainer.num_networks)]


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "gsc.bib")
