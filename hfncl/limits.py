"""Bounds on a model's sizes, checked before anything is allocated: a ``config.json`` or a flag asking for a
billion-wide layer is refused in one line instead of trying to allocate tens of gigabytes.

The bounds are far above any model the papers train (1024-d joint spaces, 300-d words, vocabularies of 10^4 to
10^5 words, 36 regions of 2048-d features) and below what would not fit a GPU's memory.
"""

from __future__ import annotations

from typing import Any

SIZE_LIMITS = {
    "embed_dim": 1 << 16,
    "word_dim": 1 << 16,
    "image_dim": 1 << 16,
    "text_dim": 1 << 16,
    "sim_dim": 1 << 16,
    "hidden_dim": 1 << 17,
    "vocab_size": 1 << 24,
    "image_regions": 1 << 16,
    "text_layers": 64,
    "num_networks": 64,
    "image_views": 64,
    "reasoning_steps": 64,
    "num_classes": 1 << 24,
}
"""The largest value of each size field."""
MAX_TENSOR_ELEMENTS = 1 << 31
"""The most elements of one weight matrix (8 GiB of float32)."""
TENSOR_SHAPES = (("vocab_size", "word_dim"), ("image_dim", "embed_dim"), ("word_dim", "embed_dim"),
                 ("embed_dim", "embed_dim"), ("hidden_dim", "hidden_dim"), ("image_dim", "hidden_dim"),
                 ("text_dim", "hidden_dim"))
"""Pairs of fields whose product is the size of one of the model's weight matrices."""


def check_sizes(values: dict[str, Any], owner: str) -> None:
    """Refuse a size field of ``values`` (integers; others are left to the owner's type checks) above its
    :data:`SIZE_LIMITS` bound, or a weight matrix over :data:`MAX_TENSOR_ELEMENTS`, naming ``owner.field``.

    Raises:
        ValueError: in one line, naming the field, its value and its bound.
    """
    sizes = {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
    for name, bound in SIZE_LIMITS.items():
        if sizes.get(name, 0) > bound:
            raise ValueError(f"{owner}.{name} must be at most {bound}, got {sizes[name]} (no allocation was tried)")
    for rows, columns in TENSOR_SHAPES:
        if rows in sizes and columns in sizes and sizes[rows] * sizes[columns] > MAX_TENSOR_ELEMENTS:
            raise ValueError(
                f"{owner}.{rows} x {owner}.{columns} = {sizes[rows]} x {sizes[columns]} is a weight matrix of more "
                f"than {MAX_TENSOR_ELEMENTS} elements (no allocation was tried)"
            )
