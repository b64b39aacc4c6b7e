"""How well ``hfncl audit`` finds the wrong pairs, against the cosine-score filter users apply today.

    python benchmarks/audit.py --plugins ncr                         # generated benchmark, 0 / 20 / 50 / 70% noise
    python benchmarks/audit.py --benchmark proxy --ratios 0.5        # real-text proxy (hours a ratio, loaded core)
    python benchmarks/audit.py --quick                               # both, tiny: checks the script
    python benchmarks/audit.py --benchmark proxy --ratios 0.5 --refit vsepp   # the audit refit by VSE++

Each run writes the training captions of a benchmark re-paired for a share of them (the NCR protocol, caption
level, into the file as a user's data would hold them; the images untouched) and audits the copy:

- **audit**: ``hfncl audit``'s default method (the installed plugin declaring ``audit_settings``; ``--plugins``
  another) trained on the copy with its audit settings (``--settings``: TrainConfig fields over them, as
  ``accuracy.py``'s) and the demo's model; the flagged set is the round(pi^ M) pairs of highest rank
  p-value, pi^ Storey's estimate (:mod:`hfncl.audit.calibration`);
- **cosine (vsepp)**: the baseline, VSE++'s plain triplet loss trained on all pairs with its demo settings and the
  same model; pairs ranked by the model's score of the pair, lowest first. Its noise rate is the weight of the
  low-mean component of a two-component Gaussian mixture on the scores (what a user thresholding a score would
  fit); its flagged set is that many lowest scores;
- **calibrated (vsepp)**: the audit's p-values and estimate on the baseline's model (the calibration without the
  noise-robust method);
- **audit, K folds** (``--folds K``): the audit cross-fitted (:mod:`hfncl.audit.cross_fitting`): each pair's
  p-values from the method trained without its image's fold, the estimate at the held-out lambda; its training
  seconds are the K fold trainings'.
- **audit, refit (P)** (``--refit P``): the audit refit (:mod:`hfncl.audit.refit`): plugins P trained with their own
  settings (``--refit-settings`` over them) on the pairs the audited model keeps, one image per pair, score every
  pair; the estimate at the held-out lambda; its training seconds are the refit's. Saved as the run's
  ``refit_P.json`` (``--resume`` reuses it) and ``refit_P_p_values.npz``.

``--no-baselines`` leaves out the two VSE++ rows. With ``--oracle-dir`` (``accuracy.py``'s output folder of the
same proxy), each oracle model trained there on exactly the right pairs of the same ratio and seed
(``oracle_noise<R>_seed<S>``: VSE++; ``oracle_(M)_noise<R>_seed<S>``: method M's own) scores the same noisy pairs
as ``hfncl audit --model`` would: **oracle (M)**, what a model that knew the wrong pairs and never trained on them
flags. The script checks that the oracle's clean pairs are exactly the copy's right ones.

Per row: the true and estimated noise rate and its error (points), precision and recall of the flagged set,
precision of the first k ranks (k = the true number of wrong pairs, and 100 / 1000), ROC-AUC of the ranking, and
seconds of training and of scoring (the table with a trained model: encoding, p-values, re-pairings, per 10K
pairs). Writes ``audit_<benchmark>.md`` and each run's ``rows.json`` (``--resume`` reuses them) with the p-values
of both models (``audit_p_values.npz``, ``baseline_p_values.npz``, beside the hidden mask) and the audited model
(``model/``, which ``hfncl audit --model`` reads) to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import DEFAULT_CAPTIONS, machine, proxy_sources, quiet, write_report
from oracle import clean_caption_mask
from sklearn.metrics import roc_auc_score
from sklearn.mixture import GaussianMixture

from hfncl.audit.calibration import storey_noise_rate, suspicion_order
from hfncl.audit.cross_fitting import held_out_p_values, image_folds
from hfncl.audit.data import AuditData
from hfncl.audit.refit import refit_p_values
from hfncl.audit.report import estimated_noise_rate
from hfncl.audit.scoring import PairScores
from hfncl.audit.table import Rescored, fold_p_values, model_verdicts, pair_table, split_p_values, trained_scores
from hfncl.audit.training import (
    MODEL_FOLDER,
    TrainedMethod,
    audit_settings,
    default_plugins,
    load_trained,
    method_settings,
    read_split,
    save_trained,
    train_method,
    train_model,
    train_scorer,
)
from hfncl.config import TrainConfig
from hfncl.data import caption_level_noise, read_captions
from hfncl.data.proxy import ProxyConfig, build_caption_proxy
from hfncl.data.synthetic import SyntheticConfig, generate_precomp
from hfncl.demo import DEMO_SIZES, shortened_settings
from hfncl.integrity import atomic_write_text
from hfncl.plugins import build_plugin_manager
from hfncl.retrieval import Retriever
from hfncl.tasks.pairs import DEMO_MODEL, ModelArguments

GENERATED = DEMO_SIZES["small"]
QUICK_GENERATED = SyntheticConfig(num_train=80, num_dev=20, num_test=40, num_concepts=16, feature_dim=16)
QUICK_PROXY = ProxyConfig(num_test=50, num_dev=30, max_images=200)
QUICK_MODEL = ModelArguments(embed_dim=32, word_dim=16)
QUICK_EPOCHS = 3
BASELINE = "vsepp"
TOP_K = (100, 1000)


def prepare(name: str, args: argparse.Namespace, output_dir: Path) -> Path | None:
    """The benchmark's precomp directory (built when not given), or ``None`` with a message when it cannot be."""
    if name == "generated":
        return generate_precomp(output_dir / "data_generated", QUICK_GENERATED if args.quick else GENERATED)
    if args.proxy_dir:
        return Path(args.proxy_dir)
    sources = proxy_sources(args.captions_file)
    if isinstance(sources, str):
        print(f"proxy skipped: {sources}")
        return None
    captions, encoder = sources
    config = QUICK_PROXY if args.quick else ProxyConfig()
    return build_caption_proxy(captions, output_dir / "data_proxy", encoder, config)


def noisy_lines(images: int, k: int, ratio: float, seed: int) -> np.ndarray:
    """Line c of the noisy copy holds caption ``noisy_lines(...)[c]`` of the original split (the NCR protocol's
    caption-level index at ``ratio`` and ``seed``, inverted)."""
    return np.argsort(caption_level_noise(images, k, ratio, seed), kind="stable")


def noisy_copy(data_dir: Path, target: Path, ratio: float, seed: int) -> np.ndarray:
    """Write the training split of ``data_dir`` to ``target`` with ``ratio`` of its captions re-paired (the images
    linked, the caption lines permuted so that line c holds a caption of image c // k or, for a wrong pair, of
    another); return the mask of the wrong lines."""
    captions = list(read_captions(data_dir / "train_caps.txt"))
    images = np.load(data_dir / "train_ims.npy", mmap_mode="r").shape[0]
    k = len(captions) // images
    lines = noisy_lines(images, k, ratio, seed)
    target.mkdir(parents=True, exist_ok=True)
    link = target / "train_ims.npy"
    if not link.exists():
        link.symlink_to((data_dir / "train_ims.npy").resolve())
    (target / "train_caps.txt").write_text("".join(captions[c] + "\n" for c in lines), encoding="utf-8")
    return lines // k != np.arange(len(lines)) // k


def scores(flagged_count: int, order: np.ndarray, wrong: np.ndarray, suspicion: np.ndarray) -> dict[str, Any]:
    """Precision and recall of the first ``flagged_count`` of ``order``, precision at k, ROC-AUC of ``suspicion``."""
    flagged = np.zeros(len(order), dtype=bool)
    flagged[order[:flagged_count]] = True
    true_count = int(wrong.sum())
    row: dict[str, Any] = {
        "flagged": int(flagged_count),
        "precision": float(wrong[flagged].mean()) if flagged_count else None,
        "recall": float(flagged[wrong].mean()) if true_count else None,
        "precision_at_true": float(wrong[order[:true_count]].mean()) if true_count else None,
        "auc": float(roc_auc_score(wrong, suspicion)) if 0 < true_count < len(wrong) else None,
    }
    row.update({f"precision_at_{k}": float(wrong[order[:k]].mean()) for k in TOP_K if k <= len(order)})
    return row


def cross_fitted_row(
    trained: TrainedMethod, pair_scores: PairScores, config: TrainConfig, model: ModelArguments, folds: int, seed: int,
    wrong: np.ndarray, run_dir: Path,
) -> dict[str, Any]:
    """The audit's row with ``folds``-fold cross-fitted p-values (:func:`hfncl.audit.cross_fitting.held_out_p_values`),
    the model trained on all pairs (its ``pair_scores`` of the split, already made for the audit's row) kept for the
    rest of the table; saves the p-values beside the hidden mask."""
    started = time.perf_counter()
    parts = image_folds(trained.data.split.num_images, folds, seed)
    held_out, _ = held_out_p_values(
        trained.data, parts, lambda part, _: train_method(part, config, model), fold_p_values
    )
    training = time.perf_counter() - started
    table = pair_table(trained, pair_scores, Rescored.cross_fitted(held_out))
    rank = np.asarray(table["rank"])
    np.savez_compressed(run_dir / f"cross_fitted_{folds}_p_values.npz", p_image=held_out.image,
                        p_caption=held_out.caption, wrong=wrong)
    return {"row": f"audit ({'+'.join(config.plugins)}, {folds} folds)", "estimate": estimated_noise_rate(table).rate,
            "train_s": training, "score_s_per_10k": None,
            **scores(int(np.count_nonzero(table["flagged"])), np.argsort(rank), wrong, -rank.astype(float))}


def refit_row(
    run_dir: Path, wrong: np.ndarray, model: ModelArguments, audited: list[str], plugins: list[str], epochs: int | None,
    seed: int, settings: dict[str, Any] | None = None, resume: bool = False,
) -> dict[str, Any]:
    """The audit's row with its p-values from a refit (:mod:`hfncl.audit.refit`): ``plugins`` trained with their own
    settings (cut to ``epochs``, under ``settings``) on the pairs that the audited model saved in the run
    (``run_dir/model``) keeps, scoring every pair as ``hfncl audit --refit`` does; checkpoints in the run's
    ``training/``, continued with ``resume``. Saves the p-values beside the hidden mask."""
    trained = load_trained(run_dir / MODEL_FOLDER, run_dir / "data", "train")
    pair_scores = trained_scores(trained)
    flagged = model_verdicts(pair_scores.p_values)["flagged"]
    config = method_settings(plugins, epochs, seed, False, settings)
    name = "+".join(plugins)
    started = time.perf_counter()
    rescored = refit_p_values(
        trained, flagged, lambda kept: train_scorer(kept, config, model, run_dir / "training" / f"refit_{name}", resume,
                                                    trained.data.split.captions),
    )
    training = time.perf_counter() - started
    table = pair_table(trained, pair_scores, rescored)
    rank = np.asarray(table["rank"])
    np.savez_compressed(run_dir / f"refit_{name}_p_values.npz", p_image=table["p_image"], p_caption=table["p_caption"],
                        first_flagged=flagged, wrong=wrong)
    return {"row": f"audit ({'+'.join(audited)}), refit ({name})", "estimate": estimated_noise_rate(table).rate,
            "train_s": training, "score_s_per_10k": None,
            **scores(int(np.count_nonzero(table["flagged"])), np.argsort(rank), wrong, -rank.astype(float))}


def audit_rows(
    data: Path, wrong: np.ndarray, model: ModelArguments, epochs: int | None, seed: int, folds: int, baselines: bool,
    plugins: list[str], training: dict[str, Any] | None = None, resume: bool = False,
) -> list[dict]:
    """The audit's row (``plugins`` trained with their audit settings under ``training``), its cross-fitted row
    (``folds`` > 1) and the two baseline rows on the noisy copy ``data``; the audit's and the baseline's checkpoints
    in the run's ``training/``, continued with ``resume`` (the seconds of training then count the resumed part)."""
    audited = read_split(data, "train", model, plugins)
    config = audit_settings(plugins, epochs, seed, False, training)
    started = time.perf_counter()
    trained = train_method(audited, config, model, data.parent / "training" / "audit", resume)
    training = time.perf_counter() - started
    save_trained(trained, data.parent / MODEL_FOLDER)
    started = time.perf_counter()
    pair_scores = trained_scores(trained)
    table = pair_table(trained, pair_scores)
    scoring = time.perf_counter() - started
    rank = np.asarray(table["rank"])
    order = np.argsort(rank)
    np.savez_compressed(data.parent / "audit_p_values.npz", p_image=table["p_image"], p_caption=table["p_caption"],
                        clean_prob=table["clean_prob"], wrong=wrong)
    rate = estimated_noise_rate(table).rate
    audit = {"row": f"audit ({'+'.join(plugins)})", "estimate": rate, "train_s": training,
             "score_s_per_10k": scoring / len(rank) * 1e4,
             **scores(int(np.count_nonzero(table["flagged"])), order, wrong, -rank.astype(float))}
    rows = [audit]
    if folds > 1:
        rows.append(cross_fitted_row(trained, pair_scores, config, model, folds, seed, wrong, data.parent))
    if baselines:
        rows += baseline_rows(data, audited, wrong, model, epochs, seed, resume)
    return rows


def baseline_rows(
    data: Path, audited: AuditData, wrong: np.ndarray, model: ModelArguments, epochs: int | None, seed: int,
    resume: bool = False,
) -> list[dict]:
    """The cosine filter's row and the calibration's on the same model (VSE++ trained on all pairs of ``data``)."""
    started = time.perf_counter()
    settings = build_plugin_manager([BASELINE]).hook.demo_settings()
    settings = shortened_settings(settings, epochs) if epochs else settings
    config = TrainConfig(plugins=[BASELINE], seed=seed, progress=False, plot_divisions=False, **settings)
    baseline_trainer, vocab = train_model(audited, config, model, training_dir=data.parent / "training" / BASELINE,
                                          resume=resume)
    training = time.perf_counter() - started
    started = time.perf_counter()
    retriever = Retriever(baseline_trainer.model, vocab, device=baseline_trainer.accelerator.device)
    p_values = split_p_values(retriever, audited.split)
    scoring = time.perf_counter() - started
    similarity = (p_values.similarity_i2t + p_values.similarity_t2i) / 2
    np.savez_compressed(data.parent / "baseline_p_values.npz", p_image=p_values.image, p_caption=p_values.caption,
                        similarity=similarity, wrong=wrong)
    order = np.argsort(similarity, kind="stable")
    mixture = GaussianMixture(2, random_state=seed).fit(similarity.reshape(-1, 1))
    gmm_rate = float(mixture.weights_[np.argmin(mixture.means_.ravel())])
    cosine = {"row": f"cosine ({BASELINE})", "estimate": gmm_rate, "train_s": training,
              "score_s_per_10k": scoring / len(order) * 1e4,
              **scores(round(gmm_rate * len(order)), order, wrong, -similarity)}
    rate = storey_noise_rate(p_values.image, p_values.caption)
    order = suspicion_order(p_values.image, p_values.caption, similarity)
    suspicion = np.empty(len(order))
    suspicion[order] = -np.arange(len(order), dtype=float)
    calibrated = {"row": f"calibrated ({BASELINE})", "estimate": rate, "train_s": training,
                  "score_s_per_10k": scoring / len(order) * 1e4,
                  **scores(round(rate * len(order)), order, wrong, suspicion)}
    return [cosine, calibrated]


def oracle_rows(oracle_dir: Path, data_dir: Path, copy: Path, ratio: float, seed: int, wrong: np.ndarray) -> list[dict]:
    """The rows of the oracles of ``oracle_dir`` at ``ratio`` and ``seed`` (their ``best/`` models, trained on
    exactly the right pairs of the original ``data_dir``) scoring the noisy ``copy`` with hfncl audit's p-values.

    Raises:
        ValueError: an oracle's clean pairs would not be exactly the copy's right ones (another data or split size).
    """
    clean = clean_caption_mask(data_dir, ratio, seed)
    images = np.load(data_dir / "train_ims.npy", mmap_mode="r").shape[0]
    if not np.array_equal(~clean[noisy_lines(images, len(clean) // images, ratio, seed)], wrong):
        raise ValueError(f"the oracles of {data_dir} at {ratio:.0%}, seed {seed}, trained on other pairs than {copy}")
    rows = []
    for best in sorted(oracle_dir.glob(f"oracle*_noise{round(ratio * 100)}_seed{seed}/best")):
        method = re.fullmatch(r"oracle_\((.+)\)_noise.*", best.parent.name)
        trained = load_trained(best, copy, "train")
        started = time.perf_counter()
        table = pair_table(trained, trained_scores(trained))
        scoring = time.perf_counter() - started
        rank = np.asarray(table["rank"])
        rows.append({"row": f"oracle ({method[1] if method else BASELINE})",
                     "estimate": estimated_noise_rate(table).rate, "train_s": None,
                     "score_s_per_10k": scoring / len(rank) * 1e4,
                     **scores(int(np.count_nonzero(table["flagged"])), np.argsort(rank), wrong, -rank.astype(float))})
    return rows


def labelled(rows: list[dict], benchmark: str, wrong: np.ndarray, seed: int) -> list[dict]:
    """``rows`` of one run with its benchmark, true noise rate and seed."""
    return [{**r, "benchmark": benchmark, "true_rate": float(wrong.mean()), "seed": seed} for r in rows]


def cell(value: Any, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:.1%}" if percent else f"{value:.3f}"


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    lines = [header, "",
             "| benchmark | noise | row | estimated rate | error (points) | precision | recall | P@true | P@100 | "
             "P@1000 | AUC | train (s) | scoring (s / 10K pairs) |",
             "|" + "---|" * 13]
    for r in rows:
        error = None if r["estimate"] is None else abs(r["estimate"] - r["true_rate"]) * 100
        seconds = "-" if r["score_s_per_10k"] is None else f"{r['score_s_per_10k']:.1f}"
        training = "-" if r["train_s"] is None else f"{r['train_s']:.0f}"
        lines.append(
            f"| {r['benchmark']} | {r['true_rate']:.1%} | {r['row']} | {cell(r['estimate'], True)} | "
            f"{'-' if error is None else f'{error:.1f}'} | {cell(r['precision'])} | {cell(r['recall'])} | "
            f"{cell(r['precision_at_true'])} | {cell(r.get('precision_at_100'))} | "
            f"{cell(r.get('precision_at_1000'))} | "
            f"{cell(r['auc'])} | {training} | {seconds} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", nargs="+", choices=("generated", "proxy"), default=None,
                        help="Default: generated (with --quick: both).")
    parser.add_argument("--ratios", nargs="+", type=float, default=[0.0, 0.2, 0.5, 0.7])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--captions-file", default=str(DEFAULT_CAPTIONS), help="Flickr8k captions.txt for the proxy.")
    parser.add_argument("--proxy-dir", help="A built proxy (precomp) to use instead of building one.")
    parser.add_argument("--output-dir", default="runs/audit_benchmark")
    parser.add_argument("--resume", action="store_true",
                        help="Reuse finished runs' rows; continue a killed run's trainings from their checkpoints.")
    parser.add_argument("--quick", action="store_true", help="Tiny data, model and epochs: checks the script.")
    parser.add_argument("--folds", type=int, default=1, help="Also the audit cross-fitted with K folds (K > 1).")
    parser.add_argument("--no-baselines", action="store_true", help="Leave out the VSE++ rows.")
    parser.add_argument("--oracle-dir", help="accuracy.py's output folder of the same proxy: add its oracles' rows.")
    parser.add_argument("--plugins", nargs="+", help="The audited method (default: hfncl audit's).")
    parser.add_argument("--refit", nargs="+", metavar="PLUGIN",
                        help="Also the audit refit with these plugins on the pairs its model keeps (a row each run).")
    parser.add_argument("--refit-settings", type=json.loads, default=None,
                        help="JSON of TrainConfig fields over the refit's own settings, e.g. '{\"epochs\": 20}'.")
    parser.add_argument("--settings", type=json.loads, default=None,
                        help="JSON of TrainConfig fields over the audited method's settings, e.g. '{\"epochs\": 20}'.")
    args = parser.parse_args(argv)
    args.benchmark = args.benchmark or (["generated", "proxy"] if args.quick else ["generated"])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    output_dir = Path(args.output_dir)
    model = QUICK_MODEL if args.quick else DEMO_MODEL
    epochs = QUICK_EPOCHS if args.quick else None
    plugins = args.plugins or default_plugins()
    for name in args.benchmark:
        data = prepare(name, args, output_dir)
        if data is None:
            continue
        rows = []
        for ratio in args.ratios:
            for seed in args.seeds:
                run_dir = output_dir / f"{name}_noise{round(ratio * 100)}_seed{seed}"
                saved = run_dir / "rows.json"
                wrong = noisy_copy(data, run_dir / "data", ratio, seed)
                if args.resume and saved.is_file():
                    rows += json.loads(saved.read_text())
                else:
                    found = audit_rows(run_dir / "data", wrong, model, epochs, seed, args.folds,
                                       not args.no_baselines, plugins, args.settings, args.resume)
                    found = labelled(found, name, wrong, seed)
                    atomic_write_text(saved, json.dumps(found, indent=1))
                    print(markdown(found, f"{name} at {ratio:.0%}, seed {seed}"), flush=True)
                    rows += found
                if args.refit:
                    refit_saved = run_dir / f"refit_{'+'.join(args.refit)}.json"
                    if args.resume and refit_saved.is_file():
                        found = json.loads(refit_saved.read_text())
                    else:
                        found = labelled([refit_row(run_dir, wrong, model, plugins, args.refit, epochs, seed,
                                                    args.refit_settings, args.resume)], name, wrong, seed)
                        atomic_write_text(refit_saved, json.dumps(found, indent=1))
                        print(markdown(found, f"{name} at {ratio:.0%}, seed {seed}, refit"), flush=True)
                    rows += found
                if args.oracle_dir:
                    found = oracle_rows(Path(args.oracle_dir), data, run_dir / "data", ratio, seed, wrong)
                    rows += labelled(found, name, wrong, seed)
        command = f"python benchmarks/audit.py {' '.join(sys.argv[1:])}"
        header = f"{machine()}, torch threads {torch.get_num_threads()}; `{command}`"
        write_report(output_dir / f"audit_{name}.md", markdown(rows, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
