"""``bow``: a bag-of-words text tower, e_T = norm(mean over the caption's words w of W x_w + b), x_w learned."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class BagOfWords(nn.Module):
    """Word vectors of hfncl's vocabulary projected into the joint space, mean-pooled (a text tower of hfncl's
    contract: ``forward`` and ``local`` read token ids (B, L) padded with 0 and their lengths (B,))."""

    def __init__(self, vocab_size: int, word_dim: int, embed_dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=0)
        self.fc = nn.Linear(word_dim, embed_dim)

    def local(self, captions: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected word vectors (B, T, embed_dim), T the longest caption, and the real-word mask (B, T)."""
        longest = int(lengths.max())
        positions = torch.arange(longest, device=captions.device)
        return self.fc(self.embed(captions[:, :longest])), positions[None, :] < lengths.to(captions.device)[:, None]

    def forward(self, captions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Unit-norm caption embeddings (B, embed_dim): the mean of the real words' projected vectors."""
        states, mask = self.local(captions, lengths)
        weights = mask.unsqueeze(-1).to(states.dtype)
        return nn.functional.normalize((states * weights).sum(dim=1) / weights.sum(dim=1), dim=-1)


def build_bow_tower(config: Any) -> BagOfWords:
    """The entry point: hfncl passes the model's ``NCLConfig``, of which the tower reads three sizes."""
    return BagOfWords(config.vocab_size, config.word_dim, config.embed_dim)
