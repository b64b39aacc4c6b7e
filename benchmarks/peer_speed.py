"""SGR / SAF side by side with the official NCR code on the CPU or CUDA: step time, scoring time, memory, roofline.

    bash ../shared/tools/ncr_peer.sh NCR_GIT_DIR /tmp/peer 5      # a CPU-runnable copy of the official code
    python benchmarks/peer_speed.py --peer-dir /tmp/peer/NCR [--quick] [--output benchmarks/peer_speed.md]

The official code (XLearning-SCU/2021-NeurIPS-NCR) is imported from ``--peer-dir`` in a
child process for measurement only; nothing of it is part of hfncl. Both programs get
one generated data set of Flickr30K shapes (36 x 2048 region features, captions of
Flickr30K-like lengths with the official vocabulary's start and end tokens, word
vectors of 300) and the same torch thread count. Every measurement runs in its own
child process (peak resident memory is that process's), the official and hfncl
children interleaved, ``--repeats`` times; the table gives medians and [min, max].

- **Warmup step**: one training step of one network on a batch of 128 pairs, as NCR's
  warmup runs it: forward, the triplet loss averaged over each pair's negatives,
  backward, gradient clipping at 2, Adam. The official step is its ``SGRAF.train(...,
  mode="warmup")``; hfncl's is its model, ``triplet_sum_negatives`` and the same
  optimiser. One untimed step, then one timed; CPU seconds are user + sys.
- **Scoring**: the similarity matrix of ``--scoring-images`` images x 5 captions each
  from precomputed embeddings, by the official ``evaluation.shard_attn_scores`` and by
  hfncl's evaluation scorer (``model.similarity`` in eval mode, the block scorer).
- **Roofline**: the matrix-multiply FLOPs of each step (``torch.utils.flop_counter``,
  forward and backward) over the step's CPU seconds, as a fraction of this CPU's
  measured matmul throughput (2048 x 2048, same threads, the best of five in CPU seconds) in
  the step's precision.
- ``--mixed-precision no bf16``: hfncl is measured in each precision (a row each, against
  the same official runs); in bf16 its step, scoring and epoch run under bf16 autocast
  (``TrainConfig.mixed_precision``; scores stay float32) and its roofline is against the bf16
  matmul throughput. The official code runs in float32 as it ships.
- ``--device cuda``: both programs on the GPU (the official code moves itself to any GPU it
  sees; on the CPU the children see none). Seconds are wall seconds after
  ``torch.cuda.synchronize()``, a training step the mean of 10 after 3 untimed ones; memory is
  the peak of ``torch.cuda.max_memory_allocated``; the matmul reference is 8192 x 8192 in
  torch's default float32 (no TF32). ``--block-mib`` sets hfncl's pair-block budget (the heads
  default to 32 MiB on the CPU and 1 GiB on CUDA). Each child prints its result and seconds to
  stderr as it ends. ``--no-scoring-flops`` skips counting the scoring pass's FLOPs, which takes
  minutes for the official code's per-caption loop whatever the device.
- **NCR epoch** (first case only, measured after every case's step and scoring): CPU
  seconds per training pair of one co-training epoch, both networks, the division and the
  noisy part included, on one generated precomp data set (``--epoch-images`` x 5 captions,
  20% noise). The official one is its ``co_train.eval_train`` (both networks' per-pair
  losses and GMMs) and ``co_train.train`` of each network on its clean batches, each
  beside a cycling noisy batch; its clean share is fixed at 80% (the pairs of highest
  clean probability) so that random data does not decide how much it trains. hfncl's is
  NCR with its defaults (a full noisy batch beside each clean batch, as the official loop)
  but for its division's losses, which come from a pass over the training set as they do
  after every co-training epoch of NCR's default loop (the first co-training epoch alone
  could reuse its warmup's records), its clean set then fixed at the same 80% of highest
  clean probability; the second epoch after one warmup epoch.

- **Floor**: hfncl's matmul FLOPs (of the step; of the scoring pass, counted on its first
  5 and 10 images and extended to all) at the full matmul throughput of its precision, over the official
  time: the lowest hfncl / official ratio those FLOPs allow on this CPU, whatever the code
  around them. A target below the floor needs fewer FLOPs or a faster precision, not
  faster code.

A measurement repeated 0 times (``--repeats 0``, ``--scoring-repeats 0``, ``--epoch-repeats 0``)
is skipped; its cells show ``-``. The report ends with ``floors warmup_step=X scoring=Y`` and, last,
``ratios warmup_step=X pair_epoch=Y scoring=Z rss=W roofline=F`` for the first head and size
measured (hfncl in float32 / official; roofline is hfncl's fraction), each after its
``bf16`` line when bf16 is measured too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

BATCH, REGIONS, IMAGE_DIM, WORD_DIM, VOCAB = 128, 36, 2048, 300, 8000
CAPTIONS_PER_IMAGE = 5
EPOCH_NOISE = 0.2
EPOCH_IMAGE_MULTIPLE = round(BATCH / (CAPTIONS_PER_IMAGE * (1 - EPOCH_NOISE)))
"""--epoch-images must be a multiple of this (32): the clean share of 5 captions x 32 images is one batch of 128."""
FLOP_COUNT_IMAGES = 10
CUDA_WARM_STEPS, CUDA_TIMED_STEPS = 3, 10
KINDS = ("train", "score", "epoch")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _seconds(device: str) -> float:
    """The clock work is timed on: CPU seconds (user + sys) on the CPU; on CUDA wall seconds once the queued kernels
    have run."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        return time.perf_counter()
    return _cpu_seconds()


def _peak_mib(device: str) -> float:
    """The process's peak memory: resident set on the CPU, tensors allocated on the GPU on CUDA."""
    if device == "cuda":
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def caption_lengths(count: int):
    """Flickr30K-like token counts from torch's global generator: about 12 words plus the start and end tokens,
    8 to 32."""
    import torch

    words = torch.distributions.Gamma(torch.tensor(9.0), torch.tensor(0.75)).sample((count,))
    return (words.round().long() + 2).clamp(8, 32)


def batch(seed: int = 0):
    """One training batch: regions (B, 36, 2048), token ids (B, L) padded with 0, lengths sorted longest first."""
    import torch

    torch.manual_seed(seed)
    lengths = caption_lengths(BATCH).sort(descending=True).values
    tokens = torch.randint(1, VOCAB, (BATCH, int(lengths[0])))
    tokens = tokens * (torch.arange(tokens.size(1))[None, :] < lengths[:, None])
    return torch.randn(BATCH, REGIONS, IMAGE_DIM), tokens, lengths


def embeddings(images: int, embed_dim: int, seed: int = 1):
    """Unit-norm local embeddings: regions (N, 36, d), words (5N, L, d) zero past each length, and the lengths."""
    import torch

    torch.manual_seed(seed)
    lengths = caption_lengths(images * CAPTIONS_PER_IMAGE)
    regions = torch.nn.functional.normalize(torch.randn(images, REGIONS, embed_dim), dim=-1)
    words = torch.nn.functional.normalize(torch.randn(len(lengths), int(lengths.max()), embed_dim), dim=-1)
    words = words * (torch.arange(words.size(1))[None, :, None] < lengths[:, None, None])
    return regions, words, lengths


def _peer_model(peer_dir: str, head: str, embed_dim: int, sim_dim: int):
    sys.path.insert(0, peer_dir)
    import model as peer  # the official NCR code, for measurement only

    opt = Namespace(
        grad_clip=2.0, img_dim=IMAGE_DIM, embed_size=embed_dim, vocab_size=VOCAB, word_dim=WORD_DIM, num_layers=1,
        bi_gru=True, no_imgnorm=False, no_txtnorm=False, sim_dim=sim_dim, module_name=head.upper(), sgr_step=3,
        margin=0.2, learning_rate=2e-4,
    )
    return peer.SGRAF(opt), opt


def _hfncl_model(args: argparse.Namespace):
    from hfncl.models import NCLConfig, NCLModel

    config = NCLConfig(
        image_dim=IMAGE_DIM, embed_dim=args.embed_dim, word_dim=WORD_DIM, vocab_size=VOCAB, similarity=args.head,
        sim_dim=args.sim_dim, num_networks=1,
    )
    model = NCLModel(config).to(args.device)
    if args.block_mib is not None:
        model.networks[0].head.block_bytes = args.block_mib * 2**20
    return model


def _on_device(device: str, *tensors):
    """The tensors on ``device``, as the trainer moves each batch: inside the timed work, as the official code does."""
    return [tensor.to(device, non_blocking=True) for tensor in tensors]


def _matmul_flops(step) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def _autocast(args: argparse.Namespace):
    """hfncl's autocast context of ``--mixed-precision`` (a no-op for ``no``)."""
    import torch

    return torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.mixed_precision == "bf16")


def _timed(step, device: str) -> dict[str, float]:
    """Seconds per call of ``step`` on ``device``'s clock: one call after an untimed one on the CPU; on CUDA the
    mean of CUDA_TIMED_STEPS after CUDA_WARM_STEPS (kernel selection and the caching allocator settle)."""
    warm, repeats = (CUDA_WARM_STEPS, CUDA_TIMED_STEPS) if device == "cuda" else (1, 1)
    for _ in range(warm):
        step()
    start = _seconds(device)
    for _ in range(repeats):
        step()
    return {"seconds": (_seconds(device) - start) / repeats}


def child_train(program: str, args: argparse.Namespace) -> dict[str, float]:
    """One warmup step of one network, timed after an untimed one; its FLOPs counted once more at the end."""
    import torch

    images, tokens, lengths = batch()
    if program == "official":
        model, _ = _peer_model(args.peer_dir, args.head, args.embed_dim, args.sim_dim)
        model.train_start()

        def step() -> None:
            model.train(images, tokens, lengths.tolist(), mode="warmup")  # moves the batch to CUDA when there is one
    else:
        from hfncl.equations.losses import triplet_sum_negatives

        model = _hfncl_model(args).train()
        network = model.networks[0]
        optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)

        def step() -> None:
            on_device = _on_device(args.device, images, tokens, lengths)
            with _autocast(args):
                similarity = network.similarity(network.encode_image(on_device[0]), network.encode_text(*on_device[1:]))
            optimizer.zero_grad()
            (triplet_sum_negatives(similarity, 0.2).sum() / similarity.size(0)).backward()  # NCR's warmup_loss
            torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
            optimizer.step()

    result = _timed(step, args.device)
    result["peak_mib"] = _peak_mib(args.device)
    result["flops"] = _matmul_flops(step)
    return result


def child_score(program: str, args: argparse.Namespace) -> dict[str, float | None]:
    """Seconds to score ``scoring_images`` x 5 captions from embeddings (no untimed run: one pass is the job), and
    the pass's matmul FLOPs, counted on its first images (:func:`_scaled_flops`)."""
    import torch

    regions, words, lengths = embeddings(args.scoring_images, args.embed_dim)
    if program == "official":
        sys.path.insert(0, args.peer_dir)
        from evaluation import shard_attn_scores

        model, opt = _peer_model(args.peer_dir, args.head, args.embed_dim, args.sim_dim)
        model.val_start()
        if args.device == "cuda":  # the shard's .cuda() that ncr_peer.sh takes out for the CPU
            forward_sim = model.forward_sim
            model.forward_sim = lambda im, ca, lens: forward_sim(im.cuda(), ca.cuda(), lens)

        def score(images: int) -> None:
            shard_attn_scores(model, regions[:images].numpy(), words.numpy(), lengths.tolist(), opt, shard_size=1000)
    else:
        from hfncl.models.heads import pack_local

        model = _hfncl_model(args).eval()
        mask = torch.arange(words.size(1))[None, :] < lengths[:, None]
        text_embeds = pack_local(words, mask)[None]

        def score(images: int) -> None:
            image_embeds = pack_local(regions[:images], None)[None]
            image_embeds, caption_embeds = _on_device(args.device, image_embeds, text_embeds)
            with torch.no_grad(), _autocast(args):
                model.similarity(image_embeds, caption_embeds).cpu()

    start = _seconds(args.device)
    score(len(regions))
    result: dict[str, float | None] = {"seconds": _seconds(args.device) - start, "peak_mib": _peak_mib(args.device)}
    result["flops"] = None if args.no_scoring_flops else _scaled_flops(score, len(regions))
    return result


def _scaled_flops(score, images: int) -> float:
    """The matmul FLOPs of ``score(images)``, from counts on FLOP_COUNT_IMAGES / 2 and FLOP_COUNT_IMAGES images:
    a pass's FLOPs are a fixed part (once per caption) and a part per image, so two counts give both."""
    half = min(FLOP_COUNT_IMAGES // 2, images)
    fewer = _matmul_flops(lambda: score(half))
    if images == half:
        return fewer
    counted = min(2 * half, images)
    more = _matmul_flops(lambda: score(counted))
    return more + (more - fewer) / (counted - half) * (images - counted)


def write_epoch_data(directory: Path, images: int, seed: int = 2) -> Path:
    """A SCAN precomp data set of Flickr30K shapes: ``images`` x 5 training captions (words ``w<k>``, Flickr30K-like
    lengths), regions (images, 36, 2048); dev and test of 5 images. Written once per size and seed."""
    import numpy as np
    import torch

    if (directory / "train_caps.txt").is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    for split, count in (("train", images), ("dev", 5), ("test", 5)):
        np.save(directory / f"{split}_ims.npy", torch.randn(count, REGIONS, IMAGE_DIM).numpy())
        lengths = caption_lengths(count * CAPTIONS_PER_IMAGE) - 2  # the start and end tokens are added when read
        words = [torch.randint(0, VOCAB - 4, (int(n),)).tolist() for n in lengths]
        (directory / f"{split}_caps.txt").write_text(
            "".join(" ".join(f"w{w}" for w in caption) + "\n" for caption in words)
        )
    return directory


def _official_batches(data_dir: Path, order: list[int], ids_only: bool = False):
    """The training pairs ``order`` (image i // 5 with caption i) in batches of 128, each sorted by caption length
    (the official collate's order): images, token ids (start 1, words w<k> as k + 4, end 2), lengths, ids."""
    import numpy as np
    import torch

    images = np.load(data_dir / "train_ims.npy")
    captions = (data_dir / "train_caps.txt").read_text().splitlines()
    batches = []
    for start in range(0, len(order), BATCH):
        ids = sorted(order[start:start + BATCH], key=lambda i: -len(captions[i].split()))
        tokens = [[1, *(int(word[1:]) + 4 for word in captions[i].split()), 2] for i in ids]
        lengths = [len(t) for t in tokens]
        padded = torch.zeros(len(ids), lengths[0], dtype=torch.long)
        for row, caption in enumerate(tokens):
            padded[row, : len(caption)] = torch.tensor(caption)
        batches.append((torch.from_numpy(images[[i // CAPTIONS_PER_IMAGE for i in ids]]), padded, lengths, ids))
    return batches


def _official_epoch(args: argparse.Namespace, data_dir: Path, pairs: int) -> dict[str, float]:
    """One NCR epoch of the official loop, noisy part included: ``eval_train`` (per-pair losses of both networks
    and the GMMs), then ``train`` of each network on its clean set with the cycling noisy batches.

    The division's share is fixed, not the GMM's on random data: the ``1 - EPOCH_NOISE`` of the pairs with the
    highest clean probability are clean, so both programs train the same amount. On CUDA one untimed warmup step
    per network comes first.
    """
    import numpy as np
    import torch

    sys.path.insert(0, args.peer_dir)
    import co_train  # the official NCR code, for measurement only

    networks = [_peer_model(args.peer_dir, args.head, args.embed_dim, args.sim_dim) for _ in range(2)]
    opt = networks[0][1]
    opt.soft_margin, opt.num_epochs, opt.log_step = "exponential", 2, 10**9
    batches = _official_batches(data_dir, list(range(pairs)))
    if args.device == "cuda":  # lazy CUDA set-up, untimed, as hfncl times its second epoch
        for net, _ in networks:
            net.train_start()
            net.train(*batches[0][:3], mode="warmup")
    started = _seconds(args.device)
    probabilities = co_train.eval_train(
        opt, networks[0][0], networks[1][0], batches, pairs, [[], []], np.ones(pairs), epoch=1
    )[:2]
    division = _seconds(args.device) - started
    for (net, _), (peer, _), probability in zip(networks, networks[::-1], probabilities[::-1], strict=True):
        ranked = np.argsort(-probability, kind="stable").tolist()
        clean_count = round(pairs * (1 - EPOCH_NOISE))
        labeled = [
            (images, tokens, lengths, ids, torch.ones(len(ids)), torch.from_numpy(probability[ids]).float(),
             torch.ones(len(ids)))
            for images, tokens, lengths, ids in _official_batches(data_dir, ranked[:clean_count])
        ]
        unlabeled = [
            (images, tokens, lengths, ids, torch.ones(len(ids)))
            for images, tokens, lengths, ids in _official_batches(data_dir, ranked[clean_count:])
        ]
        co_train.train(opt, net, peer, labeled, unlabeled, epoch=1)
    return {"epoch": _seconds(args.device) - started, "division": division}


class _Callback:
    """A trainer callback that ignores every event it does not define."""

    def __getattr__(self, name: str):
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


class _EpochClock(_Callback):
    """Trainer callback: seconds (:func:`_seconds`) of the last epoch and of its ``divide`` hook."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.epoch = self.division = 0.0
        self._epoch = self._divide = 0.0

    def on_epoch_begin(self, trainer, epoch: int) -> None:
        self._epoch = _seconds(self.device)

    def on_hook_begin(self, trainer, name: str) -> None:
        if name == "divide":
            self._divide = _seconds(self.device)

    def on_hook_end(self, trainer, name: str) -> None:
        if name == "divide":
            self.division = _seconds(self.device) - self._divide

    def on_epoch_end(self, trainer, record, seconds: float) -> None:
        self.epoch = _seconds(self.device) - self._epoch


class _FixedCleanShare(_Callback):
    """Trainer callback: each network's clean set made the ``share`` of its pairs of highest clean probability
    (:func:`hfncl.equations.beta_mixture.most_likely_clean`, ties by position, as :func:`_official_epoch` ranks), as the
    official epoch's is, instead of what the GMM makes of random data (e.g. 40-49% at 20% noise), so that both
    programs' timed epochs train the same number of clean and noisy batches."""

    def __init__(self, share: float) -> None:
        self.share = share

    def on_division(self, trainer, epoch: int, divisions, true_clean) -> None:
        from hfncl.equations.beta_mixture import most_likely_clean

        for division in divisions:
            if division is not None:
                division.clean = most_likely_clean(division.clean_prob, 1 - self.share)


def _hfncl_epoch(args: argparse.Namespace, data_dir: Path) -> dict[str, float]:
    """NCR for one warmup epoch and one co-training epoch (noisy part included); the second is timed, its clean share
    fixed as the official epoch's (:class:`_FixedCleanShare`).

    NCR's defaults but for the division's losses, which come from a pass over the training set: with the separate
    noisy batch NCR runs that pass after every co-training epoch, as the official ``eval_train`` does; only the first
    co-training epoch, the one timed here, could reuse the losses its warmup recorded."""
    from accelerate import Accelerator

    from hfncl.config import TrainConfig
    from hfncl.engine.trainer import Trainer
    from hfncl.models import NCLConfig
    from hfncl.plugin_setup import run_plugins
    from hfncl.tasks.pair_data import prepare_data
    from hfncl.tasks.pairs import PAIRS, DataArguments, ModelArguments, model_fields

    output_dir = data_dir.parent / f"hfncl-{args.head}-{args.embed_dim}"
    config = TrainConfig(
        plugins=["ncr"], output_dir=str(output_dir), epochs=2, warmup_epochs=1, batch_size=BATCH, learning_rate=2e-4,
        lr_decay_epochs=[], progress=False, overwrite_output_dir=True, plot_divisions=False,
        mixed_precision=args.mixed_precision, options={"ncr.division_statistics": "pass"},
    )
    data = prepare_data(DataArguments(data_dir=str(data_dir), noise_ratio=EPOCH_NOISE), output_dir)
    head_options = {f"{args.head}.sim_dim": args.sim_dim}
    model = ModelArguments(embed_dim=args.embed_dim, word_dim=WORD_DIM, similarity=args.head, head_options=head_options)
    model_config = NCLConfig(image_dim=IMAGE_DIM, vocab_size=len(data.vocab), **model_fields(["ncr"], model))
    clock = _EpochClock(args.device)
    accelerator = Accelerator(cpu=args.device == "cpu", mixed_precision=args.mixed_precision)
    callbacks = [clock, _FixedCleanShare(1 - EPOCH_NOISE)]
    Trainer(config, model_config, data.train, None, task=PAIRS, accelerator=accelerator, callbacks=callbacks,
            plugins=run_plugins(config)).train()
    return {"epoch": clock.epoch, "division": clock.division}


def child_epoch(program: str, args: argparse.Namespace) -> dict[str, float]:
    """Seconds (:func:`_seconds`) per training pair of one NCR co-training epoch (both networks and the division)."""
    data_dir = write_epoch_data(Path(args.work_dir) / f"epoch-data-{args.epoch_images}", args.epoch_images)
    pairs = args.epoch_images * CAPTIONS_PER_IMAGE
    result = _official_epoch(args, data_dir, pairs) if program == "official" else _hfncl_epoch(args, data_dir)
    return {
        "pair_epoch": result["epoch"] / pairs, "division_per_pair": result["division"] / pairs,
        "peak_mib": _peak_mib(args.device),
    }


def child_matmul(device: str, dtype: str = "float32") -> dict[str, float]:
    """The device's matmul throughput (GFLOP/s) in ``dtype``: the best of five products, on the clock the steps are
    timed on (:func:`_seconds`; on the CPU in CPU seconds, so that other work on the machine, which stretches wall
    time, does not lower it). 2048 x 2048 on the CPU, 8192 x 8192 on CUDA (torch's default float32 precision:
    no TF32, as both programs run)."""
    import torch

    size = 8192 if device == "cuda" else 2048
    a, b = (torch.randn(size, size, dtype=getattr(torch, dtype), device=device) for _ in range(2))
    a @ b
    seconds = []
    for _ in range(5):
        start = _seconds(device)
        a @ b
        seconds.append(_seconds(device) - start)
    return {"gflops": 2 * size**3 / min(seconds) / 1e9}


def _run_child(args: argparse.Namespace, kind: str, program: str, head: str, dims: str) -> dict[str, float]:
    env = os.environ | {"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # the official code moves itself to any GPU it sees
    command = [
        sys.executable, __file__, "--peer-dir", args.peer_dir, "--threads", str(args.threads),
        "--scoring-images", str(args.scoring_images), "--child", kind, "--program", program, "--head", head,
        "--dims", dims, "--work-dir", args.work_dir, "--epoch-images", str(args.epoch_images), "--device", args.device,
        *(["--block-mib", str(args.block_mib)] if args.block_mib is not None else []),
        *(["--no-scoring-flops"] if args.no_scoring_flops else []),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{program} {kind} {head} {dims} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    seconds = time.perf_counter() - started
    print(f"{kind} {program} {head} {dims}: {result} ({seconds:.0f} s)", file=sys.stderr, flush=True)
    return result


def _median(runs: list[dict[str, float]], key: str) -> float | None:
    """The median of ``key`` over ``runs``; None for a measurement not made (repeated 0 times)."""
    return statistics.median(run[key] for run in runs) if runs else None


def _first(runs: list[dict[str, float | None]], key: str) -> float | None:
    return runs[0][key] if runs else None


def _cell(runs: list[dict[str, float]], key: str, digits: int = 2) -> str:
    if not runs:
        return "-"
    values = [run[key] for run in runs]
    return f"{_median(runs, key):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def _variants(args: argparse.Namespace) -> list[str]:
    """hfncl's measured precisions, float32 last (its ratios line is the report's last)."""
    return sorted(args.mixed_precision, key=lambda precision: precision == "no")


def _ratio(runs: dict[str, list[dict[str, float]]], program: str, key: str) -> float | None:
    hfncl, official = _median(runs[program], key), _median(runs["official"], key)
    return None if hfncl is None or official is None else hfncl / official


def _product(first: float | None, second: float | None) -> float | None:
    return None if first is None or second is None else first * second


def _roofline(runs: list[dict[str, float | None]], throughput: float) -> float | None:
    """The matmul FLOPs per second of ``runs`` as a fraction of ``throughput`` (GFLOP/s)."""
    flops, seconds = _first(runs, "flops"), _median(runs, "seconds")
    return None if flops is None or seconds is None else flops / seconds / (throughput * 1e9)


def _shown(value: float | None, scale: float = 1.0, digits: int = 2, missing: str = "-") -> str:
    """``value / scale``, or ``missing`` for a figure not measured (``--no-scoring-flops``, or 0 repeats)."""
    return missing if value is None else f"{value / scale:.{digits}f}"


def measure(args: argparse.Namespace) -> tuple[str, list[str]]:
    """Every measurement, interleaved; the markdown report and a ratios line per hfncl precision."""
    variants = _variants(args)
    programs = ["official"] + [f"hfncl:{precision}" for precision in variants]
    fp32 = _run_child(args, "matmul", "official", "sgr", "256/64")["gflops"]
    bf16 = _run_child(args, "matmul", "hfncl:bf16", "sgr", "256/64")["gflops"] if "bf16" in variants else None
    throughput = {program: bf16 if program == "hfncl:bf16" else fp32 for program in programs}
    speeds = f"{fp32:.0f} GFLOP/s in fp32" + ("" if bf16 is None else f", {bf16:.0f} GFLOP/s in bf16")
    measured = {(kind, case): {program: [] for program in programs} for kind in KINDS for case in args.cases}
    # the epoch, the first case's only and the longest measurement, runs last
    schedule = [(kind, case) for case in args.cases for kind in ("train", "score")] + [("epoch", args.cases[0])]
    repeats = {"train": args.repeats, "score": args.scoring_repeats, "epoch": args.epoch_repeats}
    for kind, (head, dims) in schedule:
        for _ in range(repeats[kind]):
            for program in programs:
                measured[kind, (head, dims)][program].append(_run_child(args, kind, program, head, dims))
    rows, bounds, ratios, floors = [], [], {}, {}
    for head, dims in args.cases:
        first = (head, dims) == args.cases[0]
        train, score, epoch = (measured[kind, (head, dims)] for kind in KINDS)
        roofline, scoring_roofline = (
            {program: _roofline(runs[program], throughput[program]) for program in programs} for runs in (train, score)
        )
        for precision, program in zip(variants, programs[1:], strict=True):
            shown, suffix = ("fp32", "") if precision == "no" else (precision, f" {precision}")
            step_ratio, score_ratio = _ratio(train, program, "seconds"), _ratio(score, program, "seconds")
            rss_ratio, epoch_ratio = _ratio(train, program, "peak_mib"), _ratio(epoch, program, "pair_epoch")
            rows.append(
                f"| {head.upper()} {dims} | {shown} | "
                f"{_cell(train['official'], 'seconds')} | {_cell(train[program], 'seconds')} | {_shown(step_ratio)} | "
                f"{_shown(_first(train['official'], 'flops'), 1e12)} / "
                f"{_shown(_first(train[program], 'flops'), 1e12)} | "
                f"{_shown(roofline['official'])} / {_shown(roofline[program])} | "
                f"{_cell(score['official'], 'seconds', 1)} | {_cell(score[program], 'seconds', 1)} | "
                f"{_shown(score_ratio)} | {_shown(_median(train['official'], 'peak_mib'), digits=0)} / "
                f"{_shown(_median(train[program], 'peak_mib'), digits=0)} | {_shown(rss_ratio)} | "
                f"{_cell(epoch['official'], 'pair_epoch', 3)} | {_cell(epoch[program], 'pair_epoch', 3)} | "
                f"{_shown(epoch_ratio)} | {_shown(_median(epoch['official'], 'division_per_pair'), digits=3)} / "
                f"{_shown(_median(epoch[program], 'division_per_pair'), digits=3)} |"
            )
            # the floor, hfncl's FLOPs at full throughput over the official time, is its roofline times its ratio
            floor_step = _product(roofline[program], step_ratio)
            floor_score = _product(scoring_roofline[program], score_ratio)
            bounds.append(
                f"| {head.upper()} {dims} | {shown} | "
                f"{_shown(roofline['official'])} / {_shown(roofline[program])} | {_shown(floor_step)} | "
                f"{_shown(step_ratio)} | "
                f"{_shown(_first(score['official'], 'flops'), 1e12)} / "
                f"{_shown(_first(score[program], 'flops'), 1e12)} | "
                f"{_shown(scoring_roofline['official'])} / {_shown(scoring_roofline[program])} | "
                f"{_shown(floor_score)} | {_shown(score_ratio)} |"
            )
            if first:
                floors[precision] = f"floors{suffix} warmup_step={_shown(floor_step)} scoring={_shown(floor_score)}"
                ratios[precision] = (
                    f"ratios{suffix} warmup_step={_shown(step_ratio, missing='n/a')} "
                    f"pair_epoch={_shown(epoch_ratio, missing='n/a')} scoring={_shown(score_ratio, missing='n/a')} "
                    f"rss={_shown(rss_ratio, missing='n/a')} roofline={_shown(roofline[program], missing='n/a')}"
                )
    import torch

    if args.device == "cuda":
        where = f"on CUDA ({torch.cuda.get_device_name()}, torch {torch.__version__}, matmul on 8192 x 8192: {speeds})"
        clock = (f"wall seconds after torch.cuda.synchronize(), the mean of {CUDA_TIMED_STEPS} steps after "
                 f"{CUDA_WARM_STEPS} untimed ones per run")
        memory, memory_column = "Peak GPU memory allocated (torch.cuda.max_memory_allocated)", "peak GPU MiB"
    else:
        where = (f"on the CPU ({args.threads} torch thread(s), torch {torch.__version__}, "
                 f"matmul on 2048 x 2048: {speeds})")
        clock, memory, memory_column = "CPU seconds (user + sys)", "Peak RSS", "peak RSS MiB"
    blocks = "" if args.block_mib is None else f" hfncl's heads score in pair blocks of {args.block_mib} MiB."
    header = [
        f"Official NCR code vs hfncl {where}. The official code runs in fp32 as it ships; hfncl in the precision "
        "column (bf16: under bf16 autocast, TrainConfig.mixed_precision, scores float32). Warmup step: one network, "
        f"batch of {BATCH}, {clock}, median [min, max] of {args.repeats} interleaved runs. Scoring: "
        f"{args.scoring_images} x {args.scoring_images * CAPTIONS_PER_IMAGE} from embeddings, "
        f"{args.scoring_repeats} run(s). {memory} of the training-step process. Roofline: matmul FLOPs per "
        "second over the matmul throughput in the step's precision. NCR epoch (first case only): "
        f"{args.epoch_images} images x {CAPTIONS_PER_IMAGE} captions at {EPOCH_NOISE:.0%} noise, seconds per "
        f"pair of one co-training epoch with both networks, the division and the noisy part, "
        f"{args.epoch_repeats} run(s); its division column is that epoch's division stage per pair.{blocks}",
        "",
        "| head dims | hfncl precision | official step s | hfncl step s | hfncl / official | matmul TFLOP per step "
        "(official / hfncl) | roofline fraction (official / hfncl) | official scoring s | hfncl scoring s | "
        f"hfncl / official | {memory_column} (official / hfncl) | hfncl / official | official epoch s/pair | "
        "hfncl epoch s/pair | hfncl / official | division s/pair (official / hfncl) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    what_the_cpu_allows = [
        "",
        f"What this {'GPU' if args.device == 'cuda' else 'CPU'} allows: the floor is hfncl's matmul FLOPs at the "
        "full matmul throughput of its precision, over "
        "the official time, the lowest hfncl / official ratio those FLOPs can reach; scoring FLOPs counted on "
        f"{FLOP_COUNT_IMAGES // 2} and {FLOP_COUNT_IMAGES} images and extended to all.",
        "",
        "| head dims | hfncl precision | step roofline (official / hfncl) | step floor | step hfncl / official | "
        "scoring TFLOP (official / hfncl) | scoring roofline (official / hfncl) | scoring floor | "
        "scoring hfncl / official |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines = [floors[precision] for precision in variants if precision in floors]
    lines += [ratios[precision] for precision in variants if precision in ratios]
    return "\n".join(header + rows + what_the_cpu_allows + bounds) + "\n", lines


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-dir", required=True, help="The NCR/ folder of the prepared official code.")
    parser.add_argument("--quick", action="store_true",
                        help="SGR at 256/64 only, 100 scoring images, an NCR epoch of 64 x 5 pairs (a few minutes).")
    parser.add_argument("--output", help="Markdown table to write (printed in any case).")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="Interleaved runs of each training step (0: none).")
    parser.add_argument("--scoring-repeats", type=int, default=1, help="Runs of each scoring pass (0: none).")
    parser.add_argument("--scoring-images", type=int, default=1000)
    parser.add_argument("--cases", nargs="+", default=["sgr:1024/256", "saf:1024/256", "sgr:256/64", "saf:256/64"],
                        help="HEAD:EMBED/SIM cases to measure.")
    parser.add_argument("--epoch-images", type=int, default=128,
                        help="Images (x 5 captions) of the NCR-epoch measurement's training set, a multiple of "
                             f"{EPOCH_IMAGE_MULTIPLE} (its clean set is then whole batches in both programs).")
    parser.add_argument("--epoch-repeats", type=int, default=1, help="Interleaved runs of the NCR epoch (0: none).")
    parser.add_argument("--mixed-precision", nargs="+", choices=("no", "bf16"), default=["no"],
                        help="hfncl's precisions (TrainConfig.mixed_precision), a row each; the official code runs "
                        "in fp32.")
    parser.add_argument("--work-dir", default="runs/peer_speed", help="Generated data and the hfncl runs' outputs.")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="Where both programs run; on CUDA steps are timed in synchronized wall seconds.")
    parser.add_argument("--no-scoring-flops", action="store_true",
                        help="Skip counting the scoring pass's FLOPs (minutes for the official per-caption loop); "
                             "its roofline and floor show '-'.")
    parser.add_argument("--block-mib", type=int,
                        help="Memory budget of hfncl's pair blocks in MiB "
                             "(default: the heads' own, 32 on the CPU and 1024 on CUDA).")
    parser.add_argument("--child", choices=("train", "score", "matmul", "epoch"), help=argparse.SUPPRESS)
    parser.add_argument("--program", choices=("official", "hfncl:no", "hfncl:bf16"), help=argparse.SUPPRESS)
    parser.add_argument("--head", choices=("sgr", "saf"), help=argparse.SUPPRESS)
    parser.add_argument("--dims", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not (Path(args.peer_dir) / "model.py").is_file():
        parser.error(f"--peer-dir {args.peer_dir}: no model.py there; prepare it with ../shared/tools/ncr_peer.sh")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA device here")
    if args.epoch_images < 1 or args.epoch_images % EPOCH_IMAGE_MULTIPLE:
        parser.error(
            f"--epoch-images must be a positive multiple of {EPOCH_IMAGE_MULTIPLE}, got {args.epoch_images}: the timed "
            f"epoch's clean set ({1 - EPOCH_NOISE:.0%} of 5 captions per image) must fill whole batches of {BATCH}, "
            "since hfncl drops a last partial batch and the official loop trains it"
        )
    if args.block_mib is not None and args.block_mib < 1:
        parser.error(f"--block-mib must be a positive number of MiB, got {args.block_mib}")
    if args.quick:
        args.cases, args.scoring_images, args.epoch_images = ["sgr:256/64"], 100, 64
    args.cases = [tuple(case.split(":")) for case in args.cases]
    if args.dims:
        args.embed_dim, args.sim_dim = map(int, args.dims.split("/"))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        args.program, _, precision = args.program.partition(":")
        args.mixed_precision = precision or "no"
        children = {"train": child_train, "score": child_score, "epoch": child_epoch}
        if args.child == "matmul":
            result = child_matmul(args.device, "bfloat16" if args.mixed_precision == "bf16" else "float32")
        else:
            result = children[args.child](args.program, args)
        print(json.dumps(result))
        return 0
    report, ratios = measure(args)
    if args.output:
        Path(args.output).write_text(report + "\n" + "\n".join(ratios) + "\n")
    print(report)
    print("\n".join(ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
