"""Who owns an output directory: one run at a time, and never two runs' results side by side.

A run takes ``OUTPUT_DIR/hfncl.lock`` (its pid and host, created exclusively) before it
writes anything and removes it when it ends. A lock whose process no longer runs on this
host is stale: it is taken over with a warning. A directory that already holds a run's
results (``checkpoints/``, ``best/``, ``results.json``) is refused unless the new run
continues it (``resume_from_checkpoint``) or replaces it (``overwrite_output_dir``, which
first removes the previous run's artefacts).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LOCK_FILE = "hfncl.lock"
RUN_RESULTS = ("checkpoints", "best", "results.json")
RUN_ARTEFACTS = (*RUN_RESULTS, "divisions", "noise_index.npy", "training_curves.png", "run_config.yaml")


class OutputDirError(ValueError):
    """The output directory is in use by another run, or holds another run's results."""


def _owner(lock: Path) -> dict | None:
    """The pid and host a lock file names, or ``None`` when it is unreadable."""
    try:
        owner = json.loads(lock.read_text())
    except (OSError, ValueError):
        return None
    valid = isinstance(owner, dict) and isinstance(owner.get("pid"), int) and isinstance(owner.get("host"), str)
    return owner if valid else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _acquire(directory: Path, advice: str) -> Path:
    lock = directory / LOCK_FILE
    me = {"pid": os.getpid(), "host": socket.gethostname()}
    for _ in range(3):
        try:
            descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _owner(lock)
            if owner is not None and owner["host"] != me["host"]:
                raise OutputDirError(
                    f"{directory} is locked by process {owner['pid']} on host {owner['host']} ({lock}); if that run "
                    f"has ended, delete the lock file, else choose another {advice}"
                ) from None
            if owner is not None and _running(owner["pid"]):
                raise OutputDirError(
                    f"{directory} is in use by the run of process {owner['pid']} on this host ({lock}): wait for it "
                    f"to end or choose another {advice}"
                ) from None
            what = (
                "an unreadable lock" if owner is None else f"the lock of process {owner['pid']}, which no longer runs,"
            )
            warnings.warn(f"taking over {what} in {lock}", stacklevel=3)
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(descriptor, "w") as handle:
            json.dump(me, handle)
        return lock
    raise OutputDirError(f"could not take the lock {lock}: another run keeps taking it")


def _release(lock: Path) -> None:
    """Remove ``lock`` if this process still owns it."""
    if _owner(lock) == {"pid": os.getpid(), "host": socket.gethostname()}:
        lock.unlink(missing_ok=True)


@contextmanager
def owned_output_dir(
    output_dir: str | Path,
    *,
    overwrite: bool = False,
    resume: bool = False,
    main_process: bool = True,
    results: Sequence[str] = RUN_RESULTS,
    artefacts: Sequence[str] = RUN_ARTEFACTS,
    flags: tuple[str, str, str] = ("--overwrite_output_dir", "--resume_from_checkpoint latest", "output_dir"),
) -> Iterator[Path]:
    """Hold ``output_dir`` for one run (created if missing); see the module docstring.

    Only the main process locks and checks; the others just enter. ``results`` are the names that mark a
    previous run's results, ``artefacts`` what ``overwrite`` removes, and ``flags`` the command's own spellings
    of overwrite, resume and the output directory, which the errors advise (another command, e.g. ``hfncl audit``,
    owns its directory the same way with its own names).

    Raises:
        OutputDirError: the directory is locked by a live run, or holds another run's
            results and neither ``overwrite`` nor ``resume`` is set.
    """
    directory = Path(output_dir)
    if not main_process:
        yield directory
        return
    directory.mkdir(parents=True, exist_ok=True)
    overwrite_flag, resume_flag, output_flag = flags
    lock = _acquire(directory, output_flag)
    try:
        previous = [name for name in results if (directory / name).exists()]
        if previous and not (overwrite or resume):
            raise OutputDirError(
                f"{directory} holds another run's results ({', '.join(previous)}): pass {overwrite_flag} to "
                f"replace them, {resume_flag} to continue that run, or choose another {output_flag}"
            )
        if overwrite and not resume:
            for name in artefacts:
                target = directory / name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                else:
                    target.unlink(missing_ok=True)
        yield directory
    finally:
        _release(lock)


def owned_run_dir(config: Any) -> Any:
    """:func:`owned_output_dir` for a run of ``config`` (a :class:`hfncl.config.TrainConfig`),
    on Accelerate's main process."""
    return owned_output_dir(
        config.output_dir,
        overwrite=config.overwrite_output_dir,
        resume=config.resume_from_checkpoint is not None,
        main_process=_launched_rank() == 0,
    )


def _launched_rank() -> int:
    """This process's global rank as ``accelerate launch`` / ``torchrun`` set it (0 when not launched).

    Read from the environment rather than through Accelerate's ``PartialState``: built
    before the trainer's ``Accelerator``, a default ``PartialState`` takes every process
    of a multi-CPU launch for the main one and the Accelerator inherits that.
    """
    return int(os.environ.get("RANK", "0"))
