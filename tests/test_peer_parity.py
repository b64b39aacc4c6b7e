"""benchmarks/peer_parity.py's pure parts: reading the official run's log and divisions, hfncl's results, the table."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import benchmark_module

peer_parity = benchmark_module("peer_parity")

# The official code's stdout as it prints it: warmup of A then B per epoch (running means at --log_step 1), the
# comma-separated validation lines (one validation per epoch), and the final test's space-separated lines.
OFFICIAL_LOG = """\
train  data has a size of 256
[1/2] Warmup model_A
Warmup Step[0/2]\tbatch 20.1 (20.1)\tdata 0.0 ( 0.0)\tloss 5.0800e+01 (5.0800e+01)
Warmup Step[1/2]\tbatch 20.1 (20.1)\tdata 0.0 ( 0.0)\tloss 4.9000e+01 (4.9900e+01)
[1/2] Warmup model_B
Warmup Step[0/2]\tbatch 20.1 (20.1)\tdata 0.0 ( 0.0)\tloss 5.1000e+01 (5.1000e+01)
Warmup Step[1/2]\tbatch 20.1 (20.1)\tdata 0.0 ( 0.0)\tloss 5.0000e+01 (5.0500e+01)
Validattion ...
Image to text: 10.0, 30.0, 40.0, 5.0, 9.1
Text to image: 5.5, 20.0, 33.5, 8.0, 12.2
[2/2] Warmup model_A
Warmup Step[0/2]\tbatch 20.1 (20.1)\tdata 0.0 ( 0.0)\tloss 4.0000e+01 (4.0000e+01)
Warmup Step[1/2]\tbatch 20.1 (20.1)\tdata 0.0 ( 0.0)\tloss 3.0000e+01 (3.5000e+01)
[2/2] Warmup model_B
Warmup Step[1/2]\tbatch 20.1 (20.1)\tdata 0.0 ( 0.0)\tloss 3.0000e+01 (3.6000e+01)
Validattion ...
Image to text: 20.0, 40.0, 50.0, 3.0, 6.0
Text to image: 10.0, 30.0, 45.0, 4.0, 7.0
Training Step[0/2]\tbatch 20.1 (20.1)\tdata 0.0 ( 0.0)\tloss 9.0000e+00 (9.0000e+00)
Image to text: 25.0, 45.0, 55.0, 3.0, 6.0
Text to image: 10.0, 30.0, 45.0, 4.0, 7.0
rsum: 180.5
Average i2t Recall: 40.0
Image to text: 20.0 40.0 60.0 3.0 6.0
Average t2i Recall: 30.0
Text to image: 10.0 30.0 40.5 4.0 7.0
"""


def test_official_log_gives_an_rsum_per_validation_network_a_s_warmup_means_and_the_test_rsum():
    curve = peer_parity.parse_official_log(OFFICIAL_LOG, warmup_epochs=2)
    assert curve["val_rsum"] == [139.0, 195.0, 210.0]  # the test's space-separated lines are not a validation
    assert curve["warmup_loss"] == [49.9, 35.0]  # A's last running means; B's are skipped
    assert curve["test_rsum"] == 180.5


def test_a_log_cut_mid_run_gives_the_epochs_it_reached_and_no_test():
    cut = OFFICIAL_LOG[: OFFICIAL_LOG.index("[2/2] Warmup model_A")]
    curve = peer_parity.parse_official_log(cut, warmup_epochs=2)
    assert curve == {"val_rsum": [139.0], "warmup_loss": [49.9], "test_rsum": None}


def test_division_scores_rank_against_the_noise_index_s_clean_pairs_and_apply_the_official_threshold():
    noise = np.array([0, 0, 0, 0, 2, 2, 2, 1])  # 2 captions per image: captions 2, 3, 6, 7 re-paired
    clean = peer_parity.clean_pairs(noise, 2)
    assert clean.tolist() == [True, True, False, False, True, True, False, False]
    perfect = peer_parity.division_scores(clean * 0.8 + 0.1, clean)
    assert perfect == {"auc": 1.0, "clean_share": 0.5}
    inverted = peer_parity.division_scores(1.0 - (clean * 0.8 + 0.1), clean)
    assert inverted["auc"] == 0.0
    # every probability above 0.5: the official split_prob moves its threshold to the lowest 1% (here the minimum)
    assert peer_parity.division_scores(np.linspace(0.6, 0.9, 8), clean)["clean_share"] == 7 / 8
    with pytest.raises(ValueError, match="shapes differ"):
        peer_parity.division_scores(np.ones(3), clean)


def test_official_curve_adds_the_dumped_division_network_a_trains_on_of_each_co_training_epoch(tmp_path):
    """The official code trains model A on ``prob_B`` (the GMM of B's losses), the second of the dumped pair, as
    hfncl trains network 0 on its division from network 1's losses."""
    noise = np.array([0, 0, 0, 0, 1, 1, 1, 0])  # 4 captions per image: caption 7 re-paired
    np.save(tmp_path / "noise.npy", noise)
    (tmp_path / "train.log").write_text(OFFICIAL_LOG)
    a_trains_on = np.array([0.9, 0.9, 0.8, 0.9, 0.7, 0.9, 0.9, 0.1])
    np.save(tmp_path / "prob_0.npy", np.stack([1.0 - a_trains_on, a_trains_on]))
    curve = peer_parity.official_curve(tmp_path, tmp_path / "noise.npy", warmup_epochs=2)
    assert curve["division"] == [{"auc": 1.0, "clean_share": 7 / 8}]
    assert curve["val_rsum"] == [139.0, 195.0, 210.0]


def test_hfncl_curve_reads_network_a_from_results_json():
    results = {
        "history": [
            {"epoch": 1, "warmup": True, "train/warmup_lw/net0": 50.0, "train/warmup_lw/net1": 51.0, "val/rsum": 100.0},
            {
                "epoch": 2, "warmup": False, "division/net0/auc": 0.9, "division/net0/predicted_clean_ratio": 0.7,
                "division/net1/auc": 0.5, "division/net1/predicted_clean_ratio": 0.2, "val/rsum": 120.0,
            },
        ],
        "test": {"rsum": 111.0},
    }
    curve = peer_parity.hfncl_curve(json.loads(json.dumps(results)))
    assert curve == {
        "val_rsum": [100.0, 120.0], "warmup_loss": [50.0], "division": [{"auc": 0.9, "clean_share": 0.7}],
        "test_rsum": 111.0,
    }


def test_table_gives_mean_and_spread_over_seeds_and_a_dash_where_no_seed_reached_the_epoch():
    official = [
        {"val_rsum": [100.0, 200.0, 150.0], "warmup_loss": [50.0, 40.0], "division": [{"auc": 0.6, "clean_share": 0.5}],
         "test_rsum": 140.0},
        {"val_rsum": [110.0, 210.0], "warmup_loss": [52.0, 42.0], "division": [], "test_rsum": None},
    ]
    hfncl = [{"val_rsum": [120.0, 220.0, 230.0], "warmup_loss": [49.0, 39.0],
              "division": [{"auc": 0.9, "clean_share": 0.75}], "test_rsum": 225.0}]
    rows = peer_parity.table({"official": official, "hfncl": hfncl}, warmup_epochs=2, cotrain_epochs=1).splitlines()
    assert rows[2] == "| 1 (warmup) | 105.0 ± 7.1 | 120.0 | 51.00 ± 1.41 | 49.00 | - | - | - | - |"
    assert rows[4] == "| 3 (co-training 1) | 150.0 | 230.0 | - | - | 0.600 | 0.900 | 0.500 | 0.750 |"
    assert rows[5] == "| test (best checkpoint) | 140.0 | 225.0 | | | | | | |"


def test_every_official_sgraf_layer_has_one_hfncl_layer():
    names = {
        "img_enc.fc.weight": "image_encoder.fc.weight",
        "txt_enc.cap_rnn.weight_hh_l0_reverse": "text_encoder.rnn.weight_hh_l0_reverse",
        "sim_enc.v_global_w.embedding_local.1.running_var": "head.image_pool.local_norm.running_var",
        "sim_enc.t_global_w.embedding_common.0.bias": "head.text_pool.score.bias",
        "sim_enc.SGR_module.2.graph_key_w.weight": "head.steps.2.key.weight",
        "sim_enc.SGR_module.0.sim_graph_w.bias": "head.steps.0.update.bias",
        "sim_enc.sim_eval_w.weight": "head.output.weight",
    }
    assert {official: peer_parity.hfncl_name(official) for official in names} == names
    assert peer_parity.hfncl_name("sim_enc.SAF_module.bn.running_mean") == "head.norm.running_mean"
    layers = list(peer_parity.OFFICIAL_NAMES.values())
    assert len(set(layers)) == len(layers)
    with pytest.raises(KeyError, match="sim_enc.AVE_module.weight"):
        peer_parity.hfncl_name("sim_enc.AVE_module.weight")


SAF_LAYERS = {"head.attention", "head.norm"}
SGR_LAYERS = {f"head.steps.{k}.{kind}" for k in range(2) for kind in ("query", "key", "update")}


@pytest.mark.parametrize(("head", "own", "other"), [("sgr", SGR_LAYERS, SAF_LAYERS), ("saf", SAF_LAYERS, SGR_LAYERS)])
def test_the_mapped_layers_are_the_layers_of_an_hfncl_network_with_either_head(head, own, other):
    from hfncl.models import NCLConfig, NCLModel

    config = NCLConfig(image_dim=8, embed_dim=8, word_dim=8, vocab_size=10, similarity=head, sim_dim=4,
                       num_networks=1, image_regions=3, reasoning_steps=2)
    state = NCLModel(config).networks[0].state_dict()
    layers = {name.rpartition(".")[0] for name in state}
    assert (set(peer_parity.OFFICIAL_NAMES.values()) - other) | own == layers


def test_the_head_reaches_both_programs(tmp_path):
    """``--head saf``: hfncl's config sets ``similarity`` "saf" and the official run's command ``--module_name SAF``."""
    from pathlib import Path

    (tmp_path / "co_train.py").write_text("")
    argv = ["--peer-dir", str(tmp_path), "--proxy-dir", str(tmp_path)]
    assert peer_parity.hfncl_config(peer_parity.parse_args(argv), 0, Path("n.npy"))["similarity"] == "sgr"
    assert peer_parity.hfncl_config(peer_parity.parse_args([*argv, "--head", "saf"]), 0, Path("n.npy"))[
        "similarity"
    ] == "saf"
    with pytest.raises(SystemExit):
        peer_parity.parse_args([*argv, "--head", "ave"])


def test_each_script_takes_its_own_argument_beside_the_shared_ones(tmp_path):
    """``--transplant-check`` is peer_parity's own, ``--start`` peer_cotrain's; neither script takes the other's."""
    peer_cotrain = benchmark_module("peer_cotrain")
    (tmp_path / "co_train.py").write_text("")
    argv = ["--peer-dir", str(tmp_path), "--proxy-dir", str(tmp_path)]
    assert peer_parity.parse_args([*argv, "--transplant-check"], more=peer_parity.transplant_choice).transplant_check
    assert peer_parity.parse_args([*argv, "--start", "hfncl"], more=peer_cotrain.start_choice).start == "hfncl"
    with pytest.raises(SystemExit):
        peer_parity.parse_args([*argv, "--transplant-check"], more=peer_cotrain.start_choice)
    with pytest.raises(SystemExit):
        peer_parity.parse_args([*argv, "--start", "hfncl"], more=peer_parity.transplant_choice)


def test_options_reach_hfncl_s_config_over_the_recipe_s_own(tmp_path):
    from pathlib import Path

    authors = {"ncr.own_prediction": "eval", "ncr.prediction": "hinge", "ncr.label_layout": "broadcast"}
    argv = ["--peer-dir", str(tmp_path), "--proxy-dir", str(tmp_path), "--options", json.dumps(authors)]
    (tmp_path / "co_train.py").write_text("")
    args = peer_parity.parse_args(argv)
    config = peer_parity.hfncl_config(args, 0, Path(tmp_path / "noise.npy"))
    recipe = peer_parity.recipe_settings("ncr_f30k")["training"]["options"]
    assert config["options"] == {**recipe, **authors}
    assert "options" not in peer_parity.hfncl_config(peer_parity.parse_args(argv[:4]), 0, Path(tmp_path / "noise.npy"))


SGR_KINDS = {"query": "graph_query_w", "key": "graph_key_w", "update": "sim_graph_w"}


def official_name(name: str) -> str:
    """The official SGRAF name of an hfncl network's parameter or buffer: peer_parity.hfncl_name inverted here."""
    if name.startswith("head.steps."):
        _, _, step, kind, field = name.split(".")
        return f"sim_enc.SGR_module.{step}.{SGR_KINDS[kind]}.{field}"
    layer, _, field = name.rpartition(".")
    official_of = {hfncl: official for official, hfncl in peer_parity.OFFICIAL_NAMES.items()}
    return f"{official_of[layer]}.{field}"


def official_layout(network, shift: float = 0.0) -> list[dict]:
    """An hfncl network's state as the official checkpoint lists it: a state dict per official part, floats + shift."""
    parts: dict[str, dict] = {part: {} for part in peer_parity.OFFICIAL_PARTS}
    for name, value in network.state_dict().items():
        part, _, rest = official_name(name).partition(".")
        parts[part][rest] = value + shift if value.is_floating_point() else value
    return [parts[part] for part in peer_parity.OFFICIAL_PARTS]


TINY_OPT = dict(img_dim=8, embed_size=8, word_dim=6, vocab_size=10, sim_dim=4, sgr_step=2, module_name="SGR")


def test_the_official_warmup_checkpoint_becomes_hfncl_s_start_weights_a_as_network_0(tmp_path):
    """peer_cotrain.start_weights: an official checkpoint (``model_A`` / ``model_B``: the state dicts of img_enc,
    txt_enc and sim_enc, and ``opt``), written here from two hfncl networks under the official names, gives back
    those networks' every tensor, A as network 0 and B as 1, saved for ``init_weights``."""
    import argparse

    import torch

    from hfncl.models import NCLModel

    peer_cotrain = benchmark_module("peer_cotrain")
    torch.manual_seed(3)
    config = peer_cotrain.NCLConfig(image_dim=8, embed_dim=8, word_dim=6, vocab_size=10, similarity="sgr", sim_dim=4,
                                    num_networks=1, image_regions=3, reasoning_steps=2)
    networks = [NCLModel(config).networks[0] for _ in range(2)]
    checkpoint = {"epoch": 2, "opt": argparse.Namespace(**TINY_OPT)}
    for key, network in zip(("model_A", "model_B"), networks, strict=True):
        checkpoint[key] = official_layout(network, 0.25)  # not a fresh model's
    torch.save(checkpoint, tmp_path / "warmup_model_2.pth.tar")

    start = peer_cotrain.start_weights(tmp_path / "warmup_model_2.pth.tar", 3, tmp_path / "start")
    loaded = NCLModel.from_pretrained(str(start))
    for network, original in zip(loaded.networks, networks, strict=True):
        theirs, ours = network.state_dict(), original.state_dict()
        shifted = {k: v + 0.25 if v.is_floating_point() else v for k, v in ours.items()}
        assert theirs.keys() == ours.keys() and all(torch.equal(theirs[k], shifted[k]) for k in ours)


def test_hfncl_s_checkpoint_becomes_an_official_start_with_each_network_s_adam_moments_in_the_official_order(tmp_path):
    """peer_cotrain.official_from_hfncl: hfncl's checkpoint (each network's safetensors, one Adam over both networks'
    parameters) gives each official network its weights and, in the order the official SGRAF hands its parameters
    to Adam (txt_enc, img_enc, sim_enc), each parameter's own moments; parameters Adam never stepped have none."""
    import argparse

    import torch
    from safetensors.torch import save_file

    peer_cotrain = benchmark_module("peer_cotrain")
    opt = argparse.Namespace(**TINY_OPT)
    torch.manual_seed(4)
    model = peer_cotrain.hfncl_model(opt, 3)
    parameters = dict(model.named_parameters())
    unstepped = {"networks.0.image_encoder.fc.bias", "networks.1.head.output.weight"}
    adam = torch.optim.Adam(model.parameters(), lr=2e-4)
    for _ in range(2):
        for name, parameter in parameters.items():
            parameter.grad = None if name in unstepped else torch.randn_like(parameter)
        adam.step()
    folder = tmp_path / "step-00000096-epoch-0003"
    folder.mkdir()
    for network, file in zip(model.networks, ("model.safetensors", "model_1.safetensors"), strict=True):
        save_file({k: v.contiguous() for k, v in network.state_dict().items()}, folder / file)
    torch.save(adam.state_dict(), folder / "optimizer.bin")
    template = {"epoch": 2, "opt": opt, "model_A": official_layout(model.networks[0], 1.0),
                "model_B": official_layout(model.networks[1], 1.0)}

    path = peer_cotrain.official_from_hfncl(folder, template, 3, tmp_path / "start.pth.tar")
    with torch.serialization.safe_globals([argparse.Namespace]):
        converted = torch.load(path, weights_only=True)
    for index, key in enumerate(("model_A", "model_B")):
        network = model.networks[index]
        weights, optimizer = converted[key][:3], converted[key][3]
        expected = official_layout(network)
        assert [list(part) for part in weights] == [list(part) for part in expected]
        assert all(torch.equal(weights[i][k], expected[i][k]) for i in range(3) for k in expected[i])
        by_part = {official_name(name).partition(".")[0]: [] for name in dict(network.named_parameters())}
        for name, parameter in network.named_parameters():
            by_part[official_name(name).partition(".")[0]].append((f"networks.{index}.{name}", parameter))
        order = [entry for part in ("txt_enc", "img_enc", "sim_enc") for entry in by_part[part]]
        assert optimizer["param_groups"][0]["params"] == list(range(len(order)))
        for position, (name, parameter) in enumerate(order):
            if name in unstepped:
                assert position not in optimizer["state"]
                continue
            ours = adam.state[parameter]
            theirs = optimizer["state"][position]
            assert int(theirs["step"]) == 2
            assert all(torch.equal(theirs[moment], ours[moment]) for moment in ("exp_avg", "exp_avg_sq"))
