"""Saved files that are complete or absent, and checked before they are trusted.

Writers put a file or a whole directory under a temporary name and rename it into place
(:func:`atomic_write_text`, :func:`replace_directory`), so an interrupted write or a full
disk never leaves a truncated file under its final name; a write that fills the disk is one
line naming the directory and the file (:func:`writing`). A saved directory carries
``hfncl_manifest.json``, the SHA-256 and size of every file in it, written last
(:func:`write_manifest`); :func:`verify_manifest` checks the files against it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

MANIFEST = "hfncl_manifest.json"
_CHUNK = 1 << 20
LOW_SPACE_BYTES = 16 << 20
"""Free space under which a write error without an errno (torch's ``PytorchStreamWriter failed writing``, a C++
stream's ``basic_ios::clear: iostream error``) is taken for a full disk."""
WRITE_ERRORS = ("writ", "iostream error")
"""What the messages of writers that keep no errno say (torch's ``PytorchStreamWriter failed writing file``, the
C++ stream's ``basic_ios::clear: iostream error`` under torch's and safetensors' savers)."""


class IntegrityError(OSError):
    """A saved file is missing, or differs from what the directory's manifest recorded; the message names it."""


class DiskFullError(OSError):
    """A write ran out of space; the message names the directory and the file."""


@contextmanager
def writing(directory: str | Path, what: str) -> Iterator[None]:
    """Turn a full disk while writing ``what`` into ``directory`` into a one-line :class:`DiskFullError`.

    A full disk is an ``OSError`` with ``errno.ENOSPC`` (in the error or its causes), or a
    ``RuntimeError`` of a writer that keeps no errno (torch's ``[enforce fail at
    inline_container.cc...] PytorchStreamWriter failed writing file``, ``basic_ios::clear: iostream
    error``: :data:`WRITE_ERRORS`) while the disk has
    less than :data:`LOW_SPACE_BYTES` free. Other errors pass unchanged.
    """
    directory = Path(directory)
    try:
        yield
    except (OSError, RuntimeError) as error:
        if not _disk_full(error, directory):
            raise
        name = next((e.filename for e in _chain(error) if isinstance(e, OSError) and e.filename), None) or what
        raise DiskFullError(
            f"no space left on the disk of {directory} while writing {name}: free some space there, or write "
            "the run to another disk"
        ) from error


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and its causes and contexts."""
    seen: BaseException | None = error
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def _disk_full(error: BaseException, directory: Path) -> bool:
    if any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in _chain(error)):
        return True
    if not isinstance(error, RuntimeError) or not any(said in str(error) for said in WRITE_ERRORS):
        return False
    existing = next((p for p in (directory, *directory.parents) if p.exists()), Path.cwd())
    return shutil.disk_usage(existing).free < LOW_SPACE_BYTES


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8", newline="")
    os.replace(temporary, path)
    return path


def replace_directory(staging: str | Path, target: str | Path) -> None:
    """Move the finished directory ``staging`` to ``target``, replacing a previous ``target``."""
    staging, target = Path(staging), Path(target)
    previous = target.with_name(f"{target.name}.old")
    shutil.rmtree(previous, ignore_errors=True)
    if target.exists():
        os.rename(target, previous)
    os.rename(staging, target)
    shutil.rmtree(previous, ignore_errors=True)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(directory: str | Path) -> Path:
    """Record the SHA-256 and size of every file under ``directory`` in its manifest (written last, atomically)."""
    directory = Path(directory)
    files = {
        path.relative_to(directory).as_posix(): {"sha256": file_sha256(path), "size": path.stat().st_size}
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != MANIFEST and not path.name.endswith(".tmp")
    }
    return atomic_write_text(directory / MANIFEST, json.dumps({"files": files}, indent=1))


def verify_manifest(directory: str | Path, only: Callable[[str], bool] | None = None, required: bool = True) -> None:
    """Check the files of ``directory`` (those ``only`` selects by relative path) against its manifest.

    Without a manifest: an error when ``required``, else nothing is checked.

    Raises:
        IntegrityError: naming the manifest, or the first missing or differing file.
    """
    directory = Path(directory)
    manifest = directory / MANIFEST
    if not manifest.is_file():
        if required:
            raise IntegrityError(f"{manifest} does not exist: the directory was not completely written")
        return
    try:
        files = json.loads(manifest.read_text())["files"]
        entries = [(name, entry["sha256"], entry["size"]) for name, entry in files.items()]
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise IntegrityError(f"{manifest} is not a readable manifest ({type(error).__name__}: {error})") from error
    for name, sha256, size in entries:
        if only is not None and not only(name):
            continue
        path = directory / name
        if not path.is_file():
            raise IntegrityError(f"{path} is missing (listed in {manifest})")
        if path.stat().st_size != size or file_sha256(path) != sha256:
            raise IntegrityError(f"{path} is damaged: its SHA-256 differs from the one in {manifest}")
