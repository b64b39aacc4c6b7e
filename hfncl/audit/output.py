"""What an audit may write, and where: its own output directory, never the data it audits.

An audit owns its output directory as a training run does (:func:`hfncl.engine.ownership.owned_output_dir`): it
takes the directory's lock, and a directory that holds an earlier audit's results (its table, ``model/``,
``training/``) is refused unless the audit replaces them (``overwrite``: everything that audit wrote goes first,
its cleaned split included) or continues it (``resume``). The output directory may not be the data directory or
lie inside it (``allow_output_in_data_dir`` says so on purpose). A cleaned split is written into a staging folder
first, each of its files checked to lie inside it; its top-level entries are recorded in :data:`AUDIT_RECORD` and
only then moved into the output directory, none replacing a file there. ``training/`` is removed last, after the
table and the cleaned split, by renaming it away first: a kill leaves it whole or gone.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hfncl.audit.data import AuditError
from hfncl.audit.training import MODEL_FOLDER
from hfncl.engine.ownership import owned_output_dir
from hfncl.integrity import atomic_write_text

TRAINING_FOLDER = "training"
"""The folder of an audit's output directory that holds its training checkpoints until the table is written: a
killed audit continues from them with ``resume``."""
TABLE_FILES = ("audit.parquet", "audit.csv", "audit.html")
AUDIT_RECORD = "audit_files.json"
"""The entries of the output directory that an audit's cleaned split put there (removed with the audit's other
files when a later audit replaces it)."""
STAGING = ".clean-split"
REMOVED_TRAINING = ".training.removed"
AUDIT_FLAGS = ("--overwrite-output-dir", "--resume", "--output-dir")
"""``hfncl audit``'s own spellings of overwrite, resume and the output directory, which its errors advise."""


def check_split_name(name: str) -> None:
    """Refuse a split name that is not a plain file-name prefix: empty, ``.`` or ``..``, or with a path separator
    or a NUL."""
    if not name or name in (".", "..") or any(char in name for char in "/\\\0"):
        raise ValueError(f"a split name is a file-name prefix other than '.' and '..', without '/', got {name!r}")


def check_output_dir(output_dir: str | Path, data_dir: str | Path, allow_output_in_data_dir: bool = False) -> None:
    """Refuse an output directory that is the data directory or lies inside it (both resolved, links followed)
    unless ``allow_output_in_data_dir``.

    Raises:
        AuditError: naming both directories and the flag that allows it.
    """
    output, data = Path(output_dir).resolve(), Path(data_dir).resolve()
    if allow_output_in_data_dir or not (output == data or data in output.parents):
        return
    where = "is the data directory" if output == data else f"lies inside the data directory {data}"
    raise AuditError(
        f"output directory {output} {where}: an audit writes its table, model and cleaned split there and could "
        "replace the data it audits; choose another --output-dir, or pass --allow-output-in-data-dir on purpose"
    )


def split_entries(output_dir: Path, name: str) -> list[str]:
    """The entries of ``output_dir`` a split ``name`` could own: ``name`` itself, ``name_*`` and ``name.*``."""
    if not output_dir.is_dir():
        return []
    return sorted(p.name for p in output_dir.iterdir() if p.name == name or p.name.startswith((f"{name}_", f"{name}.")))


def check_clean_name_free(output_dir: Path, name: str) -> None:
    """Refuse a cleaned split ``name`` whose files or folder already exist in ``output_dir`` (:func:`split_entries`).

    Raises:
        AuditError: naming what is there.
    """
    check_split_name(name)
    taken = split_entries(output_dir, name)
    if taken:
        raise AuditError(
            f"--write-clean {name}: {output_dir} already holds {', '.join(taken)}, which a split {name!r} would "
            "replace; choose another NAME or another --output-dir"
        )


def recorded_entries(output_dir: Path) -> list[str]:
    """The output directory's entries an earlier audit's cleaned split put there (:data:`AUDIT_RECORD`)."""
    try:
        record = json.loads((output_dir / AUDIT_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    entries = record.get("clean_split", []) if isinstance(record, dict) else []
    return [e for e in entries if isinstance(e, str) and e not in ("", ".", "..") and "/" not in e and "\\" not in e]


def _remove(target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    else:
        target.unlink(missing_ok=True)


@contextmanager
def owned_audit_dir(output_dir: Path, *, overwrite: bool, resume: bool) -> Iterator[Path]:
    """Hold ``output_dir`` for one audit (the module docstring): locked, an earlier audit's results refused unless
    ``overwrite`` (all it wrote removed) or ``resume``; an earlier audit's cleaned split (which the new one writes
    again) and any half-removed training folder or staging folder removed. A directory the audit made is removed
    again when the audit fails before writing anything into it."""
    made = not output_dir.exists()
    own = [*recorded_entries(output_dir), AUDIT_RECORD, STAGING, REMOVED_TRAINING]
    results = (*TABLE_FILES, MODEL_FOLDER, TRAINING_FOLDER, AUDIT_RECORD)
    try:
        with owned_output_dir(
            output_dir, overwrite=overwrite, resume=resume, results=results, artefacts=(*results, *own),
            flags=AUDIT_FLAGS,
        ) as directory:
            for name in own:
                _remove(directory / name)
            yield directory
    except BaseException:
        if made and output_dir.is_dir() and not any(output_dir.iterdir()):
            output_dir.rmdir()  # refused before anything was written: no trace left
        raise


def write_staged_split(output_dir: Path, write: Callable[[Path], list[Path]]) -> list[Path]:
    """Write a split with ``write(folder)`` into a staging folder of ``output_dir``, check that every file it
    returns lies inside that folder and that none of its entries exists in ``output_dir``, record the entries
    (:data:`AUDIT_RECORD`) and move them into ``output_dir``; return the files' final paths.

    Raises:
        AuditError: a file written outside the staging folder, or an entry that would replace one in ``output_dir``.
    """
    staging = output_dir / STAGING
    _remove(staging)
    staging.mkdir(parents=True)
    files = write(staging)
    inside = staging.resolve()
    for file in files:
        folder = Path(os.path.realpath(Path(file).parent))  # the file itself may be a link to a kept image
        if folder != inside and inside not in folder.parents:
            raise AuditError(f"the cleaned split's file {file} lies outside the output directory {output_dir}")
    entries = sorted(p.name for p in staging.iterdir())
    taken = [name for name in entries if os.path.lexists(output_dir / name)]
    if taken:
        raise AuditError(f"the cleaned split would replace {', '.join(taken)} in {output_dir}; nothing was replaced")
    atomic_write_text(output_dir / AUDIT_RECORD, json.dumps({"clean_split": entries}, indent=1))
    for name in entries:
        os.rename(staging / name, output_dir / name)
    staging.rmdir()
    return [output_dir / Path(file).relative_to(staging) for file in files]


def remove_training(output_dir: Path) -> None:
    """Remove ``output_dir/training`` once the audit's table is written: renamed away first, so that a kill
    leaves it whole (a ``resume`` continues from it) or gone."""
    folder = output_dir / TRAINING_FOLDER
    if not folder.exists():
        return
    removed = output_dir / REMOVED_TRAINING
    _remove(removed)
    os.rename(folder, removed)
    shutil.rmtree(removed)
