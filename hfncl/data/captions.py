"""Many captions in little memory: one UTF-8 buffer and its offsets.

A Python ``str`` costs about 50 bytes on top of its text, and a list one pointer more per
item: 1M captions of 60 characters take ~117 MB as a list of strings, ~68 MB here. The
caption strings of a split are the part of the data that stays in RAM (region features are
memory-mapped), so this is what keeps memory nearly flat as the training set grows.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np

_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def control_character(text: str) -> str | None:
    """The first control character of ``text`` other than a tab, as ``U+XXXX at column N``; ``None`` when none.

    A caption is text: NUL bytes, escape sequences, carriage returns or other control characters in
    one come from a broken file (a binary written into a caption file, a truncated write).
    """
    found = _CONTROL.search(text)
    return None if found is None else f"U+{ord(found.group()):04X} at column {found.start() + 1}"


MAX_CAPTION_CHARACTERS = 4096
"""The longest caption read (MS-COCO's and Flickr30K's are under 500 characters): a longer line is a broken file
(a binary, or a whole document on one line) whose tokenising would allocate gigabytes."""


def overlong(text: str) -> str | None:
    """``N characters, more than the M a caption may have`` when ``text`` is longer than
    :data:`MAX_CAPTION_CHARACTERS`; ``None`` otherwise."""
    if len(text) <= MAX_CAPTION_CHARACTERS:
        return None
    return f"{len(text)} characters, more than the {MAX_CAPTION_CHARACTERS} a caption may have"


class CaptionStore(Sequence[str]):
    """An immutable sequence of captions stored as one UTF-8 buffer with int64 offsets.

    Indexing decodes one caption (negative indices allowed; a slice gives a list); it
    compares equal to any sequence of the same strings.
    """

    def __init__(self, captions: Iterable[str]) -> None:
        buffer = bytearray()
        ends = array("q", [0])
        for caption in captions:
            buffer += caption.encode("utf-8")
            ends.append(len(buffer))
        self._buffer = buffer
        self._offsets = np.frombuffer(ends, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        size = len(self)
        position = index + size if index < 0 else index
        if not 0 <= position < size:
            raise IndexError(f"caption index {index} is outside 0..{size - 1}")
        start, end = self._offsets[position], self._offsets[position + 1]
        return self._buffer[start:end].decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        for position in range(len(self)):
            yield self[position]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CaptionStore):
            return self._buffer == other._buffer and np.array_equal(self._offsets, other._offsets)
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CaptionStore({len(self)} captions, {len(self._buffer)} bytes)"

    @property
    def nbytes(self) -> int:
        """Bytes held: the text and the offsets."""
        return len(self._buffer) + self._offsets.nbytes

