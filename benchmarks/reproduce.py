"""Run a paper's recipe on the real features and print its test rSum beside the paper's.

    python benchmarks/reproduce.py --recipe ncr_f30k --data-dir /data/f30k_precomp --noise-ratio 0.5
    python benchmarks/reproduce.py --recipe ugncl_f30k --data-dir /data/f30k_precomp --noise-ratio 0.2 --processes 4
    python benchmarks/reproduce.py --recipe ncr_f30k --data-dir D --noise-ratio 0.5 --dry-run   # the command only
    python benchmarks/reproduce.py --list                                                     # the papers' numbers

For a machine with a GPU (or several) and the SCAN precomp features: the recipe runs with
its defaults (the paper's model and protocol, ``docs/reproduction.md``) through
``accelerate launch`` (``--processes`` processes; ``--launcher python`` runs it in one plain
process), and arguments after ``--`` go to the recipe unchanged. The paper's number is read
from the recipe's "Paper's reported numbers" line in ``docs/reproduction.md``, one of::

    rSum: A / B / C at X / Y / Z% noise
    rSum: A clean
    rSum: A with real noise

(a line that gives mAP and no rSum, the label-noise recipes', gives no rSum to compare with).

Prints the recipe, noise, the paper's rSum, hfncl's test rSum and the difference, and
appends the row to ``--output-dir/reproduction.json`` (with the machine and the command).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from common import machine

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "reproduction.md"
NOISE_LIST = re.compile(r"rSum: ([\d.]+(?: / [\d.]+)*) at ([\d.]+(?: / [\d.]+)*)% noise")
SINGLE = re.compile(r"rSum: ([\d.]+) (clean|with real noise)")


def paper_numbers(doc: Path = DOC) -> dict[str, dict[float | None, float]]:
    """Per recipe, the paper's test rSum by noise ratio (0.0 clean, ``None`` real noise); empty when not transcribed
    or reported as mAP.

    Raises:
        ValueError: a "Paper's reported numbers" line that gives numbers in none of the three forms.
    """
    numbers: dict[str, dict[float | None, float]] = {}
    recipe = None
    for line in doc.read_text().splitlines():
        if heading := re.fullmatch(r"## recipes/(\w+)\.py", line):
            recipe = heading.group(1)
        elif recipe and line.startswith("Paper's reported numbers:"):
            numbers[recipe] = _parse(line, f"{doc}: {recipe}")
    return numbers


def _parse(line: str, where: str) -> dict[float | None, float]:
    if listed := NOISE_LIST.search(line):
        values = [float(v) for v in listed.group(1).split(" / ")]
        ratios = [float(r) / 100 for r in listed.group(2).split(" / ")]
        if len(values) != len(ratios):
            raise ValueError(f"{where}: {len(values)} rSum values for {len(ratios)} noise ratios in {line!r}")
        return dict(zip(ratios, values, strict=True))
    if single := SINGLE.search(line):
        return {0.0 if single.group(2) == "clean" else None: float(single.group(1))}
    if "not transcribed" in line or ("mAP" in line and "rSum" not in line):
        return {}
    raise ValueError(f"{where}: no rSum in a known form in {line!r} (see benchmarks/reproduce.py)")


def recipe_command(args: argparse.Namespace, output_dir: Path) -> list[str]:
    """The command that trains the recipe: ``accelerate launch`` or a plain Python process."""
    script = str(REPO / "recipes" / f"{args.recipe}.py")
    if args.launcher == "python":
        command = [sys.executable, script]
    else:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(args.processes)]
        command += ["--multi_gpu", script] if args.processes > 1 else [script]
    command += ["--data-dir", args.data_dir, "--output-dir", str(output_dir)]
    if args.noise_ratio is not None:
        command += ["--noise-ratio", str(args.noise_ratio)]
    return command + args.recipe_args


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", help="A recipe of recipes/ (e.g. ncr_f30k).")
    parser.add_argument("--data-dir", help="The recipe's data: SCAN precomp features of its data set.")
    parser.add_argument("--noise-ratio", type=float, help="Noise ratio (default: the recipe's).")
    parser.add_argument("--processes", type=int, default=1, help="Processes for accelerate launch (GPUs).")
    parser.add_argument("--launcher", choices=("accelerate", "python"), default="accelerate")
    parser.add_argument("--output-dir", default="runs/reproduce", help="Where the run and reproduction.json go.")
    parser.add_argument("--dry-run", action="store_true", help="Print the command and the paper's number only.")
    parser.add_argument("--list", action="store_true", help="Print every recipe's reported numbers and exit.")
    parser.add_argument("recipe_args", nargs=argparse.REMAINDER, help="After --: arguments for the recipe.")
    args = parser.parse_args(argv)
    args.recipe_args = args.recipe_args[1:] if args.recipe_args[:1] == ["--"] else args.recipe_args
    if args.list:
        return args
    if not args.recipe or not args.data_dir:
        parser.error("--recipe and --data-dir are needed (or --list)")
    if not (REPO / "recipes" / f"{args.recipe}.py").is_file():
        parser.error(f"no recipe recipes/{args.recipe}.py")
    if args.processes < 1:
        parser.error(f"--processes must be >= 1, got {args.processes}")
    return args


def _noise_label(ratio: float | None) -> str:
    return "real" if ratio is None else f"{ratio:.0%}"


def _run_name(recipe: str, ratio: float | None) -> str:
    return f"{recipe}_{'default' if ratio is None else round(ratio * 100)}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    numbers = paper_numbers()
    if args.list:
        for recipe, by_noise in numbers.items():
            cells = ", ".join(f"{_noise_label(r)} {v}" for r, v in by_noise.items()) or "not transcribed"
            print(f"{recipe}: {cells}")
        return 0
    wanted = args.noise_ratio
    by_noise = numbers.get(args.recipe, {})
    paper = by_noise.get(wanted) if wanted is not None else by_noise.get(None, by_noise.get(0.0))
    output_dir = Path(args.output_dir) / _run_name(args.recipe, wanted)
    command = recipe_command(args, output_dir)
    print(shlex.join(command))
    if args.dry_run:
        print(f"paper: {paper if paper is not None else '-'}")
        return 0
    completed = subprocess.run(command)
    if completed.returncode != 0:
        print(f"the recipe failed (exit {completed.returncode})", file=sys.stderr)
        return completed.returncode
    rsum = json.loads((output_dir / "results.json").read_text())["test"]["rsum"]
    difference = f"{rsum - paper:+.1f}" if paper is not None else "-"
    print("| recipe | noise | paper rSum | hfncl rSum | difference |\n|---|---|---|---|---|")
    print(
        f"| {args.recipe} | {'default' if wanted is None else _noise_label(wanted)} | "
        f"{paper if paper is not None else '-'} | {rsum:.1f} | {difference} |"
    )
    record = Path(args.output_dir) / "reproduction.json"
    rows = json.loads(record.read_text()) if record.is_file() else []
    rows.append(
        {"recipe": args.recipe, "noise_ratio": wanted, "paper_rsum": paper, "rsum": rsum, "command": command,
         "machine": machine("cuda" if _has_cuda() else "cpu")}
    )
    record.write_text(json.dumps(rows, indent=1))
    return 0


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
