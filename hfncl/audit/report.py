"""What an audit writes: the table as Parquet and CSV, a self-contained HTML page (with thumbnails of raw images), a
cleaned copy of the split in its own format; and the estimated noise rate with its confidence interval."""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import datasets
import numpy as np

from hfncl.audit.calibration import exceeding, storey_lambda, storey_noise_rate
from hfncl.audit.data import AuditData
from hfncl.audit.output import TABLE_FILES, check_split_name, write_staged_split

HTML_ROWS = 500
"""The most suspicious pairs the page lists."""
THUMBNAIL_PIXELS = 96
"""The longest side of an image's thumbnail on the page (an inline JPEG of a few kilobytes)."""

ImageReader = Callable[[Sequence[int] | np.ndarray], list[Any]]
"""Image numbers -> PIL images (:meth:`hfncl.audit.data.AuditData.image_reader`)."""


@dataclass(frozen=True)
class NoiseRate:
    """Storey's estimated share of wrong pairs among ``pairs`` (:mod:`hfncl.audit.calibration`), ``rate``, with its
    ``confidence`` interval ``[low, high]``; ``flagged`` pairs (round(rate * pairs)) are flagged."""

    flagged: int
    pairs: int
    rate: float
    low: float
    high: float
    confidence: float

    def __str__(self) -> str:
        return (
            f"{self.rate:.1%} ({self.confidence:.0%} interval {self.low:.1%}-{self.high:.1%}; "
            f"{self.flagged} of {self.pairs} pairs flagged)"
        )


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for a binomial proportion (E. B. Wilson, J. Am. Stat. Assoc. 22, 1927, 209-212).

    With p = successes / n and z the standard normal quantile of (1 + confidence) / 2:

        (p + z^2 / 2n  -/+  z * sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n)

    It stays inside [0, 1] and keeps its coverage near 0 and 1, where the Wald interval collapses.

    Raises:
        ValueError: ``trials`` < 1, ``successes`` outside ``0..trials`` or ``confidence`` outside (0, 1).
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"wilson_interval needs 0 <= successes <= trials and trials >= 1, got {successes}/{trials}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    p = successes / trials
    centre = p + z * z / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    scale = 1 + z * z / trials
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


def table_column(table: datasets.Dataset, name: str) -> np.ndarray:
    """Column ``name`` of an audit table as an array, read at once (iterating ``table[name]``, a lazy column in
    ``datasets`` 4, formats it row by row: seconds per 100K rows)."""
    return np.asarray(table[name][:])


def estimated_noise_rate(table: datasets.Dataset, confidence: float = 0.95) -> NoiseRate:
    """Storey's estimated noise rate of an audit table (:func:`~hfncl.audit.calibration.storey_noise_rate` of its
    ``p_image`` and ``p_caption``), with the Wilson interval (:func:`wilson_interval`) of the count it scales,
    scaled alike.

    Held-out p-values (every row's ``held_out``: :mod:`hfncl.audit.cross_fitting`) and a refit's (every row's
    ``refit``: :mod:`hfncl.audit.refit`) are read at :data:`~hfncl.audit.calibration.HELD_OUT_LAMBDA`, in-sample ones
    at :data:`~hfncl.audit.calibration.LAMBDA`.
    The interval covers the sampling of the pairs, not the estimator's bias: in-sample, wrong pairs the model has
    partly learnt rank higher than the uniform p-value assumes, which lowers the estimate; held out, right pairs
    the model cannot match count as wrong, which raises it (``benchmarks/README.md`` measures both).
    """
    p_image, p_caption = table_column(table, "p_image"), table_column(table, "p_caption")
    held_out = "held_out" in table.column_names and bool(np.all(table_column(table, "held_out")))
    refit = "refit" in table.column_names and bool(np.all(table_column(table, "refit")))
    lam = storey_lambda(held_out or refit)
    pairs, scale = len(table), 1 - lam
    low, high = wilson_interval(round(exceeding(p_image, p_caption, lam)), pairs, confidence)
    flagged = int(np.count_nonzero(table_column(table, "flagged")))
    rate = storey_noise_rate(p_image, p_caption, lam)
    return NoiseRate(flagged, pairs, rate, min(1.0, low / scale), min(1.0, high / scale), confidence)


COLUMNS_NOTE = (
    "<b>p_image</b>: the rank of the pair's image among all images for its caption, as a p-value: near 0 when the "
    "model ranks it first, uniform on (0, 1] for an image drawn at random. <b>p_caption</b>: the same for the "
    "caption among the other images' captions for its image. A wrong pair has large p-values in both directions. "
    "The noise rate is estimated from how many p-values are large, so a weak model, which cannot match right pairs "
    "either, overestimates it; a model that has partly learnt the wrong pairs underestimates it."
)
"""The audit page's note on its p-value columns and on the estimate's bias (:mod:`hfncl.audit.calibration`)."""


def write_table(
    table: datasets.Dataset, output_dir: Path, rows: int = HTML_ROWS, images: ImageReader | None = None
) -> list[Path]:
    """Write ``audit.parquet``, ``audit.csv`` and ``audit.html`` (the ``rows`` most suspicious pairs, with
    thumbnails of ``images``' images) into ``output_dir``; return their paths."""
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = [output_dir / name for name in TABLE_FILES]
    table.to_parquet(str(paths[0]))
    table.to_csv(str(paths[1]), index=False)
    paths[2].write_text(audit_page(table, rows, images), encoding="utf-8")
    return paths


def audit_page(table: datasets.Dataset, rows: int = HTML_ROWS, images: ImageReader | None = None) -> str:
    """One self-contained HTML page: the estimated noise rate, histograms of the p-values and of the method's clean
    probabilities (an inline PNG, when matplotlib is installed) and the ``rows`` most suspicious pairs, every
    caption and image name escaped; with ``images`` (raw images), each shown pair's image as an inline JPEG
    thumbnail (:func:`thumbnails`: only the shown rows' images are read)."""
    order = np.argsort(table_column(table, "rank"))[:rows]
    shown = table.select(order.tolist())
    networks = [name for name in table.column_names if name.startswith("clean_prob_net")]
    method = [*networks, "clean_prob", "agree"] if networks else []
    header = ["rank", "pair", "image", "caption", "p_image", "p_caption", *method, "flagged", "suggested re-pairing"]
    pictures = thumbnails(images, shown["image"]) if images is not None else {}
    body = "\n".join(_row(row, networks, pictures.get(row["image"])) for row in shown)
    histogram = _histogram(table)
    figure = f'<img alt="p-values, clean probabilities" src="data:image/png;base64,{histogram}">' if histogram else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>hfncl audit</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;
padding:.3em .5em;vertical-align:top}}tr.flagged{{background:#fee}}</style></head><body>
<h1>hfncl audit</h1>
<p>Estimated noise rate: {html.escape(str(estimated_noise_rate(table)))}</p>
<p>{COLUMNS_NOTE}</p>
{figure}
<h2>The {len(shown)} most suspicious pairs of {len(table)}</h2>
<table><thead><tr>{"".join(f"<th>{html.escape(name)}</th>" for name in header)}</tr></thead>
<tbody>
{body}
</tbody></table></body></html>
"""


def thumbnails(images: ImageReader, numbers: Sequence[int]) -> dict[int, str]:
    """Base64 JPEG thumbnails (longest side :data:`THUMBNAIL_PIXELS`) of the images ``numbers``, each read once, by
    image number."""
    distinct = sorted(set(numbers))
    pictures = {}
    for number, image in zip(distinct, images(distinct), strict=True):
        picture = image.convert("RGB")
        picture.thumbnail((THUMBNAIL_PIXELS, THUMBNAIL_PIXELS))
        buffer = io.BytesIO()
        picture.save(buffer, format="JPEG", quality=80)
        pictures[number] = base64.b64encode(buffer.getvalue()).decode("ascii")
    return pictures


def _row(row: dict, networks: list[str], thumbnail: str | None) -> str:
    """One table row of the page: the image cell holds its number, its name in the data when that says more, and
    its thumbnail when there is one."""
    image = str(row["image"])
    if row["image_id"] != image:
        image += f"<br>{html.escape(row['image_id'])}"
    if thumbnail is not None:
        image += f'<br><img alt="image {row["image"]}" src="data:image/jpeg;base64,{thumbnail}">'
    cells = [str(row["rank"]), str(row["pair"]), image, html.escape(row["caption"])]
    method = [*networks, "clean_prob"] if networks else []
    cells += [f"{row[name]:.3f}" for name in ["p_image", "p_caption", *method]]
    cells += ["yes" if row["agree"] else "no"] if networks else []
    cells += ["yes" if row["flagged"] else "no", _repairing(row)]
    css = ' class="flagged"' if row["flagged"] else ""
    return f"<tr{css}>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"


def _repairing(row: dict) -> str:
    """A flagged pair's suggested caption for its image and image for its caption, with their similarities."""
    if row["suggested_caption"] is None:
        return ""
    return (
        f"image {row['image']} with caption {row['suggested_caption']} "
        f"({row['suggested_caption_similarity']:.3f}): {html.escape(row['suggested_caption_text'])}<br>"
        f"this caption with image {row['suggested_image']} ({row['suggested_image_similarity']:.3f})"
    )


def _histogram(table: datasets.Dataset) -> str | None:
    """A base64 PNG of two histograms: the pairs' p-values in both directions, with the level a share pi^ of
    uniform p-values reaches (wrong pairs fill the flat part), and the method's mean clean probabilities (when the
    table has them); ``None`` without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins, rate = 50, estimated_noise_rate(table).rate
    method = "clean_prob" in table.column_names
    figure, panels = plt.subplots(1, 2 if method else 1, figsize=(11 if method else 5.5, 3), squeeze=False)
    left = panels[0, 0]
    for column, colour in (("p_image", "#4477aa"), ("p_caption", "#ee6677")):
        left.hist(table_column(table, column), bins=bins, range=(0.0, 1.0), histtype="step", color=colour, label=column)
    if rate > 0:
        left.axhline(rate * len(table) / bins, color="black", linestyle="--", label=f"{rate:.1%} uniform (wrong) pairs")
    left.set_yscale("log")
    left.set_xlabel("p-value (rank among the other side)")
    left.set_ylabel("pairs")
    left.legend()
    if method:
        panels[0, 1].hist(table_column(table, "clean_prob"), bins=bins, range=(0.0, 1.0), color="#4477aa")
        panels[0, 1].set_xlabel("the method's clean probability (mean over the networks)")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def write_clean_split(data: AuditData, flagged: np.ndarray, output_dir: Path, name: str) -> list[Path]:
    """Write split ``name`` of the unflagged pairs into ``output_dir`` in the format the split was read from
    (:meth:`~hfncl.audit.data.AuditData.write_pairs`): one image per kept pair (a format holds the same number of
    captions for every image, which dropping captions would break), in pair order. The split is staged and moved
    in without replacing anything (:func:`~hfncl.audit.output.write_staged_split`). Returns its files.

    Raises:
        ValueError: every pair is flagged (an empty split cannot be written), or ``name`` is no split name.
        AuditError: a file the format wrote outside ``output_dir``, or one that would replace a file there.
    """
    check_split_name(name)
    kept = np.flatnonzero(~np.asarray(flagged, dtype=bool))
    if kept.size == 0:
        raise ValueError(f"every pair of split {data.split.split!r} is flagged: no cleaned split to write")
    output_dir.mkdir(parents=True, exist_ok=True)
    return write_staged_split(output_dir, lambda folder: data.write_pairs(kept, folder, name))
