"""SCAN's similarity head (Lee et al., "Stacked Cross Attention for Image-Text Matching",
ECCV 2018), text-to-image formulation: the head of NCR-SCAN (NCR Sec. 4.5.1, Fig. 3-4).

Regions v_j (projected to the joint space) and words t_i (the biGRU's states) are
L2-normalised; for every image-caption pair, each word attends to the regions:

- s_ij = v_j^T t_i, the cosine of region j and word i (SCAN Eq. 1);
- s^_ij = [s_ij]_+ / sqrt(sum_i [s_ij]_+^2), clipped at 0 and normalised over the words
  (Eq. 2 in its text-to-image form, Sec. 3.3; the option ``scan.attention_negative_slope`` a > 0 clips
  with max(s, a s) instead, as the official code's ``clipped_l2norm`` LeakyReLU(0.1));
- alpha_ij = softmax_j(lambda_1 s^_ij) over the image's regions, lambda_1 =
  ``scan.attention_lambda`` (9), and the attended image vector a_i = sum_j alpha_ij v_j (Eq. 3);
- the relevance R(t_i, a_i) = t_i^T a_i / (||t_i|| ||a_i||) (Eq. 4);
- pooled over the caption's words by LogSumExp, S_LSE = (1 / lambda_2) log sum_i exp(lambda_2 R_i)
  with lambda_2 = ``scan.lse_lambda`` (6) (Eq. 5), or by the average S_AVG = mean_i R_i (Eq. 6)
  (``scan.pooling``); the head's options are :class:`ScanOptions`.

The equation numbers are those of SCAN's Sec. 3.2 as remembered (the paper is not among the
seed papers; the formulas above are the specification). The attention is SGRAF's
(:func:`hfncl.models.sgraf_nodes.attention_weights`, which this head shares).

How it is computed: a_i is never formed. t_i^T a_i = sum_j alpha_ij s_ij reuses the cosines,
and ||a_i||^2 = alpha_i^T G alpha_i with each image's (R, R) Gram matrix G = V V^T, so the
largest tensor of a block is (rows, captions, L, R). Pairs are scored in the same
memory-bounded blocks of equal-length captions as SGR / SAF
(:func:`~hfncl.models.sgraf_kernels.plan_blocks`) in training, statistics passes and
evaluation. The score is a cosine-like value used as it is (no sigmoid): :meth:`ScanHead.squash`
is the identity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from hfncl.models.encoders import l2norm
from hfncl.models.heads import HeadPlugin, concat_packed, full_precision, unpack_local, valid_length
from hfncl.models.sgraf_kernels import PairBlock, block_budget, plan_blocks, region_gram
from hfncl.models.sgraf_nodes import assemble, attention_weights
from hfncl.options import HeadOptions, option

_EPS = 1e-8
SCAN_POOLINGS = ("lse", "avg")
"""Poolings of the word relevances: LogSumExp (Eq. 5) and average (Eq. 6)."""


class ScanHead(nn.Module):
    """SCAN's text-to-image stacked cross attention score of every image with every caption.

    Args:
        smooth: lambda_1, the inverse temperature of the softmax over regions (9 in SCAN).
        pooling: ``"lse"`` (Eq. 5) or ``"avg"`` (Eq. 6).
        lse_lambda: lambda_2 of the LogSumExp pooling (6 in SCAN).
        negative_slope: slope a of the clipping max(s, a s) (0: SCAN's [s]_+).
        block_bytes: memory budget of a block's largest tensor; None: the device's default
            (:func:`~hfncl.models.sgraf_kernels.block_budget`).
    """

    logits: bool = False
    """Set by :meth:`hfncl.models.MatchingNetwork.view_scores` as for SGR / SAF; SCAN's score is the same either way."""

    def __init__(
        self,
        smooth: float,
        pooling: str = "lse",
        lse_lambda: float = 6.0,
        negative_slope: float = 0.0,
        block_bytes: int | None = None,
    ) -> None:
        super().__init__()
        if pooling not in SCAN_POOLINGS:
            raise ValueError(f"ScanHead pooling must be one of {SCAN_POOLINGS}, got {pooling!r}")
        self.smooth = smooth
        self.pooling = pooling
        self.lse_lambda = lse_lambda
        self.negative_slope = negative_slope
        self.block_bytes = block_bytes

    @staticmethod
    def join(parts: Sequence[torch.Tensor], dim: int = 0) -> torch.Tensor:
        """Concatenate packed local features of several batches along ``dim`` (:func:`concat_packed`)."""
        return concat_packed(parts, dim=dim)

    @staticmethod
    def squash(scores: torch.Tensor) -> torch.Tensor:
        """Similarities of the scores: the scores themselves (SCAN uses its score as the similarity)."""
        return scores

    def within(self, embeds: torch.Tensor, modality: str) -> torch.Tensor:
        """Score (B, B) of every item (B, T, d + 1), packed, with every other of the same modality: the rows
        in the image's place, the columns in the caption's (the attention has no per-modality part)."""
        return self(embeds, embeds)

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        """S(I, T) (n, m) of every image (n, R, d + 1) with every caption (m, L, d + 1), both packed.

        In float32 under autocast too: S is an average or log-sum-exp of per-word relevances whose
        bf16 / fp16 rounding would make captions tie in a ranking, and the head is cheap."""
        with torch.autocast(image_embeds.device.type, enabled=False):
            return self._scores(full_precision(image_embeds), full_precision(text_embeds))

    def _scores(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        regions, region_mask = unpack_local(image_embeds)
        words, word_mask = unpack_local(text_embeds)
        if not bool(region_mask.any(dim=1).all()) or not bool(word_mask.any(dim=1).all()):
            raise ValueError("every image and caption needs at least one valid position (an all-padding item came)")
        length = int(valid_length(region_mask).max().item())
        regions, region_mask = l2norm(regions[:, :length]), region_mask[:, :length]
        words = l2norm(words)
        gram = region_gram(regions)
        blocks, order = plan_blocks(
            regions.size(0), valid_length(word_mask), length, words.element_size(),
            block_budget(self.block_bytes, words.device),
        )
        scores = [self._block(regions, region_mask, gram, words, word_mask, block) for block in blocks]
        columns = assemble(blocks, scores)
        return columns[:, torch.argsort(order).to(columns.device)]

    def _block(
        self,
        regions: torch.Tensor,
        region_mask: torch.Tensor,
        gram: torch.Tensor,
        words: torch.Tensor,
        word_mask: torch.Tensor,
        block: PairBlock,
    ) -> torch.Tensor:
        """S of the block's image rows (r) with its captions (c), cut to their length: (r, c)."""
        captions = block.captions.to(words.device)
        words, word_mask = words[captions, : block.length], word_mask[captions, : block.length]
        regions, region_mask, gram = regions[block.rows], region_mask[block.rows], gram[block.rows]
        cosine = torch.einsum("nrd,mld->nmlr", regions, words)
        alpha = attention_weights(cosine, region_mask, word_mask, self.smooth, self.negative_slope)
        dot = (alpha * cosine).sum(dim=-1)
        n, m, length, count = alpha.shape
        flat = alpha.reshape(n, m * length, count)
        squared = ((flat @ gram) * flat).sum(dim=-1).view(n, m, length)
        relevance = dot / squared.clamp_min(_EPS**2).sqrt()
        valid = word_mask.unsqueeze(0).expand_as(relevance)
        if self.pooling == "avg":
            return (relevance * valid).sum(dim=-1) / valid.sum(dim=-1)
        logits = (self.lse_lambda * relevance).masked_fill(~valid, float("-inf"))
        return torch.logsumexp(logits, dim=-1) / self.lse_lambda


@dataclass(frozen=True)
class ScanOptions(HeadOptions, namespace="scan"):
    """The SCAN head's options (a config of checkpoint format 2 or older stored ``pooling`` and ``lse_lambda`` as
    ``scan_pooling`` and ``scan_lse_lambda``)."""

    attention_lambda: float = option(9.0, exclusive_minimum=0, help="lambda_1, the inverse temperature of the "
                                     "softmax over regions (Eq. 3; 9)")
    attention_negative_slope: float = option(0.0, minimum=0, exclusive_maximum=1, help="slope a of the clipping "
                                             "max(s, a s) (0: SCAN's [s]_+; 0.1: the official code's LeakyReLU)")
    pooling: str = option("lse", choices=SCAN_POOLINGS, help="pooling of the word relevances: lse (Eq. 5) or avg "
                          "(Eq. 6)")
    lse_lambda: float = option(6.0, exclusive_minimum=0, help="lambda_2 of the LogSumExp pooling (6)")

    flat_names: ClassVar[dict[str, str]] = {"pooling": "scan_pooling", "lse_lambda": "scan_lse_lambda"}


def build_scan_head(config: Any) -> ScanHead:
    """The :class:`ScanHead` of an :class:`~hfncl.models.NCLConfig` with its ``scan.*`` head options."""
    options = ScanOptions.read(config.head_options)
    return ScanHead(options.attention_lambda, options.pooling, options.lse_lambda, options.attention_negative_slope)


SCAN = HeadPlugin(build=build_scan_head, options=ScanOptions)
"""The SCAN head (entry point ``scan``)."""
