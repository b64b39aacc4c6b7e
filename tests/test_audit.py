"""``hfncl audit`` on the tiny generated benchmark with a known 30% of its training captions re-paired: the flagged
pairs are mostly the wrong ones, the files hold the table, the cleaned split loads, bad input is refused in one line."""

from __future__ import annotations

import html
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from conftest import TINY_DATA, TINY_MODEL

from hfncl import cli
from hfncl.audit import AuditError, audit, audit_summary, estimated_noise_rate, wilson_interval
from hfncl.audit.report import audit_page
from hfncl.data import DataFormatError, caption_level_noise, load_precomp_split, read_captions
from hfncl.plugins import PluginError

NOISE = 0.3
AUDIT_TRAINING = {
    "batch_size": 32, "eval_batch_size": 64, "warmup_epochs": 4, "lr_decay_epochs": [], "learning_rate": 2e-3
}
"""The tiny model's settings (tests/conftest.py) with a tenfold learning rate: 4 warmup epochs and 2 divided ones."""
EPOCHS = 6


@pytest.fixture(scope="module")
def noisy_data(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A user's data: the tiny training split alone, its captions re-paired for 30% of the lines (the NCR protocol's
    caption-level index, written into the file), and the hidden mask of the wrong pairs, by line."""
    directory = tmp_path_factory.mktemp("user_data")
    shutil.copy(tiny_data_dir / "train_ims.npy", directory / "train_ims.npy")
    captions = list(read_captions(tiny_data_dir / "train_caps.txt"))
    k = len(captions) // TINY_DATA.num_train
    index = caption_level_noise(TINY_DATA.num_train, k, NOISE, seed=0)  # index[c]: the image caption c is shown with
    lines = np.argsort(index, kind="stable")  # line p of the file: a caption whose image index[...] is p // k
    (directory / "train_caps.txt").write_text("".join(captions[c] + "\n" for c in lines), encoding="utf-8")
    return directory, lines // k != np.arange(len(lines)) // k


@pytest.fixture(scope="module")
def audited(noisy_data, tmp_path_factory) -> tuple[datasets.Dataset, Path]:
    """NCR audited on the noisy copy (about 15 s on one thread), with a cleaned split ``train_clean``."""
    output = tmp_path_factory.mktemp("audit")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is faster than two contending ones
    try:
        table = audit(
            noisy_data[0], ["ncr"], output, EPOCHS, write_clean="train_clean", model_args=TINY_MODEL,
            training=AUDIT_TRAINING, progress=False,
        )
    finally:
        torch.set_num_threads(threads)
    return table, output


def test_the_flagged_pairs_are_mostly_the_wrong_ones(audited, noisy_data):
    table, _ = audited
    wrong = noisy_data[1]
    flagged = np.asarray(table["flagged"])
    precision, recall = wrong[flagged].mean(), flagged[wrong].mean()
    ranked_first = np.asarray(table["rank"]) <= wrong.sum()
    print({"true noise": wrong.mean(), "flagged": flagged.mean(), "precision": precision, "recall": recall,
           "precision of the top ranks": wrong[ranked_first].mean()})
    assert precision >= 0.5, f"flagged set's precision {precision:.2f}, chance {wrong.mean():.2f}"
    assert wrong[ranked_first].mean() >= 0.5


def test_the_table_has_a_row_per_pair_with_every_networks_verdict_and_repairings_for_flagged_pairs(audited):
    table, _ = audited
    rows = table.to_pandas()
    assert len(rows) == TINY_DATA.num_train * 5 and list(rows["pair"]) == list(range(len(rows)))
    assert (rows["image"] == rows["pair"] // 5).all()
    networks = rows[["clean_prob_net0", "clean_prob_net1"]].to_numpy()
    assert np.allclose(rows["clean_prob"], networks.mean(axis=1))
    assert (rows["agree"] == ((networks >= 0.5).all(axis=1) | (networks < 0.5).all(axis=1))).all()
    assert sorted(rows["rank"]) == list(range(1, len(rows) + 1))
    assert rows.sort_values("rank")["clean_prob"].is_monotonic_increasing
    flagged, kept = rows[rows["flagged"]], rows[~rows["flagged"]]
    assert len(flagged) and kept["suggested_caption"].isna().all() and kept["suggested_image"].isna().all()
    assert (flagged["suggested_caption"] != flagged["pair"]).all()
    assert (flagged["suggested_image"] != flagged["image"]).all()
    captions = list(rows["caption"])
    assert list(flagged["suggested_caption_text"]) == [captions[int(c)] for c in flagged["suggested_caption"]]
    assert np.isfinite(flagged[["suggested_caption_similarity", "suggested_image_similarity"]].to_numpy()).all()


def test_wilson_interval_by_hand():
    # 20 of 100, z = 1.959964, z^2 = 3.8414588: p = 0.2, scale 1 + z^2 / n = 1.0384146, centre p + z^2 / 2n = 0.2192073,
    # spread z * sqrt(p (1 - p) / n + z^2 / 4n^2) = 1.959964 * sqrt(0.0016 + 0.0000960365) = 1.959964 * 0.0411830
    # = 0.0807172; low (0.2192073 - 0.0807172) / 1.0384146 = 0.1333669, high 0.2999245 / 1.0384146 = 0.2888292
    low, high = wilson_interval(20, 100)
    assert low == pytest.approx(0.1333669, abs=1e-6) and high == pytest.approx(0.2888292, abs=1e-6)
    # 0 of 10: the interval starts at 0 and ends at z^2 / (n + z^2) = 3.8414588 / 13.8414588
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775328), abs=1e-6)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_the_noise_rate_is_the_share_flagged_with_its_interval(audited):
    table, _ = audited
    rate = estimated_noise_rate(table)
    assert rate.flagged == sum(table["flagged"]) and rate.rate == rate.flagged / len(table)
    assert (rate.low, rate.high) == wilson_interval(rate.flagged, len(table)) and rate.low < rate.rate < rate.high


def test_the_files_hold_the_table_and_the_page_is_self_contained(audited):
    table, output = audited
    assert datasets.Dataset.from_parquet(str(output / "audit.parquet")).to_dict() == table.to_dict()
    assert len((output / "audit.csv").read_text().splitlines()) == len(table) + 1
    page = (output / "audit.html").read_text()
    top = table.filter(lambda row: row["rank"] == 1)[0]
    assert html.escape(top["caption"]) in page and str(estimated_noise_rate(table)) in page
    assert "data:image/png;base64," in page and "http" not in page.replace("http-equiv", "")


def test_captions_are_escaped_on_the_page(audited):
    table, _ = audited
    nasty = '<script>alert("x")</script> & co'
    marked = table.map(lambda row: {"caption": nasty if row["rank"] == 1 else row["caption"]})
    page = audit_page(marked)
    assert html.escape(nasty) in page and nasty not in page


def test_the_cleaned_split_loads_and_holds_exactly_the_unflagged_pairs(audited, noisy_data):
    table, output = audited
    cleaned = load_precomp_split(output, "train_clean")
    kept = [row for row in table if not row["flagged"]]
    assert cleaned.captions_per_image == 1 and cleaned.num_images == len(kept)
    assert list(cleaned.captions) == [row["caption"] for row in kept]
    original = np.load(noisy_data[0] / "train_ims.npy")
    assert np.array_equal(cleaned.regions(np.arange(len(kept))), original[[row["image"] for row in kept]])


def test_the_command_prints_the_summary(audited, monkeypatch, capsys):
    table, output = audited
    monkeypatch.setattr("hfncl.audit.audit", lambda *args, **kwargs: table)
    assert cli.main(["audit", "--data-dir", "d", "--output-dir", str(output), "--write-clean", "train_clean"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == audit_summary(table, output, "train_clean")
    assert printed[0].startswith(f"{len(table)} pairs, {sum(table['flagged'])} flagged: estimated noise rate ")
    assert str(output / "audit.html") in printed[1] and str(output / "train_clean_ims.npy") in printed[2]


def _audit_as_the_command(arguments: list[str], data: Path, output: Path) -> datasets.Dataset:
    """:func:`audit` called as ``hfncl audit --data-dir data --output-dir output *arguments`` calls it."""
    options = dict(zip(arguments[::2], arguments[1::2], strict=True))
    plugins = [options["--plugins"]] if "--plugins" in options else None
    return audit(data, plugins, output, write_clean=options.get("--write-clean"))


@pytest.mark.parametrize(
    ("case", "arguments", "error", "said"),
    [
        ("no train split", [], DataFormatError, "train_ims.npy"),
        ("empty split", [], DataFormatError, "train_caps.txt: no captions"),
        ("no division", ["--plugins", "vsepp"], AuditError, "plugin vsepp makes no division"),
        ("not installed", ["--plugins", "nosuchmethod"], PluginError, "nosuchmethod"),
        ("bad split name", ["--write-clean", "a/b"], ValueError, "'a/b'"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_training(tmp_path, capsys, case, arguments, error, said):
    data = tmp_path / "data"
    data.mkdir()
    if case == "empty split":
        np.save(data / "train_ims.npy", np.zeros((0, 8, 16), dtype=np.float32))
        (data / "train_caps.txt").write_text("")
    elif case == "no train split":
        np.save(data / "dev_ims.npy", np.zeros((2, 8, 16), dtype=np.float32))
    output = tmp_path / "out"
    with pytest.raises(error, match=said):
        _audit_as_the_command(arguments, data, output)
    command = ["audit", "--data-dir", str(data), "--output-dir", str(output), *arguments]
    assert cli.main(command) == 1
    err = capsys.readouterr().err
    assert err.startswith("hfncl: error: ") and err.count("\n") == 1 and said in err
    assert not output.exists()


def test_epochs_that_leave_no_division_after_warmup_are_refused(tmp_path):
    with pytest.raises(AuditError, match="2 epochs with 2 warmup epochs: ncr divides only after warmup"):
        audit(tmp_path, ["ncr"], tmp_path / "out", 2, training={"warmup_epochs": 2})
