"""Checkpointing and resume of a training run: what a checkpoint holds, where it is written, how a resume finds,
verifies and loads one, and the best model kept beside them with its run record (what trained it included).

This is the engine's one reader and writer of run files: checkpoints carry their manifest
(:mod:`hfncl.integrity`) and the run's fingerprint (:mod:`hfncl.engine.fingerprint`), and a resume refuses one
that is damaged or was trained on other data or settings. The training loop (:mod:`hfncl.engine.trainer`)
hands its state in and takes it back; it reads no file itself.
"""

from __future__ import annotations

import json
import math
import pickle
import platform
import shutil
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import load as accelerate_load
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel

from hfncl.config import LATEST, one_line
from hfncl.engine.fingerprint import check_fingerprint, save_fingerprint
from hfncl.engine.ledger import Ledger
from hfncl.engine.progress import library_progress_bars
from hfncl.hub import RunRecord, save_trained_model
from hfncl.integrity import (
    IntegrityError,
    atomic_write_text,
    replace_directory,
    verify_manifest,
    write_manifest,
    writing,
)
from hfncl.registry import PluginProvenance
from hfncl.types import Division

CHECKPOINT_PREFIX = "step-"


@dataclass
class TrainerState:
    """Where training stands; saved as JSON with every checkpoint."""

    epoch: int = 0
    pass_index: int = 0
    batch_in_pass: int = 0
    global_step: int = 0
    network_steps: int = 0  # optimiser steps summed over the networks each step trained
    best_score: float = -math.inf
    best_epoch: int = -1
    plateau_decay_epoch: int = -1  # the first epoch at the rate decayed on a plateau (lr_decay_patience); -1: none
    epoch_loss_sums: dict[str, float] = field(default_factory=dict)
    epoch_loss_counts: dict[str, int] = field(default_factory=dict)
    epoch_steps: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    # the wall and CPU seconds (all threads of the process that saves the state) of the epochs trained, each timed
    # from its last start, over every process that trained them in turn; ``timed_epochs`` of them (fewer than
    # ``epoch``: resumed from a checkpoint that kept no time)
    train_seconds: float = 0.0
    train_cpu_seconds: float = 0.0
    timed_epochs: int = 0


def finished_checkpoints(output_dir: Path) -> list[Path]:
    """The finished checkpoint directories of ``OUTPUT_DIR/checkpoints/``, newest first."""
    root = output_dir / "checkpoints"
    found = [p for p in root.glob(f"{CHECKPOINT_PREFIX}*") if p.is_dir() and not p.name.endswith((".tmp", ".old"))]
    return sorted(found, reverse=True)


def resume_candidates(output_dir: Path) -> tuple[list[Path], list[str]]:
    """The checkpoint ``OUTPUT_DIR/checkpoints/latest`` names, then the others newest first; and what is
    wrong with the pointer.

    The pointer is followed only to a checkpoint directly inside ``checkpoints/``; one
    that names anything else is reported and the checkpoints there are tried.
    """
    root = output_dir / "checkpoints"
    pointer = root / LATEST
    found = finished_checkpoints(output_dir)
    if not pointer.exists():
        return found, []
    name = pointer.read_text().strip()
    if name.startswith(CHECKPOINT_PREFIX) and Path(name).name == name and (root / name) in found:
        return [root / name] + [p for p in found if p.name != name], []
    return found, [f"{pointer} names {name!r}, not a checkpoint directory of {root}"]


def checkpoint_to_resume(resume_from: str | None, output_dir: str | Path) -> Path | None:
    """The checkpoint a resume tries first (``None``: none to resume), before verifying it: the one ``resume_from``
    (``TrainConfig.resume_from_checkpoint``) names, or for ``latest`` the one ``OUTPUT_DIR/checkpoints/latest``
    names."""
    if resume_from is None:
        return None
    if resume_from != LATEST:
        return Path(resume_from)
    candidates, _ = resume_candidates(Path(output_dir))
    return candidates[0] if candidates else None


def _check_random_states(source: Path) -> None:
    """Read the checkpoint's RNG state files with accelerate's weights-only loader before accelerate does: it
    reads them inside a catch-all and goes on without them, so a file that cannot be read safely (a pickle
    that would run code) is refused here instead of ignored.

    Raises:
        IntegrityError: naming the file.
    """
    for path in sorted(source.glob("random_states_*.pkl")):
        try:
            accelerate_load(path)
        except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as error:
            raise IntegrityError(
                f"{source}: accelerate's state files cannot be loaded safely ({path.name}: {type(error).__name__}, "
                "refused by the weights-only unpickler: not an RNG state that accelerate saved)"
            ) from error


@dataclass
class Restored:
    """What a resume hands back to the loop: its state, the ledger's tensors and each network's division."""

    state: TrainerState
    tensors: dict[str, Any]
    divisions: list[Division | None]


def compute_section(
    processes: int, device: torch.device, mixed_precision: str, seconds: float | None
) -> dict[str, Any]:
    """What trains the run, for the card's Compute section (:attr:`hfncl.hub.RunRecord.compute`): processes,
    device, mixed precision and the seconds spent training (``None`` outside training)."""
    host = platform.processor() or platform.machine()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else host
    return {
        "processes": processes,
        "device": f"{device.type} ({name})" if name else device.type,
        "mixed_precision": mixed_precision,
        "seconds": None if seconds is None else round(seconds, 3),
    }


class Checkpoints:
    """The checkpoints of one run in ``output_dir``: written with :meth:`save`, read back by :meth:`resume`, and the
    best model in ``OUTPUT_DIR/best`` (:meth:`save_best`).

    ``fingerprint`` (:mod:`hfncl.engine.fingerprint`) is saved with every checkpoint; :meth:`resume` loads the
    checkpoint ``resume_from`` names (``TrainConfig.resume_from_checkpoint``) and refuses one whose fingerprint
    differs, unless ``ignore_mismatch`` (``resume_ignore_mismatch``): the fields it then continued across are
    :attr:`continued_across`.
    """

    def __init__(
        self,
        output_dir: str | Path,
        accelerator: Accelerator,
        fingerprint: dict[str, Any],
        provenance: PluginProvenance,
        *,
        resume_from: str | None = None,
        ignore_mismatch: bool = False,
    ) -> None:
        self.output_dir = Path(output_dir)
        self.accelerator = accelerator
        self.fingerprint = fingerprint
        self.provenance = provenance
        self.resume_from, self.ignore_mismatch = resume_from, ignore_mismatch
        self.continued_across: list[str] = []

    def save(self, state: TrainerState, ledger: Ledger, divisions: list[Division | None]) -> Path:
        """Save everything needed to resume (accelerate state, trainer state, divisions, ledger).

        The checkpoint is written under ``NAME.tmp``, gets its manifest (:mod:`hfncl.integrity`)
        and only then is renamed to ``NAME`` and named by ``checkpoints/latest``; the previous
        checkpoint is kept, to fall back to if this one is found damaged.

        Raises:
            hfncl.integrity.DiskFullError: the disk filled up while writing (one line naming the file).
        """
        root = self.output_dir / "checkpoints"
        target = root / f"{CHECKPOINT_PREFIX}{state.global_step:08d}-epoch-{state.epoch:04d}"
        staging = target.with_name(f"{target.name}.tmp")
        if self.accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        with writing(root, f"checkpoint {target.name}"):
            self.accelerator.save_state(str(staging))
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            with writing(root, f"checkpoint {target.name}"):
                self._write_trainer_files(staging, state, ledger, divisions)
            replace_directory(staging, target)
            atomic_write_text(root / LATEST, target.name)
            finished = finished_checkpoints(self.output_dir)
            previous = [p for p in finished if p.name < target.name][:1]
            leftovers = [p for p in root.glob(f"{CHECKPOINT_PREFIX}*.tmp") if p.is_dir()]
            for old in [p for p in finished if p != target and p not in previous] + leftovers:
                shutil.rmtree(old, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        return target

    def _write_trainer_files(
        self, staging: Path, state: TrainerState, ledger: Ledger, divisions: list[Division | None]
    ) -> None:
        """The trainer's part of a checkpoint (ledger and divisions, state, run fingerprint), then its manifest."""
        tensors = ledger.state()
        for net, division in enumerate(divisions):
            if division is not None:
                tensors.update(division.state(f"division.{net}"))
        save_file(tensors, str(staging / "trainer_tensors.safetensors"))
        (staging / "trainer_state.json").write_text(json.dumps(asdict(state), indent=1))
        save_fingerprint(staging, self.fingerprint, self.continued_across)
        write_manifest(staging)

    def resume(self, num_networks: int) -> Restored | None:
        """Load the checkpoint ``resume_from`` names, verified against its manifest.

        ``latest`` (the default): the checkpoint ``checkpoints/latest`` names, or, when that
        one is damaged (or the pointer names nothing inside ``checkpoints/``), the newest
        complete one, with a warning naming what was damaged. The checkpoint's run fingerprint
        must be this run's (:func:`hfncl.engine.fingerprint.check_fingerprint`; with
        ``resume_ignore_mismatch`` the fields that differ go to :attr:`continued_across`). The accelerator's
        state is loaded in place; the rest is returned (``None``: the output directory has no checkpoint).

        Raises:
            IntegrityError: no checkpoint passes verification.
            hfncl.engine.fingerprint.ResumeMismatchError: the checkpoint was trained on other data,
                noise or settings, and ``resume_ignore_mismatch`` is not set.
        """
        wanted = self.resume_from or LATEST
        candidates, problems = resume_candidates(self.output_dir) if wanted == LATEST else ([Path(wanted)], [])
        if not candidates and not problems:
            return None
        for source in candidates:
            try:
                verify_manifest(source)
            except IntegrityError as error:
                problems.append(str(error))
                continue
            if problems:
                warnings.warn(f"resuming from {source} instead: {'; '.join(problems)}", stacklevel=3)
            ignore = self.ignore_mismatch
            self.continued_across = check_fingerprint(source, self.fingerprint, ignore_mismatch=ignore)
            return self._load(source, num_networks)
        raise IntegrityError(f"no complete checkpoint to resume from: {'; '.join(problems)}")

    def _load(self, source: Path, num_networks: int) -> Restored:
        _check_random_states(source)
        try:  # accelerate unpickles its state files with torch's weights-only unpickler: code in them never runs
            self.accelerator.load_state(str(source))
        except (pickle.UnpicklingError, RuntimeError) as error:
            message = one_line(error) or type(error).__name__
            raise IntegrityError(f"{source}: accelerate's state files cannot be loaded safely ({message})") from error
        saved = json.loads((source / "trainer_state.json").read_text())
        if "best_rsum" in saved:  # checkpoints written before the best metric was the task's
            saved["best_score"] = saved.pop("best_rsum")
        tensors = load_file(str(source / "trainer_tensors.safetensors"))
        divisions = [
            Division.from_state(tensors, f"division.{net}") if f"division.{net}.clean" in tensors else None
            for net in range(num_networks)
        ]
        return Restored(TrainerState(**saved), tensors, divisions)

    def save_best(self, model: PreTrainedModel, record: RunRecord) -> None:
        """Save ``OUTPUT_DIR/best``: the model, the run record of this epoch and the card generated from it
        (a full disk: :class:`hfncl.integrity.DiskFullError`)."""
        if self.accelerator.is_main_process:
            staging = self.output_dir / "best.tmp"
            shutil.rmtree(staging, ignore_errors=True)
            with library_progress_bars(True), writing(self.output_dir, "best/"):  # no bar between the epoch lines
                save_trained_model(model, staging, record, self.provenance)
                write_manifest(staging)
            replace_directory(staging, self.output_dir / "best")
