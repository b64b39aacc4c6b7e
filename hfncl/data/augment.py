"""Data augmentation of region features and captions (VSE-infinity's region dropping and word perturbation).

Every function takes its random draws as an argument (or from torch's global generator), so
that a caller can make them depend on each sample's dataset index alone.
"""

from __future__ import annotations

import torch

from hfncl.data.vocab import Vocabulary


def drop_regions(images: torch.Tensor, rate: float, draws: torch.Tensor | None = None) -> torch.Tensor:
    """Drop each region of (B, R, D) ``images`` with probability ``rate``, keeping at least one per image.

    A dropped region is replaced by a copy of the image's first kept region: the same
    as discarding it under max pooling. ``draws`` are (B, R) uniform numbers in [0, 1)
    (default: torch's global generator); region r of image b is dropped if its draw is
    below ``rate``, and the region with the largest draw is always kept.
    """
    if rate == 0:
        return images
    if images.dim() != 3:
        raise ValueError(
            f"region dropping (rate {rate}) needs region features (B, R, D), got images of shape "
            f"{tuple(images.shape)}; with a pixel image tower set the drop rate to 0"
        )
    draws = torch.rand(images.shape[:2], device=images.device) if draws is None else draws.to(images.device)
    if draws.shape != images.shape[:2]:
        raise ValueError(
            f"draws must have the (images, regions) shape {tuple(images.shape[:2])}, got {tuple(draws.shape)}"
        )
    keep = draws >= rate
    keep[torch.arange(images.size(0), device=images.device), draws.argmax(dim=1)] = True
    first_kept = keep.to(torch.int8).argmax(dim=1)
    replacement = images[torch.arange(images.size(0), device=images.device), first_kept]
    return torch.where(keep[..., None], images, replacement[:, None, :])


def perturb_words(
    captions: torch.Tensor,
    lengths: torch.Tensor,
    *,
    mask: float = 0.0,
    discard: float = 0.0,
    swap: float = 0.0,
    vocab_size: int | None = None,
    draws: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask, discard or swap the words of (B, L) ``captions`` (``<start>`` w_1 .. w_n ``<end>``, 0-padded).

    Each word w_1..w_n, independently: with probability ``mask`` it becomes ``<unk>``,
    with ``discard`` it is removed (the caption closes up, its length shrinks), with
    ``swap`` it becomes a random vocabulary word (ids 4 .. vocab_size - 1, past the
    special tokens). ``<start>``, ``<end>`` and padding are untouched. ``draws`` are
    (B, L, 2) uniform numbers in [0, 1) (default: torch's global generator): the first
    chooses the word's fate (mask below ``mask``, swap in the next ``swap``, discard in
    the next ``discard``), the second the swapped-in word. Returns the new captions
    (same width) and lengths.
    """
    if min(mask, discard, swap) < 0 or mask + discard + swap > 1:
        raise ValueError(f"word probabilities must be >= 0 and sum to <= 1, got {mask}, {discard}, {swap}")
    if swap > 0 and (vocab_size is None or vocab_size <= len(Vocabulary.SPECIALS)):
        raise ValueError(f"swapping words needs a vocab_size above the {len(Vocabulary.SPECIALS)} special tokens")
    positions = torch.arange(captions.size(1), device=captions.device)
    lengths_here = lengths.to(captions.device)
    word = (positions[None, :] >= 1) & (positions[None, :] < lengths_here[:, None] - 1)
    if draws is None:
        draws = torch.rand((*captions.shape, 2), device=captions.device)
    if draws.shape != (*captions.shape, 2):
        raise ValueError(
            f"draws must have the shape {(*captions.shape, 2)} of (captions, words, 2), got {tuple(draws.shape)}"
        )
    draws, word_draws = draws[..., 0].to(captions.device), draws[..., 1].to(captions.device)
    out = torch.where(word & (draws < mask), torch.full_like(captions, Vocabulary.unk_id), captions)
    swapped = word & (draws >= mask) & (draws < mask + swap)
    if swapped.any() and vocab_size is not None:
        specials = len(Vocabulary.SPECIALS)
        random_words = specials + (word_draws * (vocab_size - specials)).long().clamp(max=vocab_size - specials - 1)
        out = torch.where(swapped, random_words, out)
    kept = (positions[None, :] < lengths_here[:, None]) & ~(
        word & (draws >= mask + swap) & (draws < mask + swap + discard)
    )
    order = torch.sort((~kept).to(torch.int8), dim=1, stable=True).indices
    new_lengths = kept.sum(dim=1)
    out = out.gather(1, order) * (positions[None, :] < new_lengths[:, None])
    return out, new_lengths.to(lengths.dtype).to(lengths.device)
