"""Pictures of a division: the per-sample statistic, coloured by the hidden mask (NCR Fig. 3b)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hfncl.division import min_max_normalise


def plot_division(
    statistic: torch.Tensor | np.ndarray,
    clean_prob: torch.Tensor | np.ndarray,
    true_clean: np.ndarray,
    path: str | Path,
    title: str = "",
) -> Path:
    """Histogram of the min-max normalised statistic for truly clean and noisy pairs, with the
    clean probability the method assigned, as a PNG. Needs matplotlib (``pip install hfncl[plots]``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = min_max_normalise(statistic)
    probability = np.asarray(torch.as_tensor(clean_prob).detach().cpu().float())
    truth = np.asarray(true_clean, dtype=bool)
    figure, counts = plt.subplots(figsize=(6.4, 4.0))
    bins = np.linspace(0.0, 1.0, 61)
    counts.hist(values[truth], bins, alpha=0.6, color="tab:green", label="clean pairs (hidden mask)")
    counts.hist(values[~truth], bins, alpha=0.6, color="tab:red", label="noisy pairs (hidden mask)")
    counts.set_xlabel("per-sample statistic, min-max normalised")
    counts.set_ylabel("pairs")
    curve = counts.twinx()
    order = np.argsort(values)
    curve.plot(values[order], probability[order], color="black", linewidth=1.5, label="clean probability")
    curve.set_ylim(0.0, 1.02)
    curve.set_ylabel("clean probability")
    handles = counts.get_legend_handles_labels()[0] + curve.get_legend_handles_labels()[0]
    counts.legend(handles, [h.get_label() for h in handles], loc="upper center", fontsize=8)
    counts.set_title(title, fontsize=10)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
