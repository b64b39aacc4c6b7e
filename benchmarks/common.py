"""What the benchmark scripts share: the machine line, quiet libraries, settings per method, tables."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
from pathlib import Path
from typing import Any

import datasets
import torch
import transformers

from hfncl.data.proxy import default_encoder_dir
from hfncl.demo import DemoRun, demo_runs
from hfncl.plugins import build_plugin_manager, installed_entry_points

SHARED_DATA = Path(os.environ.get("HFNCL_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
DEFAULT_CAPTIONS = SHARED_DATA / "flickr8k" / "captions.txt"


def proxy_sources(captions_file: str | Path) -> tuple[Path, Path] | str:
    """The captions file and the MiniLM folder a real-text proxy is built from, or why it cannot be built."""
    captions = Path(captions_file)
    if not captions.is_file():
        return f"the captions file {captions} is not there (shared data absent)"
    try:
        return captions, default_encoder_dir()
    except ModuleNotFoundError as error:
        return str(error)


def machine(device: str = "cpu") -> str:
    """Date, CPU model and usable cores (and the GPU when ``device`` is cuda), torch version."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    where = f"{cpu}, {cores} cores"
    if device == "cuda":
        where += f", {torch.cuda.get_device_name(0)}"
    return f"{datetime.date.today().isoformat()}, {where}, torch {torch.__version__}"


def quiet() -> None:
    """Silence the libraries' own progress bars (dataset conversion, checkpoint writing)."""
    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()


def correspondence_methods() -> list[str]:
    """Installed plugins that learn from image-caption pairs (``data_kind`` ``"pairs"`` or unanswered)."""
    return [
        name
        for name in sorted(installed_entry_points())
        if all(kind in (None, "pairs") for kind in build_plugin_manager([name]).hook.data_kind())
    ]


def method_runs(
    methods: list[str] | None, noise_ratio: float, settings: dict[str, Any] | None = None
) -> list[DemoRun]:
    """One run per method at ``noise_ratio``: those named, or every installed correspondence method
    that declares ``demo_settings`` (the demo's selection). ``settings`` (epochs, warmup, options)
    replace the methods' demo settings, which lets a named method without demo settings train."""
    if settings is not None:
        if not methods:
            raise ValueError("settings that replace the demo settings need the methods named")
        return [DemoRun(name, noise_ratio, dict(settings)) for name in methods]
    if methods is not None:
        return list(demo_runs((noise_ratio,), methods))
    names = correspondence_methods()
    return [run for run in demo_runs((noise_ratio,)) if run.plugin in names]


def mean_spread(values: list[float], digits: int = 1) -> str:
    """``mean ± sample standard deviation`` (just the mean for one value, ``-`` for none)."""
    values = [v for v in values if v is not None and v == v]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the file-only Agg backend, or ``None`` when matplotlib is not installed."""
    try:
        import matplotlib
    except ModuleNotFoundError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_report(path: Path, text: str) -> None:
    """Print ``text`` and write it to ``path``."""
    print(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def with_option(settings: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    """A method's ``settings`` with one option set and its other options (e.g. its demo settings') kept."""
    return {**settings, "options": {**settings.get("options", {}), name: value}}


def constant_lr_schedule(args: Any) -> dict[str, Any]:
    """Training settings of a script's ``--epochs``, ``--warmup-epochs``, ``--batch-size`` and ``--learning-rate``,
    without lr decay (the SGR-head scripts' schedule)."""
    return {
        "epochs": args.epochs,
        "warmup_epochs": args.warmup_epochs,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "lr_decay_epochs": [],
    }
