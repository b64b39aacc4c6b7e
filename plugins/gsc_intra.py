"""GSC's intra-modal structure term (Zhao et al., CVPR 2024, Sec. 3.2-3.3), as a stage of any method.

The intra-modal structure of pair i is its row of image-image similarities
<I_i, I_k> and its row of caption-caption similarities <T_i, T_k>. A matched pair's two
rows mirror each other; a mismatched pair's do not. This module holds the structure
computations GSC is built on (Eq. 7 and Eq. 8, used by :mod:`hfncl_plugins.gsc`) and a
plugin that adds gamma * L_IM (Eq. 7, 9) to another method's loss, e.g.
``plugins=["ncr", "gsc_intra"]``: the paper's claim (Sec. 3.5) that the term is
compatible with existing methods.

As a stage, the correspondence labels y weighting the structures are the clean
probabilities of the division the first method made for the trained network
(``trainer.divisions[net].clean_prob``), and 1 for every pair during warmup or when the
method makes no division.

Reading choices where the paper leaves room (cosine structures, the y_i weight of Eq. 7, sums
that include i): ``docs/methods/gsc_intra.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from hfncl.equations.toolkit import bibtex_citation, same_terms_in_warmup
from hfncl.hookspecs import hookimpl
from hfncl.models.heads import global_embeddings as structure_embeddings
from hfncl.options import MethodOptions, option

if TYPE_CHECKING:
    from hfncl.trainer_view import TrainerView
    from hfncl.types import PairOutputs


def intra_modal_similarity(embeds: torch.Tensor) -> torch.Tensor:
    """<X_i, X_k>: the cosine of every item of a batch with every other of the same modality -> (B, B).

    ``embeds`` are (B, d) or packed local features (B, T, d + 1) (:func:`structure_embeddings`).
    """
    unit = F.normalize(structure_embeddings(embeds), dim=1)
    return unit @ unit.t()


def _check_structures(image_structure: torch.Tensor, text_structure: torch.Tensor, labels: torch.Tensor) -> None:
    b = labels.numel()
    if labels.dim() != 1 or image_structure.shape != (b, b) or text_structure.shape != (b, b):
        raise ValueError(
            f"structures must be (B, B) and labels (B,); got image {tuple(image_structure.shape)}, "
            f"text {tuple(text_structure.shape)}, labels {tuple(labels.shape)}"
        )


def structure_similarity(
    image_structure: torch.Tensor, text_structure: torch.Tensor, labels: torch.Tensor, eps: float = 1e-8
) -> torch.Tensor:
    """Eq. 8: S_IM^i, the cosine between pair i's y-weighted image and text structure rows.

    S_IM^i = sum_j y_j <I_i,I_j> y_j <T_i,T_j> / (||(y_j <I_i,I_j>)_j|| ||(y_j <T_i,T_j>)_j||);
    a row whose weighted norm is below ``eps`` (every y_j = 0) scores 0.
    """
    _check_structures(image_structure, text_structure, labels)
    weighted_image = image_structure * labels[None, :]
    weighted_text = text_structure * labels[None, :]
    numerator = (weighted_image * weighted_text).sum(dim=1)
    norms = weighted_image.norm(dim=1) * weighted_text.norm(dim=1)
    return torch.where(norms > eps, numerator / norms.clamp(min=eps), torch.zeros_like(numerator))


def intra_modal_loss(
    image_structure: torch.Tensor, text_structure: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Eq. 7: L_IM, a contrastive loss between y-weighted intra-modal structures (batch mean).

    logit_ij = sum_k y_k <I_i,I_k> y_k <T_j,T_k> / tau2; image structure i must pick out
    text structure i among the batch's: L_IM = -(1/B) sum_i y_i log softmax_j(logit_i)_i.
    The labels are constants (no gradient flows into them).
    """
    _check_structures(image_structure, text_structure, labels)
    labels = labels.detach()
    logits = (image_structure * labels[None, :]) @ (text_structure * labels[None, :]).t() / temperature
    positives = torch.arange(labels.numel(), device=logits.device)
    return (labels * F.cross_entropy(logits, positives, reduction="none")).mean()


def batch_labels(trainer: "TrainerView", outputs: "PairOutputs", net: int) -> torch.Tensor:
    """y of the batch's pairs: network ``net``'s division's clean probability, or 1 before any division."""
    division = None if trainer.in_warmup else trainer.divisions[net]
    device = outputs.similarity.device
    if division is None:
        return torch.ones(outputs.index.numel(), device=device)
    return division.clean_prob[outputs.index.cpu()].to(device=device, dtype=torch.float32)


@dataclass(frozen=True)
class GSCIntraOptions(MethodOptions, namespace="gsc_intra"):
    """gamma, the weight of L_IM (Eq. 9), and tau2, its temperature (Eq. 7)."""

    gamma: float = option(0.01, minimum=0)
    tau2: float = option(1.0, exclusive_minimum=0)


@hookimpl
def options() -> type[GSCIntraOptions]:
    return GSCIntraOptions


def _term(trainer: "TrainerView", batch, outputs: "PairOutputs", net: int) -> dict[str, torch.Tensor]:
    """gamma * L_IM (Eq. 7, 9) with the active division's clean probabilities as y (every y = 1 in warmup)."""
    settings = trainer.options_of(GSCIntraOptions)
    labels = batch_labels(trainer, outputs, net)
    image_structure = intra_modal_similarity(outputs.image_embeds)
    text_structure = intra_modal_similarity(outputs.text_embeds)
    return {
        "gsc_intra_modal": settings.gamma * intra_modal_loss(image_structure, text_structure, labels, settings.tau2)
    }


loss, warmup_loss = same_terms_in_warmup(_term)


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "gsc.bib")
