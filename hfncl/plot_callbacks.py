"""The figures a run draws while it trains, as trainer callbacks (main process; need matplotlib and
``config.plot_divisions``; without matplotlib nothing is drawn).

:class:`DivisionPlots` saves ``OUTPUT_DIR/divisions/epoch-EEE-net-K.png`` for every division that
carries ``extras["statistic"]`` (:func:`hfncl.plots.plot_division`); :class:`TrainingCurves`
redraws ``OUTPUT_DIR/training_curves.png`` after every epoch (:func:`hfncl.plots.plot_training_curves`).
The experiments install both (:func:`training_figures`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hfncl.engine.callbacks import CallbackTrainer, TrainerCallback
from hfncl.plots import plot_division, plot_training_curves

if TYPE_CHECKING:
    import numpy as np

    from hfncl.types import Division

CURVES_FILE = "training_curves.png"
DIVISIONS_DIR = "divisions"


def training_figures() -> list[TrainerCallback]:
    """The callbacks that draw a run's figures: division plots and training curves."""
    return [DivisionPlots(), TrainingCurves()]


def _draws(trainer: CallbackTrainer) -> bool:
    return trainer.config.plot_divisions and trainer.accelerator.is_main_process


class DivisionPlots(TrainerCallback):
    """Save ``OUTPUT_DIR/divisions/epoch-EEE-net-K.png`` for each new division that carries ``extras["statistic"]``."""

    def on_division(
        self, trainer: CallbackTrainer, epoch: int, divisions: list[Division | None], true_clean: np.ndarray
    ) -> None:
        if not _draws(trainer):
            return
        for net, division in enumerate(divisions):
            if division is not None and "statistic" in division.extras:
                try:
                    plot_division(
                        division.extras["statistic"],
                        division.clean_prob,
                        true_clean,
                        trainer.output_dir / DIVISIONS_DIR / f"epoch-{epoch + 1:03d}-net-{net}.png",
                        title=f"{'+'.join(trainer.config.plugins)}: division of epoch {epoch + 1}, network {net}",
                        mixture=division.extras.get("mixture"),
                        statistic_name=division.statistic_name,
                    )
                except ImportError:
                    return


class TrainingCurves(TrainerCallback):
    """Redraw ``OUTPUT_DIR/training_curves.png`` from the history after every epoch."""

    def on_epoch_end(self, trainer: CallbackTrainer, record: dict[str, Any], seconds: float) -> None:
        if not _draws(trainer):
            return
        try:
            plot_training_curves(trainer.state.history, trainer.output_dir / CURVES_FILE, trainer.task.best_metric)
        except ImportError:
            pass
