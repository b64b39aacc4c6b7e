"""The trainer end to end on tiny generated data: resume, errors, plugin combination."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from conftest import TINY_MODEL, Interrupted, noisy_trainer, tiny_config
from safetensors.torch import load_file

from hfncl.engine.trainer import Trainer
from hfncl.experiment import DataArguments, run_experiment
from hfncl.integrity import write_manifest
from hfncl.models import NCLConfig
from hfncl.plugin_setup import run_plugins
from hfncl.plugins import PluginError
from hfncl.tasks.pair_data import prepare_data
from hfncl.tasks.pairs import PAIRS


def test_killed_mid_epoch_resumes_to_the_same_result(tiny_data_dir, tmp_path, monkeypatch, capsys):
    reference = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "ref", ["ncr"], save_steps=3))
    expected = reference.train()

    interrupted = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "run", ["ncr"], save_steps=3))
    original_step = Trainer._step
    calls = {"n": 0}

    def dying_step(self, batch, networks):
        calls["n"] += 1
        if calls["n"] == 17:  # mid-epoch, after division, between checkpoints
            raise Interrupted
        return original_step(self, batch, networks)

    monkeypatch.setattr(Trainer, "_step", dying_step)
    with pytest.raises(Interrupted):
        interrupted.train()
    monkeypatch.setattr(Trainer, "_step", original_step)

    resumed = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "run", ["ncr"], save_steps=3, resume=True))
    capsys.readouterr()
    result = resumed.train()
    assert re.search(r"^resumed at step 15: epoch \d+/\d+, batch \d+ of its pass 1$", capsys.readouterr().out, re.M)
    assert resumed.state.global_step == reference.state.global_step
    assert json.dumps(result["history"], sort_keys=True) == json.dumps(expected["history"], sort_keys=True)
    ref_weights = load_file(str(tmp_path / "ref" / "best" / "model.safetensors"))
    run_weights = load_file(str(tmp_path / "run" / "best" / "model.safetensors"))
    assert all(torch.equal(ref_weights[k], run_weights[k]) for k in ref_weights)


def test_same_seed_same_division_and_metrics(tiny_data_dir, tmp_path):
    first = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "a", ["ncr"], epochs=2)).train()
    second = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "b", ["ncr"], epochs=2)).train()
    assert first["history"] == second["history"]
    assert "division/net0/auc" in first["history"][-1]


def test_unknown_plugin_and_unknown_option_are_named(tiny_data_dir, tmp_path):
    with pytest.raises(PluginError, match="'ncrr'"):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["ncrr"]))
    with pytest.raises(PluginError, match="ncr.alfa"):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["ncr"], options={"ncr.alfa": 0.1}))


def test_stages_of_two_plugins_combine(tiny_data_dir, tmp_path):
    # ncr divides and rectifies; vsepp adds its hardest-negative term to ncr's loss.
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["ncr", "vsepp"], epochs=2))
    history = trainer.train()["history"]
    assert {"train/soft_margin_triplet/net0", "train/triplet_hardest/net0"} <= set(history[-1])


def test_run_experiment_reports_test_metrics_and_division(tiny_data_dir, tmp_path, capfd):
    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4, test_folds=2),
        tiny_config(tmp_path, ["ncr"], epochs=2),
        TINY_MODEL,
    )
    assert set(result["test"]) >= {"i2t_r1", "t2i_r10", "rsum", "i2t_medr", "fold_rsum", "fold_i2t_r1"}
    assert 0.3 < result["true_noise_ratio"] <= 0.4
    assert (tmp_path / "best" / "model.safetensors").exists() and (tmp_path / "noise_index.npy").exists()
    picture = tmp_path / "divisions" / "epoch-002-net-0.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    check_epoch_lines(*capfd.readouterr(), (tmp_path / "epochs.log").read_text())


def check_epoch_lines(out: str, err: str, log: str) -> None:
    """The two epochs' lines of an NCR run (warmup, then divided: clean batches and the noisy batches beside them):
    on the console each network's loss, rSum, R@1 and division AUC in at most 120 characters; in epochs.log every
    term, recall and division measure; and no bar with progress off."""
    lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 2 and lines[0].startswith("epoch 1/2 warmup | loss ")
    assert all(len(line) <= 120 for line in lines), lines
    number = r"\d+\.\d+"
    assert re.fullmatch(
        rf"epoch 2/2 \| loss {number}/{number} \| val rSum {number}, R@1 i2t {number} t2i {number} \| "
        rf"division AUC {number}/{number}, clean \d+%/\d+% \| {number}s",
        lines[1],
    ), lines[1]
    details = log.splitlines()
    assert len(details) == 2 and details[0].startswith("epoch 1/2 warmup | loss warmup_")
    division = rf"AUC {number} P {number} R {number} clean \d+%"
    assert re.fullmatch(
        rf"epoch 2/2 \| loss soft_margin_triplet/net0 {number} soft_margin_triplet/net0/noisy {number} "
        rf"soft_margin_triplet/net1 {number} soft_margin_triplet/net1/noisy {number} \| "
        rf"val i2t R@1/5/10 {number}/{number}/{number} t2i R@1/5/10 {number}/{number}/{number} rSum {number} \| "
        rf"division net0 {division} net1 {division} \| {number}s",
        details[1],
    ), details[1]
    assert "Writing model shards" not in err and "it/s" not in err  # progress off: no bar at all


def test_a_train_step_override_keeps_the_terms_of_plugins_combined_with_it(tiny_data_dir, tmp_path):
    # tcvse replaces the step (Algorithm 1) but starts from trainer.compute_loss, so vsepp's term is trained too.
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["tcvse", "vsepp"], epochs=1, warmup_epochs=0))
    history = trainer.train()["history"]
    assert {"train/uce/net0", "train/uce/net1", "train/triplet_hardest/net0", "train/consistency"} <= set(history[-1])


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: parameter.detach().clone() for name, parameter in module.named_parameters()}


def test_text_tower_lr_scale_and_freeze_act_on_the_pretrained_text_encoder_only(tiny_data_dir, tmp_path):
    from test_towers import save_tiny_bert

    from hfncl.data import read_captions
    from hfncl.engine.callbacks import TrainerCallback
    from hfncl.models import NCLConfig
    from hfncl.tasks.pair_data import prepare_data
    from hfncl.tasks.pairs import PAIRS

    words = sorted(
        {w for s in ("train", "dev", "test") for c in read_captions(tiny_data_dir / f"{s}_caps.txt") for w in c.split()}
    )
    bert = save_tiny_bert(tmp_path / "bert", words)
    data = prepare_data(DataArguments(data_dir=str(tiny_data_dir)), tmp_path / "run", tokenizer=str(bert))
    model_config = NCLConfig(
        image_dim=data.image_dim, embed_dim=16, text_tower="transformer", text_tower_name=str(bert)
    )
    config = tiny_config(
        tmp_path / "run", ["vsepp"], epochs=3, warmup_epochs=0, learning_rate=1e-3, lr_decay_epochs=[2],
        text_tower_lr_scale=0.1, freeze_text_tower_epochs=1, plot_divisions=False,
    )

    class Snapshots(TrainerCallback):
        """The text tower's encoder and head and the image encoder at every epoch's start and end, and the group lrs."""

        def __init__(self) -> None:
            self.taken: list[dict[str, dict[str, torch.Tensor]]] = []
            self.lrs: list[list[float]] = []

        def _take(self, trainer: Trainer) -> None:
            network = trainer.model.networks[0]
            self.taken.append(
                {
                    "encoder": _weights(network.text_encoder.model),
                    "head": {"proj": network.text_encoder.proj_weight.detach().clone()},
                    "image": _weights(network.image_encoder),
                }
            )

        def on_epoch_begin(self, trainer: Trainer, epoch: int) -> None:
            self._take(trainer)

        def on_epoch_end(self, trainer: Trainer, record: dict, seconds: float) -> None:
            self._take(trainer)
            self.lrs.append([group["lr"] for group in trainer.optimizer.param_groups])

    snapshots = Snapshots()
    trainer = Trainer(
        config, model_config, data.train, data.val, task=PAIRS, callbacks=[snapshots], plugins=run_plugins(config)
    )
    encoder = trainer.model.networks[0].text_encoder.model
    groups = trainer.optimizer.param_groups
    assert [group["lr_scale"] for group in groups] == [1.0, 0.1]
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in encoder.parameters()}
    rest = {id(p) for p in groups[0]["params"]}
    assert id(trainer.model.networks[0].text_encoder.proj_weight) in rest and not rest & {
        id(p) for p in encoder.parameters()
    }
    assert len(rest) + len(groups[1]["params"]) == len(list(trainer.model.parameters()))
    trainer.train()
    # lr: 1e-3 and 1e-4 (BERT x0.1) in epochs 0 and 1, both x0.1 from epoch 2 on
    assert [lr for epoch in snapshots.lrs for lr in epoch] == pytest.approx([1e-3, 1e-4, 1e-3, 1e-4, 1e-4, 1e-5])

    def changed(part: str, epoch: int) -> bool:
        before, after = snapshots.taken[2 * epoch][part], snapshots.taken[2 * epoch + 1][part]
        return any(not torch.equal(before[name], after[name]) for name in before)

    assert not changed("encoder", 0) and changed("head", 0) and changed("image", 0)  # frozen in the first epoch
    assert changed("encoder", 1) and changed("encoder", 2)
    # Adam's step count: the frozen epoch left the encoder's moments untouched (as if it needed no gradient)
    state = trainer.optimizer.state
    per_epoch = trainer.state.global_step // 3
    head = trainer.model.networks[0].text_encoder.proj_weight
    assert int(state[head]["step"]) == 3 * per_epoch
    embeddings = encoder.embeddings.word_embeddings.weight
    assert int(state[embeddings]["step"]) == 2 * per_epoch


def test_text_tower_settings_without_a_pretrained_text_tower_are_refused(tiny_data_dir, tmp_path):
    with pytest.raises(
        ValueError,
        match=r"text_tower_lr_scale \(0.1\) and freeze_text_tower_epochs \(0\) act on a pretrained text tower",
    ):
        noisy_trainer(tiny_data_dir, tiny_config(tmp_path, ["vsepp"], text_tower_lr_scale=0.1))
    with pytest.raises(ValueError, match="TrainConfig.text_tower_lr_scale must be a finite number > 0, got 0.0"):
        tiny_config(tmp_path, ["vsepp"], text_tower_lr_scale=0.0)
    with pytest.raises(ValueError, match="TrainConfig.freeze_text_tower_epochs must be between 0 and epochs=3, got 4"):
        tiny_config(tmp_path, ["vsepp"], freeze_text_tower_epochs=4)


@pytest.mark.parametrize(("min_epochs", "trained"), [(0, 4), (5, 5)])
def test_early_stopping_ends_the_run_after_patience_epochs_without_a_better_validation_score(
    micro_data_dir, tmp_path, monkeypatch, min_epochs, trained
):
    """Validation rSum 1, 3, 2, 2, 2, 5: the best is epoch 1; with patience 2 the run stops after epoch 3 (two epochs
    without improvement), or, with ``early_stopping_min_epochs`` 5, after epoch 4. Each record counts the optimiser
    steps per network so far."""
    scores = iter([1.0, 3.0, 2.0, 2.0, 2.0, 5.0])
    config = tiny_config(
        tmp_path, ["vsepp"], epochs=6, lr_decay_epochs=[], batch_size=16, warmup_epochs=0,
        early_stopping_patience=2, early_stopping_min_epochs=min_epochs,
    )
    trainer = noisy_trainer(micro_data_dir, config)
    monkeypatch.setattr(trainer, "evaluate", lambda split: {"rsum": next(scores)})
    summary = trainer.train()
    assert len(summary["history"]) == trained and summary["best_epoch"] == 2
    per_epoch = trainer.num_train // 16
    assert [record["steps_per_network"] for record in summary["history"]] == [
        per_epoch * (e + 1) for e in range(trained)
    ]


@pytest.mark.parametrize(
    ("scores", "min_epochs", "trained", "best", "decayed"),
    [([1.0, 3.0, 2.0, 2.0, 2.0, 2.0, 9.0], 0, 6, 2, 4), ([1.0, 3.0, 2.0, 2.0, 5.0, 4.0, 4.0, 4.0, 9.0], 0, 7, 5, 4),
     ([1.0, 3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 9.0], 5, 7, 2, 5)],
)
def test_a_plateau_decays_the_rate_once_and_early_stopping_waits_for_it(micro_data_dir, tmp_path, monkeypatch, scores,
                                                                       min_epochs, trained, best, decayed):
    """``lr_decay_patience`` 2: the validation rSum stalls after epoch 2 (its best), so epochs 5 on train at a tenth of
    the rate, once whatever follows (epochs 6 on with ``early_stopping_min_epochs`` 5: no decay before it); early
    stopping (patience 2) then waits for 2 epochs at the decayed rate, and counts from a best found after the decay.
    Saved in the trainer state, so a resumed run decays where this one did."""
    scores_left = iter(scores)
    rates = []

    def evaluate(split):
        rates.append(trainer.optimizer.param_groups[0]["lr"])
        return {"rsum": next(scores_left)}

    config = tiny_config(tmp_path, ["vsepp"], epochs=len(scores), lr_decay_epochs=[], batch_size=16, warmup_epochs=0,
                         learning_rate=1e-3, early_stopping_patience=2, lr_decay_patience=2,
                         early_stopping_min_epochs=min_epochs)
    trainer = noisy_trainer(micro_data_dir, config)
    monkeypatch.setattr(trainer, "evaluate", evaluate)
    summary = trainer.train()
    assert len(summary["history"]) == trained and summary["best_epoch"] == best
    assert rates == pytest.approx([1e-3] * decayed + [1e-4] * (trained - decayed))
    saved = json.loads(max((tmp_path / "checkpoints").glob("step-*")).joinpath("trainer_state.json").read_text())
    assert saved["plateau_decay_epoch"] == decayed


@pytest.mark.parametrize("setting", ["early_stopping_patience", "lr_decay_patience"])
def test_a_setting_that_reads_the_validation_score_is_refused_without_a_validation_split(micro_data_dir, tmp_path,
                                                                                          setting):
    data = prepare_data(DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.4), str(tmp_path))
    model_config = NCLConfig(image_dim=data.image_dim, vocab_size=len(data.vocab), embed_dim=32, word_dim=16)
    config = tiny_config(tmp_path, ["vsepp"], **{setting: 2})
    with pytest.raises(ValueError, match=rf"TrainConfig.{setting} reads the validation score, and the run has no "
                                         r"validation split \(give one, or set it to 0\)"):
        Trainer(config, model_config, data.train, None, task=PAIRS, plugins=run_plugins(config))


def test_early_stopping_settings_are_checked():
    with pytest.raises(ValueError, match="early_stopping_patience must be >= 0"):
        tiny_config("out", ["vsepp"], early_stopping_patience=-1)
    with pytest.raises(ValueError, match=r"lr_decay_patience must be >= 0 \(0: no decay on a plateau\)"):
        tiny_config("out", ["vsepp"], lr_decay_patience=-1)


def test_epochs_count_from_1_on_the_console_and_in_the_results_checkpoints_card_and_plots(
    tiny_data_dir, tmp_path, capfd
):
    """One convention: what a person reads of a run (epoch lines, results.json, the checkpoints' names, the card's
    "weights of epoch N", the run record and the division plots) counts epochs from 1."""
    from hfncl.hub.record import read_run_record

    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.4),
        tiny_config(tmp_path, ["ncr"], epochs=2),
        TINY_MODEL,
    )
    lines = [line for line in capfd.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert [line.split(" |")[0] for line in lines] == ["epoch 1/2 warmup", "epoch 2/2"]
    assert [record["epoch"] for record in result["history"]] == [1, 2]
    best = max(result["history"], key=lambda record: record["val/rsum"])
    assert result["best_epoch"] == best["epoch"] == read_run_record(tmp_path / "best").best_epoch
    assert f"weights of epoch {best['epoch']}," in (tmp_path / "best" / "README.md").read_text()
    assert sorted(
        path.name.split("-epoch-")[1] for path in (tmp_path / "checkpoints").glob("step-*")
    ) == ["0001", "0002"]
    assert sorted(
        path.name for path in (tmp_path / "divisions").iterdir()
    ) == ["epoch-002-net-0.png", "epoch-002-net-1.png"]


def test_a_run_ends_with_one_line_saying_the_best_epoch_the_test_score_and_where_the_model_is():
    from hfncl.experiment import summary_line

    result = {"history": [{}, {}, {}], "best_epoch": 2, "best_val_rsum": 412.34, "test": {"rsum": 398.06}}
    assert summary_line(result, "runs/x") == (
        "done: best epoch 2/3 (validation rsum 412.3), test rsum 398.1; model in runs/x/best, "
        "results in runs/x/results.json"
    )
    labels = {"history": [{}, {}], "best_epoch": None, "best_val_mean_map": None, "test": {"mean_map": 0.7123}}
    assert summary_line(labels, "out") == (
        "done: no validation split: the last epoch's model (2/2), test mean_map 0.712; "
        "its checkpoint in out/checkpoints, results in out/results.json"
    )


def test_a_resumed_run_keeps_the_time_of_the_epochs_it_trained_before(micro_data_dir, tmp_path, monkeypatch):
    def settings(output_dir, resume=False):
        return tiny_config(output_dir, ["vsepp"], epochs=3, warmup_epochs=0, batch_size=16, resume=resume)

    original_epoch = Trainer._train_epoch

    def dying_epoch(self, epoch):
        if epoch == 2:
            raise Interrupted
        return original_epoch(self, epoch)

    monkeypatch.setattr(Trainer, "_train_epoch", dying_epoch)
    first = noisy_trainer(micro_data_dir, settings(tmp_path / "run"))
    with pytest.raises(Interrupted):
        first.train()
    monkeypatch.setattr(Trainer, "_train_epoch", original_epoch)
    before = first.state
    assert before.timed_epochs == 2 and before.train_seconds > 0 and before.train_cpu_seconds > 0
    checkpoint = max((tmp_path / "run" / "checkpoints").glob("step-*"))
    old = tmp_path / "old"  # the same checkpoint as an hfncl that kept no time wrote it
    shutil.copytree(tmp_path / "run", old)
    state_file = old / "checkpoints" / checkpoint.name / "trainer_state.json"
    saved = json.loads(state_file.read_text())
    assert saved["timed_epochs"] == 2 and saved["train_seconds"] == before.train_seconds
    for key in ("train_seconds", "train_cpu_seconds", "timed_epochs"):
        del saved[key]
    state_file.write_text(json.dumps(saved))
    write_manifest(state_file.parent)

    card_seconds = []  # the training time a best model's card would record, taken during the last epoch
    original_evaluate = Trainer.evaluate
    monkeypatch.setattr(Trainer, "evaluate", lambda self, split: (card_seconds.append(self._compute()["seconds"]),
                                                                 original_evaluate(self, split))[1])
    resumed = noisy_trainer(micro_data_dir, settings(tmp_path / "run", resume=True))
    summary = resumed.train()
    assert summary["untimed_epochs"] == 0 and resumed.state.timed_epochs == 3
    assert summary["train_seconds"] > before.train_seconds and summary["train_cpu_seconds"] > before.train_cpu_seconds
    assert before.train_seconds < card_seconds[-1] <= summary["train_seconds"]  # the first process's time counts
    assert resumed._compute()["seconds"] is None  # between epochs

    untimed = noisy_trainer(micro_data_dir, settings(old, resume=True))
    summary = untimed.train()
    assert summary["untimed_epochs"] == 2 and summary["train_seconds"] > 0
    assert card_seconds[-1] is None  # a card leaves out a time it does not know
