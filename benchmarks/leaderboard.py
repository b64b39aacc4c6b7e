"""The field's leaderboard: every installed image-caption method under NCR's and DECL's noise protocols.

    python benchmarks/leaderboard.py --batch-size 32                  # generated benchmark, seeds 0-2
    python benchmarks/leaderboard.py --benchmark proxy --seeds 0      # the real-text proxy (Flickr8k, 1000 images)
    python benchmarks/leaderboard.py --benchmark generated proxy --proxy-seeds 0   # both; the proxy at seed 0 only
    python benchmarks/leaderboard.py --jobs 4                         # 4 runs at once (one per GPU where several)
    python benchmarks/leaderboard.py --sgraf ncr vsepp                # also SGR and SAF models, averaged ("SGRAF")
    python benchmarks/leaderboard.py --quick                          # checks the script in about a minute
    python benchmarks/leaderboard.py --benchmark clip --seeds 0       # the CLIP track (benchmarks/clip_track.py)

Methods: every installed plugin (entry-point group ``hfncl``, built-in or third-party) that
learns from image-caption pairs and declares ``demo_settings``, or those named with
``--methods`` (:func:`common.method_runs`, the selection of ``accuracy.py``). Noise: each
protocol at its ratios, a seed seeding the noise and the training:

- ``ncr-caption`` (``--ncr-ratios``, default 20 / 50%): NCR's caption-level re-pairing;
- ``decl-image`` (``--decl-ratios``, default 40 / 80%): DECL's image-level permutation, all
  captions of a picked image moved together (:mod:`hfncl.data.noise`).

Benchmarks: ``generated`` (:mod:`hfncl.data.synthetic`, ``--size``, default tiny: 200 training
images x 5 captions, 50 dev, 100 test; the demo's model, ``--model`` changes it; ``--batch-size
32`` gives its 1000 pairs 31 steps an epoch: VSE++ at 50% noise stayed at chance with the demo's
128 and a 64-d joint space, test rSum 74.0 after 12 epochs, and reached 161.6 with 32 and the
demo's 256-d model; the two changes were not measured apart) and
``proxy`` (Flickr8k captions through MiniLM, ``accuracy.py``'s proxy with
``--proxy-train-images`` training images, default 1000; skipped with a message when the file
or the encoder package is absent); ``clip``: the CLIP track (``clip_track.py``: both towers of a CLIP fine-tuned on
generated pictures, an InfoNCE baseline without noise handling; alone, it writes ``benchmarks/leaderboard_clip``).

Schedule: a method trains its demo settings under the converged oracle's rule of
``accuracy.py`` (:func:`accuracy.converged_settings`, ``--schedule plateau``): at its learning
rate for at least its demo epochs and until the validation rSum has not improved for ``--patience``
epochs, then at a tenth of it until it has not again (``lr_decay_patience``; at most 60 epochs past
the demo's), so that a method converges whatever its learning rate (on the generated benchmark,
NCR at 20% tests at 324.0 after its demo epochs at 2e-4, 434.6 at the plateau with patience 2 and
465.0 with 3, the default: the 50 dev images' rSum moves too much from epoch to epoch for 2). ``--schedule
fixed``: the demo epochs, then a tenth for at most 10 more. The best-validation checkpoint is
tested. The **oracle**
(``--oracle-method``, VSE++'s triplet) trains the same way on exactly the clean pairs, for
at least as many optimiser steps as any method at that ratio and seed; a method's share is
its test rSum over its oracle's, per seed, then averaged. A method trained by another rule
than the oracle method (optimiser, learning rate, weight decay, decay factor or the model
fields its plugin asks for, :func:`training_rule`: TcVSE's AdamW at 5e-4 and max pooling,
DECL's 5e-4, UGNCL's two image views) has an oracle of its own, ``oracle (M)``: the method
itself on exactly the clean pairs under the same converged rule (``--own-oracles M``: also for a
method of the oracle's rule, e.g. a loss that learns better than the triplet; ``all``: every
method); the table names each row's oracle. Where a method falls below VSE++, the notes point to
its ``docs/methods`` page's section "On the leaderboard", where the cause is measured at the cells
the section names (e.g. ``"`decl-image` 40%"``); so do they where two methods' measured order
inverts a paper's own comparison table at that protocol and ratio (``papers_comparisons.yaml``).
With two seeds or more, a place that the seeds do not resolve (a paired t-test over the seeds both
ran, two-sided p >= 0.05, :func:`seed_spread`) is noted as within the seed spread, with the
difference and its sd: no order is measured there to explain.

Evaluation modes, named in every row: the model as its method ranks (``one network``, the
``mean of K networks`` of a co-trained method, or the plugin's own ``inference_similarity``);
for a co-trained method also ``network A`` alone (its own similarity); with ``--sgraf``, the
method trained twice, with the SGR and with the SAF similarity head, and the two models'
similarities averaged (``SGRAF``).

Resumable run by run: each run leaves ``row.json`` under
``--output-dir/<benchmark>/<protocol>/`` and is reused; a run killed part way continues from
its latest checkpoint; runs of methods installed later train when the script is run again. A
run whose ``run_config.yaml`` differs from the plan in a training field (its method's settings
changed since, or an oracle's step floor grew), or whose saved model differs from a model field its plugin
asks for now (``model_defaults``), trains again from the start; ``--report-only``
shows it and names it in the notes.
``--jobs N`` trains N runs at once, each in its own process (one GPU each where there are
several; ``--threads`` CPU threads each, default 1). Writes ``--report`` ``.md`` (measured table,
then the papers' reported numbers from ``docs/reproduction.md``, never mixed), ``.png``
(rSum against noise ratio per method, a panel per protocol) and ``.json``; prints the cost
(runs per core-hour, wall time).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import multiprocessing
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import clip_track
import torch
from accuracy import (
    ORACLE,
    PROXY,
    Job,
    bounded_job,
    commit,
    converged_settings,
    is_reference,
    jobs,
    oracle_row,
    plateau_rule,
    prepare_benchmark,
    split_pairs,
)
from common import DEFAULT_CAPTIONS, machine, mean_spread, method_runs, pyplot, quiet, write_report
from leaderboard_notes import cost_line, notes, oracle_of, oracle_rsums, share_of_oracle
from leaderboard_runs import (
    HEADS,
    NETWORK_A,
    ONE_NETWORK,
    PROTOCOL_KINDS,
    SGRAF,
    Run,
    asked_model_fields,
    cells_in_turn,
    declared_options,
    head_row,
    mode_rows,
    protocol_ratios,
    train_run,
    with_options,
    worker_setup,
)
from reproduce import DOC, REPO, paper_numbers

from hfncl.data.noise import protocol_names
from hfncl.demo import DEMO_SIZES, DemoRun, demo_train_config
from hfncl.plots import save_png

DEFAULT_RATIOS = {"ncr-caption": [0.2, 0.5], "decl-image": [0.4, 0.8]}
REPORTED_DATASETS = {"f30k": "Flickr30K", "coco": "MS-COCO 1K", "cc152k": "CC152K"}
RULE_FIELDS = ("optimizer", "learning_rate", "weight_decay", "lr_decay_factor")


# --- planning -------------------------------------------------------------------------------------------------------


def protocol_args(args: argparse.Namespace, protocol: str, own: list[str] | None = None) -> argparse.Namespace:
    """``args`` as ``accuracy.jobs`` reads them for one protocol: its ratios, no half-data control, and an oracle of
    their own for the methods ``own``."""
    ratios = protocol_ratios(args)[protocol]
    oracles = args.oracle_method + [method for method in own or [] if method not in args.oracle_method]
    return argparse.Namespace(**{**vars(args), "ratios": ratios, "no_half_data": True, "references_only": False,
                                 "oracle_method": oracles})


def training_rule(run: DemoRun) -> dict[str, Any]:
    """What of a run's training the oracle's convergence schedule leaves as it is: the optimiser, learning rate,
    weight decay and decay factor of its demo configuration, and the model fields its plugin asks for
    (``model_defaults``) that the leaderboard's model reads (Co-teaching's fresh heads for pretrained towers do not
    change a model of region features and a biGRU). Its epochs, warmup and decay epochs are not part of it: the
    converged rule sets the oracle's (at least as many optimiser steps as any method's, then until the validation
    rSum stalls)."""
    from hfncl.models import NCLConfig

    config = demo_train_config(run, Path(), 0, False)
    asked = asked_model_fields([run.plugin])
    unused = NCLConfig(**asked).unused_fields()
    return {**{field: getattr(config, field) for field in RULE_FIELDS},
            **{field: value for field, value in asked.items() if field not in unused}}


def own_oracles(args: argparse.Namespace) -> dict[str, str]:
    """The oracle row each method's share is over: ``oracle`` (the first ``--oracle-method`` on the clean pairs) for a
    method trained by that method's rule (:func:`training_rule`), ``oracle (M)`` (method M itself on the clean pairs,
    under the same converged rule) for a method M whose rule differs, e.g. TcVSE's AdamW at 5e-4 and max pooling, or
    that ``--own-oracles`` names (``all``: every method), e.g. a loss that learns better than the oracle method's."""
    if args.no_references:
        return {}
    first = args.oracle_method[0]
    reference = training_rule(method_runs([first], 0.0)[0])
    named = set(args.own_oracles or [])
    return {run.plugin: ORACLE if training_rule(run) == reference and not named & {run.plugin, "all"}
            else oracle_row(run.plugin, first) for run in method_runs(args.methods, 0.0, args.settings)}


def converged_method(job: Job, patience: int, plateau: bool = True) -> Job:
    """A method's ``job`` on the converged oracle's rule (:func:`accuracy.converged_settings`, no step floor): at
    its learning rate until the validation rSum stalls for ``patience`` epochs (``plateau``; otherwise for its demo
    epochs), then at a tenth of it until it stalls again; unchanged with ``patience`` 0."""
    if not patience:
        return job
    batch = int(job.run.settings.get("batch_size", 128))
    per_epoch = split_pairs(job.data.data_dir, job.data.train_split) // batch
    settings = converged_settings(job.run.settings, 0.0, per_epoch, patience, plateau)
    return dataclasses.replace(job, run=DemoRun(job.run.plugin, job.run.noise_ratio, settings))


def with_batch(job: Job, batch_size: int | None) -> Job:
    """``job`` with the batch size ``batch_size`` (``None``: its own)."""
    if batch_size is None:
        return job
    return dataclasses.replace(
        job, run=DemoRun(job.run.plugin, job.run.noise_ratio, {**job.run.settings, "batch_size": batch_size})
    )


def method_plugins(args: argparse.Namespace) -> set[str]:
    """The plugins of the methods this call trains on the generated benchmark and the proxy (``--methods``)."""
    return {run.plugin for run in method_runs(args.methods, 0.0)}


def planned_plugins(args: argparse.Namespace) -> set[str]:
    """The plugins this call trains: on the generated benchmark and the proxy its methods' and oracle methods', on
    the CLIP track its methods' (:func:`clip_track.plugin_of`)."""
    plugins: set[str] = set()
    if set(args.benchmark) - {"clip"}:
        plugins |= method_plugins(args) | set(args.oracle_method)
    if "clip" in args.benchmark:
        plugins |= {clip_track.plugin_of(method) for method in args.clip_methods}
    return plugins


def unclaimed_options(args: argparse.Namespace) -> list[str]:
    """The ``--options`` keys that no plugin of this call declares (:func:`planned_plugins`,
    :func:`declared_options`): they would reach no run."""
    declared = set().union(*(declared_options(plugin) for plugin in planned_plugins(args)))
    return sorted(set(args.options or {}) - declared)


def plan(args: argparse.Namespace, data_dir: Path) -> tuple[list[Run], list[Run]]:
    """The method runs (first phase) and the reference runs (second phase: their schedules read the methods' steps)
    of every protocol."""
    methods, references = [], []
    own = [method for method, oracle in own_oracles(args).items() if oracle != ORACLE]
    for protocol in args.protocols:
        for job in jobs(protocol_args(args, protocol, own), data_dir, PROTOCOL_KINDS[protocol]):
            job = with_options(with_batch(job, args.batch_size), args.options)
            if is_reference(job.row):
                references.append(Run(protocol, job))
                continue
            methods.append(Run(protocol, converged_method(job, args.patience, plateau_rule(args))))
            if args.sgraf is not None and (not args.sgraf or job.row in args.sgraf):
                for head in HEADS:
                    twin = dataclasses.replace(job, row=head_row(job.row, head))
                    methods.append(Run(protocol, converged_method(twin, args.patience, plateau_rule(args)),
                                       {"similarity": head}))
    return methods, references


def groups(methods: list[Run], references: list[Run]) -> list[list[Run]]:
    """The runs in the order they train: per protocol and ratio, its methods, then its references (whose schedule
    reads the methods' steps), the protocols taking turns, so that a call stopped early leaves whole columns of
    both."""
    by_protocol: dict[str, list[float]] = {}
    for run in methods + references:
        ratios = by_protocol.setdefault(run.protocol, [])
        ratios += [] if run.job.run.noise_ratio in ratios else [run.job.run.noise_ratio]
    out = []
    for key in cells_in_turn(by_protocol):
        for phase in (methods, references):
            out.append([run for run in phase if (run.protocol, run.job.run.noise_ratio) == key])
    return [group for group in out if group]


# --- running --------------------------------------------------------------------------------------------------------


def run_groups(ordered: list[list[Run]], args: argparse.Namespace, root: Path, rows: list[dict[str, Any]]) -> None:
    """Train the runs of ``ordered`` (:func:`groups`) in their order, in ``--jobs`` processes (:func:`schedule`),
    appending each finished row to ``rows``; a reference gets its convergence schedule from the rows of its cell's
    methods when it starts. A failed run is reported and the others go on."""
    if args.jobs == 1 or args.report_only:
        torch.set_num_threads(args.threads)
        for run in (run for group in ordered for run in group):
            run = _bounded(run, rows, args)
            _collect(run, lambda r=run: train_run(r, root, args.quick, args.model, args.report_only), rows)
        return
    gpus = torch.cuda.device_count()
    context = multiprocessing.get_context("spawn")
    devices = None
    if gpus > 1:
        devices = context.Queue()
        for index in range(args.jobs):
            devices.put(index % gpus)
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context, initializer=worker_setup,
                                                initargs=(devices, args.threads)) as pool:
        schedule(ordered, args.jobs, lambda run: pool.submit(train_run, run, root, args.quick, args.model, False),
                 lambda run: _bounded(run, rows, args), rows)


def _bounded(run: Run, rows: list[dict[str, Any]], args: argparse.Namespace) -> Run:
    """``run`` with a reference's convergence schedule from the finished rows of its protocol (:func:`bounded_job`)."""
    return dataclasses.replace(run, job=bounded_job(run.job, [r for r in rows if r["protocol"] == run.protocol], args))


def schedule(ordered: list[list[Run]], jobs: int, submit: Callable[[Run], concurrent.futures.Future],
             prepare: Callable[[Run], Run], rows: list[dict[str, Any]]) -> None:
    """Keep ``jobs`` runs in flight, taken in the groups' order; a group waits only for the earlier groups of its cell
    (protocol and ratio: a cell's references read its methods' rows), so a worker that is free while a cell's last
    method trains takes the next cell's runs. ``prepare`` readies a run as it starts, ``submit`` starts it."""
    cells = [(group[0].protocol, group[0].job.run.noise_ratio) for group in ordered]
    needs = [[earlier for earlier in range(index) if cells[earlier] == cell] for index, cell in enumerate(cells)]
    left = [len(group) for group in ordered]
    queue = [(index, run) for index, group in enumerate(ordered) for run in group]
    in_flight: dict[concurrent.futures.Future, tuple[int, Run]] = {}
    while queue or in_flight:
        for item in list(queue):
            if len(in_flight) >= jobs:
                break
            if not any(left[earlier] for earlier in needs[item[0]]):
                queue.remove(item)
                run = prepare(item[1])
                in_flight[submit(run)] = (item[0], run)
        done, _ = concurrent.futures.wait(in_flight, return_when=concurrent.futures.FIRST_COMPLETED)
        for future in done:
            index, run = in_flight.pop(future)
            _collect(run, future.result, rows)
            left[index] -= 1


def _collect(run: Run, result: Any, rows: list[dict[str, Any]]) -> None:
    try:
        row = result()
    except Exception as error:  # noqa: BLE001 - one failed run must not end the table
        print(f"{run.key}: failed: {type(error).__name__}: {error}", file=sys.stderr)
        return
    if row is not None:
        rows.append(row)
        print(f"{run.key}: rSum {row['test']['rsum']:.1f} after {row['epochs']} epochs ({row['seconds']:.0f}s)",
              flush=True)


# --- tables ---------------------------------------------------------------------------------------------------------


def protocol_table(rows: list[dict[str, Any]], protocol: str, ratios: list[float],
                   oracles: dict[str, str] | None = None) -> list[str]:
    """Markdown rows of one protocol: a row per method and evaluation mode, the oracle its share is over
    (:func:`oracle_of`), rSum and share of that oracle per ratio."""
    header = "| method | evaluation | oracle | " + " | ".join(f"{r:.0%} rSum | {r:.0%} share of oracle" for r in ratios)
    lines = [header + " | epochs (best / trained) |", "|---|---|---|" + "---|---|" * len(ratios) + "---|"]
    groups: dict[tuple[str, str], dict[float, list[dict[str, Any]]]] = {}
    for row in sorted(rows, key=lambda r: (is_reference(r["method"]), r["method"], r["mode"])):
        groups.setdefault((row["method"], row["mode"]), {}).setdefault(row["noise_ratio"], []).append(row)
    rsums = oracle_rsums(rows)
    for (method, mode), by_ratio in groups.items():
        cells = []
        runs = [r for group in by_ratio.values() for r in group]
        name = oracle_of(runs[0], oracles or {})
        for ratio in ratios:
            group = by_ratio.get(ratio, [])
            rsum = mean_spread([r["test"]["rsum"] for r in group])
            shares = [share_of_oracle(r, rsums, oracles or {}) for r in group]
            share = mean_spread([value for value in shares if value is not None])
            cells.append(f"{rsum} | {share}{'%' if share != '-' else ''}")
        epochs = f"{_count([r['best_epoch'] or 0 for r in runs])} / {_count([r['epochs'] for r in runs])}"
        lines.append(f"| {method} | {mode} | {name} | " + " | ".join(cells) + f" | {epochs} |")
    return lines


def _count(values: list[int]) -> str:
    """A count of epochs: the value where the runs agree, mean ± sd where they differ."""
    return str(values[0]) if len(set(values)) == 1 else mean_spread(values, 0)


def table_columns(args: argparse.Namespace) -> list[tuple[str, float]]:
    """The (protocol, ratio) columns of a call's tables, in its order."""
    return [(protocol, ratio) for protocol, ratios in protocol_ratios(args).items() for ratio in ratios]


README_MARKERS = ("<!-- leaderboard:start -->", "<!-- leaderboard:end -->")
"""The lines of ``README.md`` between which :func:`readme_excerpt` stands."""


def readme_excerpt(result: dict[str, Any], columns: list[tuple[str, float]], seeds: list[int]) -> list[str]:
    """The README's short table of one benchmark's ``result``: a row per method as it ranks (its first evaluation
    mode, not ``network A alone`` nor SGRAF), test rSum and share of its oracle (:func:`oracle_of`; mean over
    ``seeds``) per protocol and ratio of ``columns``, the methods by their mean share, best first; the VSE++ oracle
    last, a method's own oracle not shown."""
    oracles = result.get("oracles", {})
    rows = [r for r in result["rows"] if r["mode"] not in (NETWORK_A, SGRAF)]
    rsums = oracle_rsums(rows)
    table: dict[str, dict[tuple[str, float], tuple[float, float | None]]] = {}
    for method in sorted({r["method"] for r in rows if not is_reference(r["method"]) or r["method"] == ORACLE}):
        for column in columns:
            group = [r for r in rows if r["method"] == method and (r["protocol"], r["noise_ratio"]) == column]
            if group:
                shares = [share for share in (share_of_oracle(r, rsums, oracles) for r in group) if share is not None]
                table.setdefault(method, {})[column] = (statistics.mean(r["test"]["rsum"] for r in group),
                                                        statistics.mean(shares) if shares else None)

    def rank(method: str) -> tuple[bool, float]:
        shares = [share for _, share in table[method].values() if share is not None]
        return is_reference(method), -(statistics.mean(shares) if shares else 0.0)

    modes = {r["method"]: r["mode"] for r in rows}
    seeds_text = f"seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}"
    lines = [f"Test rSum (share of its oracle), {result['description']}, {seeds_text}; "
             "[benchmarks/leaderboard.md](benchmarks/leaderboard.md) has every evaluation mode, each row's oracle, "
             "the notes and the cost:", "", "| method | " + " | ".join(f"`{p}` {r:.0%}" for p, r in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for method in sorted(table, key=rank):
        cells = []
        for column in columns:
            rsum, share = table[method].get(column, (None, None))
            shown = share is not None and method != ORACLE
            cells.append("-" if rsum is None else f"{rsum:.1f}" + (f" ({share:.0f}%)" if shown else ""))
        name = method if is_reference(method) or modes[method] == ONE_NETWORK else f"{method}, {modes[method]}"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def write_readme_excerpt(path: Path, lines: list[str]) -> None:
    """Replace the text between :data:`README_MARKERS` of ``path`` by ``lines``.

    Raises:
        ValueError: ``path`` lacks either marker, or has them out of order.
    """
    text = path.read_text(encoding="utf-8")
    start, end = text.find(README_MARKERS[0]), text.find(README_MARKERS[1])
    if start < 0 or end < start:
        raise ValueError(f"{path}: expected the lines {README_MARKERS[0]} and then {README_MARKERS[1]}")
    head = text[: start + len(README_MARKERS[0])]
    path.write_text(head + "\n" + "\n".join(lines) + "\n" + text[end:], encoding="utf-8")


def reported_table(doc: Path = DOC) -> list[str]:
    """The papers' own rSum (``docs/reproduction.md``'s "Paper's reported numbers", read by ``reproduce.py``), a row
    per recipe of Flickr30K, MS-COCO 1K or CC152K, each with its source and protocol."""
    numbers, sources = paper_numbers(doc), reported_sources(doc)
    lines = ["| recipe | data set | protocol | noise: rSum (reported) | source |", "|---|---|---|---|---|"]
    for recipe, by_noise in numbers.items():
        dataset = REPORTED_DATASETS.get(recipe.rsplit("_", 1)[-1])
        if not by_noise or dataset is None:
            continue
        cells = ", ".join(f"{'real' if r is None else f'{r:.0%}'}: {v}" for r, v in by_noise.items())
        lines.append(
            f"| {recipe} | {dataset} | {recipe_protocol(recipe, by_noise)} | {cells} | "
            f"{sources.get(recipe, '-').rstrip(',:')} |"
        )
    return lines


def reported_sources(doc: Path = DOC) -> dict[str, str]:
    """Per recipe of ``doc``, the source its "Paper's reported numbers" name before the rSum (e.g. ``"NCR Table 1,
    Flickr30K"``)."""
    return dict(re.findall(r"^## recipes/(\w+)\.py\n\n(?:[^#\n].*\n|\n)*?Paper's reported numbers: (.*?),? rSum",
                           doc.read_text(), flags=re.MULTILINE))


def recipe_protocol(recipe: str, by_noise: dict[float | None, float]) -> str:
    """The noise protocol of a recipe's reported numbers: the recipe's ``noise_kind`` (caption unless it sets image);
    ``real`` for a data set's own noise only, ``clean`` without noise."""
    if set(by_noise) == {None}:
        return "real (CC152K)"
    if set(by_noise) == {0.0}:
        return "clean"
    text = (REPO / "recipes" / f"{recipe}.py").read_text() if (REPO / "recipes" / f"{recipe}.py").is_file() else ""
    return protocol_names()["image" if re.search(r"""["']noise_kind["']\s*:\s*["']image["']""", text) else "caption"]


def plot(rows: list[dict[str, Any]], planned: dict[str, list[float]], path: Path) -> Path | None:
    """rSum against noise ratio per method and mode (mean over seeds, bars: sd), a panel per protocol of ``planned``
    spanning its planned ratios, so that a table not finished shows where its runs are still to come."""
    plt = pyplot()
    if plt is None:
        return None
    figure, axes = plt.subplots(1, len(planned), figsize=(5.2 * len(planned) + 2.2, 4.6), squeeze=False,
                                layout="constrained")
    labels = sorted({(r["method"], r["mode"]) for r in rows})
    colors = {label: plt.cm.tab20(index % 20) for index, label in enumerate(sorted({m for m, _ in labels}))}
    for axis, (protocol, planned_ratios) in zip(axes[0], planned.items(), strict=True):
        for method, mode in labels:
            group = [r for r in rows if r["protocol"] == protocol and (r["method"], r["mode"]) == (method, mode)]
            ratios = sorted({r["noise_ratio"] for r in group})
            if not ratios:
                continue
            values = [[r["test"]["rsum"] for r in group if r["noise_ratio"] == x] for x in ratios]
            means = [statistics.mean(v) for v in values]
            errors = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values]
            style = "--" if is_reference(method) else (":" if mode in (NETWORK_A, SGRAF) else "-")
            name = (method if style == "-" or is_reference(method)
                    else f"{method} ({'A' if mode == NETWORK_A else 'SGRAF'})")
            axis.errorbar([100 * x for x in ratios], means, yerr=errors, fmt=style, marker="o", markersize=3,
                          color=colors[method], label=name, capsize=2)
        ticks = [100 * x for x in planned_ratios]
        axis.set_xticks(ticks)
        axis.set_xlim(min(ticks) - 5, max(ticks) + 5)
        if not any(r["protocol"] == protocol for r in rows):
            axis.text(0.5, 0.5, "no finished run yet", transform=axis.transAxes, ha="center", color="gray")
        axis.set_title(f"protocol {protocol}", fontsize=10)
        axis.set_xlabel("noise ratio (%)")
        axis.set_ylabel("test rSum")
    handles = {
        label: handle for axis in axes[0] for handle, label in zip(*axis.get_legend_handles_labels(), strict=True)
    }
    if handles:  # one legend for both panels, beside them
        figure.legend(list(handles.values()), list(handles), loc="outside right center", fontsize=7)
    return save_png(figure, path)


# --- the script -----------------------------------------------------------------------------------------------------


def report(args: argparse.Namespace, results: dict[str, Any], wall: float) -> str:
    parts = [
        "# Leaderboard: noisy-correspondence methods side by side",
        "",
        f"Command: `python benchmarks/leaderboard.py {' '.join(a for a in args.argv if a != '--report-only')}`"
        + (" (these tables: its finished runs, `--report-only`)" if args.report_only else "")
        + f"; {machine()}; commit {commit()}. "
        "Measured here, on the same data, noise files, schedule and evaluation; schedule: "
        + ("each run at its learning rate until its validation rSum stalls, then at a tenth until it stalls again"
           if plateau_rule(args) else "each run's demo epochs, then a tenth of its learning rate")
        + f" (patience {args.patience}); test rSum of the best-validation "
        f"checkpoint, mean ± sd over each benchmark's seeds; share of oracle: over the row's oracle at the same ratio "
        "and seed, trained to convergence on exactly the clean pairs: "
        + (f"{ORACLE} ({args.oracle_method[0]}), or, for a method whose optimiser, learning rate, weight decay or "
           f"model fields differ from {args.oracle_method[0]}'s (or that `--own-oracles` names), `{ORACLE} (method)`, "
           "that method itself."
           if args.benchmark != ["clip"] else "`oracle`, the baseline without noise handling, for the baseline; "
           "`oracle (M)`, method M itself, for method M."),
    ]
    for benchmark, result in results.items():
        if "skipped" in result:
            parts += ["", f"## {benchmark}: {result['skipped']}"]
            continue
        rows = result["rows"]
        for protocol, ratios in protocol_ratios(args).items():
            seeds = ", ".join(map(str, result["seeds"]))
            parts += ["", f"## Measured: {result['description']}, seeds {seeds}, protocol `{protocol}`", ""]
            parts += protocol_table([r for r in rows if r["protocol"] == protocol], protocol, ratios, result["oracles"])
        if result["notes"]:
            parts += ["", "Notes:"] + [f"- {line}" for line in result["notes"]]
        parts += ["", f"{benchmark}: {result['cost']}"]
    parts += ["", "## Reported by the papers (not measured here; Flickr30K, MS-COCO 1K, CC152K)", "",
              "Each paper's own numbers as `docs/reproduction.md` transcribes them, with their source; "
              "not comparable with the measured tables above.", ""]
    parts += reported_table()
    return "\n".join(parts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", nargs="+", choices=("generated", "proxy", "clip"), default=None,
                        help="Benchmarks (default: generated; with --quick: generated and proxy; clip: the CLIP track "
                        "of benchmarks/clip_track.py).")
    parser.add_argument("--methods", nargs="+", default=None,
                        help="Methods (default: every installed pair method with demo settings).")
    parser.add_argument("--protocols", nargs="+", choices=tuple(DEFAULT_RATIOS), default=list(DEFAULT_RATIOS))
    parser.add_argument("--ncr-ratios", type=float, nargs="+", default=DEFAULT_RATIOS["ncr-caption"])
    parser.add_argument("--decl-ratios", type=float, nargs="+", default=DEFAULT_RATIOS["decl-image"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--proxy-seeds", type=int, nargs="+", default=None,
                        help="Seeds of the real-text proxy, whose runs cost about 20 times the generated benchmark's "
                        "(default: --seeds).")
    parser.add_argument("--size", choices=tuple(DEMO_SIZES), default="tiny",
                        help="Size of the generated benchmark (hfncl.demo.DEMO_SIZES; tiny: 200 training images, 100 "
                        "test); runs of another size than tiny go to OUTPUT_DIR/generated_<size>.")
    parser.add_argument("--jobs", type=int, default=1, help="Runs trained at once, each in its own process.")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads per run (default 1: on a loaded machine a second thread waits for a core "
                        "at every parallel operation; a run of the tiny benchmark took 220 s per epoch with 2, 3 s "
                        "with 1).")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="Batch size of every run (default: the demo's 128; a small benchmark needs more steps).")
    parser.add_argument("--patience", type=int, default=3,
                        help="Epochs without a better validation rSum that decay the rate, then end the run (0: demo "
                        "schedule).")
    parser.add_argument("--schedule", choices=("plateau", "fixed"), default="plateau",
                        help="plateau: a run's rate decays when its validation rSum stalls, past its demo epochs; "
                        "fixed: at its demo epochs (the rule of the tables before plateau decay).")
    parser.add_argument("--oracle-method", nargs="+", default=["vsepp"])
    parser.add_argument("--oracle-patience", type=int, default=3)
    parser.add_argument("--own-oracles", nargs="+", default=None, metavar="METHOD",
                        help="Methods whose share is over an oracle of their own (the method itself on exactly the "
                        "clean pairs) even where their training rule is the oracle method's; 'all': every method.")
    parser.add_argument("--no-references", action="store_true", help="Leave out the oracle.")
    parser.add_argument("--sgraf", nargs="*", default=None,
                        help="Also train the methods named (none named: all) with the SGR and the SAF head; row SGRAF.")
    parser.add_argument("--model", type=json.loads, default=None,
                        help="JSON of ModelArguments fields over the demo model's.")
    parser.add_argument("--options", type=json.loads, default=None,
                        help='JSON of plugin options over the demo settings\', each set in the runs of the plugin that '
                        'declares it (its own oracle\'s included), e.g. \'{"npc.temperature": 0.1}\'; a key no '
                        "plugin of the call declares is refused; with another --output-dir, or the leaderboard's runs "
                        "train again.")
    parser.add_argument("--captions-file", default=str(DEFAULT_CAPTIONS))
    parser.add_argument("--proxy-train-images", type=int, default=1000,
                        help="Training images of the real-text proxy (its 500 dev and 1000 test images besides).")
    parser.add_argument("--output-dir", default="runs/leaderboard", help="Where data and runs go.")
    parser.add_argument("--report", default=None,
                        help="Path prefix of the .md / .png / .json (default benchmarks/leaderboard; --quick: "
                        "OUTPUT_DIR/leaderboard; _clip added for --benchmark clip alone).")
    parser.add_argument("--readme", default=None,
                        help="Also write the short table of --readme-benchmark between the leaderboard markers of this "
                        "file (README.md).")
    parser.add_argument("--readme-benchmark", choices=("generated", "proxy"), default="generated")
    parser.add_argument("--report-only", action="store_true", help="Train nothing: the tables of the finished runs.")
    parser.add_argument("--quick", action="store_true",
                        help="Tiny data and model, 2 epochs, one ratio per protocol, seed 0.")
    clip_track.add_arguments(parser)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.settings, args.references_only, args.no_half_data = None, False, True
    if args.benchmark is None:
        args.benchmark = ["generated", "proxy"] if args.quick else ["generated"]
    if args.quick:
        args.ncr_ratios, args.decl_ratios, args.seeds = [0.5], [0.4], [0]
    args.proxy_seeds = args.seeds if args.quick or args.proxy_seeds is None else args.proxy_seeds
    if args.jobs < 1 or args.threads < 1:
        parser.error(f"--jobs and --threads must be >= 1, got {args.jobs} and {args.threads}")
    for name in ("ncr_ratios", "decl_ratios"):
        if not all(0.0 < r < 1.0 for r in getattr(args, name)):
            parser.error(f"--{name.replace('_', '-')} must lie in (0, 1), got {getattr(args, name)}")
    if args.options is not None and not (isinstance(args.options, dict) and all(
            isinstance(key, str) and "." in key.strip(".") for key in args.options)):
        parser.error(f"--options: expected a JSON object of 'plugin.option' keys, got {json.dumps(args.options)}")
    if args.own_oracles and (unknown := set(args.own_oracles) - {"all"} - method_plugins(args)):
        parser.error(f"--own-oracles: {', '.join(sorted(unknown))} not among the methods this call trains")
    if args.options and (unclaimed := unclaimed_options(args)):
        parser.error(f"--options: {', '.join(unclaimed)} declared by no plugin this call trains "
                     f"({', '.join(sorted(planned_plugins(args)))})")
    if args.patience < 0 or args.oracle_patience < 0:
        parser.error("--patience and --oracle-patience must be >= 0")
    if args.report is None:
        args.report = (
            str(Path(args.output_dir) / "leaderboard") if args.quick else str(REPO / "benchmarks" / "leaderboard")
        )
        args.report += "_clip" if args.benchmark == ["clip"] else ""  # the CLIP track alone: its own report
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet()
    started = time.perf_counter()
    output_dir = Path(args.output_dir)
    results: dict[str, Any] = {}
    for name in args.benchmark:
        if name == "clip":
            results[name] = clip_track.run_track(args, output_dir)
            continue
        proxy = dataclasses.replace(PROXY, max_images=args.proxy_train_images + PROXY.num_dev + PROXY.num_test)
        data_dir, description = prepare_benchmark(name, args, output_dir, DEMO_SIZES[args.size], proxy)
        if data_dir is None:
            print(description)
            results[name] = {"skipped": description}
            continue
        root = output_dir / (name if name == "proxy" or args.size == "tiny" else f"{name}_{args.size}")
        seeds = args.proxy_seeds if name == "proxy" else args.seeds
        benchmark_args = argparse.Namespace(**{**vars(args), "seeds": seeds})
        methods, references = plan(benchmark_args, data_dir)
        rows: list[dict[str, Any]] = []
        began = time.perf_counter()
        run_groups(groups(methods, references), args, root, rows)
        labelled = mode_rows(rows, root, data_dir)
        planned = len(methods) + len(references)
        cost = cost_line(rows, time.perf_counter() - began)
        if len(rows) < planned:
            cost += f"; {planned - len(rows)} of {planned} planned runs not finished (not shown)"
        print(f"{name}: {cost}")
        oracles = own_oracles(args)
        results[name] = {"description": description, "seeds": benchmark_args.seeds, "rows": labelled,
                         "notes": notes(labelled, oracles, benchmark=name), "cost": cost, "oracles": oracles,
                         "data_dir": str(data_dir)}
    prefix = Path(args.report)
    write_report(prefix.with_suffix(".md"), report(args, results, time.perf_counter() - started))
    for name, result in results.items():
        if "rows" in result:
            suffix = "" if len(results) == 1 or name == "generated" else f"_{name}"
            plot(result["rows"], protocol_ratios(args), prefix.with_name(prefix.name + suffix + ".png"))
    if args.readme and "rows" in results.get(args.readme_benchmark, {}):
        shown = results[args.readme_benchmark]
        excerpt = readme_excerpt(shown, table_columns(args), shown["seeds"])
        write_readme_excerpt(Path(args.readme), excerpt)
    prefix.with_suffix(".json").write_text(json.dumps({"machine": machine(), "commit": commit(), "argv": args.argv,
                                                       "benchmarks": results}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
