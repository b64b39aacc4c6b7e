"""What the leaderboard's rows say (:mod:`leaderboard`, :mod:`clip_track`): each row's share of its oracle, the
notes on a method below VSE++ or against a paper's ordering with the section of ``docs/methods`` that measured the
cause at that cell, the seeds' verdict, flags above the oracle, and the cost of the runs."""

from __future__ import annotations

import itertools
import re
import statistics
from pathlib import Path
from typing import Any

import yaml
from accuracy import ORACLE, is_reference
from leaderboard_runs import NETWORK_A, SGRAF
from reproduce import REPO
from scipy import stats

from hfncl.data.noise import protocol_names

METHOD_DOCS = REPO / "docs" / "methods"
CAUSE_SECTION = "## On the leaderboard"
PAPERS_COMPARISONS = REPO / "benchmarks" / "papers_comparisons.yaml"


def oracle_of(row: dict[str, Any], oracles: dict[str, str]) -> str:
    """The oracle row whose rSum a row's share is over: its method's own (``oracles`` by the row's method, else by its
    plugin, :func:`leaderboard.own_oracles`), else ``oracle``; an oracle row is over itself."""
    method = str(row["method"])
    if is_reference(method):
        return method
    return oracles.get(method, oracles.get(row.get("plugin", method), ORACLE))


def oracle_rsums(rows: list[dict[str, Any]]) -> dict[tuple[str, str, float, int], float]:
    """Each oracle row's test rSum by (oracle row, protocol, ratio, seed)."""
    return {(r["method"], r["protocol"], r["noise_ratio"], r["seed"]): r["test"]["rsum"]
            for r in rows if is_reference(r["method"])}


def share_of_oracle(row: dict[str, Any], rsums: dict[tuple[str, str, float, int], float],
                    oracles: dict[str, str]) -> float | None:
    """A row's test rSum in percent of its oracle's (:func:`oracle_of`) at its protocol, ratio and seed; ``None``
    where that oracle has not run."""
    rsum = rsums.get((oracle_of(row, oracles), row["protocol"], row["noise_ratio"], row["seed"]))
    return 100 * row["test"]["rsum"] / rsum if rsum else None


VSEPP = "VSE++"
"""How a cause section's heading names VSE++, the baseline a method's place below is measured against."""
BENCHMARK_WORDS = {"generated": "generated benchmark", "proxy": "proxy", "clip": "CLIP track"}
"""What a cause section's heading names for the causes it measured on each benchmark."""


def cell_name(protocol: str, ratio: float) -> str:
    """How a cause section names a cell it measured: the protocol in backticks and the ratio, e.g.
    ``"`ncr-caption` 20%"``."""
    return f"`{protocol}` {ratio:.0%}"


def page_sections(page: Path) -> list[tuple[str, str]]:
    """The sections of a markdown page: (heading, body), a body running to the next heading outside a fenced code
    block; none where ``page`` is not a file."""
    sections: list[tuple[str, list[str]]] = []
    fenced = False
    for line in page.read_text().splitlines() if page.is_file() else []:
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#{1,6} ", line):
            sections.append((line.strip(), []))
        elif sections:
            sections[-1][1].append(line)
    return [(heading, "\n".join(body)) for heading, body in sections]


def names_word(text: str, word: str) -> bool:
    """Whether ``text`` names ``word`` as a word of its own, whatever its case."""
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE) is not None


def cause_sections(page: Path) -> list[tuple[str, str]]:
    """The sections (:func:`page_sections`) of a ``docs/methods`` page whose heading starts with
    :data:`CAUSE_SECTION`."""
    return [(heading, body) for heading, body in page_sections(page) if heading.startswith(CAUSE_SECTION)]


def own_oracle_page(method: str, cell: tuple[str, float], benchmark: str, page: Path,
                    sections: list[tuple[str, str]]) -> str | None:
    """Where ``method``, above its oracle at ``cell`` (protocol, ratio) on ``benchmark``, was trained on exactly the
    clean pairs itself: the first of ``page``'s ``sections`` (``docs/leaderboard.md``, :func:`page_sections`) whose
    heading names the benchmark as :data:`BENCHMARK_WORDS` does and that has a table row whose first cell is the cell
    (:func:`cell_name`) and whose second starts with the method's name; ``None`` where there is none."""
    row = re.compile(rf"^\|\s*{re.escape(cell_name(*cell))}\s*\|\s*{re.escape(method)}(?!\w)", re.MULTILINE)
    for heading, body in sections:
        if names_word(heading, BENCHMARK_WORDS.get(benchmark, benchmark)) and row.search(body):
            return f"docs/{page.name}, \"{heading.lstrip('# ')}\""
    return None


def cause_page(method: str, cell: tuple[str, float], docs: Path = METHOD_DOCS, against: str | None = None,
               benchmark: str | None = None) -> tuple[str, bool] | None:
    """Where the cause of ``method``'s place on the leaderboard is measured: its ``docs/methods`` page's first section
    whose heading starts with :data:`CAUSE_SECTION` (and, for its place below method ``against``, names that method as
    a word; for a place on ``benchmark``, names it as :data:`BENCHMARK_WORDS` does), and whether it measured ``cell``
    (protocol, ratio): its text names the cell as :func:`cell_name` does. The first section that names the cell is
    preferred; ``None`` where the page has no such section."""
    words = [w for w in (against, BENCHMARK_WORDS.get(benchmark or "", benchmark)) if w]
    found = [(heading, cell_name(*cell) in body)
             for heading, body in cause_sections(docs / f"{method}.md")
             if all(names_word(heading, word) for word in words)]
    if not found:
        return None
    heading, here = max(found, key=lambda section: section[1])  # the first that names the cell, else the first
    return f"docs/methods/{method}.md, \"{heading.lstrip('# ')}\"", here


def cause_answer(found: tuple[str, bool] | None, spread: str | None = None) -> str:
    """A note's answer for its place: the cause section of :func:`cause_page` where it measured the note's cell, else
    the seeds' verdict (:func:`seed_spread`), else a section that measured other cells only, else none."""
    if found is not None and found[1]:
        return f"the cause, measured: {found[0]}"
    if spread:
        return spread
    if found is not None:
        return f"the cause is measured at other cells ({found[0]}), not at this one yet"
    return "the cause is not measured yet"


def comparison_tables(path: Path = PAPERS_COMPARISONS) -> list[dict[str, Any]]:
    """The papers' comparison tables of ``path`` (``benchmarks/papers_comparisons.yaml``), each with its ``source``,
    ``paper``, ``protocol``, ``ratios`` and ``rows`` (per method, the ``rsum`` at each ratio; ``other_rows``: the
    same methods' variants, not compared).

    Raises:
        ValueError: naming the file, the table and the field, for a table unlike that.
    """
    tables = (yaml.safe_load(path.read_text()) or {}).get("tables")
    if not isinstance(tables, list):
        raise ValueError(f"{path}: expected a list 'tables'")
    protocols = set(protocol_names().values())
    for index, table in enumerate(tables):
        where = f"{path}: tables[{index}]" + (f" ({table.get('source')})" if isinstance(table, dict) else "")
        if not isinstance(table, dict) or not all(isinstance(table.get(k), str) for k in ("source", "paper")):
            raise ValueError(f"{where}: expected a mapping with the strings 'source' and 'paper'")
        if table.get("protocol") not in protocols:
            raise ValueError(f"{where}: field 'protocol': expected one of {sorted(protocols)}, "
                             f"got {table.get('protocol')!r}")
        ratios = table.get("ratios")
        if not isinstance(ratios, list) or not ratios or not all(isinstance(r, float) and 0 <= r < 1 for r in ratios):
            raise ValueError(f"{where}: field 'ratios': expected a list of noise ratios in [0, 1), got {ratios!r}")
        rows = table.get("rows")
        named = [(f"rows.{m}", r) for m, r in rows.items()] if isinstance(rows, dict) and rows else []
        named += [(f"other_rows[{i}]", r) for i, r in enumerate(table.get("other_rows") or [])]
        if not named:
            raise ValueError(f"{where}: field 'rows': expected a mapping of methods to rows")
        for field, row in named:
            rsum = row.get("rsum") if isinstance(row, dict) else None
            if not isinstance(rsum, list) or len(rsum) != len(ratios) or not all(isinstance(v, float) for v in rsum):
                raise ValueError(f"{where}: field '{field}.rsum': expected {len(ratios)} rSum values, one per ratio, "
                                 f"got {rsum!r}")
    return tables


def paper_orderings(tables: list[dict[str, Any]]) -> dict[tuple[str, float, str, str], list[str]]:
    """Per (protocol, ratio, A, B) where a paper's table ranks method A's row above B's: the tables, each as
    ``"source (rSum A vs rSum B)"``. A paper whose own tables rank a pair both ways at one protocol and ratio (its
    Flickr30K one way, its MS-COCO the other) claims no order for that pair there."""
    claims: dict[tuple[str, float, str, str], list[tuple[str, str]]] = {}
    for table in tables:
        for index, ratio in enumerate(table["ratios"]):
            for (a, row_a), (b, row_b) in itertools.permutations(table["rows"].items(), 2):
                if row_a["rsum"][index] > row_b["rsum"][index]:
                    claims.setdefault((table["protocol"], ratio, a, b), []).append(
                        (table["paper"], f"{table['source']} ({row_a['rsum'][index]} vs {row_b['rsum'][index]})"))
    orderings = {}
    for (protocol, ratio, a, b), found in claims.items():
        reversed_by = {paper for paper, _ in claims.get((protocol, ratio, b, a), [])}
        if kept := [text for paper, text in found if paper not in reversed_by]:
            orderings[(protocol, ratio, a, b)] = kept
    return orderings


def ranked_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The method rows in the evaluation mode each method ranks by (not network A alone, not SGRAF, no oracle)."""
    return [r for r in rows if r["mode"] != NETWORK_A and r["mode"] != SGRAF and not is_reference(r["method"])]


SEED_SPREAD_P = 0.05
"""The two-sided p of a paired t-test over seeds at and above which a measured difference is within the seed spread."""


def seed_cells(rows: list[dict[str, Any]]) -> dict[tuple[str, str, float], dict[int, float]]:
    """Per (protocol, method, ratio), the test rSum of each seed, of the rows a method ranks by
    (:func:`ranked_rows`)."""
    cells: dict[tuple[str, str, float], dict[int, float]] = {}
    for r in ranked_rows(rows):
        cells.setdefault((r["protocol"], r["method"], r["noise_ratio"]), {})[r["seed"]] = r["test"]["rsum"]
    return cells


def division_quality(rows: list[dict[str, Any]], digits: int = 2) -> dict[tuple[str, str, float], str]:
    """Per (protocol, method, ratio) of the rows a method ranks by, its division's quality against the hidden noise
    (network A, last epoch) where recorded: the mean AUC, precision and recall over its seeds."""
    found: dict[tuple[str, str, float], list[dict[str, float]]] = {}
    for r in ranked_rows(rows):
        if r.get("division", {}).get("auc") is not None:
            found.setdefault((r["protocol"], r["method"], r["noise_ratio"]), []).append(r["division"])
    return {cell: ", ".join(f"{key} {statistics.mean(d[key] for d in divisions):.{digits}f}"
                            for key in ("auc", "precision", "recall") if all(d.get(key) is not None for d in divisions))
            for cell, divisions in found.items()}


def paired_difference(differences: list[float], seeds: list[int]) -> str:
    """Paired differences over ``seeds`` as the notes give them: their mean, ± their sd over two seeds or more."""
    sd = f" ± {statistics.stdev(differences):.1f}" if len(differences) > 1 else ""
    return f"{statistics.mean(differences):+.1f}{sd} over seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}"


def seed_spread(lower: dict[int, float], upper: dict[int, float]) -> str | None:
    """Whether the seeds leave ``lower``'s mean place below ``upper``'s unresolved: over the seeds both ran (two or
    more), the paired differences' mean ± sd and the two-sided p of a paired t-test (``scipy.stats.ttest_rel``) at
    least :data:`SEED_SPREAD_P`; ``None`` where the difference is resolved or one seed cannot tell."""
    seeds = sorted(lower.keys() & upper.keys())
    if len(seeds) < 2:
        return None
    differences = [lower[s] - upper[s] for s in seeds]
    if statistics.stdev(differences) == 0:
        return None
    p = float(stats.ttest_rel([lower[s] for s in seeds], [upper[s] for s in seeds]).pvalue)
    if p < SEED_SPREAD_P:
        return None
    return (f"within the seed spread, no difference measured: {paired_difference(differences, seeds)} "
            f"(paired t-test p = {p:.2f})")


def notes(rows: list[dict[str, Any]], oracles: dict[str, str] | None = None, docs: Path = METHOD_DOCS,
          papers: Path = PAPERS_COMPARISONS, benchmark: str | None = None) -> list[str]:
    """Where a method's mean rSum falls below VSE++'s at a protocol and ratio (same evaluation mode of the method as
    trained) and where its cause is measured (:func:`cause_page`, a section naming VSE++); where two methods'
    measured order inverts a paper's own table at that protocol and ratio (:func:`paper_orderings` of ``papers``),
    and where the cause of that is measured: a section that names the other method, or, for a method below VSE++
    there and the other not, the cause of that; a section counts for ``benchmark`` only where its heading names it,
    and as measured at a cell only where its text names the cell (:func:`cause_answer`). A place with no section
    measured there that the seeds leave unresolved (:func:`seed_spread`) says so. Then :func:`measurement_notes`."""
    out = []
    cells = seed_cells(rows)
    mean = {key: statistics.mean(by_seed.values()) for key, by_seed in cells.items()}
    quality = division_quality(rows)
    for (protocol, method, ratio), value in sorted(mean.items()):
        vsepp = mean.get((protocol, "vsepp", ratio))
        if method != "vsepp" and vsepp is not None and value < vsepp:
            found = quality.get((protocol, method, ratio))
            seen = f"; its division (network A, last epoch): {found}" if found is not None else ""
            page = cause_page(method, (protocol, ratio), docs, VSEPP, benchmark)
            spread = seed_spread(cells[protocol, method, ratio], cells[protocol, "vsepp", ratio])
            out.append(f"{method} is below VSE++ under {protocol} at {ratio:.0%} ({value:.1f} vs {vsepp:.1f}){seen}; "
                       + cause_answer(page, spread))
    for (protocol, ratio, above, below), sources in sorted(paper_orderings(comparison_tables(papers)).items()):
        a, b = mean.get((protocol, above, ratio)), mean.get((protocol, below, ratio))
        if a is not None and b is not None and a < b:
            vsepp = mean.get((protocol, "vsepp", ratio))
            under = cause_page(above, (protocol, ratio), docs, VSEPP, benchmark)
            against = cause_page(above, (protocol, ratio), docs, below, benchmark)
            spread = seed_spread(cells[protocol, above, ratio], cells[protocol, below, ratio])
            measured_under = vsepp is not None and a < vsepp <= b and under is not None and under[1]
            cause = f"below VSE++ there, {cause_answer(under)}" if measured_under else cause_answer(against, spread)
            out.append(f"{above} below {below} under {protocol} at {ratio:.0%} ({a:.1f} vs {b:.1f}), against "
                       f"{' and '.join(sources)}; {cause}")
    return out + measurement_notes(rows, oracles, benchmark, docs.parent / "leaderboard.md")


def measurement_notes(rows: list[dict[str, Any]], oracles: dict[str, str] | None = None, benchmark: str | None = None,
                      own_oracles_page: Path | None = None) -> list[str]:
    """What every benchmark's table notes of its runs: a method whose mean is above its own oracle's over the seeds
    the oracle ran (a defect of the measurement until shown otherwise; the difference's mean ± sd, or the seeds'
    verdict where they leave it unresolved, :func:`seed_spread`; with ``benchmark``, where ``own_oracles_page`` has
    the method trained on the cell's clean pairs: :func:`own_oracle_page`), runs trained otherwise than the plan
    (``stale``, with ``--report-only``), and the runs that stopped at their last planned epoch (not converged by the
    rule)."""
    out = []
    rsums = oracle_rsums(rows)
    above = []
    first: dict[tuple[str, str, float], dict[str, Any]] = {}  # a cell's first row: its oracle
    for r in ranked_rows(rows):
        first.setdefault((r["protocol"], r["method"], r["noise_ratio"]), r)
    sections = page_sections(own_oracles_page) if benchmark and own_oracles_page else []
    for (protocol, method, ratio), by_seed in sorted(seed_cells(rows).items()):
        oracle = oracle_of(first[protocol, method, ratio], oracles or {})
        bound = {seed: rsums[oracle, protocol, ratio, seed] for seed in by_seed
                 if (oracle, protocol, ratio, seed) in rsums}
        if bound and statistics.mean(by_seed[s] for s in bound) > statistics.mean(bound.values()):
            differences = [by_seed[s] - bound[s] for s in sorted(bound)]
            difference = seed_spread(by_seed, bound) or paired_difference(differences, sorted(bound))
            own = (own_oracle_page(method, (protocol, ratio), benchmark, own_oracles_page, sections)
                   if benchmark and own_oracles_page else None)
            measured = f"; its own oracle, measured: {own}" if own else ""
            above.append(f"{method} over {oracle} ({protocol} {ratio:.0%}: {difference}{measured})")
    if above:
        out.append("above its oracle, a defect of the measurement until shown otherwise (test rSum minus the oracle's, "
                   "mean ± sd over the seeds): " + ", ".join(above))
    stale = sorted({f"{r['method']} ({r['protocol']} {r['noise_ratio']:.0%} seed {r['seed']}: {'; '.join(r['stale'])})"
                    for r in rows if r.get("stale")})
    if stale:
        out.append("trained otherwise than the plan, shown until trained again (a call without --report-only): "
                   + ", ".join(stale))
    stopped = sorted({f"{r['method']} ({r['protocol']} {r['noise_ratio']:.0%} seed {r['seed']})" for r in rows
                      if r["mode"] != NETWORK_A and r.get("planned_epochs") and r["epochs"] >= r["planned_epochs"]
                      and r.get("best_epoch") == r["epochs"]})
    if stopped:
        out.append("still improving at the last planned epoch (not converged by the rule): " + ", ".join(stopped))
    return out


def cost_line(rows: list[dict[str, Any]], wall: float) -> str:
    """Runs per core-hour (core-seconds: the CPU time of a run's epochs, all threads, over every process that trained
    them; a GPU run's device named), the runs' own wall time and this call's; and how many runs' time lacks epochs
    (``untimed_epochs``: resumed from a checkpoint that kept no time; a row without the field: recorded before rows
    kept it, its time the last process's)."""
    core_hours = sum(r.get("cpu_seconds", r["seconds"] * r.get("threads", 1)) for r in rows) / 3600
    run_wall = sum(r["seconds"] for r in rows) / 3600
    devices = sorted({r.get("device", "cpu") for r in rows})
    rate = f"{len(rows) / core_hours:.1f}" if core_hours else "-"
    untimed = sum(1 for r in rows if r.get("untimed_epochs", 1))
    return (f"cost: {len(rows)} runs in {core_hours:.3f} core-hours of training ({rate} runs per core-hour; devices: "
            f"{', '.join(devices)}); {run_wall:.2f} h of wall time in all, this call's {wall / 60:.1f} min"
            + (f"; {untimed} of the runs may lack an earlier process's time (resumed from a checkpoint that kept "
               "none, or recorded before rows kept it): the rate is an upper bound" if untimed else ""))
