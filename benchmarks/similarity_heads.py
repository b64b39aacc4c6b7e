"""Cost of the similarity heads: cosine, SGR and SAF (SGRAF) on the CPU or CUDA.

    python benchmarks/similarity_heads.py --output benchmarks/similarity_heads.md [--device cuda]

Two measurements per head, each in a fresh subprocess (so that its peak resident memory
is its own), on random inputs of the precomp shapes (36 regions x 2048-d features, the
1024-d joint space, 256-d similarity representations, captions of ``--caption-length``
words):

1. **Training step**: forward + backward of one batch of ``--batch-size`` (128) pairs
   through one network (towers + head, the K x K similarity matrix, a scalar loss),
   median over ``--repeats`` timed steps after one untimed step.
2. **5K x 25K evaluation**: the embeddings of 5000 images and 25000 captions as
   :func:`hfncl.engine.encoding.encode_split` holds them (pooled vectors for cosine,
   packed local features for SGR / SAF), scored by ``model.similarity`` the way
   :func:`hfncl.evaluation.retrieval_metrics` asks for it (blocks of image rows against
   every caption, every block visited twice). Cosine runs the full evaluation. SGR / SAF
   score ``--eval-rows`` image rows against all 25000 captions through the same block
   scorer (the heads' blocks of at most ``--block-mb`` MiB bound the memory, whatever the
   number of rows); their full-evaluation time is *extrapolated* as
   5000 / eval_rows x (measured time) (evaluation scores an expensive head's matrix
   once), and the table says so.

With ``--compile`` the training step runs the head through ``torch.compile`` (inductor), and the
table adds the first step's seconds (the compilation) and the first step at captions three
words longer (a recompilation when a new padded length arrives); evaluation stays eager.
``--heads`` measures some heads only.

Peak memory is the process's peak resident set size (``ru_maxrss``), reported in full
and as the increase over the process after building the model and before the measured
work. With ``--device cuda`` the model and inputs are on the GPU, times are wall seconds
after ``torch.cuda.synchronize()``, and memory is ``torch.cuda.max_memory_allocated`` (its
increase over what was allocated before the measured work). Writes a markdown table to
``--output`` and prints it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

HEADS = ("cosine", "sgr", "saf")
EVAL_IMAGES, EVAL_CAPTIONS_PER_IMAGE = 5000, 5


def _peak_mib(device: str) -> float:
    """The process's peak memory: resident set on the CPU, GPU memory allocated on CUDA."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _baseline_mib(device: str) -> float:
    """The memory the measured work starts from (on CUDA, what is allocated now: the peak restarts from it)."""
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**20
    return _peak_mib(device)


def _clock(device: str) -> float:
    """Wall seconds, after the device's queued work has finished."""
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def _model(args: argparse.Namespace, head: str):
    from hfncl.models import NCLConfig, NCLModel

    torch.manual_seed(0)
    config = NCLConfig(
        image_dim=args.image_dim,
        embed_dim=args.embed_dim,
        word_dim=300,
        vocab_size=10000,
        similarity=head,
        sim_dim=args.sim_dim,
    )
    model = NCLModel(config).to(args.device)
    if model.networks[0].head is not None:
        model.networks[0].head.block_bytes = args.block_mb * 2**20
    return model


def _captions(count: int, length: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, 10000, (count, length), generator=generator)
    return tokens.to(device), torch.full((count,), length)


def measure_training(args: argparse.Namespace, head: str) -> dict[str, float]:
    """Median seconds of forward + backward of one batch, and the peak memory."""
    model = _model(args, head).train()
    network = model.networks[0]
    if args.compile and network.head is not None:
        network.head = torch.compile(network.head)
    images = torch.randn(args.batch_size, args.regions, args.image_dim, generator=torch.Generator().manual_seed(2))
    images = images.to(args.device)
    captions, lengths = _captions(args.batch_size, args.caption_length, args.device)
    baseline = _baseline_mib(args.device)

    def step(captions: torch.Tensor, lengths: torch.Tensor) -> float:
        start = _clock(args.device)
        image_embeds, text_embeds = network(images, captions, lengths)
        similarity = network.view_similarity(image_embeds, text_embeds).mean(dim=0)
        (similarity.sum() - 2 * similarity.diagonal().sum()).backward()
        network.zero_grad(set_to_none=True)
        return _clock(args.device) - start

    first = step(captions, lengths)
    times = sorted(step(captions, lengths) for _ in range(args.repeats))
    result = {"seconds": times[len(times) // 2], "first_seconds": first}
    if args.compile:
        result["new_length_seconds"] = step(*_captions(args.batch_size, args.caption_length + 3, args.device))
    peak = _peak_mib(args.device)
    return {**result, "peak_mib": peak, "increase_mib": peak - baseline}


@torch.no_grad()
def measure_evaluation(args: argparse.Namespace, head: str) -> dict[str, float]:
    """Seconds and peak memory of scoring 5K x 25K (cosine) or eval_rows x 25K rows (SGR / SAF)."""
    from hfncl.evaluation import retrieval_metrics
    from hfncl.models.heads import pack_local

    model = _model(args, head).eval()
    captions = EVAL_IMAGES * EVAL_CAPTIONS_PER_IMAGE
    generator = torch.Generator().manual_seed(3)
    if head == "cosine":
        image_embeds = torch.nn.functional.normalize(
            torch.randn(1, EVAL_IMAGES, args.embed_dim, generator=generator), dim=-1
        )
        text_embeds = torch.nn.functional.normalize(
            torch.randn(1, captions, args.embed_dim, generator=generator), dim=-1
        )
    else:
        image_embeds = pack_local(
            torch.randn(EVAL_IMAGES, args.regions, args.embed_dim, generator=generator), None
        )[None]
        text_embeds = pack_local(
            torch.randn(captions, args.caption_length, args.embed_dim, generator=generator), None
        )[None]
    image_embeds, text_embeds = image_embeds.to(args.device), text_embeds.to(args.device)
    embeddings_mib = (image_embeds.numel() + text_embeds.numel()) * 4 / 2**20
    baseline = _baseline_mib(args.device)
    start = _clock(args.device)
    if head == "cosine":
        retrieval_metrics(
            lambda rows: model.similarity(image_embeds[:, rows], text_embeds), EVAL_IMAGES, EVAL_CAPTIONS_PER_IMAGE
        )
        rows, seconds = EVAL_IMAGES, _clock(args.device) - start
        full_seconds = seconds
    else:
        rows = args.eval_rows
        block = model.similarity(image_embeds[:, :rows], text_embeds)
        assert block.shape == (rows, captions)
        seconds = _clock(args.device) - start
        full_seconds = EVAL_IMAGES / rows * seconds
    peak = _peak_mib(args.device)
    return {
        "rows": rows,
        "seconds": seconds,
        "full_seconds": full_seconds,
        "embeddings_mib": embeddings_mib,
        "peak_mib": peak,
        "increase_mib": peak - baseline,
    }


def _run_child(kind: str, head: str, argv: list[str]) -> dict[str, float]:
    command = [sys.executable, __file__, *argv, "--child", kind, "--child-head", head]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"measurement {kind}/{head} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(args: argparse.Namespace, results: dict[str, dict[str, dict[str, float]]]) -> str:
    """The markdown report of every head's measurements."""
    compiled = " | first step s (compile) | first step at +3 words s" if args.compile else ""
    where = (
        f"on CUDA ({torch.cuda.get_device_name()}, wall seconds after synchronising, GPU memory allocated"
        if args.device == "cuda"
        else f"on the CPU ({torch.get_num_threads()} threads"
    )
    lines = [
        (
            f"Similarity heads {where}, torch {torch.__version__}"
            f"{', heads through torch.compile in training' if args.compile else ''}): "
            f"{args.regions} regions x {args.image_dim}-d features, {args.embed_dim}-d joint space, "
            f"{args.sim_dim}-d similarity representations, captions of {args.caption_length} words, "
            f"SGR / SAF blocks of at most {args.block_mb} MiB."
        ),
        "",
        (
            f"| head | fwd+bwd s / batch of {args.batch_size} | training peak MiB (+ over model) | "
            f"5K x 25K eval s | eval peak MiB (+ over embeddings) | embeddings MiB | eval measured on |{compiled}"
        ),
        "|---|---|---|---|---|---|---|" + "---|" * compiled.count("|"),
    ]
    for head in args.heads:
        train, evaluation = results[head]["train"], results[head]["eval"]
        full = evaluation["rows"] == EVAL_IMAGES
        eval_time = f"{evaluation['full_seconds']:.1f}" if full else f"~{evaluation['full_seconds']:.0f} (extrapolated)"
        measured = "all 5000 rows, both passes" if full else (
            f"{evaluation['rows']} image rows x 25000 captions in {evaluation['seconds']:.1f} s, one pass"
        )
        lines.append(
            f"| {head} | {train['seconds']:.3f} | {train['peak_mib']:.0f} (+{train['increase_mib']:.0f}) | "
            f"{eval_time} | {evaluation['peak_mib']:.0f} (+{evaluation['increase_mib']:.0f}) | "
            f"{evaluation['embeddings_mib']:.0f} | {measured} |"
            + (f" {train['first_seconds']:.1f} | {train['new_length_seconds']:.1f} |" if args.compile else "")
        )
    lines += [
        "",
        (
            "Extrapolated times are 5000 / rows x the measured time (evaluation scores an SGR / SAF head's matrix "
            "once); the peak memory of the block scorer is set by the block budget, not by the number of rows. "
            "The full evaluation also holds one 1000 x 25000 float32 score block (95 MiB) at a time."
        ),
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="benchmarks/similarity_heads.md", help="Markdown table to write.")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--regions", type=int, default=36)
    parser.add_argument("--image-dim", type=int, default=2048)
    parser.add_argument("--embed-dim", type=int, default=1024)
    parser.add_argument("--sim-dim", type=int, default=256)
    parser.add_argument("--caption-length", type=int, default=12, help="Words per caption (F30K's mean is about 12).")
    parser.add_argument("--repeats", type=int, default=3, help="Timed training steps (after one untimed).")
    parser.add_argument("--eval-rows", type=int, default=2, help="Image rows SGR / SAF score against all captions.")
    parser.add_argument("--block-mb", type=int, default=256, help="Memory budget of an SGR / SAF pair block.")
    parser.add_argument(
        "--heads", nargs="+", choices=HEADS, default=list(HEADS), help="Heads to measure (default: all)."
    )
    parser.add_argument(
        "--compile", action="store_true", help="Train through torch.compile (inductor); eval stays eager."
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="Where the heads run.")
    parser.add_argument("--child", choices=("train", "eval"), help=argparse.SUPPRESS)
    parser.add_argument("--child-head", choices=HEADS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.child:
        measure = measure_training if args.child == "train" else measure_evaluation
        print(json.dumps(measure(args, args.child_head)))
        return 0
    results = {head: {kind: _run_child(kind, head, argv) for kind in ("train", "eval")} for head in args.heads}
    report = table(args, results)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
