"""Labels: index or one-hot label arrays converted to class indices (``label_base``), checked
against each other, the features' row counts and the number of classes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hfncl.data.labelled.files import ArrayRef, _feature_shape, _opened
from hfncl.data.labelled.layouts import SplitArrays
from hfncl.data.precomp import DataFormatError


def _index_labels(ref: ArrayRef, label_base: int) -> tuple[np.ndarray, int | None]:
    """Class indices (N,) of a label array, and the one-hot width K if it was one-hot."""
    with _opened(ref) as rows:
        values = rows.read()
    if values.dtype.kind not in "iufb":
        raise DataFormatError(f"{ref.where}: labels of dtype {values.dtype}, expected numbers")
    if values.ndim == 2 and values.shape[1] > 1:
        if not np.isin(values, (0, 1)).all():
            raise DataFormatError(f"{ref.where}: one-hot labels of shape {values.shape} must hold only 0 and 1")
        positives = values.sum(axis=1)
        if (positives != 1).any():
            row = int(np.flatnonzero(positives != 1)[0])
            raise DataFormatError(
                f"{ref.where}: one-hot row {row} has {int(positives[row])} ones, expected exactly 1 "
                "(multi-label rows are not supported)"
            )
        return values.argmax(axis=1).astype(np.int64), values.shape[1]
    if values.ndim not in (1, 2):
        raise DataFormatError(f"{ref.where}: labels of shape {values.shape}, expected (N,), (N, 1) or one-hot (N, K)")
    values = values.reshape(-1)
    if values.dtype.kind == "f" and not (np.isfinite(values) & (values == np.round(values))).all():
        row = int(np.flatnonzero(~(np.isfinite(values) & (values == np.round(values))))[0])
        raise DataFormatError(f"{ref.where}: label {values[row]} at row {row} is not a whole number")
    labels = values.astype(np.int64) - label_base
    if labels.size and labels.min() < 0:
        row = int(np.argmin(labels))
        raise DataFormatError(
            f"{ref.where}: label {labels[row] + label_base} at row {row} is below label_base={label_base} "
            "(labels count classes from label_base)"
        )
    return labels, None


@dataclass
class _ResolvedSplit:
    raw: SplitArrays
    image_labels: np.ndarray
    text_labels: np.ndarray
    image_dim: int
    text_dim: int
    rows: np.ndarray | None = None  # a subset of the file's rows (derived splits)

    def subset(self, positions: np.ndarray) -> _ResolvedSplit:
        """The samples at ``positions`` (sorted) of this split."""
        base = np.arange(len(self.image_labels)) if self.rows is None else self.rows
        return _ResolvedSplit(
            self.raw,
            self.image_labels[positions],
            self.text_labels[positions],
            self.image_dim,
            self.text_dim,
            base[positions],
        )


def _resolve(
    raw: dict[str, SplitArrays], label_base: int, num_classes: int | None
) -> tuple[dict[str, _ResolvedSplit], int]:
    resolved, widths = {}, {}
    for split, parts in raw.items():
        image_labels, image_width = _index_labels(parts.image_labels, label_base)
        text_labels, text_width = _index_labels(parts.text_labels, label_base)
        widths.update({parts.image_labels.where: image_width, parts.text_labels.where: text_width})
        if len(image_labels) != len(text_labels):
            raise DataFormatError(
                f"{parts.image_labels.where} has {len(image_labels)} labels but {parts.text_labels.where} has "
                f"{len(text_labels)}: the modalities of a split must be paired sample by sample"
            )
        image_dim = _feature_shape(parts.image, len(image_labels), parts.image_labels.where)
        text_dim = _feature_shape(parts.text, len(text_labels), parts.text_labels.where)
        resolved[split] = _ResolvedSplit(parts, image_labels, text_labels, image_dim, text_dim)
    first = resolved["train"]
    for item in resolved.values():
        if (item.image_dim, item.text_dim) != (first.image_dim, first.text_dim):
            raise DataFormatError(
                f"{item.raw.image.where} / {item.raw.text.where}: feature dimensions ({item.image_dim}, "
                f"{item.text_dim}) differ from the train split's ({first.image_dim}, {first.text_dim})"
            )
    one_hot = {where: width for where, width in widths.items() if width is not None}
    if num_classes is None:
        if one_hot:
            num_classes = max(one_hot.values())
        else:
            num_classes = 1 + max(
                int(a.max()) for r in resolved.values() for a in (r.image_labels, r.text_labels) if a.size
            )
    for where, width in one_hot.items():
        if width != num_classes:
            raise DataFormatError(f"{where}: one-hot labels with {width} columns, expected {num_classes} classes")
    for item in resolved.values():
        for ref, labels in ((item.raw.image_labels, item.image_labels), (item.raw.text_labels, item.text_labels)):
            if labels.size and labels.max() >= num_classes:
                row = int(np.argmax(labels))
                raise DataFormatError(
                    f"{ref.where}: label {labels[row] + label_base} at row {row} is out of range: expected "
                    f"{label_base}..{label_base + num_classes - 1} for {num_classes} classes (label_base={label_base})"
                )
    return resolved, num_classes
