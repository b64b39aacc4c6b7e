"""TcVSE: Trust-consistent Visual Semantic Embedding (tcvse.txt, Sec. 2, 3.1, Algorithm 1).

Two VSE branches with max-pooled region / word features and cosine similarity
(network 0: i2t, network 1: t2i), trained jointly. The similarities of a batch of K
pairs are evidence, e = g(s) = exp(s / tau) or ReLU(s / tau) (Eq. 2), of a Dirichlet
opinion per query over the K items of the other modality, alpha = e + 1 (Eq. 3). The
i2t branch is trained with its image queries (rows of its similarity matrix), the
t2i branch with its caption queries (columns), each with the uncertainty-aware cross
entropy (Eq. 5-6) plus lambda(epoch) times the KL of Eq. 7 (Eq. 8-9). After that
update, Algorithm 1's second step recomputes both branches' opinions with a fresh
forward pass and minimises the L1 gap between their beliefs (Eq. 10-11), MaxTimes
times per batch, each time with its own update. Retrieval ranks with the i2t branch,
the t2i branch or their ensemble (the mean of both similarities), in both directions
(Table 1), and reports each query's Dirichlet uncertainty u = K / S (Eq. 3).

Reading choices where the paper leaves room (lambda's schedule, which gradients Eq. 10-11 let
flow, one augmentation per batch, the augmentation itself, the ensemble's uncertainty):
``docs/methods/tcvse.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hfncl.data.augment import drop_regions, perturb_words
from hfncl.equations.evidential import EVIDENCE_FUNCTIONS, opinion, scaled_evidence
from hfncl.equations.evidential import kl_to_uniform as evidential_kl
from hfncl.equations.toolkit import bibtex_citation, same_terms_in_warmup
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions, option

I2T, T2I = 0, 1
NETWORKS = 2
BRANCHES = ("i2t", "t2i", "ensemble")
DIRECTIONS = ("i2t", "t2i")
WORD_OPERATIONS = {"mask": 0.5, "discard": 0.4, "swap": 0.1}


@dataclass(frozen=True)
class TcVSEOptions(MethodOptions, namespace="tcvse"):
    """tau and g of Eq. 2, lambda's step (Eq. 8), MaxTimes (Algorithm 1), the augmentation rates, the ranking branch."""

    tau: float = option(0.05, exclusive_minimum=0, exclusive_maximum=1)
    evidence: str = option("exp", choices=EVIDENCE_FUNCTIONS)
    kl_step: float = option(0.005, minimum=0)
    max_times: int = option(3, minimum=0)
    region_drop: float = option(0.2, minimum=0, exclusive_maximum=1)
    word_augment: float = option(0.2, minimum=0, exclusive_maximum=1)
    inference_branch: str = option("ensemble", choices=BRANCHES)


# ----------------------------------------------------------------------------- equations


def uncertainty_cross_entropy(alpha: torch.Tensor) -> torch.Tensor:
    """Eq. 5-6: the mean over the K queries (rows) of psi(S_i) - psi(alpha_ii).

    ``alpha`` (K, K) holds one Dirichlet per row; the matching item of query i is
    item i (the label matrix is the identity I_K).
    """
    _check_square(alpha)
    return (torch.digamma(alpha.sum(dim=1)) - torch.digamma(alpha.diagonal())).mean()


def kl_to_uniform(alpha: torch.Tensor) -> torch.Tensor:
    """Eq. 7: mean over the queries of KL[D(p_i | alpha~_i) || D(p_i | <1, ..., 1>)].

    alpha~_i = I_K(i,:) + (1 - I_K(i,:)) * alpha_i keeps only the evidence of the
    negatives. KL = log Gamma(S~_i) - sum_k log Gamma(alpha~_ik) - log Gamma(K)
    + sum_k (alpha~_ik - 1)(psi(alpha~_ik) - psi(S~_i)), i.e. -log(Gamma(K) B(alpha~_i)) + ...
    """
    _check_square(alpha)
    return evidential_kl(alpha, torch.eye(alpha.size(0), dtype=alpha.dtype, device=alpha.device)).mean()


def kl_weight(epoch: int, step: float) -> float:
    """lambda of Eq. 8, increasing with the epoch: min(1, step * epoch)."""
    return min(1.0, step * epoch)


def uncertainty_aware_loss(
    query_similarity: torch.Tensor, tau: float, function: str, kl_lambda: float
) -> dict[str, torch.Tensor]:
    """Eq. 8 for one branch: ``uce`` (Eq. 6) and ``kl`` (Eq. 7, already weighted by lambda).

    ``query_similarity`` (K, K) has the branch's queries as rows (the i2t branch's
    similarity, the transpose of the t2i branch's).
    """
    alpha = scaled_evidence(query_similarity, tau, function) + 1
    return {"uce": uncertainty_cross_entropy(alpha), "kl": kl_lambda * kl_to_uniform(alpha)}


def consistency_loss(
    i2t_similarity: torch.Tensor, t2i_similarity: torch.Tensor, tau: float, function: str
) -> torch.Tensor:
    """Eq. 10-11: L_c = 1/K sum_k [L_c^i2t(b_k, b^_k) + L_c^t2i(b^_k, b_k)], L_c^dir = 1/K sum |b - b^|.

    ``i2t_similarity`` and ``t2i_similarity`` (K, K) are the two branches' similarity
    matrices of the same batch (images as rows). For image queries, b^i2t comes from
    the i2t branch (detached: the target) and b^^i2t from the t2i branch; for caption
    queries, b^t2i from the t2i branch (detached) and b^^t2i from the i2t branch.
    """
    _check_square(i2t_similarity)
    if i2t_similarity.shape != t2i_similarity.shape:
        raise ValueError(
            f"the branches' similarities must have the same shape, got {tuple(i2t_similarity.shape)} "
            f"and {tuple(t2i_similarity.shape)}"
        )

    def beliefs(query_similarity: torch.Tensor) -> torch.Tensor:
        return opinion(scaled_evidence(query_similarity, tau, function))[0]

    image_queries = (beliefs(i2t_similarity.detach()) - beliefs(t2i_similarity)).abs().mean()
    caption_queries = (beliefs(t2i_similarity.t().detach()) - beliefs(i2t_similarity.t())).abs().mean()
    return image_queries + caption_queries


def _check_square(matrix: torch.Tensor) -> None:
    if matrix.dim() != 2 or matrix.size(0) != matrix.size(1) or matrix.size(0) < 2:
        raise ValueError(f"expected a square (K, K) matrix with K >= 2 over a batch, got {tuple(matrix.shape)}")


# ----------------------------------------------------------------------------- augmentation


def augment(trainer, batch: dict[str, torch.Tensor], settings: TcVSEOptions) -> dict[str, torch.Tensor]:
    """x' = Augment(x) of Algorithm 1: random region dropping and word mask / discard / swap.

    Each pair's draws come from ``trainer.sample_uniform``: they depend on the seed, the
    epoch and the pair's dataset index, not on the number of processes or a resume. An
    augmentation whose rate is 0 is skipped, draws included.
    """
    index, augmented = batch["index"], dict(batch)
    if settings.word_augment:
        captions = batch["captions"]
        augmented["captions"], augmented["lengths"] = perturb_words(
            captions,
            batch["lengths"],
            vocab_size=trainer.model.config.vocab_size,
            draws=trainer.sample_uniform(index, (*captions.shape[1:], 2), "tcvse.words"),
            **{operation: share * settings.word_augment for operation, share in WORD_OPERATIONS.items()},
        )
    if settings.region_drop:
        images = batch["images"]
        augmented["images"] = drop_regions(
            images, settings.region_drop, trainer.sample_uniform(index, images.shape[1:2], "tcvse.regions")
        )
    return augmented


# ----------------------------------------------------------------------------- hooks
@hookimpl
def options() -> type[TcVSEOptions]:
    return TcVSEOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    return {
        "epochs": 2,
        "learning_rate": 5e-4,
        "optimizer": "adamw",
        "weight_decay": 1e-4,
        "lr_decay_epochs": [10, 20],
        "lr_decay_factor": 0.9,
    }


@hookimpl
def model_defaults() -> dict[str, Any]:
    return {"image_pooling": "max", "text_pooling": "max"}


@hookimpl
def num_networks(config) -> int:
    return NETWORKS


@hookimpl
def training_passes(config, num_networks) -> list[list[int]]:
    """Both branches in one pass: Algorithm 1 updates them on the same batch (stated, so a co-teaching
    plugin that trains networks in turn is refused at start)."""
    return [list(range(num_networks))]


def _evidential_terms(trainer, batch, outputs, net: int) -> dict[str, torch.Tensor]:
    """Eq. 9 for one branch: the i2t branch with its image queries (rows), the t2i branch with its captions
    (columns)."""
    settings = trainer.options_of(TcVSEOptions)
    similarity = outputs.similarity if net == I2T else outputs.similarity.t()
    return uncertainty_aware_loss(
        similarity, settings.tau, settings.evidence, kl_weight(trainer.epoch, settings.kl_step)
    )


loss, warmup_loss = same_terms_in_warmup(_evidential_terms)


@hookimpl
def train_step(trainer, batch, networks) -> dict[str, float]:
    """Algorithm 1 on one batch: the uncertainty-aware update (Eq. 9), then MaxTimes consistency updates (Eq. 11).

    The first update is the trainer's default objective on the augmented batch x'
    (``trainer.compute_loss``): this plugin's Eq. 9 terms per branch plus the terms of
    any plugin combined with it.
    """
    if sorted(networks) != [I2T, T2I]:
        raise ValueError(f"TcVSE trains its i2t and t2i branches jointly (networks [0, 1]), got the pass {networks}")
    settings = trainer.options_of(TcVSEOptions)
    inputs = augment(trainer, batch, settings)
    total, metrics = trainer.compute_loss(inputs, networks)
    trainer.optimize(total, networks)
    consistency = 0.0
    for _ in range(settings.max_times):
        gap = consistency_loss(
            trainer.forward(I2T, inputs).similarity,
            trainer.forward(T2I, inputs).similarity,
            settings.tau,
            settings.evidence,
        )
        trainer.optimize(gap, networks)
        consistency += float(gap.detach())
    metrics["consistency"] = consistency / max(settings.max_times, 1)
    return metrics


def _branch_similarities(model, image_embeds: torch.Tensor, text_embeds: torch.Tensor, direction: str) -> torch.Tensor:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if len(model.networks) != NETWORKS:
        raise ValueError(f"a TcVSE model has {NETWORKS} networks (i2t, t2i), this one has {len(model.networks)}")
    return model.network_similarities(image_embeds, text_embeds)


def _chosen(values: torch.Tensor, branch: str) -> torch.Tensor:
    """The i2t branch's, the t2i branch's or the mean of both of per-branch ``values`` (2, ...)."""
    if branch == "ensemble":
        return values.mean(dim=0)
    return values[I2T if branch == "i2t" else T2I]


@hookimpl
def inference_similarity(model, image_embeds, text_embeds, direction) -> torch.Tensor:
    """The similarity of ``tcvse.inference_branch``: the i2t branch, the t2i branch or their mean (both directions)."""
    settings = TcVSEOptions.read(model.config.plugin_options)
    return _chosen(_branch_similarities(model, image_embeds, text_embeds, direction), settings.inference_branch)


@hookimpl
def query_uncertainty(model, image_embeds, text_embeds, direction) -> torch.Tensor:
    """u = K / S (Eq. 3) of each query's opinion over the whole given gallery, for the chosen branch.

    ``"i2t"``: one value per image (its row of similarities, K = number of captions);
    ``"t2i"``: one per caption (its column, K = number of images). The ensemble
    averages the two branches' u.
    """
    settings = TcVSEOptions.read(model.config.plugin_options)
    similarities = _branch_similarities(model, image_embeds, text_embeds, direction)
    queries = similarities if direction == "i2t" else similarities.transpose(1, 2)
    uncertainty = opinion(scaled_evidence(queries, settings.tau, settings.evidence))[1]
    return _chosen(uncertainty, settings.inference_branch).to(similarities.dtype)


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "tcvse.bib")
