"""What a training run reports beside its losses: how well each division found the hidden clean units.

The hidden clean mask(s) of the training data are read here only, to score divisions; no plugin sees them.
"""

from __future__ import annotations

import numpy as np

from hfncl.evaluation import division_quality, partition_report
from hfncl.types import Division


def division_report(
    divisions: list[Division | None], hidden_masks: dict[str, np.ndarray], true_clean: np.ndarray
) -> dict[str, float]:
    """Each division's quality against the hidden clean mask (``division/...``; ``division/netK/...`` with several
    networks), per part of the units where there are several (each modality, ``.../PART/...``), and the share and
    purity of every partition a division's extras mark."""
    report: dict[str, float] = {}
    scored = [("", slice(None), true_clean)]
    if len(hidden_masks) > 1:
        scored += [(f"/{part}", units, hidden_masks[part]) for part, units in part_units(hidden_masks).items()]
    for net, division in enumerate(divisions):
        if division is None:
            continue
        prefix = f"division/net{net}" if len(divisions) > 1 else "division"
        for part, units, truth in scored:
            quality = division_quality(division.clean_prob[units], division.clean[units], truth)
            report.update({f"{prefix}{part}/{k}": float(v) for k, v in quality.items()})
        for name, share, purity in partition_report(division.extras, true_clean):
            report[f"{prefix}/{name}_share"], report[f"{prefix}/{name}_purity"] = share, purity
    return report


def part_units(hidden_masks: dict[str, np.ndarray]) -> dict[str, slice]:
    """Where each part of the units (e.g. each modality) lies among all of them: the parts in order, end to end."""
    units, start = {}, 0
    for part, mask in hidden_masks.items():
        units[part], start = slice(start, start + len(mask)), start + len(mask)
    return units
