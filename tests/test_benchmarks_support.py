"""Library code the benchmarks use: the real-text proxy builder, hook timing, the mixture overlay."""

from __future__ import annotations

import argparse
import time

import numpy as np
import pytest
import torch
from conftest import MICRO_DATA, benchmark_module
from scipy.stats import norm
from transformers import BertConfig, BertModel, BertTokenizer

from hfncl.data import DataFormatError, load_precomp_split
from hfncl.data.proxy import ProxyConfig, build_caption_proxy, read_image_captions, split_images
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.data.vocab import Vocabulary
from hfncl.equations.beta_mixture import most_likely_clean
from hfncl.experiment import DataArguments
from hfncl.tasks.pair_data import prepare_data
from hfncl.types import Division

WORDS = ["a", "dog", "cat", "runs", "sits", "on", "the", "grass", "red", "ball", "man", "rides", "bike", "."]


def _captions_file(path, images: int = 8, per_image: int = 3):
    """Captions ``IMAGE#K<tab>caption``; the line of image 1, caption 2 uses a space like Flickr8k's messy lines."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(images):
        for k in range(per_image):
            caption = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 9))))
            separator = " " if (i, k) == (1, 2) else "\t"
            lines.append(f"img{i}.jpg#{k}{separator}{caption}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A randomly initialised 1-layer BERT (hidden size 32) and its word-level tokenizer, saved to a folder."""
    folder = tmp_path_factory.mktemp("tiny_bert")
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    BertTokenizer(vocab=vocab).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(folder)
    return folder


def test_reads_tab_and_space_separated_lines_in_caption_order(tmp_path):
    path = tmp_path / "captions.txt"
    path.write_text("b.jpg#1\tsecond of b\nb.jpg#0 first of b\na.jpg#0\tfirst of a\n\na.jpg#1\t  second of a  \n")
    assert read_image_captions(path) == {"b.jpg": ["first of b", "second of b"], "a.jpg": ["first of a", "second of a"]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a.jpg#0\tone\na.jpg no caption key\n", "captions.txt:2"),
        ("a.jpg#0\tone\na.jpg#0\tagain\n", "captions.txt:2: caption #0 of a.jpg appears twice"),
        ("a.jpg#0\tone\na.jpg#1\ttwo\nb.jpg#0\tone\n", "image b.jpg has captions #[0]"),
        ("a.jpg#0\tone\na.jpg#2\ttwo\n", "image a.jpg has captions #[0, 2]"),
    ],
)
def test_malformed_caption_files_name_the_line_or_image(tmp_path, text, message):
    path = tmp_path / "captions.txt"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_image_captions(path)


def test_splits_are_disjoint_seeded_and_sized():
    names = [f"img{i}" for i in range(20)]
    config = ProxyConfig(num_test=5, num_dev=3, seed=4)
    splits = split_images(names[::-1], config)
    assert [len(splits[s]) for s in ("test", "dev", "train")] == [5, 3, 12]
    assert sorted(sum(splits.values(), [])) == sorted(names)
    assert split_images(names, config) == splits
    assert split_images(names, ProxyConfig(num_test=5, num_dev=3, seed=5)) != splits
    with pytest.raises(ValueError, match="leave none for training"):
        split_images(names[:8], config)


def test_proxy_regions_are_the_encoders_token_vectors_padded_with_their_mean(tmp_path, tiny_encoder):
    captions = _captions_file(tmp_path / "captions.txt")
    config = ProxyConfig(num_test=2, num_dev=2, region_caption=1, max_regions=6, batch_size=3, seed=1)
    out = build_caption_proxy(captions, tmp_path / "proxy", tiny_encoder, config)
    by_image = read_image_captions(captions)
    splits = split_images(list(by_image), config)
    tokenizer = BertTokenizer.from_pretrained(tiny_encoder)
    encoder = BertModel.from_pretrained(tiny_encoder).eval()
    for split, names in splits.items():
        regions = np.load(out / f"{split}_ims.npy")
        assert regions.shape == (len(names), 6, 32) and regions.dtype == np.float32
        texts = (out / f"{split}_caps.txt").read_text().splitlines()
        assert texts == [c for name in names for k, c in enumerate(by_image[name]) if k != 1]
        for row, name in enumerate(names):
            ids = tokenizer(by_image[name][1], truncation=True, max_length=6, return_tensors="pt")
            with torch.no_grad():
                alone = encoder(**ids).last_hidden_state[0].numpy()  # one caption, no padding
            n = alone.shape[0]
            np.testing.assert_allclose(regions[row, :n], alone, atol=1e-5)
            np.testing.assert_allclose(regions[row, n:], np.broadcast_to(alone.mean(0), (6 - n, 32)), atol=1e-5)
            np.testing.assert_allclose(regions[row].mean(0), alone.mean(0), atol=1e-5)
            np.testing.assert_allclose(regions[row].max(0), alone.max(0), atol=1e-6)
    split = load_precomp_split(out, "train", cache_dir=tmp_path / "cache")
    assert split.num_images == 4 and split.captions_per_image == 2


def test_proxy_is_deterministic_and_reused(tmp_path, tiny_encoder):
    captions = _captions_file(tmp_path / "captions.txt")
    config = ProxyConfig(num_test=2, num_dev=2, max_regions=5)
    first = build_caption_proxy(captions, tmp_path / "one", tiny_encoder, config)
    second = build_caption_proxy(captions, tmp_path / "two", tiny_encoder, config)
    for split in ("train", "dev", "test"):
        assert (first / f"{split}_ims.npy").read_bytes() == (second / f"{split}_ims.npy").read_bytes()
    written = (first / "train_ims.npy").stat().st_mtime_ns
    time.sleep(0.01)
    build_caption_proxy(captions, first, tiny_encoder, config)
    assert (first / "train_ims.npy").stat().st_mtime_ns == written
    build_caption_proxy(captions, first, tiny_encoder, ProxyConfig(num_test=2, num_dev=2, max_regions=4))
    assert np.load(first / "train_ims.npy").shape[1] == 4


def test_proxy_needs_a_caption_left_as_text(tmp_path, tiny_encoder):
    captions = _captions_file(tmp_path / "captions.txt", per_image=1)
    with pytest.raises(ValueError, match="leave at least one as text"):
        build_caption_proxy(captions, tmp_path / "proxy", tiny_encoder, ProxyConfig(num_test=2, num_dev=2))


# --------------------------------------------------------------------------- hook timing


def _timed_call(timer, name: str, seconds: float = 0.0) -> None:
    """What the trainer does around a hook call: the begin and end events, the hook's work between them."""
    timer.on_hook_begin(None, name)
    time.sleep(seconds)
    timer.on_hook_end(None, name)


def test_hook_timer_records_the_intervals_of_the_named_hooks():
    from hfncl.profiling import HookTimer

    timer = HookTimer(["divide"])
    _timed_call(timer, "divide", 0.02)
    _timed_call(timer, "train_step")
    assert "train_step" not in timer.calls
    (start, end), = timer.calls["divide"]
    assert timer.seconds("divide") == [end - start] and 0.015 < end - start < 1.0
    timer.calls["epoch_start"], timer.calls["epoch_end"] = [(1.0, 1.5), (4.0, 4.1)], [(3.0, 3.5), (9.0, 9.5)]
    assert timer.between("epoch_start", "epoch_end") == [2.5, 5.5]


def test_hook_timer_stops_after_the_limit_and_rejects_unknown_names():
    from hfncl.profiling import HookLimitReached, HookTimer

    timer = HookTimer(["train_step"], limits={"train_step": 2})
    _timed_call(timer, "train_step")
    _timed_call(timer, "train_step")
    with pytest.raises(HookLimitReached, match="train_step"):
        timer.on_hook_begin(None, "train_step")
    assert len(timer.calls["train_step"]) == 2
    with pytest.raises(ValueError, match="not hooks the trainer reports"):
        HookTimer(["no_such_hook"])
    with pytest.raises(ValueError, match="not timed"):
        HookTimer(["divide"], limits={"train_step": 1})


def test_hook_timer_times_a_training_run_and_its_limit_stops_it(tiny_data_dir, tmp_path):
    from conftest import noisy_trainer, tiny_config

    from hfncl.profiling import HookLimitReached, HookTimer

    timer = HookTimer(["epoch_start", "divide", "epoch_end", "train_step"])
    options = {"ncr.noisy_batch": "split"}  # every pass the same number of batches
    config = tiny_config(tmp_path / "full", ["ncr"], epochs=2, plot_divisions=False, options=options)
    noisy_trainer(tiny_data_dir, config, callbacks=[timer]).train()
    assert len(timer.calls["epoch_start"]) == len(timer.calls["epoch_end"]) == 2 and len(timer.calls["divide"]) == 1
    assert len(timer.calls["train_step"]) == 2 * 2 * (800 // 32)  # epochs x NCR's passes x batches
    epochs, division = timer.between("epoch_start", "epoch_end"), timer.seconds("divide")[0]
    assert all(seconds > 0 for seconds in epochs) and 0 < division < epochs[1]

    limited = HookTimer(["train_step"], limits={"train_step": 3})
    trainer = noisy_trainer(tiny_data_dir, tiny_config(tmp_path / "limited", ["ncr"]), callbacks=[limited])
    with pytest.raises(HookLimitReached):
        trainer.train()
    assert len(limited.calls["train_step"]) == trainer.state.global_step == 3


# --------------------------------------------------------------------------- the fitted mixture


def test_fit_loss_mixture_recovers_two_gaussians_and_matches_the_clean_probability():
    from hfncl.equations.division import fit_loss_mixture, gmm_clean_probability, min_max_normalise

    rng = np.random.default_rng(0)
    losses = np.concatenate([rng.normal(1.0, 0.1, 3000), rng.normal(3.0, 0.2, 1000)])
    posterior, mixture = fit_loss_mixture(losses, max_iter=100, tol=1e-6)
    # on the normalised scale (x - min) / (max - min); EM adds reg_covar = 5e-4 to each variance
    low, span = losses.min(), np.ptp(losses)
    std = np.sqrt((np.array([0.1, 0.2]) / span) ** 2 + 5e-4)
    expected = np.array([[0.75, (1.0 - low) / span, std[0]], [0.25, (3.0 - low) / span, std[1]]])
    np.testing.assert_allclose(mixture.numpy(), expected, rtol=0.05, atol=0.005)
    torch.testing.assert_close(posterior, gmm_clean_probability(losses, max_iter=100, tol=1e-6))

    x = min_max_normalise(losses)
    w, m, s = mixture.double().numpy().T
    joint = w[:, None] * norm.pdf(x[None, :], m[:, None], s[:, None])
    np.testing.assert_allclose(posterior.numpy(), joint[0] / joint.sum(0), atol=1e-4)


def test_mixture_counts_match_a_monte_carlo_histogram():
    from hfncl.plots import mixture_counts

    mixture = np.array([[0.7, 0.25, 0.05], [0.3, 0.7, 0.1]])
    rng = np.random.default_rng(1)
    n = 400_000
    component = rng.random(n) < 0.7
    samples = np.where(component, rng.normal(0.25, 0.05, n), rng.normal(0.7, 0.1, n))
    bins = np.linspace(0.0, 1.0, 51)
    histogram = np.histogram(samples, bins)[0]
    centres = (bins[:-1] + bins[1:]) / 2
    expected = mixture_counts(mixture, centres, n, bins[1] - bins[0])
    assert expected.shape == (2, 50)
    np.testing.assert_allclose(expected.sum(0), histogram, rtol=0.08, atol=60)
    with pytest.raises(ValueError, match=r"\(K, 3\)"):
        mixture_counts(np.array([[1.0, 0.5, 0.0]]), centres, n, 0.02)


def test_plot_division_draws_the_mixture(tmp_path):
    pytest.importorskip("matplotlib")
    from hfncl.equations.division import fit_loss_mixture
    from hfncl.plots import plot_division

    rng = np.random.default_rng(2)
    losses = torch.tensor(np.concatenate([rng.normal(1, 0.1, 300), rng.normal(2, 0.3, 100)]))
    truth = np.arange(400) < 300
    posterior, mixture = fit_loss_mixture(losses)
    plain = plot_division(losses, posterior, truth, tmp_path / "plain.png")
    overlaid = plot_division(losses, posterior, truth, tmp_path / "mixture.png", mixture=mixture)
    assert overlaid.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert overlaid.read_bytes() != plain.read_bytes()


def test_ncr_division_carries_the_gmm_it_fitted():
    from types import SimpleNamespace

    from hfncl.equations.division import fit_loss_mixture
    from hfncl_plugins import ncr

    options = {
        "ncr.alpha": 0.2,
        "ncr.division_statistics": "pass",
        "ncr.threshold": 0.5,
        "ncr.gmm_max_iter": 10,
        "ncr.gmm_reg_covar": 5e-4,
    }
    losses = {"loss0": torch.linspace(0, 1, 50) ** 2, "loss1": torch.cat([torch.full((30,), 0.1), torch.ones(20)])}
    trainer = SimpleNamespace(
        options_of=lambda kind: kind.read(options),
        config=SimpleNamespace(seed=3, batch_size=50),
        collect=lambda statistic, description, **loader: losses,
    )
    divisions = ncr.divide(trainer=trainer, epoch=2)
    for net, peer in ((0, "loss1"), (1, "loss0")):
        posterior, mixture = fit_loss_mixture(losses[peer], max_iter=10, reg_covar=5e-4, seed=5)
        torch.testing.assert_close(divisions[net].extras["mixture"], mixture)
        torch.testing.assert_close(divisions[net].clean_prob, posterior)
        torch.testing.assert_close(divisions[net].extras["statistic"], losses[peer])


def test_given_settings_replace_the_demo_settings_and_train_a_method_without_any():
    common = benchmark_module("common")
    settings = {"epochs": 3, "warmup_epochs": 1, "options": {"ugncl.xi1": 0.0}}
    (run,) = common.method_runs(["ugncl"], 0.7, settings)
    assert (run.plugin, run.noise_ratio, run.settings) == ("ugncl", 0.7, settings)
    (ncr,) = common.method_runs(["ncr"], 0.5)
    assert ncr.settings["epochs"] == 10
    with pytest.raises(ValueError, match="methods named"):
        common.method_runs(None, 0.5, settings)


def test_ncr_ablation_rows_change_one_option_of_the_demo_settings_and_keep_the_others():
    ncr_ablation = benchmark_module("ncr_ablation")
    runs = {label: run for label, run, _ in ncr_ablation.ablation_runs()}
    demo = runs["50% noise"].settings
    assert demo["options"], "NCR's demo settings carry options for the ablation to keep"
    changes = {
        "50% noise, noisy part in every epoch": {"ncr.noisy_part_start": 0.0},
        "50% noise, no co-rectify": {"ncr.co_rectify": False},
        "50% noise, division from a pass over the data": {"ncr.division_statistics": "pass"},
    }
    for label, change in changes.items():
        assert runs[label].settings == {**demo, "options": {**demo["options"], **change}}, label


def test_ncr_ablation_half_images_row_trains_on_a_part_of_the_same_data_and_vocabulary(tmp_path):
    ncr_ablation = benchmark_module("ncr_ablation")
    data_dir = generate_precomp(tmp_path / "data", MICRO_DATA)
    full, half = (ncr_ablation.training_data(data_dir, 0.0, share) for share in (1.0, 0.5))
    assert (half.data_dir, half.val_split, half.test_split) == (full.data_dir, full.val_split, full.test_split)
    whole, part = (load_precomp_split(data_dir, args.train_split) for args in (full, half))
    assert part.num_images == whole.num_images // 2
    assert list(part.captions) == list(whole.captions)[: len(part.captions)]
    assert Vocabulary.from_json(half.vocab_file).word2idx == Vocabulary.build(whole.captions).word2idx
    with pytest.raises(ValueError, match="clean reference"):
        ncr_ablation.training_data(data_dir, 0.5, 0.5)


def test_peer_speed_refuses_a_folder_without_the_official_code_and_builds_its_data(tmp_path, capsys):
    peer_speed = benchmark_module("peer_speed")
    with pytest.raises(SystemExit):
        peer_speed.parse_args(["--peer-dir", str(tmp_path)])
    assert "no model.py there" in capsys.readouterr().err
    (tmp_path / "model.py").write_text("")
    quick = peer_speed.parse_args(["--peer-dir", str(tmp_path), "--quick"])
    assert quick.cases == [("sgr", "256/64")] and quick.scoring_images == 100 and quick.epoch_images == 64
    with pytest.raises(SystemExit):
        peer_speed.parse_args(["--peer-dir", str(tmp_path), "--epoch-images", "52"])
    assert "--epoch-images must be a positive multiple of 32, got 52" in capsys.readouterr().err
    images, tokens, lengths = peer_speed.batch()
    assert images.shape == (128, 36, 2048) and tokens.shape == (128, int(lengths[0]))
    assert bool((lengths[:-1] >= lengths[1:]).all()) and bool(((tokens > 0).sum(dim=1) == lengths).all())
    regions, words, caption_lengths = peer_speed.embeddings(3, 8)
    assert regions.shape == (3, 36, 8) and words.shape[0] == 15 == len(caption_lengths)
    assert bool((words.norm(dim=-1) > 0).sum(dim=1).eq(caption_lengths).all())


def test_peer_speed_scoring_flops_scale_from_the_counted_images_to_the_whole_pass():
    """hfncl's scoring child times the whole pass and counts its matmul FLOPs on the first images only: the
    extended count (a part per caption, a part per image) equals the count of the whole pass."""
    from torch.utils.flop_counter import FlopCounterMode

    from hfncl.models.heads import pack_local

    peer_speed = benchmark_module("peer_speed")
    images = 2 * peer_speed.FLOP_COUNT_IMAGES + 3
    args = argparse.Namespace(
        scoring_images=images, embed_dim=16, sim_dim=8, head="sgr", mixed_precision="no", device="cpu", block_mib=None,
        no_scoring_flops=False,
    )
    result = peer_speed.child_score("hfncl", args)
    regions, words, lengths = peer_speed.embeddings(images, 16)
    model = peer_speed._hfncl_model(args).eval()
    mask = torch.arange(words.size(1))[None, :] < lengths[:, None]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.similarity(pack_local(regions, None)[None], pack_local(words, mask)[None])
    assert result["flops"] == pytest.approx(counter.get_total_flops(), rel=1e-9)
    assert result["seconds"] > 0 and result["peak_mib"] > 0


def test_peer_speed_epoch_data_gives_both_programs_the_same_pairs_and_lengths(tmp_path):
    """The NCR-epoch data set: hfncl reads it as precomp data; the official batches hold the same captions'
    token counts (start and end tokens included), sorted longest first within each batch of 128."""
    peer_speed = benchmark_module("peer_speed")
    data_dir = peer_speed.write_epoch_data(tmp_path / "data", images=30)
    data = prepare_data(DataArguments(data_dir=str(data_dir), noise_ratio=0.0), tmp_path / "run")
    assert len(data.train) == 150 and np.load(data_dir / "train_ims.npy").shape == (30, 36, 2048)
    batches = peer_speed._official_batches(data_dir, list(range(150)))
    assert [len(ids) for *_, ids in batches] == [128, 22]
    for images, tokens, lengths, ids in batches:
        assert lengths == sorted(lengths, reverse=True) and images.shape == (len(ids), 36, 2048)
        assert bool(((tokens > 0).sum(dim=1) == torch.tensor(lengths)).all())
        assert bool((tokens[:, 0] == 1).all()) and bool((tokens.max(dim=1).values < peer_speed.VOCAB).all())
    captions = (data_dir / "train_caps.txt").read_text().splitlines()
    assert sorted(length for *_, lengths, _ in batches for length in lengths) == sorted(
        len(c.split()) + 2 for c in captions
    )


def test_oracle_split_holds_exactly_the_clean_pairs_of_the_noise_index_training_uses(tmp_path):
    oracle = benchmark_module("oracle")
    small = SyntheticConfig(num_train=20, num_dev=4, num_test=4, num_concepts=6, num_regions=6, feature_dim=4)
    data_dir = generate_precomp(tmp_path / "data", small)
    data = prepare_data(DataArguments(data_dir=str(data_dir), noise_ratio=0.5, noise_seed=3), tmp_path / "run")
    saved = np.load(tmp_path / "run" / "noise_index.npy")
    full = load_precomp_split(data_dir, "train")
    k = full.captions_per_image
    clean = saved == np.arange(len(saved)) // k
    np.testing.assert_array_equal(oracle.clean_caption_mask(data_dir, 0.5, 3), clean)
    assert 0 < clean.sum() < len(clean) and data.train.clean_mask.sum() == clean.sum()

    split = load_precomp_split(data_dir, oracle.oracle_split(data_dir, 0.5, 3))
    kept = np.flatnonzero(clean)
    assert split.captions_per_image == 1 and list(split.captions) == [full.captions[c] for c in kept]
    np.testing.assert_array_equal(split.image_inputs(np.arange(len(kept))), full.image_inputs(kept // k))

    half = load_precomp_split(data_dir, oracle.half_data_split(data_dir, 0.5))
    assert half.num_images == 10 and list(half.captions) == list(full.captions)[: 10 * k]
    np.testing.assert_array_equal(half.image_inputs(np.arange(10)), full.image_inputs(np.arange(10)))
    assert Vocabulary.from_json(oracle.training_vocabulary(data_dir)) == data.vocab


def test_share_of_oracle_pairs_each_run_with_the_oracle_of_its_ratio_and_seed():
    accuracy = benchmark_module("accuracy")

    def row(method, ratio, seed, rsum):
        return {"method": method, "noise_ratio": ratio, "seed": seed, "test": {"rsum": rsum}}

    rows = [
        row("oracle", 0.5, 0, 200.0),
        row("oracle", 0.5, 1, 100.0),
        row("ncr", 0.5, 0, 150.0),
        row("ncr", 0.5, 1, 90.0),
    ]
    rows.append(row("ncr", 0.0, 0, 300.0))
    shares = accuracy.oracle_shares(rows)
    assert shares[("ncr", 0.5)] == [0.75, 0.9] and shares[("oracle", 0.5)] == [1.0, 1.0]
    assert ("ncr", 0.0) not in shares


def test_the_references_follow_the_schedule_of_the_settings_not_a_methods_warmup_or_options():
    accuracy = benchmark_module("accuracy")
    demo = accuracy.reference_run(accuracy.parse_args(["--benchmark", "proxy"]), 0.5)
    assert demo.plugin == "vsepp" and demo.settings == {"epochs": 10}
    settings = '{"epochs": 20, "warmup_epochs": 2, "lr_decay_epochs": [], "options": {"gsc.beta": 0.5}}'
    args = accuracy.parse_args(["--benchmark", "proxy", "--methods", "gsc", "--settings", settings])
    longer = accuracy.reference_run(args, 0.7)
    assert longer.plugin == "vsepp" and longer.noise_ratio == 0.7
    assert longer.settings == {"epochs": 20, "lr_decay_epochs": []}


def test_similarity_heads_measures_a_training_step_on_the_chosen_device(capsys):
    """similarity_heads.py on the CPU: a step's seconds and memory from one measurement; ``--device cuda`` is
    refused where torch sees no GPU."""
    similarity_heads = benchmark_module("similarity_heads")
    tiny = ["--embed-dim", "16", "--sim-dim", "8", "--image-dim", "12", "--batch-size", "4"]
    args = similarity_heads.parse_args([*tiny, "--repeats", "2", "--caption-length", "5"])
    assert args.device == "cpu"
    result = similarity_heads.measure_training(args, "sgr")
    assert result["seconds"] > 0 and result["peak_mib"] >= result["increase_mib"] >= 0
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            similarity_heads.parse_args([*tiny, "--device", "cuda"])
        assert "torch sees no CUDA device" in capsys.readouterr().err


def test_peer_speed_report_computes_ratios_and_leaves_measurements_not_made_blank(tmp_path, monkeypatch):
    """The report from the children's results: hfncl / official medians, roofline = FLOPs / seconds / throughput,
    floor = roofline x ratio; a measurement repeated 0 times shows '-' (and 'n/a' in the ratios line)."""
    peer_speed = benchmark_module("peer_speed")
    (tmp_path / "model.py").write_text("")
    results = {
        ("matmul", "official"): {"gflops": 100.0},
        ("train", "official"): {"seconds": 10.0, "peak_mib": 800.0, "flops": 4e11},
        ("train", "hfncl:no"): {"seconds": 4.0, "peak_mib": 200.0, "flops": 2e11},
        ("score", "official"): {"seconds": 6.0, "peak_mib": 90.0, "flops": None},
        ("score", "hfncl:no"): {"seconds": 3.0, "peak_mib": 80.0, "flops": None},
        ("epoch", "official"): {"pair_epoch": 0.2, "division_per_pair": 0.02, "peak_mib": 900.0},
        ("epoch", "hfncl:no"): {"pair_epoch": 0.1, "division_per_pair": 0.01, "peak_mib": 300.0},
    }
    made = []

    def child(args, kind, program, head, dims):
        made.append((kind, program))
        return results[kind, program]

    monkeypatch.setattr(peer_speed, "_run_child", child)
    common = ["--peer-dir", str(tmp_path), "--cases", "sgr:1024/256", "--no-scoring-flops"]
    report, lines = peer_speed.measure(peer_speed.parse_args([*common, "--repeats", "1"]))
    assert made[-2:] == [("epoch", "official"), ("epoch", "hfncl:no")]
    # roofline 2e11 / 4 s / 100e9 = 0.5; floor 0.5 x 0.4 = 0.2
    assert lines == [
        "floors warmup_step=0.20 scoring=-",
        "ratios warmup_step=0.40 pair_epoch=0.50 scoring=0.50 rss=0.25 roofline=0.50",
    ]
    assert (
        "| SGR 1024/256 | fp32 | 10.00 [10.00, 10.00] | 4.00 [4.00, 4.00] | 0.40 | 0.40 / 0.20 | 0.40 / 0.50 |"
        in report
    )
    made.clear()
    report, lines = peer_speed.measure(peer_speed.parse_args([*common, "--repeats", "0", "--scoring-repeats", "0"]))
    assert {kind for kind, _ in made} == {"matmul", "epoch"}
    assert lines == [
        "floors warmup_step=- scoring=-",
        "ratios warmup_step=n/a pair_epoch=0.50 scoring=n/a rss=n/a roofline=n/a",
    ]
    assert (
        "| SGR 1024/256 | fp32 | - | - | - | - / - | - / - | - | - | - | - / - | - | 0.200 [0.200, 0.200] |" in report
    )


def test_peer_speed_fixes_hfncl_s_clean_set_at_the_official_share_of_highest_clean_probability():
    peer_speed = benchmark_module("peer_speed")
    probability = torch.tensor([0.1, 0.9, 0.5, 0.9, 0.3])
    assert most_likely_clean(probability, 0.4).tolist() == [False, True, True, True, False]
    assert most_likely_clean(probability, 0.8).tolist() == [False, True, False, False, False]
    division = Division(clean_prob=probability, clean=torch.zeros(5, dtype=torch.bool))
    peer_speed._FixedCleanShare(0.8).on_division(None, 1, [division, None], None)
    assert division.clean.tolist() == [False, True, True, True, True]


def test_the_converged_oracle_trains_at_least_the_methods_optimiser_steps_then_stops_on_patience(tmp_path):
    """The oracle's schedule: E epochs at the demo rate, E the least with at least the most steps any method of its
    ratio and seed took (a finished row's count, or a planned method's epochs of full batches), then decayed, stopped
    by patience never before E + patience; the half-data control the same; a method row unchanged."""
    accuracy = benchmark_module("accuracy")
    settings = accuracy.converged_settings({"epochs": 10}, steps=1406, steps_per_epoch=70, patience=2)
    assert settings["lr_decay_epochs"] == [21] and 21 * 70 >= 1406 > 20 * 70
    assert settings["early_stopping_min_epochs"] == 23 and settings["epochs"] == 21 + accuracy.ORACLE_DECAYED_EPOCHS
    assert accuracy.converged_settings(
        {"epochs": 10}, steps=100, steps_per_epoch=70, patience=2
    )["lr_decay_epochs"] == [10]

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "train_caps.txt").write_text("a caption\n" * 1000)
    (data_dir / "train_oracle_50_seed0_caps.txt").write_text("a caption\n" * 500)
    args = accuracy.parse_args(
        ["--benchmark", "generated", "--methods", "ncr", "vsepp", "--ratios", "0.5", "--seeds", "0"]
    )
    oracle = accuracy.Job(accuracy.ORACLE, accuracy.reference_run(args, 0.5), 0, accuracy.DataArguments(
        data_dir=str(data_dir), train_split="train_oracle_50_seed0"))
    rows = [{"method": "ncr", "noise_ratio": 0.5, "seed": 0, "epochs": 10, "steps_per_network": 100.0},
            {"method": "ncr", "noise_ratio": 0.5, "seed": 1, "epochs": 10, "steps_per_network": 900.0}]
    bounded = accuracy.bounded_job(oracle, rows, args).run.settings
    # ncr took 100 steps at seed 0; vsepp, not trained yet, plans 10 epochs of 1000 // 128 = 7 batches: 70 steps;
    # the oracle's 500 pairs make 3 batches an epoch, so 34 epochs (102 steps) at the demo rate
    assert bounded["lr_decay_epochs"] == [34] and bounded["early_stopping_patience"] == 2
    # an oracle of the method's own counts the method's steps per batch: ncr's 140 steps over 10 epochs of 7 batches
    # are 2 a batch, so its oracle's 3 batches are 6 steps an epoch and 140 steps take 24 epochs (TcVSE's case: 4)
    own = accuracy.Job(accuracy.oracle_row("ncr", "vsepp"), accuracy.reference_run(args, 0.5, "ncr"), 0, oracle.data)
    twice = [{**rows[0], "plugin": "ncr", "steps_per_network": 140.0}]
    assert accuracy.steps_per_batch("ncr", twice, 1000) == 2.0 and accuracy.steps_per_batch("vsepp", twice, 1000) == 1.0
    # at the batch size the run recorded: VSE++'s 434 steps in 14 epochs of 1000 // 32 = 31 batches are 1 a batch
    small = [{"method": "vsepp", "plugin": "vsepp", "epochs": 14, "batch_size": 32, "steps_per_network": 434.0}]
    assert accuracy.steps_per_batch("vsepp", small, 1000) == 1.0
    assert accuracy.bounded_job(own, twice, args).run.settings["lr_decay_epochs"] == [24]
    method = accuracy.Job("ncr", accuracy.method_runs(["ncr"], 0.5)[0], 0, oracle.data)
    assert accuracy.bounded_job(method, rows, args) == method
    demo = accuracy.parse_args(["--benchmark", "generated", "--oracle-patience", "0"])
    assert accuracy.bounded_job(oracle, rows, demo) == oracle


def test_a_share_above_the_oracle_by_more_than_the_seeds_spread_is_flagged():
    accuracy = benchmark_module("accuracy")
    shares = {("gsc", 0.5): [1.20, 1.24, 1.22], ("ncr", 0.5): [0.98, 1.06, 1.0], ("tcvse", 0.7): [1.01]}
    warnings = accuracy.unconverged_oracle_warnings(shares)
    assert len(warnings) == 2 and "gsc at 50%" in warnings[0] and "did not converge" in warnings[0]
    assert "tcvse at 70%" in warnings[1]

    def row(method, seed, rsum):
        return {"method": method, "noise_ratio": 0.5, "seed": seed, "test": {"rsum": rsum}}

    rows = [row("oracle", 0, 200.0), row("oracle (gsc)", 0, 250.0), row("gsc", 0, 225.0), row("ncr", 0, 150.0)]
    shares = accuracy.oracle_shares(rows)
    assert shares[("gsc", 0.5)] == [0.9] and shares[("ncr", 0.5)] == [0.75]
