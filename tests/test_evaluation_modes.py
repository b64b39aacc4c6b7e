"""Evaluation modes, each labelled: one network, the mean of a co-trained model's networks, two models averaged
(SGRAF); the best-validation checkpoint is the one tested; the noise protocol in results.json and the card."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import TINY_MODEL, tiny_config

from hfncl import cli
from hfncl.data import load_precomp_split
from hfncl.engine.encoding import RetrievalSplit, encode_split
from hfncl.evaluation import retrieval_metrics_from_matrix
from hfncl.experiment import DataArguments, run_experiment
from hfncl.hub import load_text_vocabulary
from hfncl.models import NCLConfig, NCLModel
from hfncl.tasks.checkpoints import evaluate_checkpoints


@pytest.fixture(scope="module")
def runs(micro_data_dir, tmp_path_factory):
    """An NCR model (two co-trained networks) under DECL's image-level noise and a VSE++ model under NCR's."""
    root = tmp_path_factory.mktemp("modes")
    out = {}
    for plugin, kind in (("ncr", "image"), ("vsepp", "caption")):
        data = DataArguments(data_dir=str(micro_data_dir), noise_ratio=0.4, noise_kind=kind)
        config = tiny_config(root / plugin, [plugin], epochs=2, warmup_epochs=1, batch_size=16, lr_decay_epochs=[])
        out[plugin] = (run_experiment(data, config, TINY_MODEL), root / plugin)
    return out


def _matrix(checkpoint, data_dir, network=None):
    """The plain reference: the (N, N * k) test similarities of one checkpoint's networks (or of one network)."""
    model = NCLModel.from_pretrained(str(checkpoint)).eval()
    split = RetrievalSplit.from_precomp(
        load_precomp_split(data_dir, "test"), load_text_vocabulary(str(checkpoint), model.config)
    )
    images, texts = encode_split(model, split, batch_size=64)
    with torch.no_grad():
        each = model.network_similarities(images, texts)
    return each.mean(0) if network is None else each[network], split.captions_per_image


def test_single_network_scores_as_that_network_of_the_model():
    torch.manual_seed(0)
    model = NCLModel(NCLConfig(image_dim=8, embed_dim=16, word_dim=8, vocab_size=20, num_networks=2)).eval()
    images, captions, lengths = torch.randn(3, 4, 8), torch.randint(4, 20, (5, 6)), torch.full((5,), 6)
    with torch.no_grad():
        both = model.network_similarities(model.encode_image(images), model.encode_text(captions, lengths))
        alone = model.single_network(1)
        one = alone.similarity(alone.encode_image(images), alone.encode_text(captions, lengths))
    torch.testing.assert_close(one, both[1])
    assert alone.config.num_networks == 1 and model.config.num_networks == 2
    assert alone.networks[0] is model.networks[1]  # the weights are shared, not copied
    with pytest.raises(ValueError, match="network 2 does not exist: the model holds 2"):
        model.single_network(2)


def test_the_tested_checkpoint_is_the_best_validation_one(runs, micro_data_dir):
    for result, directory in runs.values():
        record = json.loads((directory / "best" / "hfncl_run.json").read_text())
        val = [epoch["val/rsum"] for epoch in result["history"]]
        assert result["best_epoch"] == 1 + val.index(max(val)) == record["best_epoch"]
        assert evaluate_checkpoints([directory / "best"], micro_data_dir) == pytest.approx(result["test"])


def test_each_mode_against_the_plain_reference(runs, micro_data_dir):
    ncr, vsepp = runs["ncr"][1] / "best", runs["vsepp"][1] / "best"
    mean, k = _matrix(ncr, micro_data_dir)
    assert evaluate_checkpoints([ncr], micro_data_dir) == pytest.approx(retrieval_metrics_from_matrix(mean, k))
    network_a, _ = _matrix(ncr, micro_data_dir, network=0)
    alone = evaluate_checkpoints([ncr], micro_data_dir, network=0)
    assert alone == pytest.approx(retrieval_metrics_from_matrix(network_a, k))
    other, _ = _matrix(vsepp, micro_data_dir)
    averaged = evaluate_checkpoints([ncr, vsepp], micro_data_dir)  # SGRAF's rule: two models' similarities averaged
    assert averaged == pytest.approx(retrieval_metrics_from_matrix((mean + other) / 2, k))
    with pytest.raises(ValueError, match="network 3 does not exist"):
        evaluate_checkpoints([ncr], micro_data_dir, network=3)


def test_cli_evaluate_labels_its_mode(runs, micro_data_dir, capsys):
    ncr = str(runs["ncr"][1] / "best")
    assert cli.main(["evaluate", ncr, "--data-dir", str(micro_data_dir), "--network", "1", "--no-progress"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["mode"] == "network 1 of each checkpoint alone"
    assert printed["metrics"] == pytest.approx(evaluate_checkpoints([ncr], micro_data_dir, network=1))


def test_results_json_and_card_name_the_noise_protocol(runs):
    for plugin, protocol in (("ncr", "decl-image"), ("vsepp", "ncr-caption")):
        directory = runs[plugin][1]
        assert json.loads((directory / "results.json").read_text())["noise_protocol"] == protocol
        assert json.loads((directory / "best" / "hfncl_run.json").read_text())["data"]["noise_protocol"] == protocol
        assert f"protocol `{protocol}`, " in (directory / "best" / "README.md").read_text()
