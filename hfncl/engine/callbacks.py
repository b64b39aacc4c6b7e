"""What a run shows while it trains, and the events a caller can follow it by.

The trainer calls every :class:`TrainerCallback` at fixed points of training (its event
methods, in the order a run reaches them); :class:`EpochLine` is always installed, a
caller adds its own with ``Trainer(..., callbacks=[...])`` (the applications add the
figures of :mod:`hfncl.plot_callbacks`; :mod:`hfncl.profiling` times hook calls).
Progress bars: :mod:`hfncl.engine.progress`.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Protocol

from tqdm.auto import tqdm

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    from accelerate import Accelerator

    from hfncl.config import TrainConfig
    from hfncl.engine.checkpoints import TrainerState
    from hfncl.engine.tasks import Task
    from hfncl.types import Division

TRAINING_HOOKS = (
    "epoch_start", "divide", "batch_plan", "rectify", "warmup_loss", "loss", "train_step", "pass_end", "epoch_end"
)
"""The plugin hooks whose calls in training the trainer reports with ``on_hook_begin`` / ``on_hook_end``."""


class CallbackTrainer(Protocol):
    """What a callback reads of the :class:`hfncl.engine.trainer.Trainer` that calls it (the trainer passes
    itself): its settings, accelerator, progress, output directory, task, networks, plugins' hook and the
    epoch's divisions. Declared here, below the trainer, so that the trainer imports its callbacks and never
    the other way round."""

    config: TrainConfig
    accelerator: Accelerator
    state: TrainerState
    output_dir: Path
    task: Task
    model: Any
    hook: Any
    divisions: list[Division | None]


class TrainerCallback:
    """Called by the trainer on every process; override the events you need.

    In one epoch the events come in this order: ``on_epoch_begin``; ``on_hook_begin`` /
    ``on_hook_end`` around each call of a hook of :data:`TRAINING_HOOKS` (``epoch_start``,
    ``divide``, ``batch_plan`` at the start of each pass, then per step ``train_step`` and
    inside the default step ``rectify`` and ``loss`` or ``warmup_loss``, ``pass_end`` after
    each pass, ``epoch_end``); after ``divide``, ``on_division``; ``on_epoch_end``.
    ``on_train_begin`` comes before the first epoch, ``on_train_end`` after the last. An
    exception raised by an event stops training there (raised from ``on_hook_begin``:
    before the hook runs).
    """

    def on_train_begin(self, trainer: CallbackTrainer) -> None:
        """Before the first epoch of this call of ``train``, after a resume loaded its checkpoint."""

    def on_epoch_begin(self, trainer: CallbackTrainer, epoch: int) -> None:
        """When an epoch starts, or resumes in its middle (then its ``epoch_start`` and ``divide`` are not called)."""

    def on_hook_begin(self, trainer: CallbackTrainer, name: str) -> None:
        """Before the trainer calls the plugins' hook ``name`` (one of :data:`TRAINING_HOOKS`)."""

    def on_hook_end(self, trainer: CallbackTrainer, name: str) -> None:
        """After the call of hook ``name`` returned or raised."""

    def on_division(
        self, trainer: CallbackTrainer, epoch: int, divisions: list[Division | None], true_clean: np.ndarray
    ) -> None:
        """After an epoch's divisions were made (one per network, ``None`` where a network has none), before its
        first step. ``true_clean`` is the hidden clean mask of the division's units, for diagnostics only."""

    def on_epoch_end(self, trainer: CallbackTrainer, record: dict[str, Any], seconds: float) -> None:
        """After an epoch's validation and history ``record`` (``epoch``, counted from 1 as in every file and on the
        console, where the events' ``epoch`` argument is the index from 0; ``train/TERM``, ``val/METRIC``,
        ``division/...`` or ``division/netK/...``), before its checkpoint; ``seconds`` since ``on_epoch_begin``."""

    def on_train_end(self, trainer: CallbackTrainer, summary: dict[str, Any]) -> None:
        """After the last epoch, with the summary ``train`` returns."""


EPOCH_LINE_WIDTH = 120
"""The most characters of an epoch's console line (a terminal of 120 columns shows it on one line)."""
EPOCH_LOG = "epochs.log"
"""``OUTPUT_DIR/epochs.log``: each epoch's line with every loss term, recall and division measure."""


class EpochLine(TrainerCallback):
    """Print one line per epoch on the main process, at most :data:`EPOCH_LINE_WIDTH` characters (see
    :func:`format_epoch_line`), and append the detailed line (:func:`format_epoch_details`) to
    ``OUTPUT_DIR/epochs.log``; say where a resumed run continues from. The trackers get every number."""

    def on_train_begin(self, trainer: CallbackTrainer) -> None:
        state = trainer.state
        if trainer.accelerator.is_main_process and state.global_step > 0:
            within = f", batch {state.batch_in_pass} of its pass {state.pass_index + 1}" if state.batch_in_pass else ""
            tqdm.write(f"resumed at step {state.global_step}: epoch {state.epoch + 1}/{trainer.config.epochs}{within}")

    def on_epoch_end(self, trainer: CallbackTrainer, record: dict[str, Any], seconds: float) -> None:
        if trainer.accelerator.is_main_process:
            tqdm.write(format_epoch_line(record, trainer.config.epochs, seconds))
            with (trainer.output_dir / EPOCH_LOG).open("a", encoding="utf-8") as log:
                log.write(format_epoch_details(record, trainer.config.epochs, seconds) + "\n")


def format_epoch_line(record: dict[str, Any], epochs: int, seconds: float, width: int = EPOCH_LINE_WIDTH) -> str:
    """``epoch E/N [warmup] | loss L | val rSum S, R@1 i2t a t2i b | division AUC A, clean C | Ts`` in at most
    ``width`` characters, from an epoch's history record.

    The loss is each network's sum of its terms (``a/b`` for two networks), the division each network's ROC-AUC
    against the hidden mask and the share of each set it made; a metric other than recalls (mAP) prints by name.
    A line still too long drops the R@1 recalls, then the shares, then is cut. Every term, recall, precision and
    recall of a division is in :func:`format_epoch_details`.
    """
    head = f"epoch {record['epoch']}/{epochs}" + (" warmup" if record.get("warmup") else "")
    losses = _by_network(record, "train/")
    loss = ["loss " + "/".join(f"{value:.3f}" for value in losses.values())] if losses else []
    validation = {key[len("val/"):]: value for key, value in record.items() if key.startswith("val/")}
    if "rsum" in validation:
        score = f"val rSum {validation['rsum']:.1f}"
    else:
        score = "val " + ", ".join(f"{name} {value:.4f}" for name, value in list(validation.items())[:2])
    sides = [side for side in ("i2t", "t2i") if side + "_r1" in validation]
    recalls = " ".join(f"{side} {validation[side + '_r1']:.1f}" for side in sides)
    divisions = _division_columns(record)
    aucs = divisions.pop("auc", [])
    shares = " ".join(f"{name} " + "/".join(f"{share:.0%}" for share in values) for name, values in divisions.items())
    if any(math.isfinite(value) for value in aucs):
        auc = "division AUC " + "/".join(f"{value:.3f}" for value in aucs)
    else:  # no known noisy pair (an audit of real data, a clean run): AUC undefined, the shares only
        auc, shares = ("division " + shares, "") if shares else ("", "")
    for keep_recalls, keep_shares in ((True, True), (False, True), (False, False)):
        parts = [
            head,
            *loss,
            (score + (f", R@1 {recalls}" if keep_recalls and recalls else "")) if validation else "",
            auc + (f", {shares}" if keep_shares and auc and shares else ""),
            f"{seconds:.1f}s",
        ]
        line = " | ".join(part for part in parts if part)
        if len(line) <= width:
            return line
    return line[: width - 3] + "..."


def _by_network(record: dict[str, Any], prefix: str) -> dict[str, float]:
    """The sum of the values under ``prefix`` per network (``netK`` in the key; one sum without it), by network."""
    sums: dict[str, float] = {}
    for key, value in record.items():
        if key.startswith(prefix):
            network = next((part for part in key.split("/") if re.fullmatch(r"net\d+", part)), "")
            sums[network] = sums.get(network, 0.0) + float(value)
    return dict(sorted(sums.items()))


def _division_columns(record: dict[str, Any]) -> dict[str, list[float]]:
    """``auc`` and the share of each named set (the clean share without named sets), each a list over the
    networks' divisions in ``record``."""
    columns: dict[str, list[float]] = {}
    for prefix in _division_prefixes(record):
        columns.setdefault("auc", []).append(record[f"{prefix}/auc"])
        for name, share in _shares(record, prefix):
            columns.setdefault(name, []).append(share)
    return columns


def format_epoch_details(record: dict[str, Any], epochs: int, seconds: float) -> str:
    """``epoch E/N [warmup] | loss TERM v ... | val ... | division ... | Ts`` from an epoch's history record: the line
    of ``OUTPUT_DIR/epochs.log``.

    Validation recalls are grouped per direction (``i2t R@1/5/10 a/b/c``) followed by
    rSum; other metrics (mAP) print by name. Division quality is the AUC, precision and
    recall of each network's division, with the share of each named set.
    """
    parts = [f"epoch {record['epoch']}/{epochs}" + (" warmup" if record.get("warmup") else "")]
    losses = [f"{key[len('train/'):]} {value:.4f}" for key, value in record.items() if key.startswith("train/")]
    if losses:
        parts.append("loss " + " ".join(losses))
    validation = {key[len("val/"):]: value for key, value in record.items() if key.startswith("val/")}
    if validation:
        parts.append("val " + _validation(validation))
    divisions = _divisions(record)
    if divisions:
        parts.append("division " + " ".join(divisions))
    parts.append(f"{seconds:.1f}s")
    return " | ".join(parts)


def _validation(metrics: dict[str, float]) -> str:
    shown = []
    for direction in ("i2t", "t2i"):
        recalls = [metrics.get(f"{direction}_r{k}") for k in (1, 5, 10)]
        if None not in recalls:
            shown.append(f"{direction} R@1/5/10 " + "/".join(f"{r:.1f}" for r in recalls))
    if "rsum" in metrics:
        shown.append(f"rSum {metrics['rsum']:.1f}")
    if not shown:
        shown = [f"{name} {value:.4f}" for name, value in metrics.items()]
    return " ".join(shown)


def _division_prefixes(record: dict[str, Any]) -> list[str]:
    """``division`` or ``division/netK``: one per division in ``record``."""
    return sorted({key.rsplit("/", 1)[0] for key in record if key.startswith("division") and key.endswith("/auc")})


def _shares(record: dict[str, Any], prefix: str) -> list[tuple[str, float]]:
    """(set, share) of each set the division under ``prefix`` made; the clean share without named sets."""
    shares = [
        (key[len(prefix) + 1:-len("_share")], value)
        for key, value in record.items()
        if key.startswith(prefix + "/") and key.endswith("_share") and key.count("/") == prefix.count("/") + 1
    ]
    if not shares and f"{prefix}/predicted_clean_ratio" in record:
        shares = [("clean", record[f"{prefix}/predicted_clean_ratio"])]
    return shares


def _divisions(record: dict[str, Any]) -> list[str]:
    """``[netK] AUC a P p R r SET share ...`` for each division in ``record`` (the clean share without named sets)."""
    shown = []
    for prefix in _division_prefixes(record):
        name = prefix[len("division"):].strip("/")
        auc, precision, recall = (record[f"{prefix}/{metric}"] for metric in ("auc", "precision", "recall"))
        text = f"AUC {auc:.3f} P {precision:.3f} R {recall:.3f}" if math.isfinite(auc) else "no known noisy pairs"
        shares = [f"{set_name} {share:.0%}" for set_name, share in _shares(record, prefix)]
        shown.append(" ".join(filter(None, [name, text, *shares])))
    return shown
