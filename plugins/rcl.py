"""RCL: Robust Cross-modal Learning (Hu et al., "Cross-Modal Retrieval with Partially Mismatched Pairs", TPAMI 2023).

Complementary contrastive learning: a pair's own similarity may be a mismatch, but a batch's other
pairs are almost surely not matched, so RCL learns only from those complementary pairs. Within a
batch of B pairs (Sec. 3.2),

    p^{i2t}_ij = exp(S(I_i, T_j) / tau) / sum_k exp(S(I_i, T_k) / tau)   (image i queries the captions)
    p^{t2i}_ij = exp(S(I_j, T_i) / tau) / sum_k exp(S(I_k, T_i) / tau)   (caption i queries the images)

and each pair's loss is a bounded penalty phi of the probability it gives every complementary pair,

    L_i = sum_{j != i} phi(p^{i2t}_ij) + sum_{j != i} phi(p^{t2i}_ij),   the batch's loss the mean of L_i,

which pushes every mismatched probability down and, through the softmax, the pair's own one up
without ever fitting it. phi is one of the losses of the paper's Table 6: L_log = -log(1 - p)
(the default, Table 2's), L_tan = tan p, L_mae = p, L_exp = e^{p - 1}, L_gce = (1 - (1 - p)^q) / q.
RCL needs no division and no warmup. Reading choices and measurements: ``docs/methods/rcl.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hfncl.equations.toolkit import bibtex_citation, same_terms_in_warmup
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option

LOG_EPSILON = 1e-10
"""The authors' epsilon inside -log(1 - p + eps): finite where p rounds to 1 in float32."""


def _log_penalty(p: torch.Tensor, q: float) -> torch.Tensor:
    return -torch.log(1 - p + LOG_EPSILON)


def _gce_penalty(p: torch.Tensor, q: float) -> torch.Tensor:
    return (1 - (1 - p).clamp(min=0) ** q) / q


PENALTIES: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "log": _log_penalty,
    "tan": lambda p, q: torch.tan(p),
    "mae": lambda p, q: p,
    "exp": lambda p, q: torch.exp(p - 1),
    "gce": _gce_penalty,
}
"""phi(p) on p in [0, 1]: each grows with p, so minimising it pushes a complementary pair's probability down."""


@dataclass(frozen=True)
class RCLOptions(MethodOptions, namespace="rcl"):
    """tau (the softmax temperature), the penalty phi (and q of ``"gce"``) and the share of each query's negatives
    used as complementary pairs (1: all B - 1)."""

    tau: float = option(0.05, exclusive_minimum=0)
    penalty: str = option("log", choices=tuple(PENALTIES))
    q: float = option(0.2, exclusive_minimum=0, maximum=1, help="the exponent of the 'gce' penalty")
    negative_share: float = option(
        1.0, exclusive_minimum=0, maximum=1, help="share of the B - 1 negatives each query penalises"
    )


@hookimpl
def options() -> type[RCLOptions]:
    return RCLOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    """The demo's cosine similarity spans [-1, 1], twice the range of SGRAF's sigmoid, so tau 0.1 gives the
    official logits' span (measured in ``docs/methods/rcl.md``)."""
    return {"epochs": 10, "options": {"rcl.tau": 0.1}}


def matching_probabilities(similarity: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(p^{i2t}, p^{t2i}): row i of each is query i's softmax over the batch's other modality (Sec. 3.2).

    ``p_i2t[i, j]`` is the probability image i gives caption j; ``p_t2i[i, j]`` the one caption i gives image j.
    """
    b = similarity.size(0)
    if similarity.dim() != 2 or similarity.size(1) != b:
        raise ValueError(f"similarity must be a square (B, B) matrix, got {tuple(similarity.shape)}")
    logits = similarity / tau
    return logits.softmax(dim=1), logits.t().softmax(dim=1)


def complementary_mask(size: int, share: float, draws: torch.Tensor | None = None) -> torch.Tensor:
    """Which negatives each query penalises: all off-diagonal cells, or, with ``share`` < 1, the int(share * B)
    negatives of each row with the largest ``draws`` (a (B, B) uniform sample; at least one per row)."""
    off_diagonal = ~torch.eye(size, dtype=torch.bool, device=None if draws is None else draws.device)
    if share >= 1 or size < 2:
        return off_diagonal
    if draws is None:
        raise ValueError("complementary_mask needs uniform draws to sample a share of the negatives")
    count = min(size - 1, max(1, int(share * size)))
    ranked = draws.masked_fill(~off_diagonal, -1.0).topk(count, dim=1).indices
    return torch.zeros_like(off_diagonal).scatter(1, ranked, True)


def complementary_contrastive_loss(
    similarity: torch.Tensor,
    tau: float = 0.05,
    penalty: str = "log",
    q: float = 0.2,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per pair i: sum over its complementary pairs j of phi(p^{i2t}_ij) + phi(p^{t2i}_ij) (Sec. 3.2).

    ``mask[i, j]`` (default: every j != i) selects the complementary pairs of query i, the same cells in both
    directions. Returns (B,); RCL's batch loss is the mean.
    """
    if penalty not in PENALTIES:
        raise ValueError(f"penalty must be one of {tuple(PENALTIES)}, got {penalty!r}")
    p_i2t, p_t2i = matching_probabilities(similarity, tau)
    if mask is None:
        mask = ~torch.eye(similarity.size(0), dtype=torch.bool, device=similarity.device)
    phi = PENALTIES[penalty]
    weights = mask.to(similarity.dtype)
    return (phi(p_i2t, q) * weights).sum(dim=1) + (phi(p_t2i, q) * weights).sum(dim=1)


def batch_mask(trainer, outputs) -> torch.Tensor | None:
    """The complementary pairs of this batch: all negatives, or a seeded share of them per query
    (``rcl.negative_share``; drawn from the run's seed, the epoch and the pairs' dataset indices)."""
    share = trainer.options_of(RCLOptions).negative_share
    if share >= 1:
        return None
    size = outputs.similarity.size(0)
    draws = trainer.sample_uniform(outputs.index, (size,), "rcl.negatives").to(outputs.similarity.device)
    return complementary_mask(size, share, draws)


def _complementary_terms(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    settings = trainer.options_of(RCLOptions)
    per_pair = complementary_contrastive_loss(
        outputs.similarity, settings.tau, settings.penalty, settings.q, batch_mask(trainer, outputs)
    )
    return {"complementary_contrastive": per_pair.mean()}


loss, warmup_loss = same_terms_in_warmup(_complementary_terms)


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "rcl.bib")
