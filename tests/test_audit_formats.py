"""``hfncl audit`` on every data format the project reads: SCAN precomp with CC152K's ``.tsv`` captions, an imagefolder
of raw images through a pixel tower, and a format a package registers (``tests/extension_package``'s ``npz_pairs``).

The fast tests score with an untrained model saved as a checkpoint (``--model``: nothing trains) and write the
cleaned split of a chosen set of flagged pairs; the slow ones train NCR on each format end to end. Bad input of every
format is refused in one line before anything trains.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import re
import shutil
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_DATA, tiny_config, untrained_model
from PIL import Image
from test_extension_points import PACKAGE, npz_benchmark

from hfncl import cli, registry
from hfncl.audit import AuditError, run_audit, write_clean_split
from hfncl.audit.data import read_audit_data
from hfncl.data import load_pixel_splits, load_precomp_split, read_captions
from hfncl.experiment import DataArguments, ModelArguments, run_experiment

TAB_FIELDS = 3
"""Fields of the CC152K-style rows written here: image id, caption, and one more the cleaned split must keep."""
NCR_TRAINING = {
    "batch_size": 16, "eval_batch_size": 32, "warmup_epochs": 1, "lr_decay_epochs": [], "learning_rate": 2e-3
}


@pytest.fixture(scope="module")
def tsv_dir(tiny_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CC152K's layout: the tiny training split's features with one caption per image in ``train_caps.tsv``, rows
    ``img_NNNN.jpg<TAB>caption<TAB>source``, image 0's caption quoted (csv must read and write it back alike)."""
    directory = tmp_path_factory.mktemp("cc152k")
    shutil.copy(tiny_data_dir / "train_ims.npy", directory / "train_ims.npy")
    every = list(read_captions(tiny_data_dir / "train_caps.txt"))
    captions = every[:: len(every) // TINY_DATA.num_train]
    captions[0] = 'a "quoted" caption'
    with (directory / "train_caps.tsv").open("w", encoding="utf-8", newline="") as file:
        csv.writer(file, delimiter="\t", lineterminator="\n").writerows(
            [f"img_{i:04d}.jpg", caption, f"source {i}"] for i, caption in enumerate(captions)
        )
    return directory


@pytest.fixture
def npz_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example package's ``npz_pairs`` format served as installed in the ``hfncl.data_formats`` group."""
    monkeypatch.syspath_prepend(str(PACKAGE))
    point = EntryPoint("npz_pairs", "hfncl_extension_example.formats:NPZ_PAIRS", "hfncl.data_formats")
    installed = registry.entry_points

    def entry_points(group: str) -> list[EntryPoint]:
        return [*installed(group=group), *([point] if group == point.group else [])]

    monkeypatch.setattr(registry, "entry_points", entry_points)


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """Training fails the test: what is refused must be refused before it."""

    def train_method(*args, **kwargs):
        raise AssertionError("the audit trained before refusing")

    monkeypatch.setattr("hfncl.audit.train_method", train_method)


def every_other_flagged(pairs: int) -> np.ndarray:
    """A flagged mask: the odd pairs."""
    return np.arange(pairs) % 2 == 1


def page_thumbnails(page: str) -> list[Image.Image]:
    """The inline JPEG thumbnails of an audit page, decoded."""
    found = re.findall(r'src="data:image/jpeg;base64,([^"]+)"', page)
    return [Image.open(io.BytesIO(base64.b64decode(data))) for data in found]


def test_a_tsv_split_is_audited_with_cc152k_image_ids_and_cleaned_into_a_tsv(tsv_dir, tmp_path, capsys):
    rows = list(csv.reader((tsv_dir / "train_caps.tsv").open(encoding="utf-8", newline=""), delimiter="\t"))
    model = untrained_model(tmp_path / "model", [row[1] for row in rows], image_dim=TINY_DATA.feature_dim)
    result = run_audit(tsv_dir, output_dir=tmp_path / "out", model=model, progress=False)
    table = result.table.to_pandas()
    assert list(table["image_id"]) == [row[0] for row in rows] and list(table["caption"]) == [row[1] for row in rows]
    assert rows[0][1] == 'a "quoted" caption' and "img_0000.jpg" in (tmp_path / "out" / "audit.html").read_text()

    data = read_audit_data(tsv_dir, "train", "auto", None)
    flagged = every_other_flagged(len(rows))
    files = write_clean_split(data, flagged, tmp_path / "out", "train_clean")
    assert files == [tmp_path / "out" / "train_clean_ims.npy", tmp_path / "out" / "train_clean_caps.tsv"]
    assert not (tmp_path / "out" / "train_clean_caps.txt").exists()
    kept = np.flatnonzero(~flagged)
    written = list(csv.reader(files[1].open(encoding="utf-8", newline=""), delimiter="\t"))
    assert written == [rows[i] for i in kept] and len(written[0]) == TAB_FIELDS  # every field, the quotes read back
    cleaned = load_precomp_split(tmp_path / "out", "train_clean")
    assert list(cleaned.captions) == [rows[i][1] for i in kept]
    np.testing.assert_array_equal(cleaned.regions(np.arange(len(kept))), np.load(tsv_dir / "train_ims.npy")[kept])

    command = ["audit", "--data-dir", str(tsv_dir), "--output-dir", str(tmp_path / "cli"), "--model", str(model)]
    assert cli.main(command) == 0
    assert capsys.readouterr().out.startswith(f"{len(rows)} pairs, ")


def test_an_imagefolder_is_audited_through_the_pixel_tower_with_thumbnails_and_cleaned_into_an_imagefolder(
    raw_dir, tower_dir, tmp_path
):
    train = json.loads("[" + ",".join((raw_dir / "train" / "metadata.jsonl").read_text().splitlines()) + "]")
    captions = [caption for row in train for caption in row["captions"]]
    model = untrained_model(tmp_path / "model", captions, tower=tower_dir)
    table = run_audit(raw_dir, output_dir=tmp_path / "out", model=model, progress=False).table.to_pandas()
    files = [str((raw_dir / "train" / row["file_name"]).resolve()) for row in train]
    assert list(table["caption"]) == captions and list(table["image_id"]) == [files[i] for i in table["image"]]
    thumbnails = page_thumbnails((tmp_path / "out" / "audit.html").read_text())
    assert len(thumbnails) == len(train) * 2 and all(max(t.size) <= 96 for t in thumbnails)  # one per shown pair

    data = read_audit_data(raw_dir, "train", "auto", str(tower_dir))
    flagged = every_other_flagged(len(captions))
    assert write_clean_split(data, flagged, tmp_path / "out", "train_clean") == [
        tmp_path / "out" / "train_clean" / "train" / "metadata.jsonl"
    ]
    links = sorted((tmp_path / "out" / "train_clean" / "train").glob("*.png"))
    originals = raw_dir.resolve() / "train"
    assert links and all(link.is_symlink() and link.resolve() == originals / link.name for link in links)
    cleaned = load_pixel_splits(tmp_path / "out" / "train_clean", ["train"], str(tower_dir))["train"]
    kept = np.flatnonzero(~flagged)
    assert cleaned.captions_per_image == 1 and list(cleaned.captions) == [captions[i] for i in kept]
    np.testing.assert_array_equal(cleaned.image_inputs(range(len(kept))), data.split.image_inputs(kept // 2))


def test_a_registered_format_is_audited_and_a_clean_split_it_cannot_write_is_refused_before_training(
    npz_registered, no_training, micro_data_dir, tmp_path, capsys
):
    data_dir = npz_benchmark(micro_data_dir, tmp_path / "npz")
    captions = list(read_captions(micro_data_dir / "train_caps.txt"))
    model = untrained_model(tmp_path / "model", captions, image_dim=8)
    table = run_audit(data_dir, output_dir=tmp_path / "out", model=model, progress=False).table
    assert table["caption"] == captions and table["image_id"] == [str(i) for i in np.arange(len(captions)) // 5]

    said = "data format 'npz_pairs' cannot write a cleaned split (its DataFormat has no write_pairs)"
    with pytest.raises(AuditError, match=re.escape(said)):
        run_audit(data_dir, ["ncr"], tmp_path / "refused", write_clean="train_clean")
    command = ["audit", "--data-dir", str(data_dir), "--output-dir", str(tmp_path / "refused"), "--plugins", "ncr"]
    capsys.readouterr()  # saving the model wrote progress bars
    assert cli.main([*command, "--write-clean", "train_clean"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and not (tmp_path / "refused").exists()


def _bad_data(case: str, root: Path, tiny_data_dir: Path, raw_dir: Path) -> Path:
    """The data of a bad-input case."""
    if case in ("tsv row without a caption", "precomp with --image-tower"):
        shutil.copy(tiny_data_dir / "train_ims.npy", root / "train_ims.npy")
        rows = "".join(f"img_{i}.jpg\tcaption {i}\n" for i in range(TINY_DATA.num_train))
        rows = rows.replace("img_1.jpg\tcaption 1", "img_1.jpg") if "tsv" in case else rows
        (root / "train_caps.tsv").write_text(rows)
    elif case == "imagefolder without --image-tower":
        return raw_dir
    elif case in ("an image file missing", "no captions column"):
        shutil.copytree(raw_dir / "train", root / "train")
        metadata = root / "train" / "metadata.jsonl"
        text = metadata.read_text()
        bad = text.replace('"001.png"', '"absent.png"') if "missing" in case else text.replace('"captions"', '"text"')
        metadata.write_text(bad)
    return root


@pytest.mark.parametrize(
    ("case", "arguments", "said"),
    [
        ("tsv row without a caption", [], "train_caps.tsv:2: expected at least 2 tab-separated fields (image id, "),
        ("imagefolder without --image-tower", [], "is an imagefolder of raw images, but the model's image tower"),
        ("precomp with --image-tower", ["--image-tower"], "holds precomputed image features (precomp), but the"),
        ("an image file missing", ["--image-tower"], "metadata.jsonl row 1: no image file"),
        ("no captions column", ["--image-tower"], "has no caption column 'captions'"),
        ("unknown format", ["--data-format", "hdf5"], "data_format must be one of"),
        ("no data directory", [], "does not exist or is not a directory"),
    ],
)
def test_bad_input_of_every_format_is_one_line_before_training(
    case, arguments, said, no_training, tiny_data_dir, raw_dir, tower_dir, tmp_path, capsys
):
    root = tmp_path / "data"
    if case != "no data directory":
        root.mkdir()
        root = _bad_data(case, root, tiny_data_dir, raw_dir)
    options = [*arguments, str(tower_dir)] if arguments == ["--image-tower"] else arguments
    output = tmp_path / "out"
    command = ["audit", "--data-dir", str(root), "--output-dir", str(output), "--plugins", "ncr", *options]
    assert cli.main(command) == 1
    err = capsys.readouterr().err
    assert err.startswith("hfncl: error: ") and err.count("\n") == 1 and said in err
    assert not output.exists()


@pytest.mark.slow
def test_ncr_audits_a_tsv_split_and_its_cleaned_tsv_split_trains(tsv_dir, tmp_path):
    result = run_audit(
        tsv_dir, ["ncr"], tmp_path / "out", 3, write_clean="train_clean",
        model_args=ModelArguments(embed_dim=32, word_dim=16), training=NCR_TRAINING, progress=False,
    )
    assert len(result.table) == TINY_DATA.num_train and "clean_prob" in result.table.column_names
    assert result.clean_files[1].name == "train_clean_caps.tsv"
    kept = [row["caption"] for row in result.table if not row["flagged"]]
    assert list(load_precomp_split(tmp_path / "out", "train_clean").captions) == kept


@pytest.mark.slow
def test_ncr_audits_raw_images_through_a_clip_tower_and_its_cleaned_imagefolder_trains(
    raw_dir, tower_dir, tmp_path, offline
):
    model_args = ModelArguments(embed_dim=8, word_dim=8, image_tower=str(tower_dir), image_pooling="pooler")
    training = NCR_TRAINING | {"batch_size": 4}
    output = tmp_path / "out"
    table = run_audit(raw_dir, ["ncr"], output, 3, model_args=model_args, training=training, progress=False).table
    assert len(table) == 14 and "clean_prob" in table.column_names and Path(table["image_id"][0]).is_file()
    assert len(page_thumbnails((tmp_path / "out" / "audit.html").read_text())) == 14
    again = run_audit(raw_dir, output_dir=tmp_path / "again", model=tmp_path / "out" / "model", progress=False).table
    np.testing.assert_allclose(again["similarity"], table["similarity"], rtol=1e-5)  # the saved pixel model rescored

    # 7 random images and a random tower learn little in 3 epochs (every pair may be flagged): half the pairs kept
    data = read_audit_data(raw_dir, "train", "auto", str(tower_dir))
    write_clean_split(data, every_other_flagged(len(table)), tmp_path / "out", "train_clean")
    cleaned = tmp_path / "out" / "train_clean"
    for split in ("validation", "test"):
        shutil.copytree(raw_dir / split, cleaned / split)
    config = tiny_config(tmp_path / "run", ["vsepp"], epochs=1, warmup_epochs=0, batch_size=4, lr_decay_epochs=[])
    trained = run_experiment(DataArguments(data_dir=str(cleaned)), config, model_args)
    assert "rsum" in trained["test"]


@pytest.mark.slow
def test_ncr_audits_a_registered_format(npz_registered, micro_data_dir, tmp_path):
    data_dir = npz_benchmark(micro_data_dir, tmp_path / "npz")
    table = run_audit(
        data_dir, ["ncr"], tmp_path / "out", 3, model_args=ModelArguments(embed_dim=8, word_dim=8),
        training=NCR_TRAINING, progress=False,
    ).table
    assert len(table) == 80 and "clean_prob" in table.column_names
    assert (tmp_path / "out" / "model" / "vocab.json").is_file()
