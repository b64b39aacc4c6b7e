"""NPC (Zhang, Li and Ye, AAAI 2024): Negative Pre-aware Cross-modal matching.

Each step (paper Sec. "Negative Pre-aware"; Fig. 2b):

1. the siamese model A' is a copy of the base model A (refreshed from A every step, so it is never saved);
2. every pair i of the batch has two memory entries, the confident clean pairs nearest to its image and to its
   caption (:func:`nearest_entries`), drawn from the memory bank, the pairs a two-component GMM on the per-pair
   loss calls clean with probability above 0.9 (:func:`memory_bank`, the authors' ``get_memorybank.py``);
3. A' takes one step on the batch; the negative impact of pair i is how the loss of its memory entries moves:
   ``r_i = (L_A'(m^I_i) / L_A'+1(m^I_i) + L_A'(m^T_i) / L_A'+1(m^T_i)) / 2`` (:func:`loss_ratio`);
4. the confidence weight is ``w_i = tanh(r_i)`` where r_i < 1 (the entries' loss rose: a harmful pair) and 1
   otherwise (:func:`confidence_weight`);
5. A trains on ``sum_i w_i L(I_i, T_i) / B + L_mb``, the re-weighted batch and the memory entries' loss
   (:func:`npc_objective`).

The loss L is CLIP's symmetric cross-entropy over the batch's cosine similarities divided by a temperature
(:func:`pair_cross_entropy`). Where the authors' code departs from the paper, both readings are options
(``docs/methods/npc.md``): ``npc.weighting`` ("per_pair", the paper's sum; "batch_mean", the code's mean weight
times the mean loss) and ``npc.bank_loss`` (the code computes L_mb without gradient, so it does not train A).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from hfncl.equations.division import fit_loss_mixture
from hfncl.equations.toolkit import bibtex_citation, training_batches
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option
from hfncl.types import Division

NET = 0
WEIGHTINGS = ("per_pair", "batch_mean")
SIAMESE_STEPS = ("adam", "sgd")
CHUNK = 4096


@dataclass(frozen=True)
class NPCOptions(MethodOptions, namespace="npc"):
    """The loss temperature, the memory bank's GMM threshold, the siamese step and the two readings of the objective."""

    temperature: float = option(0.01, exclusive_minimum=0, help="tau of L: CLIP's logit scale 100 is tau = 0.01")
    bank_threshold: float = option(0.9, minimum=0, exclusive_maximum=1, help="clean probability a memory entry exceeds")
    siamese_step: str = option("adam", choices=SIAMESE_STEPS, help="A' steps as a fresh Adam's first step, or SGD")
    siamese_lr_scale: float = option(1.0, exclusive_minimum=0, help="A''s step size over the run's learning rate")
    weighting: str = option("per_pair", choices=WEIGHTINGS, help="per_pair: the paper; batch_mean: the authors' code")
    bank_loss: bool = option(True, help="train A on the memory entries' loss L_mb (the paper; the code does not)")


@hookimpl
def options() -> type[NPCOptions]:
    return NPCOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    """One warmup epoch: the demo's towers start untrained, and NPC's first memory bank presumes a pretrained model."""
    return {"epochs": 10, "warmup_epochs": 1}


@hookimpl
def division_fields(config) -> dict[str, list[str]]:
    return {"division": ["bank_image", "bank_text", "statistic", "mixture"]}


# ----------------------------------------------------------------------------- equations


def pair_cross_entropy(similarity: torch.Tensor, temperature: float) -> torch.Tensor:
    """L(I_i, T_i): the mean of the image-to-text and text-to-image cross-entropies of pair i, (B,).

    Each row (image) and each column (caption) of ``similarity / temperature`` is a softmax over the
    batch, the pair being the diagonal entry (CLIP's loss, the authors' ``criterions.py``).
    """
    logits = similarity / temperature
    target = torch.arange(logits.shape[0], device=logits.device)
    image_to_text = F.cross_entropy(logits, target, reduction="none")
    text_to_image = F.cross_entropy(logits.t(), target, reduction="none")
    return (image_to_text + text_to_image) / 2


def loss_ratio(
    image_entry_before: torch.Tensor,
    image_entry_after: torch.Tensor,
    text_entry_before: torch.Tensor,
    text_entry_after: torch.Tensor,
) -> torch.Tensor:
    """r_i: the memory entries' loss on A' over their loss on A' after its step on the batch, averaged over the
    image's and the caption's entry. r_i < 1 when the step raised the clean entries' loss."""
    return (image_entry_before / image_entry_after + text_entry_before / text_entry_after) / 2


def confidence_weight(ratio: torch.Tensor) -> torch.Tensor:
    """w_i = tanh(r_i) where r_i < 1 (a pair of negative impact), else 1."""
    return torch.where(ratio < 1, torch.tanh(ratio), torch.ones_like(ratio))


def npc_objective(weights: torch.Tensor, pair_losses: torch.Tensor, weighting: str) -> torch.Tensor:
    """The re-weighted batch loss: ``mean_i w_i L_i`` (``per_pair``, the paper) or ``mean_i w_i * mean_i L_i``
    (``batch_mean``: the authors' code multiplies the weights by the batch's mean loss)."""
    if weighting == "per_pair":
        return (weights * pair_losses).mean()
    if weighting == "batch_mean":
        return weights.mean() * pair_losses.mean()
    raise ValueError(f"npc.weighting must be one of {WEIGHTINGS}, got {weighting!r}")


def memory_bank(clean_prob: torch.Tensor, threshold: float) -> torch.Tensor:
    """The memory bank: positions of the pairs whose clean probability exceeds ``threshold``; never empty (the most
    probable pair when none does)."""
    bank = (clean_prob > threshold).nonzero().squeeze(1)
    return bank if bank.numel() else clean_prob.argmax().reshape(1)


def nearest_entries(queries: torch.Tensor, keys: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
    """For each query embedding, the bank position whose key embedding has the largest cosine similarity, (N,).

    ``queries`` (N, d) and ``keys`` (N, d) are every pair's image (or caption) embeddings; only the rows ``bank``
    of ``keys`` are candidates, so a clean pair's entry is itself.
    """
    queries, candidates = F.normalize(queries.float(), dim=1), F.normalize(keys[bank].float(), dim=1)
    nearest = [
        (queries[start : start + CHUNK] @ candidates.t()).argmax(dim=1) for start in range(0, len(queries), CHUNK)
    ]
    return bank[torch.cat(nearest)]


def siamese_update(parameters: list[torch.Tensor], gradients: list[torch.Tensor | None], lr: float, step: str) -> None:
    """A' one step on its batch loss, in place: ``p - lr * g`` (``sgd``) or a fresh Adam's first step
    ``p - lr * g / (|g| + 1e-8)`` (``adam``: m = g and v = g^2 after bias correction)."""
    with torch.no_grad():
        for parameter, gradient in zip(parameters, gradients, strict=True):
            if gradient is None:
                continue
            change = gradient if step == "sgd" else gradient / (gradient.abs() + 1e-8)
            parameter.sub_(lr * change)


# ----------------------------------------------------------------------------- hooks


@hookimpl
def divide(trainer, epoch) -> Division:
    """The memory bank from the current model (deterministic, so a resumed run rebuilds the same one).

    Per-pair L over shuffled batches of the training batch size, a GMM on it (the authors' ``get_memorybank.py``:
    the low-loss component's posterior above ``npc.bank_threshold`` makes a memory entry), and each pair's entries:
    the bank pair with the most similar image and the one with the most similar caption.
    """
    settings = trainer.options_of(NPCOptions)

    def statistics(batch) -> dict[str, torch.Tensor]:
        outputs = trainer.forward(NET, batch, grad=False)
        return {
            "loss": pair_cross_entropy(outputs.similarity, settings.temperature),
            "image": outputs.image_embeds.flatten(1),
            "text": outputs.text_embeds.flatten(1),
        }

    columns = trainer.collect(statistics, description=f"epoch {epoch} memory bank", **training_batches(trainer, epoch))
    clean_prob, mixture = fit_loss_mixture(columns["loss"], seed=trainer.config.seed + epoch)
    bank = memory_bank(clean_prob, settings.bank_threshold)
    clean = torch.zeros_like(clean_prob, dtype=torch.bool)
    clean[bank] = True
    extras = {
        "bank_image": nearest_entries(columns["image"], columns["image"], bank),
        "bank_text": nearest_entries(columns["text"], columns["text"], bank),
        "statistic": columns["loss"],
        "mixture": mixture,
    }
    return replace(
        Division(clean_prob, clean, extras), statistic_name="per-pair loss L (memory bank: GMM posterior > threshold)"
    )


@hookimpl
def warmup_loss(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    """Before the first memory bank (``warmup_epochs``): plain CLIP fine-tuning, the mean of L."""
    return {"clip_ce": pair_cross_entropy(outputs.similarity, trainer.options_of(NPCOptions).temperature).mean()}


@hookimpl
def train_step(trainer, batch, networks) -> dict[str, float] | None:
    """One NPC step (module docstring, steps 1-5); the default step in warmup, before there is a memory bank."""
    if trainer.in_warmup or trainer.divisions[NET] is None:
        return None
    if networks != [NET]:
        raise ValueError(f"NPC trains one network (networks [0]), got the pass {networks}")
    settings = trainer.options_of(NPCOptions)
    division = trainer.divisions[NET]
    index = batch["index"].cpu()
    entries = [trainer.samples(division.extras[name][index]) for name in ("bank_image", "bank_text")]

    siamese = copy.deepcopy(trainer.model.networks[NET])
    before = [entry_losses(trainer, siamese, entry, settings.temperature) for entry in entries]
    siamese_loss = pair_cross_entropy(
        trainer.forward(NET, batch, network=siamese).similarity, settings.temperature
    ).mean()
    parameters = [parameter for parameter in siamese.parameters() if parameter.requires_grad]
    gradients = torch.autograd.grad(siamese_loss, parameters, allow_unused=True)
    siamese_update(
        parameters, list(gradients), trainer.config.learning_rate * settings.siamese_lr_scale, settings.siamese_step
    )
    after = [entry_losses(trainer, siamese, entry, settings.temperature) for entry in entries]
    weights = confidence_weight(loss_ratio(before[0], after[0], before[1], after[1]))

    outputs = trainer.forward(NET, batch)
    batch_loss = npc_objective(
        weights, pair_cross_entropy(outputs.similarity, settings.temperature), settings.weighting
    )
    total = batch_loss
    metrics = {"npc_batch": float(batch_loss.detach())}
    if settings.bank_loss:
        entry_terms = [
            pair_cross_entropy(trainer.forward(NET, entry).similarity, settings.temperature) for entry in entries
        ]
        bank_loss = (entry_terms[0].mean() + entry_terms[1].mean()) / 2
        total = total + bank_loss
        metrics["npc_bank"] = float(bank_loss.detach())
    trainer.optimize(total, networks)
    trainer.ledger.record(outputs.index, "npc_weight", weights)  # the metrics are loss terms: the epoch line sums them
    return metrics


def entry_losses(trainer, siamese: torch.nn.Module, entries, temperature: float) -> torch.Tensor:
    """L of each memory entry on A' (eval mode, no gradient), the entries of the batch being each other's negatives."""
    return pair_cross_entropy(trainer.forward(NET, entries, grad=False, network=siamese).similarity, temperature)


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "npc.bib")
