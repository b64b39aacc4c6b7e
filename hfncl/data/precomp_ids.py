"""The name a person finds each image of a precomp split by: CC152K's image id, the first field of its caption rows
in ``{split}_caps.tsv``; else the image's row of ``{split}_ims.npy``."""

from __future__ import annotations

import csv
from itertools import islice
from pathlib import Path

from hfncl.data.precomp import PrecompSplit, caption_file


def tsv_rows(path: Path, count: int) -> list[list[str]]:
    """The first ``count`` rows of a ``.tsv`` captions file, every field, as :func:`hfncl.data.read_captions` parses
    them (``csv.reader``, tab-separated, a UTF-8 byte order mark dropped)."""
    with path.open(encoding="utf-8-sig", newline="") as file:
        return list(islice(csv.reader(file, delimiter="\t"), count))


def precomp_image_ids(split: PrecompSplit) -> list[str]:
    """Each image's id, in image order: in a split read from a ``.tsv``, the first field of the image's first caption
    row; else its row number of ``{split}_ims.npy``."""
    path = caption_file(split.data_dir, split.split)
    if path is None or path.suffix != ".tsv":
        return [str(image) for image in range(split.num_images)]
    return [row[0] for row in tsv_rows(path, split.num_captions)[:: split.captions_per_image]]
