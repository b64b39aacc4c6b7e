"""Tests of hfncl.models: encoders, NCLConfig, NCLModel, save/load and the Auto classes."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel

import hfncl.models
from hfncl.models import MatchingNetwork, NCLConfig, NCLModel
from hfncl.models.encoders import RegionImageEncoder

TINY = dict(image_dim=8, embed_dim=16, word_dim=6, vocab_size=20)
B, R, L = 5, 4, 7


def tiny_config(**overrides: object) -> NCLConfig:
    return NCLConfig(**{**TINY, **overrides})


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Images (B, R, 8), captions (B, L) padded with 0 and their lengths, one caption of length 1."""
    generator = torch.Generator().manual_seed(1)
    images = torch.randn(B, R, TINY["image_dim"], generator=generator)
    lengths = torch.tensor([7, 3, 5, 1, 4])
    captions = torch.randint(1, TINY["vocab_size"], (B, L), generator=generator)
    captions[torch.arange(L)[None, :] >= lengths[:, None]] = 0
    return images, captions, lengths


def model(seed: int = 0, **overrides: object) -> NCLModel:
    torch.manual_seed(seed)
    return NCLModel(tiny_config(**overrides)).eval()


def assert_same_model(loaded: NCLModel, original: NCLModel, batch) -> None:
    """Bit-identical weights; similarities equal up to float rounding.

    Loaded parameters live in one buffer read from model.safetensors and are not
    64-byte aligned, so vectorised GRU kernels may round the last bit differently.
    """
    state, loaded_state = original.state_dict(), loaded.state_dict()
    assert state.keys() == loaded_state.keys()
    assert all(torch.equal(state[k], loaded_state[k]) for k in state)
    with torch.no_grad():
        torch.testing.assert_close(loaded(*batch), original(*batch), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("overrides", [{}, {"num_networks": 3}, {"bidirectional": False, "text_layers": 2}])
def test_output_shapes(batch, overrides):
    images, captions, lengths = batch
    m = model(**overrides)
    k, d = m.config.num_networks, TINY["embed_dim"]
    with torch.no_grad():
        image_embeds, text_embeds = m.encode_image(images), m.encode_text(captions, lengths)
        assert image_embeds.shape == (k, B, d)
        assert text_embeds.shape == (k, B, d)
        assert m.similarity(image_embeds, text_embeds[:, :3]).shape == (B, 3)
        assert m(images, captions, lengths).shape == (B, B)
        img, txt = m.networks[0](images, captions, lengths)
    assert img.shape == txt.shape == (B, d)


def test_embeddings_are_unit_norm(batch):
    images, captions, lengths = batch
    m = model(num_networks=2)
    with torch.no_grad():
        for embeds in (m.encode_image(images), m.encode_text(captions, lengths)):
            torch.testing.assert_close(embeds.norm(dim=-1), torch.ones(2, B))


def test_text_encoder_ignores_padding(batch):
    _, captions, lengths = batch
    encoder = model().networks[0].text_encoder
    with torch.no_grad():
        reference = encoder(captions, lengths)
        padded = encoder(torch.cat([captions, torch.zeros(B, 6, dtype=torch.long)], dim=1), lengths)
        one_by_one = torch.cat([encoder(captions[i : i + 1, : lengths[i]], lengths[i : i + 1]) for i in range(B)])
    torch.testing.assert_close(padded, reference)
    torch.testing.assert_close(one_by_one, reference)


def test_permuting_the_batch_permutes_the_similarity(batch):
    images, captions, lengths = batch
    m = model(num_networks=2)
    perm = torch.tensor([3, 0, 4, 1, 2])
    with torch.no_grad():
        sims = m(images, captions, lengths)
        permuted = m(images[perm], captions[perm], lengths[perm])
    torch.testing.assert_close(permuted, sims[perm][:, perm])


def test_networks_start_apart_and_deterministically():
    first, again = model(seed=3, num_networks=2), model(seed=3, num_networks=2)
    state, state_again = first.state_dict(), again.state_dict()
    assert all(torch.equal(state[k], state_again[k]) for k in state)
    for name, value in first.networks[0].state_dict().items():
        if not name.endswith("fc.bias"):  # the only parameter SCAN sets to a constant (0)
            assert not torch.equal(value, first.networks[1].state_dict()[name]), name


def test_scan_initialisation_survives_post_init():
    network = model().networks[0]
    fc, embed = network.image_encoder.fc, network.text_encoder.embed
    r = math.sqrt(6) / math.sqrt(TINY["image_dim"] + TINY["embed_dim"])
    assert fc.weight.abs().max() <= r
    assert fc.weight.std() > r / 2  # uniform(-r, r) has std r / sqrt(3); transformers' default is 0.02
    assert torch.equal(fc.bias, torch.zeros_like(fc.bias))
    assert embed.weight.abs().max() <= 0.1
    assert embed.weight.std() > 0.04  # uniform(-0.1, 0.1): std 0.058


def test_model_similarity_is_mean_of_network_similarities(batch):
    images, captions, lengths = batch
    m = model(num_networks=2)
    with torch.no_grad():
        per_network = [net.image_encoder(images) @ net.text_encoder(captions, lengths).t() for net in m.networks]
        actual = m(images, captions, lengths)
    assert not torch.allclose(per_network[0], per_network[1])
    torch.testing.assert_close(actual, (per_network[0] + per_network[1]) / 2)


def test_similarity_rejects_embeddings_of_the_wrong_network_count(batch):
    images, captions, lengths = batch
    m = model(num_networks=2)
    with torch.no_grad(), pytest.raises(ValueError, match="K=2"):
        m.similarity(m.encode_image(images)[:1], m.encode_text(captions, lengths)[:1])


def test_save_and_load_roundtrip(batch, tmp_path: Path):
    m = model(num_networks=2, plugins=["ncr"], plugin_versions={"ncr": "0.1.0"})
    m.save_pretrained(tmp_path)
    assert {"config.json", "model.safetensors"} <= {p.name for p in tmp_path.iterdir()}
    loaded = NCLModel.from_pretrained(tmp_path).eval()
    loaded_fields, fields = loaded.config.to_dict(), m.config.to_dict()
    assert loaded_fields.pop("_name_or_path") == str(tmp_path)
    assert loaded_fields == {k: v for k, v in fields.items() if k != "_name_or_path"}
    assert (loaded.config.plugins, loaded.config.plugin_versions) == (["ncr"], {"ncr": "0.1.0"})
    assert_same_model(loaded, m, batch)


def test_auto_model_roundtrip(batch, tmp_path: Path):
    m = model(num_networks=2)
    m.save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is NCLConfig
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert type(loaded) is NCLModel
    assert_same_model(loaded, m, batch)


def test_registration_survives_reimport():
    importlib.reload(hfncl.models)
    assert type(AutoConfig.for_model("hfncl", **TINY)) is NCLConfig


def test_offline_local_load(batch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    m = model()
    m.save_pretrained(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads the variable once, at import.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert_same_model(AutoModel.from_pretrained(str(tmp_path)).eval(), m, batch)
    with pytest.raises(OSError):
        NCLModel.from_pretrained("hfncl-test/no-such-model")


def test_a_weight_missing_from_the_checkpoint_is_refused_not_initialised(tmp_path: Path):
    from hfncl.hub import CheckpointError

    m = model(num_networks=2)
    m.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["networks.1.image_encoder.fc.weight"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    said = r"tensor networks\.1\.image_encoder\.fc\.weight is missing; nothing was loaded"
    with pytest.raises(CheckpointError, match=said):
        NCLModel.from_pretrained(tmp_path)
    fc = m.networks[1].image_encoder.fc.weight  # a new model's layer: SCAN's initialisation
    r = math.sqrt(6) / math.sqrt(TINY["image_dim"] + TINY["embed_dim"])
    assert torch.isfinite(fc).all() and fc.abs().max() <= r and fc.std() > r / 2


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("similarity", "dot", r"NCLConfig\.similarity must be one of \('cosine', 'saf', 'scan', 'sgr'\), got 'dot'"),
        ("image_pooling", "sum", r"NCLConfig\.image_pooling must be one of \('mean', 'max'\)"),
        ("embed_dim", 0, r"NCLConfig\.embed_dim must be a positive integer, got 0"),
        ("num_networks", -1, r"NCLConfig\.num_networks must be a positive integer"),
        ("vocab_size", 2.5, r"NCLConfig\.vocab_size must be a positive integer"),
        ("image_dim", True, r"NCLConfig\.image_dim must be a positive integer"),
        ("bidirectional", "yes", r"NCLConfig\.bidirectional must be True or False"),
        ("plugins", "ncr", r"NCLConfig\.plugins must be a list"),
    ],
)
def test_invalid_config_values_raise(field, value, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**{field: value})


def test_config_defaults():
    config = NCLConfig()
    assert (config.image_dim, config.embed_dim, config.word_dim, config.vocab_size) == (2048, 1024, 300, 10000)
    assert (config.text_layers, config.bidirectional, config.image_pooling) == (1, True, "mean")
    assert (config.similarity, config.num_networks, config.plugins, config.plugin_versions) == ("cosine", 1, [], {})
    assert config.model_type == "hfncl"


def test_max_pooling(batch):
    images, captions, lengths = batch
    encoder = RegionImageEncoder(TINY["image_dim"], TINY["embed_dim"], pooling="max")
    with torch.no_grad():
        pooled = encoder.fc(images).amax(dim=1)
        torch.testing.assert_close(encoder(images), pooled / pooled.norm(dim=-1, keepdim=True))
        network = MatchingNetwork(tiny_config(image_pooling="max"))
        assert network.image_encoder.pooling == "max"
        assert model(image_pooling="max")(images, captions, lengths).shape == (B, B)
    with pytest.raises(ValueError, match="pooling must be one of"):
        RegionImageEncoder(TINY["image_dim"], TINY["embed_dim"], pooling="sum")



# --- image views and text pooling --------------------------------------------------------------


def test_image_views_are_separate_unit_norm_projections(batch) -> None:
    images, captions, lengths = batch
    net = model(seed=3, image_views=3).networks[0]
    image_embeds, text_embeds = net(images, captions, lengths)
    assert image_embeds.shape == (B, 3 * TINY["embed_dim"])
    views = image_embeds.view(B, 3, TINY["embed_dim"])
    assert torch.allclose(views.norm(dim=-1), torch.ones(B, 3), atol=1e-6)
    weight = net.image_encoder.fc.weight.view(3, TINY["embed_dim"], TINY["image_dim"])
    for w in range(3):
        expected = torch.nn.functional.normalize(
            (images @ weight[w].t() + net.image_encoder.fc.bias.view(3, -1)[w]).mean(dim=1), dim=-1
        )
        assert torch.allclose(views[:, w], expected, atol=1e-6)
    per_view = net.view_similarity(image_embeds, text_embeds)
    assert per_view.shape == (3, B, B)
    for w in range(3):
        assert torch.allclose(per_view[w], views[:, w] @ text_embeds.t(), atol=1e-6)
    assert torch.allclose(net.similarity(image_embeds, text_embeds), per_view.mean(dim=0), atol=1e-6)


@pytest.mark.parametrize("similarity", ["sgr", "saf"])
def test_local_heads_score_each_image_view_on_its_own(batch, similarity) -> None:
    """With W views an SGR / SAF head scores each view's regions alone; view_scores are its raw output,
    view_similarity their sigmoid, and one view scores as a one-view network with that view's weights."""
    images, captions, lengths = batch
    heads = dict(similarity=similarity, sim_dim=6, reasoning_steps=2, image_regions=R)
    net = model(seed=3, image_views=2, **heads).networks[0].eval()  # no dropout draws
    single = model(seed=4, **heads).networks[0].eval()
    image_embeds, text_embeds = net(images, captions, lengths)
    assert image_embeds.shape == (B, R, 2 * TINY["embed_dim"] + 1)
    scores = net.view_scores(image_embeds, text_embeds)
    assert scores.shape == (2, B, B)
    assert torch.equal(net.view_similarity(image_embeds, text_embeds), torch.sigmoid(scores))
    assert bool(((scores < 0) | (scores > 1)).any())  # raw logits, not similarities in (0, 1)
    shared = {name: value for name, value in net.state_dict().items() if not name.startswith("image_encoder.fc.")}
    single.load_state_dict(shared, strict=False)
    weight, bias = net.image_encoder.fc.weight.view(2, TINY["embed_dim"], -1), net.image_encoder.fc.bias.view(2, -1)
    for view in range(2):
        single.image_encoder.fc.weight.data.copy_(weight[view])
        single.image_encoder.fc.bias.data.copy_(bias[view])
        one_image, one_text = single(images, captions, lengths)
        torch.testing.assert_close(single.view_scores(one_image, one_text)[0], scores[view])


def test_view_projection_is_initialised_like_one_scan_layer_per_view() -> None:
    """Every view's weights are Xavier-uniform for (image_dim, embed_dim), not for the stacked layer."""
    torch.manual_seed(0)
    fc = NCLModel(tiny_config(image_dim=400, embed_dim=300, image_views=2)).networks[0].image_encoder.fc
    bound = math.sqrt(6.0 / (400 + 300))
    assert fc.weight.abs().max() <= bound
    assert fc.weight.abs().max() > 0.95 * bound
    assert torch.count_nonzero(fc.bias) == 0


def test_text_max_pooling_ignores_padding(batch) -> None:
    images, captions, lengths = batch
    net = model(seed=1, text_pooling="max").networks[0]
    encoder = net.text_encoder
    embedded = encoder.embed(captions)
    expected = []
    for i in range(B):
        states, _ = encoder.rnn(embedded[i : i + 1, : lengths[i]])
        fwd, bwd = states.chunk(2, dim=-1)
        expected.append(torch.nn.functional.normalize(((fwd + bwd) / 2).amax(dim=1), dim=-1))
    assert torch.allclose(net.encode_text(captions, lengths), torch.cat(expected), atol=1e-5)


@pytest.mark.parametrize("field,value", [("image_views", 0), ("text_pooling", "sum")])
def test_bad_view_and_pooling_values_are_rejected(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"NCLConfig.{field}"):
        tiny_config(**{field: value})


def test_views_and_options_round_trip(tmp_path: Path, batch) -> None:
    images, captions, lengths = batch
    original = model(seed=2, image_views=2, plugin_options={"x.tau": 0.1})
    original.save_pretrained(tmp_path)
    loaded = NCLModel.from_pretrained(tmp_path)
    assert loaded.config.image_views == 2 and loaded.config.plugin_options == {"x.tau": 0.1}
    assert torch.allclose(original(images, captions, lengths), loaded(images, captions, lengths), atol=1e-6)


@pytest.mark.parametrize("config_class", ["NCLConfig", "CategoryConfig"])
def test_both_model_configs_share_the_provenance_fields_and_their_checks(config_class):
    from hfncl import models
    from hfncl.models import HfnclConfig
    from hfncl.models.provenance import CHECKPOINT_FORMAT, IncompatibleCheckpointError

    cls = getattr(models, config_class)
    assert issubclass(cls, HfnclConfig)
    plugins = ["a"]
    config = cls(plugins=plugins, plugin_versions={"a": "1"}, plugin_distributions={"a": "pkg-a"})
    plugins.append("b")
    assert config.plugins == ["a"], "lists are copied"
    assert config.to_dict()["checkpoint_format"] == CHECKPOINT_FORMAT
    with pytest.raises(ValueError, match=rf"{config_class}\.plugin_distributions must be a dict name -> package"):
        cls(plugin_distributions={"a": 1})
    with pytest.raises(ValueError, match=rf"{config_class}\.plugins must be a list of plugin names"):
        cls(plugins="ncr")
    with pytest.raises(IncompatibleCheckpointError, match="Upgrade hfncl"):
        cls(checkpoint_format=CHECKPOINT_FORMAT + 1)
