"""Pictures of a division: the per-sample statistic, coloured by the hidden mask (NCR Fig. 3b)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from scipy.stats import norm

from hfncl.equations.division import min_max_normalise


def plot_division(
    statistic: torch.Tensor | np.ndarray,
    clean_prob: torch.Tensor | np.ndarray,
    true_clean: np.ndarray,
    path: str | Path,
    title: str = "",
    mixture: torch.Tensor | np.ndarray | None = None,
    statistic_name: str = "",
) -> Path:
    """A division as a PNG in two panels, each a histogram of the truly clean and the noisy pairs (the hidden
    mask): above, the per-sample statistic the division was made from (min-max normalised, named on its axis
    by ``statistic_name``); below, the clean probability the method assigned. Histograms read the same for any
    method, also where the clean probability is no function of the statistic (a line through the sorted
    statistic drew a comb of vertical lines there). The legend sits outside both panels. Needs matplotlib
    (``pip install hfncl[plots]``).

    ``mixture`` (K, 3), a division's ``extras["mixture"]`` (weight, mean, standard deviation
    per Gaussian component on the normalised scale), adds the fitted density, scaled to
    the counts of all pairs (:func:`mixture_counts`; their histogram is outlined in grey):
    each component dashed, their sum solid.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = min_max_normalise(statistic)
    probability = np.asarray(torch.as_tensor(clean_prob).detach().cpu().float())
    truth = np.asarray(true_clean, dtype=bool)
    figure, (counts, probabilities) = plt.subplots(2, 1, figsize=(8.0, 5.6), layout="constrained")
    bins = np.linspace(0.0, 1.0, 41)
    for axes, shown in ((counts, values), (probabilities, probability)):
        axes.hist(shown[truth], bins, alpha=0.6, color="tab:green", label="clean pairs (hidden mask)")
        axes.hist(shown[~truth], bins, alpha=0.6, color="tab:red", label="noisy pairs (hidden mask)")
        axes.set_ylabel("pairs")
    if mixture is not None:
        counts.hist(values, bins, histtype="step", color="dimgray", linewidth=0.8, label="all pairs")
        grid = np.linspace(0.0, 1.0, 400)
        expected = mixture_counts(mixture, grid, len(values), bins[1] - bins[0])
        for component, style in zip(expected, ("--", ":"), strict=False):
            counts.plot(grid, component, color="tab:blue", linestyle=style, linewidth=1.2)
        counts.plot(grid, expected.sum(axis=0), color="tab:blue", linewidth=1.5, label="fitted mixture (all pairs)")
    counts.set_xlabel(f"{statistic_name or 'per-sample statistic of the division'}, min-max normalised")
    probabilities.set_xlabel("clean probability the method assigned")
    figure.legend(*counts.get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    figure.suptitle(title, fontsize=10)
    return save_png(figure, path)


def mixture_counts(
    mixture: torch.Tensor | np.ndarray, grid: np.ndarray, num_samples: int, bin_width: float
) -> np.ndarray:
    """(K, len(grid)) expected histogram counts of each Gaussian component of ``mixture`` at ``grid``.

    ``mixture`` rows are (weight, mean, standard deviation); a component's density times
    its weight, the number of samples and the bin width is the count a bin of that width
    centred at the grid point expects from it.
    """
    parameters = np.asarray(torch.as_tensor(mixture).detach().cpu().double())
    if parameters.ndim != 2 or parameters.shape[1] != 3 or (parameters[:, 2] <= 0).any():
        raise ValueError(
            f"mixture must be a (K, 3) array of (weight, mean, std > 0) rows, got {parameters.tolist()}"
        )
    weight, mean, std = (parameters[:, i, None] for i in range(3))
    return weight * norm.pdf(grid[None, :], loc=mean, scale=std) * num_samples * bin_width


def plot_training_curves(history: list[dict], path: str | Path, metric: str = "rsum") -> Path:
    """Loss terms, validation ``metric`` and division AUC by epoch (a trainer's history records) as a PNG.

    Panels without data (no validation, no division) are left out. Needs matplotlib.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(keys: list[str]) -> dict[str, tuple[list[int], list[float]]]:
        return {
            key: ([r["epoch"] for r in history if key in r], [r[key] for r in history if key in r]) for key in keys
        }

    keys = sorted({key for record in history for key in record})
    panels = [
        ("training loss", series([k for k in keys if k.startswith("train/")])),
        (f"validation {metric}", series([k for k in keys if k == f"val/{metric}"])),
        ("division AUC", series([k for k in keys if k.startswith("division") and k.endswith("/auc")])),
    ]
    panels = [(title, lines) for title, lines in panels if lines]
    figure, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.2 * max(len(panels), 1), 3.4), squeeze=False)
    for axis, (title, lines) in zip(axes[0], panels, strict=False):  # one empty axis when no panel
        for key, (epochs, values) in lines.items():
            axis.plot(epochs, values, marker="o", markersize=3, label=key.split("/", 1)[1] if "/" in key else key)
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("epoch")
        if len(lines) > 1:
            axis.legend(fontsize=7)
    return save_png(figure, path)


def save_png(figure, path: str | Path) -> Path:
    """Lay out ``figure``, write it as a PNG at ``path`` (parents created), close it; return the path."""
    import matplotlib.pyplot as plt

    if figure.get_layout_engine() is None:  # a figure laid out as it was made ("constrained") keeps its layout
        figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
