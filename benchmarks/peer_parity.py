"""NCR-SGR (or NCR-SAF) learning side by side: the official NCR code and ``recipes/ncr_f30k.py`` on one real-text proxy.

    bash ../shared/tools/ncr_peer.sh NCR_GIT_DIR /tmp/peer 4        # a CPU-runnable copy, 4 captions per image
    python benchmarks/peer_parity.py --peer-dir /tmp/peer/NCR --proxy-dir runs/bench_proxy/data \\
        --images 320 --warmup-epochs 3 --cotrain-epochs 2 --seeds 0 1

What it measures: whether hfncl's NCR with the SGR head (``--head saf``: SAF) *learns* as the authors' code does, on
the same data, noise and settings. Both programs train on the first ``--images`` training images
of a precomp real-text proxy (``benchmarks/accuracy.py --benchmark proxy`` builds one: 32
MiniLM token vectors of 384 dims as "regions", 4 captions per image), are validated on its first
``--dev-images`` dev images and tested on its first ``--test-images`` test images, with the
issue's settings: joint space 256, similarity 64, batch 128, Adam lr 2e-4, grad clip 2,
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
  settings above (``benchmarks/recipes_proxy.py``'s runner). ``--options`` (JSON) sets NCR options over the
  recipe's; the authors' code's three readings are ``'{"ncr.own_prediction": "eval", "ncr.prediction":
  "hinge", "ncr.label_layout": "broadcast"}'`` (``docs/methods/ncr.md``). Give such a run its own
  ``--work-dir``: hfncl's runs are kept per seed.

Per epoch and program: validation rSum (both networks' similarities averaged, as both programs
validate), network A's warmup loss (the mean over the epoch; the official one from its log's
running average), and in co-training network A's division, the one network A trains on (co-divide:
the GMM of network B's losses, the official code's ``prob_B``; hfncl's division of network 0): the
ROC-AUC of its clean probability against the noise file's clean pairs and its clean share (pairs
above the 0.5 threshold, which A trains on as clean). The test rSum is of each program's best checkpoint (the
official code keeps the best co-training epoch; hfncl the best epoch of all).

Both programs score pairs with ``--head``: the official ``--module_name`` SGR or SAF, hfncl's ``similarity`` "sgr" or
"saf" (the recipe's own is "sgr").

``--transplant-check`` adds, in seconds, whether the two compute the same thing: the official model's weights
copied into hfncl's network (:func:`hfncl_name` maps every layer), their similarities on the first 128 training
pairs in eval mode and in training mode without dropout, the warmup loss and every gradient; and the initial
standard deviation of each parameter of fresh models of both (:func:`init_spread`).

``peer_cotrain.py`` (same arguments) continues both programs from the official run's warmup weights, so that their
co-training epochs are compared from one start.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from common import machine, mean_spread, pyplot, write_report
from recipes_proxy import RecipeRun, network_a, recipe_settings, train

from hfncl.plots import save_png

REPO = Path(__file__).resolve().parents[1]
CAPTIONS_PER_IMAGE = 4
OFFICIAL_REGIONS = "VisualSA(embed_size, 0.4, 36)"
VALIDATION = re.compile(r"^(Image to text|Text to image): ([\d.]+), ([\d.]+), ([\d.]+), [\d.]+, [\d.]+$")
STEP_LOSS = re.compile(r"^(Warmup|Training) Step\[\s*(\d+)/(\d+)\].*loss ([\d.e+-]+) \(([\d.e+-]+)\)")
TEST_RSUM = re.compile(r"^rsum: ([\d.]+)$")
PROGRAMS = ("official", "hfncl")
HEADS = {"sgr": "SGR", "saf": "SAF"}
"""hfncl's ``similarity`` of each head and the official code's ``--module_name`` for it."""


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
    """An official run's curves: its log's, and network A's divisions (:func:`official_divisions`)."""
    log = run_dir / "train.log"
    return {**parse_official_log(log.read_text() if log.is_file() else "", warmup_epochs),
            "division": official_divisions(run_dir, noise_file)}


def official_divisions(run_dir: Path, noise_file: Path) -> list[dict[str, float]]:
    """The scores (:func:`division_scores`) of the division network A trained on in each co-training epoch dumped so
    far: ``prob_EPOCH.npy`` stacks ``prob_A`` and ``prob_B``, and A trains on ``prob_B``, the GMM of B's losses."""
    clean = clean_pairs(np.load(noise_file), CAPTIONS_PER_IMAGE)
    count = len(list(run_dir.glob("prob_*.npy")))
    return [division_scores(np.load(run_dir / f"prob_{epoch}.npy")[1], clean) for epoch in range(count)]


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
        if axis.get_legend_handles_labels()[0]:
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


def device_name() -> str:
    """Where both programs train: the GPU both move themselves to when torch sees one, else the CPU."""
    import torch

    return machine("cuda" if torch.cuda.is_available() else "cpu")


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


OFFICIAL_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
torch.set_num_threads(1)
import co_train, model, run
if torch.cuda.is_available():  # the model moves itself to the GPU; ncr_peer.sh left the evaluation shards on the CPU
    forward_sim = model.SGRAF.forward_sim
    model.SGRAF.forward_sim = lambda self, im, ca, lens: forward_sim(self, im.cuda(), ca.cuda(), lens)
load_state_dict = model.SGRAF.load_state_dict
def load_weights_and_moments(self, state):  # peer_cotrain.py --start hfncl appends each network's Adam state
    load_state_dict(self, state[:3])
    if len(state) > 3:
        self.optimizer.load_state_dict(state[3])
model.SGRAF.load_state_dict = load_weights_and_moments
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


def program_args(args: argparse.Namespace, program: str, **changes: Any) -> argparse.Namespace:
    """``args`` with ``changes`` for one program's run, ``report_only`` unless it trains now (in ``--programs``)."""
    report_only = args.report_only or program not in args.programs
    return argparse.Namespace(**{**vars(args), **changes, "report_only": report_only})


def run_official(
    args: argparse.Namespace, peer: Path, seed: int, noise: Path, name: str = "official", extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The official run of ``seed`` in ``WORK/{name}_seed{seed}`` (reused when finished), and its curves; ``extra``:
    more flags of its ``run.py`` (``peer_cotrain.py``'s ``--warmup_model_path``)."""
    run_dir = args.work_dir / f"{name}_seed{seed}"
    done = run_dir / "curve.json"
    if done.is_file():  # a finished run's log curves; its divisions scored again from the dumped files
        return {**json.loads(done.read_text()), "division": official_divisions(run_dir, noise)}
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
        "--module_name", HEADS[args.head], "--log_step", "1", *extra,
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
        "similarity": args.head,
        "batch_size": 128,
        "learning_rate": 2e-4,
        "grad_clip": 2.0,
        "progress": False,
        "train_split": "train",
        "val_split": "dev",
        "test_split": "test",
        "test_folds": 1,
    } | ({"options": {**recipe_settings("ncr_f30k")["training"]["options"], **args.options}} if args.options else {})


def run_hfncl(
    args: argparse.Namespace, seed: int, noise: Path, name: str = "hfncl", settings: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """hfncl's run of ``seed`` in ``WORK/{name}_seed{seed}`` (reused when finished, continued from its checkpoint when
    stopped), and its curves; ``settings`` replace some of :func:`hfncl_config`'s."""
    run = RecipeRun(("ncr_f30k",), {**hfncl_config(args, seed, noise), **(settings or {})})
    os.environ.update(_environment())
    outcome = train(run, (args.work_dir / "data" / "f30k_precomp").resolve(), args.work_dir / f"{name}_seed{seed}",
                    resume=True, report_only=args.report_only)
    return None if outcome is None else hfncl_curve(outcome["results"])


OFFICIAL_NAMES = {
    "img_enc.fc": "image_encoder.fc", "txt_enc.embed": "text_encoder.embed", "txt_enc.cap_rnn": "text_encoder.rnn",
    "sim_enc.v_global_w.embedding_local.0": "head.image_pool.local_proj",
    "sim_enc.v_global_w.embedding_local.1": "head.image_pool.local_norm",
    "sim_enc.v_global_w.embedding_global.0": "head.image_pool.query_proj",
    "sim_enc.v_global_w.embedding_global.1": "head.image_pool.query_norm",
    "sim_enc.v_global_w.embedding_common.0": "head.image_pool.score",
    "sim_enc.t_global_w.embedding_local.0": "head.text_pool.local_proj",
    "sim_enc.t_global_w.embedding_global.0": "head.text_pool.query_proj",
    "sim_enc.t_global_w.embedding_common.0": "head.text_pool.score",
    "sim_enc.sim_tranloc_w": "head.local_sim.transform", "sim_enc.sim_tranglo_w": "head.global_sim.transform",
    "sim_enc.sim_eval_w": "head.output",
    "sim_enc.SAF_module.attn_sim_w": "head.attention", "sim_enc.SAF_module.bn": "head.norm",
}
"""The official SGRAF's layers (``img_enc`` / ``txt_enc`` / ``sim_enc`` prefixed) and hfncl's network layers they
correspond to; SGR step k's ``graph_query_w`` / ``graph_key_w`` / ``sim_graph_w`` are ``steps.k.query`` / ``key`` /
``update``; SAF's ``attn_sim_w`` / ``bn`` are ``attention`` / ``norm``."""


OFFICIAL_PARTS = ("img_enc", "txt_enc", "sim_enc")
"""The official ``SGRAF``'s three modules, in the order its checkpoints list their state dicts."""


def hfncl_state(parts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One hfncl network's state from the official modules' state dicts, keyed by :data:`OFFICIAL_PARTS`."""
    return {hfncl_name(f"{part}.{key}"): value for part, state in parts.items() for key, value in state.items()}


def hfncl_name(official: str) -> str:
    """hfncl's name (within one network) of the official SGRAF parameter or buffer ``official``."""
    if match := re.fullmatch(r"sim_enc\.SGR_module\.(\d+)\.(graph_query_w|graph_key_w|sim_graph_w)\.(\w+)", official):
        step, layer, field = match.groups()
        kind = {"graph_query_w": "query", "graph_key_w": "key", "sim_graph_w": "update"}[layer]
        return f"head.steps.{step}.{kind}.{field}"
    layer, _, field = official.rpartition(".")
    if layer not in OFFICIAL_NAMES:
        raise KeyError(f"no hfncl layer for the official {official}")
    return f"{OFFICIAL_NAMES[layer]}.{field}"


def init_spread(official: Any, hfncl: Any, draws: int = 5) -> list[float]:
    """The range over parameters of the standard deviation of hfncl's fresh initialisation over the official one's,
    each the mean ratio of ``draws`` fresh models of each (``official()`` an SGRAF, ``hfncl()`` one network); 1: the
    same initial distributions."""
    ratios: dict[str, list[float]] = {}
    for _ in range(draws):
        model, network = official(), hfncl()
        ours = network.state_dict()
        for part in OFFICIAL_PARTS:
            for name, value in getattr(model, part).state_dict().items():
                if value.numel() > 1 and float(value.float().std()) > 0:
                    mine = ours[hfncl_name(f"{part}.{name}")]
                    ratios.setdefault(f"{part}.{name}", []).append(float(mine.float().std() / value.float().std()))
    means = [float(np.mean(r)) for r in ratios.values()]
    return [min(means), max(means)]


def transplant_check(peer: Path, data: Path, vocab_file: Path, head: str = "sgr", seed: int = 0) -> dict[str, Any]:
    """The official SGRAF (256/64, ``head`` a key of :data:`HEADS`) and hfncl's network with the official weights
    copied in, on the first 128 training pairs of ``data``: the largest absolute difference of their similarity
    matrices in eval mode, and in training mode with dropout off (batch-norm statistics of the batch) of the warmup
    loss and, relative to the largest gradient entry, of every parameter's gradient. Equal up to float32 rounding
    means the two compute the same function and the same update from the same weights."""
    import torch

    from hfncl.equations.losses import triplet_sum_negatives
    from hfncl.models import NCLConfig, NCLModel

    sys.path.insert(0, str(peer))
    import data as peer_data  # the official NCR code, for measurement only
    import model as peer_model
    import vocab as peer_vocab

    torch.manual_seed(seed)
    vocabulary = peer_vocab.deserialize_vocab(str(vocab_file))
    captions, images = peer_data.get_dataset(str(data.parent), data.name, "train", vocabulary)
    regions, image_dim = images.shape[1:]
    tokens = [torch.tensor(c) for c in captions[:128]]
    lengths = torch.tensor([len(t) for t in tokens])
    text = torch.nn.utils.rnn.pad_sequence(tokens, batch_first=True)
    pixels = torch.from_numpy(np.asarray(images[np.arange(128) // CAPTIONS_PER_IMAGE]))
    options = argparse.Namespace(
        grad_clip=2.0, img_dim=image_dim, embed_size=256, vocab_size=len(vocabulary), word_dim=300, num_layers=1,
        bi_gru=True, no_imgnorm=False, no_txtnorm=False, sim_dim=64, module_name=HEADS[head], sgr_step=3, margin=0.2,
        learning_rate=2e-4,
    )
    official = peer_model.SGRAF(options)
    config = NCLConfig(image_dim=image_dim, embed_dim=256, word_dim=300, vocab_size=len(vocabulary),
                       similarity=head, sim_dim=64, num_networks=1, image_regions=regions)
    network = NCLModel(config).networks[0]
    parts = {part: getattr(official, part) for part in OFFICIAL_PARTS}
    network.load_state_dict(hfncl_state({part: m.state_dict() for part, m in parts.items()}), strict=True)
    modules = [*parts.values(), network]

    def similarities(train: bool) -> tuple[torch.Tensor, torch.Tensor]:
        for module in modules:
            module.train(train)
        ours = network.similarity(network.encode_image(pixels), network.encode_text(text, lengths))
        theirs = official.forward_sim(*official.forward_emb(pixels, text, lengths.tolist()))
        return ours, theirs

    with torch.no_grad():
        ours, theirs = similarities(False)
    result = {"eval_similarity": float((ours - theirs).abs().max())}
    for module in modules:
        for layer in module.modules():
            if isinstance(layer, torch.nn.Dropout):
                layer.p = 0.0
    ours, theirs = similarities(True)
    loss = triplet_sum_negatives(ours, 0.2).sum() / ours.size(0)  # the official warmup loss: per-pair means, summed
    official_loss = official.criterion(theirs, mode="warmup")
    (loss + official_loss).backward()
    named = {f"{part}.{k}": p for part, m in parts.items() for k, p in m.named_parameters()}
    ours_named = dict(network.named_parameters())
    scale = max(float(p.grad.abs().max()) for p in named.values() if p.grad is not None)
    differences = []
    for name, parameter in named.items():
        mine = ours_named[hfncl_name(name)].grad  # None: a parameter the loss does not reach (SGR's key bias)
        theirs_grad = torch.zeros_like(parameter) if parameter.grad is None else parameter.grad
        differences.append(float((theirs_grad - (torch.zeros_like(parameter) if mine is None else mine)).abs().max()))
    gradient = max(differences) / scale
    result.update(train_similarity=float((ours - theirs).abs().max()), warmup_loss=float(loss.detach()),
                  init_spread=init_spread(lambda: peer_model.SGRAF(options), lambda: NCLModel(config).networks[0]),
                  official_warmup_loss=float(official_loss.detach()), gradient=gradient)
    return result


def parse_args(
    argv: list[str] | None,
    description: str | None = __doc__,
    more: Callable[[argparse.ArgumentParser], object] | None = None,
) -> argparse.Namespace:
    """The arguments this script and (``description``) ``peer_cotrain.py`` share, and (``more``) each one's own: this
    script's :func:`transplant_choice`, ``peer_cotrain.py``'s ``--start``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    if more is not None:
        more(parser)
    parser.add_argument("--peer-dir", type=Path, required=True, help="NCR/ of ncr_peer.sh (4 captions).")
    parser.add_argument("--proxy-dir", type=Path, required=True,
                        help="A precomp real-text proxy ({split}_ims.npy, {split}_caps.txt, train_vocab.json).")
    parser.add_argument("--images", type=int, default=320, help="Training images (the first ones), 4 captions each.")
    parser.add_argument("--dev-images", type=int, default=200)
    parser.add_argument("--test-images", type=int, default=200)
    parser.add_argument("--warmup-epochs", type=int, default=3)
    parser.add_argument("--cotrain-epochs", type=int, default=2)
    parser.add_argument("--noise-ratio", type=float, default=0.2)
    parser.add_argument("--head", choices=HEADS, default="sgr", help="The similarity head both programs train.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--programs", nargs="+", choices=PROGRAMS, default=list(PROGRAMS),
                        help="Which programs to train now (the report tables both from what exists).")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/peer_parity"))
    parser.add_argument("--output-dir", type=Path, default=Path("runs/peer_parity"))
    parser.add_argument("--report-only", action="store_true", help="Train nothing: table and plot what exists.")
    parser.add_argument("--options", type=json.loads, default={},
                        help="NCR options (JSON) over the recipe's for hfncl's runs, e.g. the authors' readings.")
    args = parser.parse_args(argv)
    if not (args.peer_dir / "co_train.py").is_file():
        parser.error(f"--peer-dir {args.peer_dir}: no co_train.py there; prepare it with ../shared/tools/ncr_peer.sh")
    if args.images < 1 or args.warmup_epochs < 1 or args.cotrain_epochs < 1:
        parser.error("--images, --warmup-epochs and --cotrain-epochs must be >= 1")
    return args


def transplant_choice(parser: argparse.ArgumentParser) -> None:
    """This script's own argument: ``--transplant-check``."""
    parser.add_argument("--transplant-check", action="store_true",
                        help="Also compare both programs from the same weights (transplant_check; seconds).")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__, transplant_choice)
    data = prepare_data(args)
    regions, args.image_dim = np.load(data / "train_ims.npy", mmap_mode="r").shape[1:]
    peer = prepare_peer(args, regions)
    transplant = args.work_dir / "transplant.json"
    if args.transplant_check:
        vocab = args.work_dir / "vocab" / "f30k_precomp_vocab.json"
        transplant.write_text(json.dumps(transplant_check(peer.resolve(), data, vocab, args.head)))
    curves: dict[str, list[dict[str, Any]]] = {program: [] for program in PROGRAMS}
    reached = []
    for seed in args.seeds:
        noise = noise_file(args, peer, seed)
        runs = {"official": run_official(program_args(args, "official"), peer, seed, noise),
                "hfncl": run_hfncl(program_args(args, "hfncl"), seed, noise)}
        if all(runs[p] is not None and runs[p]["val_rsum"] for p in PROGRAMS):
            reached.append(seed)
            for program in PROGRAMS:
                curves[program].append(runs[program])
    header = (
        f"NCR-{HEADS[args.head]}, official code vs recipes/ncr_f30k.py ({device_name()}, 1 thread each): the first "
        f"{args.images} training images x {CAPTIONS_PER_IMAGE} captions of the real-text proxy, "
        f"{args.noise_ratio:.0%} noise from the official code's noise file, 256/64, batch 128, lr 2e-4, clip 2, "
        f"{args.warmup_epochs} warmup + {args.cotrain_epochs} co-training epochs; validation on {args.dev_images} dev "
        f"images, test on {args.test_images}; seeds {reached} (mean ± spread over them)."
        + (f" hfncl's options: {json.dumps(args.options)}." if args.options else "")
    )
    if transplant.is_file():
        check = json.loads(transplant.read_text())
        header += (
            " From the same weights (the official model's copied into hfncl's network, the first 128 training pairs): "
            f"similarities differ by at most {check['eval_similarity']:.1e} in eval mode and "
            f"{check['train_similarity']:.1e} in training mode without dropout, the warmup loss is "
            f"{check['warmup_loss']:.4f} against the official {check['official_warmup_loss']:.4f}, and the gradients "
            f"differ by at most {check['gradient']:.1e} of the largest gradient entry; each parameter's initial "
            f"standard deviation is {check['init_spread'][0]:.2f}-{check['init_spread'][1]:.2f} times the official one "
            "(the mean of 5 fresh models each)."
        )
    report = header + "\n\n" + table(curves, args.warmup_epochs, args.cotrain_epochs) + "\n"
    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_report(args.output_dir / "peer_parity.md", report)
    (args.output_dir / "peer_parity.json").write_text(json.dumps({"seeds": reached, "curves": curves}, indent=1))
    plot(curves, reached, args.warmup_epochs, args.output_dir / "peer_parity.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
