"""Trainer callbacks: the events of a run in order, and the figures drawn through them."""

from __future__ import annotations

from conftest import noisy_trainer, tiny_config

from hfncl.engine.callbacks import TRAINING_HOOKS, CallbackTrainer, TrainerCallback
from hfncl.plot_callbacks import CURVES_FILE, DIVISIONS_DIR, training_figures

BATCHES = 800 // 32  # the tiny benchmark's pairs / batch size


class Recorder(TrainerCallback):
    """Writes down every event as a tuple of its name and its arguments of interest."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_train_begin(self, trainer):
        self.events.append(("train_begin",))

    def on_epoch_begin(self, trainer, epoch):
        self.events.append(("epoch_begin", epoch))

    def on_hook_begin(self, trainer, name):
        self.events.append(("begin", name))

    def on_hook_end(self, trainer, name):
        self.events.append(("end", name))

    def on_division(self, trainer, epoch, divisions, true_clean):
        assert divisions == trainer.divisions and len(true_clean) == len(divisions[0])
        self.events.append(("division", epoch, len(divisions)))

    def on_epoch_end(self, trainer, record, seconds):
        assert record is trainer.state.history[-1] and seconds > 0
        self.events.append(("epoch_end", record["epoch"]))

    def on_train_end(self, trainer, summary):
        assert summary["history"] is trainer.state.history
        self.events.append(("train_end", len(summary["history"])))


def _hook(name: str) -> list[tuple]:
    return [("begin", name), ("end", name)]


def test_a_callback_receives_the_events_of_a_run_in_order(tiny_data_dir, tmp_path):
    recorder = Recorder()
    config = tiny_config(tmp_path, ["ncr"], epochs=2, plot_divisions=False, options={"ncr.noisy_batch": "split"})
    noisy_trainer(tiny_data_dir, config, callbacks=[recorder]).train()

    def epoch(number: int, warmup: bool) -> list[tuple]:
        events = [("epoch_begin", number), *_hook("epoch_start")]
        if not warmup:
            events += [*_hook("divide"), ("division", number, 2)]
        step = _hook("train_step") + (_hook("warmup_loss") if warmup else _hook("rectify") + _hook("loss"))
        for _ in range(2):  # NCR trains its two networks in turn, one pass each
            events += _hook("batch_plan") + step * BATCHES + _hook("pass_end")
        return events + _hook("epoch_end") + [("epoch_end", number + 1)]  # the record counts epochs from 1

    expected = [("train_begin",), *epoch(0, warmup=True), *epoch(1, warmup=False), ("train_end", 2)]
    assert recorder.events == expected
    assert {name for event, *names in recorder.events if event == "begin" for name in names} == set(TRAINING_HOOKS)


def test_the_trainer_has_every_member_the_callbacks_protocol_declares(tiny_data_dir, tmp_path):
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["ncr"], epochs=1))
    members = set(CallbackTrainer.__annotations__)
    assert {"config", "accelerator", "state", "output_dir", "divisions"} <= members
    assert [name for name in sorted(members) if not hasattr(trainer, name)] == []
    assert trainer.output_dir == tmp_path and len(trainer.divisions) == 2


def test_the_figure_callbacks_draw_where_the_trainer_did_and_honour_plot_divisions(tiny_data_dir, tmp_path):
    noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "on", ["ncr"], epochs=2), callbacks=training_figures()).train()
    pictures = sorted(path.name for path in (tmp_path / "on" / DIVISIONS_DIR).iterdir())
    assert pictures == ["epoch-002-net-0.png", "epoch-002-net-1.png"]  # the first division: epoch 2 of 2
    assert (tmp_path / "on" / CURVES_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    config = tiny_config(tmp_path / "off", ["ncr"], epochs=2, plot_divisions=False)
    noisy_trainer(tiny_data_dir, config, callbacks=training_figures()).train()
    noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "bare", ["ncr"], epochs=2)).train()
    for run in ("off", "bare"):  # turned off, or a trainer without the figure callbacks: nothing drawn
        assert not (tmp_path / run / DIVISIONS_DIR).exists() and not (tmp_path / run / CURVES_FILE).exists()
