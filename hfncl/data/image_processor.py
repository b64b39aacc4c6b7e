"""Reading a vision tower's image processor: what turns raw images into the pixel values it reads
(the image side's counterpart of :mod:`hfncl.data.vocab`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def image_processor_from_pretrained(name_or_path: str | Path, subfolder: str = "") -> Any:
    """``AutoImageProcessor.from_pretrained`` of a Hub id or directory (optionally one of its subfolders).

    Raises:
        OSError: naming the place when no image processor can be read there.
    """
    from transformers import AutoImageProcessor

    try:
        return AutoImageProcessor.from_pretrained(str(name_or_path), subfolder=subfolder)
    except (OSError, ValueError) as error:
        where = f"{name_or_path}/{subfolder}" if subfolder else str(name_or_path)
        raise OSError(f"Cannot load an image processor from {where!r}: {error}") from error
