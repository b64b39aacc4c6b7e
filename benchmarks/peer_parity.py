"""NCR-SGR learning side by side: the official NCR code and ``recipes/ncr_f30k.py`` on the same real-text proxy.

    bash ../shared/tools/ncr_peer.sh NCR_GIT_DIR /tmp/peer 4        # a CPU-runnable copy, 4 captions per image
    python benchmarks/peer_parity.py --peer-dir /tmp/peer/NCR --proxy-dir runs/bench_proxy/data \\
        --images 320 --warmup-epochs 3 --cotrain-epochs 2 --seeds 0 1

What it measures: whether hfncl's NCR with the SGR head *learns* as the authors' code does, on
the same data, noise and settings. Both programs train on the first ``--images`` training images
of a precomp real-text proxy (``benchmarks/accuracy.py --benchmark proxy`` builds one: 32
MiniLM token vectors of 384 dims as "regions", 4 captions per image), are validated on its first
``--dev-images`` dev images and tested on its first ``--test-images`` test images, with the
issue's settings: joint space 256, SGR similarity 64, batch 128, Adam lr 2e-4, grad clip 2,
``--warmup-epochs`` warmup epochs then ``--cotrain-epochs`` co-training epochs, no lr decay,
``--noise-ratio`` caption-level noise, one torch thread each (``OMP_NUM_THREADS=1``).

- **Noise**: one file per seed, made by the official code's own ``data.PrecompDataset`` (its
  generator seeded as its ``run.py`` seeds it); the official run reads it with ``--noise_file``,
  hfncl with ``--noise_file`` (a caption-level index, entry c = the image caption c is paired with).
- **The official code** (prepared by ``../shared/tools/ncr_peer.sh``, imported in a child
  process for measurement only, nothing of it is part of hfncl) is copied under ``--work-dir``
  with its image pooling's BatchNorm over 36 region positions set to the proxy's region count
  (it is hard-coded for 36 Faster R-CNN regions). It runs its own ``run.py`` main loop unchanged
  but for one addition: a validation after each warmup epoch before the last (it validates only
  once, after the whole warmup). That validation changes no weights; creating its data iterator
  draws from torch's generator, so later dropout masks and batch orders are other draws than in a
  run without it. Each co-training epoch's division is dumped to ``prob_EPOCH.npy`` by the
  prepared copy.
- **hfncl** runs ``recipes/ncr_f30k.py`` as a user runs it, with a ``--config`` file of the
  settings above (``benchmarks/recipes_proxy.py``'s runner).

Per epoch and program: validation rSum (both networks' similarities averaged, as both programs
validate), network A's warmup loss (the mean over the epoch; the official one from its log's
running average), and in co-training network A's division: the ROC-AUC of its clean probability
against the noise file's clean pairs and its clean share (pairs above the 0.5 threshold, the
share the peer trains on as clean). The test rSum is of each program's best checkpoint (the
official code keeps the best co-training epoch; hfncl the best epoch of all).

Every run keeps its folder under ``--work-dir`` (``official_seedS/``, ``hfncl_seedS/``): a finished
run is reused (its ``curve.json`` / ``results.json``), so runs stopped part way can be run again
later; ``--report-only`` tables what exists, partial official runs included (from their log).
Writes ``peer_parity.md``, ``peer_parity.json`` and ``peer_parity.png`` (validation rSum and
division AUC by epoch, one line per program and seed) to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from common import machine, mean_spread, pyplot, write_report
from recipes_proxy import RecipeRun, network_a, train

from hfncl.plots import save_png

REPO = Path(__file__).resolve().parents[1]
CAPTIONS_PER_IMAGE = 4
OFFICIAL_REGIONS = "VisualSA(embed_size, 0.4, 36)"
VALIDATION = re.compile(r"^(Image to text|Text to image): ([\d.]+), ([\d.]+), ([\d.]+), [\d.]+, [\d.]+$")
STEP_LOSS = re.compile(r"^(Warmup|Training) Step\[\s*(\d+)/(\d+)\].*loss ([\d.e+-]+) \(([\d.e+-]+)\)")
TEST_RSUM = re.compile(r"^rsum: ([\d.]+)$")
PROGRAMS = ("official", "hfncl")


def parse_official_log(text: str, warmup_epochs: int) -> dict[str, Any]:
    """The official run's curves from its stdout: validation rSum in order (one per epoch, warmup first), network A's
    mean warmup loss per warmup epoch, and the test rSum of its best checkpoint (``None`` before it ran).

    Validations print ``Image to text: r1, r5, r10, medr, meanr`` and ``Text to image: ...`` (comma separated; the
    final test's lines are space separated and followed by ``rsum: X``). The warmup alternates network A's epoch and
    network B's; each ``Warmup Step[i/N] ... loss x (mean)`` line carries the epoch's running mean, so a
    network-epoch's mean is its last line's (the log must print the last step: ``--log_step 1``).
    """
    rsums: list[float] = []
    half: float | None = None
    warmup_means: list[float] = []
    test: float | None = None
    for line in text.splitlines():
        line = line.strip()
        if match := VALIDATION.match(line):
            recall = sum(float(value) for value in match.groups()[1:])
            if match.group(1) == "Image to text":
                half = recall
            elif half is not None:
                rsums.append(round(half + recall, 2))
                half = None
        elif (match := STEP_LOSS.match(line)) and match.group(1) == "Warmup":
            step, steps = int(match.group(2)), int(match.group(3))
            if step == steps - 1:
                warmup_means.append(float(match.group(5)))
        elif match := TEST_RSUM.match(line):
            test = float(match.group(1))
    losses = warmup_means[0::2][:warmup_epochs]  # network A's epochs; B's are the odd ones
    return {"val_rsum": rsums, "warmup_loss": losses, "test_rsum": test}


def clean_pairs(noise_index: np.ndarray, captions_per_image: int) -> np.ndarray:
    """Which pairs of a caption-level noise index are clean: caption c still with its own image c // k."""
    return noise_index == np.arange(len(noise_index)) // captions_per_image


def division_scores(probability: np.ndarray, clean: np.ndarray, threshold: float = 0.5) -> dict[str, float]:
    """A division's ROC-AUC of the clean probability against the true clean pairs, and its clean share (pairs above
    ``threshold``; when none is below it the official ``split_prob`` keeps the lowest 1% noisy, as here)."""
    from sklearn.metrics import roc_auc_score

    if probability.shape != clean.shape:
        raise ValueError(f"a division of {probability.shape} pairs against {clean.shape} clean flags: shapes differ")
    if probability.min() > threshold:
        threshold = float(np.sort(probability)[len(probability) // 100])
    return {"auc": float(roc_auc_score(clean, probability)), "clean_share": float((probability > threshold).mean())}


def official_curve(run_dir: Path, noise_file: Path, warmup_epochs: int) -> dict[str, Any]:
    """An official run's curves: its log's, and network A's division of each co-training epoch dumped so far."""
    log = run_dir / "train.log"
    curve = parse_official_log(log.read_text() if log.is_file() else "", warmup_epochs)
    clean = clean_pairs(np.load(noise_file), CAPTIONS_PER_IMAGE)
    divisions = []
    for epoch in range(len(list(run_dir.glob("prob_*.npy")))):
        divisions.append(division_scores(np.load(run_dir / f"prob_{epoch}.npy")[0], clean))
    curve["division"] = divisions
    return curve


def hfncl_curve(results: dict[str, Any]) -> dict[str, Any]:
    """hfncl's curves from its ``results.json``: validation rSum per epoch, network A's warmup loss per warmup epoch,
    network A's division (AUC, clean share) per co-training epoch, and the test rSum."""
    history = results["history"]
    divisions = [network_a(r, "division") for r in history if not r.get("warmup")]
    return {
        "val_rsum": [r["val/rsum"] for r in history],
        "warmup_loss": [network_a(r, "train")["warmup_lw"] for r in history if r.get("warmup")],
        "division": [{"auc": d["auc"], "clean_share": d["predicted_clean_ratio"]} for d in divisions if "auc" in d],
        "test_rsum": results["test"]["rsum"],
    }


def _cell(values: list[float | None], digits: int = 1) -> str:
    """Mean ± spread over the seeds that reached it (``-`` when none did)."""
    return mean_spread([v for v in values if v is not None], digits)


def _at(sequence: list[Any], index: int, key: str | None = None) -> Any:
    if index >= len(sequence):
        return None
    return sequence[index] if key is None else sequence[index][key]


def table(curves: dict[str, list[dict[str, Any]]], warmup_epochs: int, cotrain_epochs: int) -> str:
    """One row per epoch: each program's validation rSum, and network A's warmup loss or division AUC / clean share,
    mean ± spread over the seeds that reached it; a last row with the test rSum."""
    lines = [
        "| epoch | official val rSum | hfncl val rSum | official loss (A) | hfncl loss (A) | official AUC (A) | "
        "hfncl AUC (A) | official clean share (A) | hfncl clean share (A) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for epoch in range(warmup_epochs + cotrain_epochs):
        warm = epoch < warmup_epochs
        name = f"{epoch + 1} (warmup)" if warm else f"{epoch + 1} (co-training {epoch - warmup_epochs + 1})"
        cells = [_cell([_at(c["val_rsum"], epoch) for c in curves[p]]) for p in PROGRAMS]
        if warm:
            cells += [_cell([_at(c["warmup_loss"], epoch) for c in curves[p]], 2) for p in PROGRAMS] + ["-"] * 4
        else:
            index = epoch - warmup_epochs
            cells += ["-", "-"]
            cells += [_cell([_at(c["division"], index, "auc") for c in curves[p]], 3) for p in PROGRAMS]
            cells += [_cell([_at(c["division"], index, "clean_share") for c in curves[p]], 3) for p in PROGRAMS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    tests = [_cell([c["test_rsum"] for c in curves[p]]) for p in PROGRAMS]
    lines.append(f"| test (best checkpoint) | {tests[0]} | {tests[1]} | | | | | | |")
    return "\n".join(lines)


def plot(curves: dict[str, list[dict[str, Any]]], seeds: list[int], warmup_epochs: int, path: Path) -> Path | None:
    """Validation rSum and network A's division AUC by epoch, a line per program and seed; ``None`` without
    matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    styles = {"official": ("tab:blue", "o"), "hfncl": ("tab:orange", "s")}
    for program in PROGRAMS:
        color, marker = styles[program]
        for seed, curve in zip(seeds, curves[program], strict=False):
            label = f"{program} seed {seed}"
            if curve["val_rsum"]:
                left.plot(range(1, len(curve["val_rsum"]) + 1), curve["val_rsum"], color=color, marker=marker,
                          markersize=3, label=label, alpha=0.9)
            aucs = [d["auc"] for d in curve["division"]]
            if aucs:
                right.plot(range(warmup_epochs + 1, warmup_epochs + 1 + len(aucs)), aucs, color=color, marker=marker,
                           markersize=3, label=label, alpha=0.9)
    for axis, title in ((left, "validation rSum"), (right, "division AUC (network A)")):
        axis.axvline(warmup_epochs + 0.5, color="grey", linewidth=0.8, linestyle=":")
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("epoch (dotted: end of warmup)")
        if axis.lines:
            axis.legend(fontsize=7)
    return save_png(figure, path)


def prepare_data(args: argparse.Namespace) -> Path:
    """``WORK/data/f30k_precomp``: the first ``--images`` / ``--dev-images`` / ``--test-images`` images of the proxy's
    splits and their captions, and ``WORK/vocab/f30k_precomp_vocab.json`` (the proxy's training vocabulary), laid
    out as the official code reads them (hfncl reads the same folder)."""
    data = args.work_dir / "data" / "f30k_precomp"
    data.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", args.images), ("dev", args.dev_images), ("test", args.test_images)):
        images = np.load(args.proxy_dir / f"{split}_ims.npy", mmap_mode="r")
        captions = (args.proxy_dir / f"{split}_caps.txt").read_text().splitlines()
        if count > len(images) or len(captions) != CAPTIONS_PER_IMAGE * len(images):
            raise SystemExit(
                f"{args.proxy_dir}/{split}: {len(images)} images and {len(captions)} captions; expected at least "
                f"{count} images with {CAPTIONS_PER_IMAGE} captions each"
            )
        np.save(data / f"{split}_ims.npy", np.ascontiguousarray(images[:count]))
        (data / f"{split}_caps.txt").write_text("\n".join(captions[: CAPTIONS_PER_IMAGE * count]) + "\n")
    vocab = args.work_dir / "vocab"
    vocab.mkdir(exist_ok=True)
    shutil.copyfile(args.proxy_dir / "train_vocab.json", vocab / "f30k_precomp_vocab.json")
    return data


def prepare_peer(args: argparse.Namespace, regions: int) -> Path:
    """A copy of the prepared official code whose image pooling batch-normalises ``regions`` positions."""
    peer = args.work_dir / "peer"
    if not (peer / "model.py").is_file():
        shutil.copytree(args.peer_dir, peer, ignore=shutil.ignore_patterns("__pycache__"))
        source = (peer / "model.py").read_text()
        if OFFICIAL_REGIONS not in source:
            raise SystemExit(f"{args.peer_dir}/model.py: no '{OFFICIAL_REGIONS}' to set to {regions} regions")
        (peer / "model.py").write_text(source.replace(OFFICIAL_REGIONS, f"VisualSA(embed_size, 0.4, {regions})"))
    return peer


def noise_file(args: argparse.Namespace, peer: Path, seed: int) -> Path:
    """The official code's noise index for ``seed`` (made once, by its ``PrecompDataset`` in a child process)."""
    path = args.work_dir / f"noise_{args.noise_ratio:g}_seed{seed}.npy"
    if not path.is_file():
        child = (
            "import sys, numpy as np; sys.path.insert(0, sys.argv[1]); import data; np.random.seed(int(sys.argv[2]))\n"
            "n = int(sys.argv[3]) * int(sys.argv[4])\n"
            "data.PrecompDataset([[1]] * n, np.zeros((int(sys.argv[3]), 1)), 'train', float(sys.argv[5]), sys.argv[6])"
        )
        command = [sys.executable, "-c", child, str(peer), str(seed), str(args.images), str(CAPTIONS_PER_IMAGE),
                   str(args.noise_ratio), str(path)]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return path


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


OFFICIAL_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
import co_train, run
warmup, models, val = co_train.warmup, [], []
def warmup_then_validate(opt, loader, model, epoch):
    warmup(opt, loader, model, epoch)
    models.append(model)
    if len(models) % 2 == 0 and epoch < opt.warmup_epoch - 1:  # main() validates after the last one itself
        if not val:
            vocab = co_train.deserialize_vocab(f"{opt.vocab_path}/{opt.data_name}_vocab.json")
            captions, images = co_train.get_dataset(opt.data_path, opt.data_name, "dev", vocab)
            val.append(co_train.get_loader(captions, images, "dev", opt.batch_size, opt.workers))
        print("\\nValidattion ...")
        co_train.validate(opt, val[0], models[-2:])
co_train.warmup = warmup_then_validate
sys.argv = ["run.py"] + sys.argv[2:]
run.run()
"""


def run_official(args: argparse.Namespace, peer: Path, seed: int, noise: Path) -> dict[str, Any]:
    """The official run of ``seed`` (reused when finished), and its curves."""
    run_dir = args.work_dir / f"official_seed{seed}"
    done = run_dir / "curve.json"
    if done.is_file():
        return json.loads(done.read_text())
    if args.report_only:
        return official_curve(run_dir, noise, args.warmup_epochs)
    if run_dir.is_dir():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    command = [
        sys.executable, "-c", OFFICIAL_CHILD, str(peer.resolve()),
        "--data_path", str((args.work_dir / "data").resolve()), "--data_name", "f30k_precomp",
        "--vocab_path", str((args.work_dir / "vocab").resolve()), "--img_dim", str(args.image_dim),
        "--embed_size", "256", "--sim_dim", "64", "--batch_size", "128", "--learning_rate", "2e-4",
        "--grad_clip", "2", "--warmup_epoch", str(args.warmup_epochs), "--num_epochs", str(args.cotrain_epochs),
        "--lr_update", str(args.cotrain_epochs + 1), "--noise_ratio", str(args.noise_ratio),
        "--noise_file", str(noise.resolve()), "--seed", str(seed), "--output_dir", str(run_dir.resolve()),
        "--log_step", "1",
    ]
    with (run_dir / "train.log").open("w") as log:
        finished = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=peer, env=_environment())
    curve = official_curve(run_dir, noise, args.warmup_epochs)
    if finished.returncode != 0:
        tail = (run_dir / "train.log").read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"the official run of seed {seed} exited with {finished.returncode}: {' | '.join(tail)}")
    done.write_text(json.dumps(curve))
    return curve


def hfncl_config(args: argparse.Namespace, seed: int, noise: Path) -> dict[str, Any]:
    """``recipes/ncr_f30k.py``'s ``--config`` values for the comparison: the issue's settings and the noise file."""
    return {
        "epochs": args.warmup_epochs + args.cotrain_epochs,
        "warmup_epochs": args.warmup_epochs,
        "lr_decay_epochs": [],
        "noise_file": str(noise.resolve()),
        "vocab_file": str((args.work_dir / "vocab" / "f30k_precomp_vocab.json").resolve()),
        "seed": seed,
        "embed_dim": 256,
        "sim_dim": 64,
        "batch_size": 128,
        "learning_rate": 2e-4,
        "grad_clip": 2.0,
        "progress": False,
        "train_split": "train",
        "val_split": "dev",
        "test_split": "test",
        "test_folds": 1,
    }


def run_hfncl(args: argparse.Namespace, seed: int, noise: Path) -> dict[str, Any] | None:
    """hfncl's run of ``seed`` (reused when finished, continued from its checkpoint when stopped), and its curves."""
    run = RecipeRun(("ncr_f30k",), hfncl_config(args, seed, noise))
    os.environ.update(_environment())
    outcome = train(run, (args.work_dir / "data" / "f30k_precomp").resolve(), args.work_dir / f"hfncl_seed{seed}",
                    resume=True, report_only=args.report_only)
    return None if outcome is None else hfncl_curve(outcome["results"])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer-dir", type=Path, required=True, help="NCR/ of ncr_peer.sh (4 captions).")
    parser.add_argument("--proxy-dir", type=Path, required=True,
                        help="A precomp real-text proxy ({split}_ims.npy, {split}_caps.txt, train_vocab.json).")
    parser.add_argument("--images", type=int, default=320, help="Training images (the first ones), 4 captions each.")
    parser.add_argument("--dev-images", type=int, default=200)
    parser.add_argument("--test-images", type=int, default=200)
    parser.add_argument("--warmup-epochs", type=int, default=3)
    parser.add_argument("--cotrain-epochs", type=int, default=2)
    parser.add_argument("--noise-ratio", type=float, default=0.2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--programs", nargs="+", choices=PROGRAMS, default=list(PROGRAMS),
                        help="Which programs to train now (the report tables both from what exists).")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/peer_parity"))
    parser.add_argument("--output-dir", type=Path, default=Path("runs/peer_parity"))
    parser.add_argument("--report-only", action="store_true", help="Train nothing: table and plot what exists.")
    args = parser.parse_args(argv)
    if not (args.peer_dir / "co_train.py").is_file():
        parser.error(f"--peer-dir {args.peer_dir}: no co_train.py there; prepare it with ../shared/tools/ncr_peer.sh")
    if args.images < 1 or args.warmup_epochs < 1 or args.cotrain_epochs < 1:
        parser.error("--images, --warmup-epochs and --cotrain-epochs must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = prepare_data(args)
    regions, args.image_dim = np.load(data / "train_ims.npy", mmap_mode="r").shape[1:]
    peer = prepare_peer(args, regions)
    curves: dict[str, list[dict[str, Any]]] = {program: [] for program in PROGRAMS}
    reached = []
    for seed in args.seeds:
        noise = noise_file(args, peer, seed)
        runs = {}
        for program in PROGRAMS:
            trains = program in args.programs and not args.report_only
            if program == "official":
                runs[program] = run_official(argparse.Namespace(**{**vars(args), "report_only": not trains}),
                                             peer, seed, noise)
            else:
                runs[program] = run_hfncl(argparse.Namespace(**{**vars(args), "report_only": not trains}), seed, noise)
        if all(runs[p] is not None and runs[p]["val_rsum"] for p in PROGRAMS):
            reached.append(seed)
            for program in PROGRAMS:
                curves[program].append(runs[program])
    header = (
        f"NCR-SGR, official code vs recipes/ncr_f30k.py ({machine()}, 1 thread each): the first {args.images} "
        f"training images x {CAPTIONS_PER_IMAGE} captions of the real-text proxy, {args.noise_ratio:.0%} noise from "
        f"the official code's noise file, 256/64, batch 128, lr 2e-4, clip 2, {args.warmup_epochs} warmup + "
        f"{args.cotrain_epochs} co-training epochs; validation on {args.dev_images} dev images, test on "
        f"{args.test_images}; seeds {reached} (mean ± spread over them)."
    )
    report = header + "\n\n" + table(curves, args.warmup_epochs, args.cotrain_epochs) + "\n"
    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_report(args.output_dir / "peer_parity.md", report)
    (args.output_dir / "peer_parity.json").write_text(json.dumps({"seeds": reached, "curves": curves}, indent=1))
    plot(curves, reached, args.warmup_epochs, args.output_dir / "peer_parity.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
