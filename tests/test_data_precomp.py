"""SCAN precomp reading: Arrow conversion, caching and the format errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import hfncl.data.precomp as precomp
from hfncl.data import (
    DataFormatError,
    iter_feature_chunks,
    load_precomp_split,
    read_captions,
)
from hfncl.data.captions import CaptionStore

NUM_IMAGES, REGIONS, DIM, K = 6, 3, 8, 5


def write_split(
    directory: Path, split: str = "train", *, features: np.ndarray | None = None, captions: list[str] | None = None
) -> np.ndarray:
    """Write ``{split}_ims.npy`` and ``{split}_caps.txt``; return the features."""
    directory.mkdir(parents=True, exist_ok=True)
    if features is None:
        features = np.random.default_rng(0).random((NUM_IMAGES, REGIONS, DIM), dtype=np.float32)
    if captions is None:
        captions = [f"Image {i // K} caption {i % K}." for i in range(len(features) * K)]
    np.save(directory / f"{split}_ims.npy", features)
    (directory / f"{split}_caps.txt").write_text("\n".join(captions) + "\n", encoding="utf-8")
    return features


@pytest.fixture
def data_dir(tmp_path) -> Path:
    directory = tmp_path / "f30k_precomp"
    write_split(directory)
    return directory


def load(data_dir: Path, split: str = "train", **kwargs):
    kwargs.setdefault("cache_dir", data_dir.parent / "cache")
    return load_precomp_split(data_dir, split, **kwargs)


def test_load_reads_features_and_captions(data_dir):
    features = np.load(data_dir / "train_ims.npy")
    split = load(data_dir)
    assert (split.num_images, split.num_captions, split.captions_per_image) == (NUM_IMAGES, NUM_IMAGES * K, K)
    assert split.name == "f30k_precomp" and split.split == "train"
    assert split.region_shape == (REGIONS, DIM)
    assert split.images.column_names == ["regions"]
    assert split.images.features["regions"].dtype == "float32"
    assert split.captions[7] == "Image 1 caption 2."
    np.testing.assert_array_equal(split.regions(range(NUM_IMAGES)), features)
    assert "caption 0" not in repr(split)  # the caption list is left out of the repr


def test_regions_accessor_keeps_order_and_repeats(data_dir):
    features = np.load(data_dir / "train_ims.npy")
    split = load(data_dir)
    out = split.regions(np.array([4, 1, 4, 0]))
    assert out.dtype == np.float32 and out.shape == (4, REGIONS, DIM)
    np.testing.assert_array_equal(out, features[[4, 1, 4, 0]])
    assert split.regions([]).shape == (0, REGIONS, DIM)
    with pytest.raises(IndexError, match="image index 6"):
        split.regions([1, 6])


def test_an_images_dataset_with_an_indices_mapping_is_refused(data_dir):
    split = load(data_dir)
    shuffled = split.images.select([2, 0, 1])
    with pytest.raises(ValueError, match=r"indices mapping .*flatten_indices"):
        dataclasses.replace(split, images=shuffled)
    flat = dataclasses.replace(split, images=shuffled.flatten_indices())
    np.testing.assert_array_equal(flat.regions([0]), split.regions([2]))


def test_second_load_reuses_the_cache(data_dir, monkeypatch):
    first = load(data_dir)
    files = [f["filename"] for f in first.images.cache_files]
    assert all(Path(f).is_relative_to(data_dir.parent / "cache") for f in files)

    def fail(**_kwargs):
        raise AssertionError("the cache was rebuilt")

    monkeypatch.setattr(precomp, "_region_rows", fail)
    second = load(data_dir)
    assert [f["filename"] for f in second.images.cache_files] == files
    np.testing.assert_array_equal(second.regions([2]), first.regions([2]))


def test_changed_file_or_dtype_gets_a_new_cache(data_dir):
    files = load(data_dir).images.cache_files
    assert load(data_dir, feature_dtype="float16").images.cache_files != files
    new = write_split(data_dir, features=np.ones((NUM_IMAGES, REGIONS, DIM), np.float32))
    rebuilt = load(data_dir)
    assert rebuilt.images.cache_files != files
    np.testing.assert_array_equal(rebuilt.regions([0]), new[:1])


def test_default_cache_dir_is_hfncl_cache_or_under_home(data_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("HFNCL_CACHE", str(tmp_path / "cache"))
    split = load_precomp_split(data_dir, "train")
    assert Path(split.images.cache_files[0]["filename"]).is_relative_to(tmp_path / "cache" / "precomp")
    monkeypatch.delenv("HFNCL_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    split = load_precomp_split(data_dir, "train", feature_dtype="float16")
    root = tmp_path / "home" / ".cache" / "hfncl" / "precomp"
    assert Path(split.images.cache_files[0]["filename"]).is_relative_to(root)


def test_float16_storage(data_dir):
    features = np.load(data_dir / "train_ims.npy")
    split = load(data_dir, feature_dtype="float16")
    assert split.images.features["regions"].dtype == "float16"
    assert str(split.images.data.schema.field("regions").type.storage_type.value_type.value_type) == "halffloat"
    out = split.regions([0, 5])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, features[[0, 5]], rtol=1e-3)


def test_float16_overflow_is_an_error(tmp_path):
    features = np.zeros((NUM_IMAGES, REGIONS, DIM), np.float32)
    features[3, 0, 0] = 1e6
    write_split(tmp_path / "d", features=features)
    with pytest.raises(DataFormatError, match="image 3 has a feature beyond"):
        load(tmp_path / "d", feature_dtype="float16")
    assert load(tmp_path / "d").regions([3])[0, 0, 0] == 1e6


def test_features_are_streamed_in_chunks_from_a_memory_map(tmp_path, monkeypatch):
    features = write_split(tmp_path / "d", features=np.random.default_rng(1).random((7, 2, 4), dtype=np.float32))
    chunks = list(iter_feature_chunks(tmp_path / "d" / "train_ims.npy", chunk_size=3))
    assert [start for start, _ in chunks] == [0, 3, 6]
    assert [len(chunk) for _, chunk in chunks] == [3, 3, 1]

    modes = []
    real_load = np.load

    def recording_load(*args, **kwargs):
        modes.append(kwargs.get("mmap_mode"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(np, "load", recording_load)
    split = load(tmp_path / "d", chunk_size=2)
    assert modes and set(modes) == {"r"}
    np.testing.assert_array_equal(split.regions(range(7)), features)


def test_one_caption_per_image(tmp_path):
    write_split(tmp_path / "d", captions=[f"caption {i}" for i in range(NUM_IMAGES)])
    assert load(tmp_path / "d").captions_per_image == 1


def test_cc152k_tsv_captions(tmp_path):
    directory = tmp_path / "cc152k_precomp"
    write_split(directory)
    (directory / "train_caps.txt").unlink()
    rows = [f"img{i}\t  caption number {i} \textra" for i in range(NUM_IMAGES)]
    (directory / "train_caps.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    split = load(directory)
    assert split.captions_per_image == 1
    assert split.captions[2] == "caption number 2"


def test_caption_lines_are_stripped_and_trailing_blank_lines_ignored(tmp_path):
    path = tmp_path / "caps.txt"
    path.write_bytes(b"\xef\xbb\xbf first \r\nsecond\r\n\r\n")
    assert read_captions(path) == ["first", "second"]
    assert isinstance(read_captions(path), CaptionStore)


# --- errors -----------------------------------------------------------------------------


def test_missing_directory(tmp_path):
    with pytest.raises(DataFormatError, match="does not exist"):
        load_precomp_split(tmp_path / "nope", "train")


def test_missing_features_file_names_present_splits(data_dir):
    with pytest.raises(DataFormatError, match=r"dev_ims\.npy.*splits present: \['train'\]"):
        load(data_dir, "dev")


def test_missing_captions_file_names_both_candidates(data_dir):
    (data_dir / "train_caps.txt").unlink()
    with pytest.raises(DataFormatError, match=r"train_caps\.txt and train_caps\.tsv"):
        load(data_dir)


@pytest.mark.parametrize("num_captions", [NUM_IMAGES * K - 1, NUM_IMAGES - 1])
def test_caption_count_must_be_a_multiple_of_image_count(tmp_path, num_captions):
    write_split(tmp_path / "d", captions=[f"c {i}" for i in range(num_captions)])
    with pytest.raises(DataFormatError, match=f"has {num_captions} captions but .* has {NUM_IMAGES} images"):
        load(tmp_path / "d")


def test_wrong_feature_dim(data_dir):
    expected = r"train_ims\.npy: region features have shape \(6, 3, 8\), expected \(N_images, R, 2048\)"
    with pytest.raises(DataFormatError, match=expected):
        load(data_dir, expected_feature_dim=2048)


def test_wrong_region_count(data_dir):
    with pytest.raises(DataFormatError, match=r"shape \(6, 3, 8\), expected \(N_images, 36, 8\)"):
        load(data_dir, expected_regions=36, expected_feature_dim=DIM)


def test_wrong_ndim(tmp_path):
    write_split(tmp_path / "d", features=np.zeros((NUM_IMAGES, DIM), np.float32))
    with pytest.raises(DataFormatError, match=r"shape \(6, 8\), expected \(N_images, R, D\)"):
        load(tmp_path / "d")


def test_integer_features_are_rejected(tmp_path):
    write_split(tmp_path / "d", features=np.zeros((NUM_IMAGES, REGIONS, DIM), np.int32))
    with pytest.raises(DataFormatError, match="expected floating-point features, found dtype int32"):
        load(tmp_path / "d")


def test_unreadable_features_file(data_dir):
    (data_dir / "train_ims.npy").write_bytes(b"not an npy file")
    with pytest.raises(DataFormatError, match=r"train_ims\.npy: not a readable \.npy"):
        load(data_dir)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_feature_names_the_first_bad_image(tmp_path, bad):
    features = np.zeros((NUM_IMAGES, REGIONS, DIM), np.float32)
    features[4, 2, 1] = bad
    features[5, 0, 0] = bad
    write_split(tmp_path / "d", features=features)
    for _ in range(2):  # a failed build leaves no cache behind
        with pytest.raises(DataFormatError, match=r"train_ims\.npy: image 4 has a NaN or infinite feature"):
            load(tmp_path / "d", chunk_size=4)
    assert load(tmp_path / "d", check_finite=False).num_images == NUM_IMAGES


@pytest.mark.parametrize("line", ["", "   \t"])
def test_empty_caption_line_names_file_and_line(tmp_path, line):
    captions = [f"c {i}" for i in range(NUM_IMAGES * K)]
    captions[11] = line
    write_split(tmp_path / "d", captions=captions)
    with pytest.raises(DataFormatError, match=r"train_caps\.txt:12: empty caption"):
        load(tmp_path / "d")


def test_short_tsv_line_names_file_and_line(tmp_path):
    path = tmp_path / "train_caps.tsv"
    path.write_text("a\tfirst caption\nb second caption without tab\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"train_caps\.tsv:2: expected at least 2 tab-separated fields"):
        read_captions(path)


def test_non_utf8_captions_name_file_and_line(tmp_path):
    path = tmp_path / "train_caps.txt"
    path.write_bytes(b"fine\nalso fine\ncaf\xe9 latin-1\n")
    with pytest.raises(DataFormatError, match=r"train_caps\.txt:3: not UTF-8"):
        read_captions(path)


def test_empty_captions_file(tmp_path):
    path = tmp_path / "train_caps.txt"
    path.write_text("\n")
    with pytest.raises(DataFormatError, match="no captions"):
        read_captions(path)


def test_invalid_options(data_dir):
    with pytest.raises(ValueError, match="feature_dtype"):
        load(data_dir, feature_dtype="bfloat16")
    with pytest.raises(ValueError, match="chunk_size"):
        load(data_dir, chunk_size=0)
