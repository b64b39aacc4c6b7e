"""Noisy correspondence: NCR caption-level and DECL/RCL image-level protocols."""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

import numpy as np
import pytest
from _shared_data import published_file

from hfncl.data import (
    DataFormatError,
    caption_level_noise,
    caption_pairing,
    clean_mask,
    image_level_noise,
    load_noise_index,
    make_noise,
    save_noise_index,
    shuffle_subset,
)
from hfncl.data import noise as noise_module
from hfncl.data.noise import pairing_protocol, protocol_names
from hfncl.registry import PluginError
from hfncl.types import NoiseProtocol


def test_caption_level_noise_is_seeded_and_keeps_every_image_k_times():
    index = caption_level_noise(200, 5, 0.4, seed=3)
    assert index.shape == (1000,) and index.dtype == np.int64
    np.testing.assert_array_equal(index, caption_level_noise(200, 5, 0.4, seed=3))
    assert not np.array_equal(index, caption_level_noise(200, 5, 0.4, seed=4))
    np.testing.assert_array_equal(np.bincount(index, minlength=200), np.full(200, 5))


def test_shuffle_subset_repairs_exactly_the_picked_positions():
    values = np.arange(1000) // 5
    shuffled, picked = shuffle_subset(values, 0.3, seed=0)
    assert len(picked) == 300 and len(np.unique(picked)) == 300
    untouched = np.setdiff1d(np.arange(1000), picked)
    np.testing.assert_array_equal(shuffled[untouched], values[untouched])
    np.testing.assert_array_equal(np.sort(shuffled[picked]), np.sort(values[picked]))
    np.testing.assert_array_equal(shuffled, caption_level_noise(200, 5, 0.3, seed=0))


@pytest.mark.parametrize("ratio", [0.2, 0.5, 0.8])
def test_caption_level_clean_fraction_is_about_one_minus_ratio(ratio):
    index = caption_level_noise(2000, 5, ratio, seed=0)
    noisy = 1.0 - clean_mask(index, 5).mean()
    assert ratio - 0.01 <= noisy <= ratio


def test_image_level_noise_permutes_the_picked_images():
    index = image_level_noise(1000, 0.5, seed=1)
    assert index.shape == (1000,) and index.dtype == np.int64
    np.testing.assert_array_equal(np.sort(index), np.arange(1000))
    assert 0.49 <= (index != np.arange(1000)).mean() <= 0.5
    np.testing.assert_array_equal(index, image_level_noise(1000, 0.5, seed=1))
    assert not np.array_equal(index, image_level_noise(1000, 0.5, seed=2))


def test_zero_ratio_is_clean_and_bad_ratio_is_rejected():
    np.testing.assert_array_equal(caption_level_noise(4, 5, 0.0, seed=0), np.arange(20) // 5)
    with pytest.raises(ValueError, match="ratio"):
        image_level_noise(10, 1.5, seed=0)


def test_caption_pairing_expands_image_level_indices():
    image_level = np.array([2, 0, 1])
    np.testing.assert_array_equal(caption_pairing(image_level, 3, 2), [2, 2, 0, 0, 1, 1])
    caption_level = np.array([0, 1, 1, 2, 2, 0], dtype=np.int32)
    out = caption_pairing(caption_level, 3, 2)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, caption_level)


@pytest.mark.parametrize(
    ("index", "match"),
    [
        (np.zeros(5, np.int64), r"shape \(5,\), expected \(6,\) .* or \(3,\)"),
        (np.zeros((3, 2), np.int64), r"shape \(3, 2\)"),
        (np.array([0, 1, 3]), "entry 2 is 3, expected an image index in 0..2"),
        (np.array([0, -1, 2]), "entry 1 is -1"),
        (np.array([0.0, 1.0, 2.0]), "dtype float64, expected integer"),
    ],
)
def test_caption_pairing_rejects_bad_indices(index, match):
    with pytest.raises(DataFormatError, match=match):
        caption_pairing(index, 3, 2)


def test_clean_mask():
    np.testing.assert_array_equal(clean_mask(np.array([0, 1, 1, 1, 0, 2]), 2), [True, False, True, True, False, True])


@pytest.mark.parametrize("kind", ["caption", "image"])
def test_save_and_load_roundtrip(tmp_path, kind):
    index = caption_level_noise(50, 5, 0.5, 0) if kind == "caption" else image_level_noise(50, 0.5, 0)
    path = save_noise_index(tmp_path / "sub" / "noise", index)
    assert path == tmp_path / "sub" / "noise.npy"
    loaded = load_noise_index(path, 50, 5)
    assert loaded.shape == (250,)
    np.testing.assert_array_equal(loaded, caption_pairing(index, 50, 5))


def test_make_noise():
    np.testing.assert_array_equal(make_noise("caption", 20, 5, 0.5, 7), caption_level_noise(20, 5, 0.5, 7))
    np.testing.assert_array_equal(make_noise("image", 20, 5, 0.5, 7), np.repeat(image_level_noise(20, 0.5, 7), 5))
    with pytest.raises(ValueError, match="noise kind"):
        make_noise("label", 20, 5, 0.5, 7)


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(DataFormatError, match="not found"):
        load_noise_index(tmp_path / "absent.npy", 3, 5)
    path = tmp_path / "short.npy"
    np.save(path, np.zeros(4, np.int64))
    with pytest.raises(DataFormatError, match=r"short\.npy: shape \(4,\)"):
        load_noise_index(path, 3, 5)
    np.save(path, np.array([{"a": 1}], dtype=object))
    with pytest.raises(DataFormatError, match=r"short\.npy: not a readable"):
        load_noise_index(path, 3, 5)


@pytest.mark.parametrize(
    ("name", "num_images", "ratio"),
    [
        ("bicro_f30k_precomp_0.2.npy", 29000, 0.2),
        ("bicro_f30k_precomp_0.5.npy", 29000, 0.5),
        ("rcl_f30k_precomp_noise_inx_0.2.npy", 29000, 0.2),
        ("rcl_f30k_precomp_noise_inx_0.5.npy", 29000, 0.5),
        ("rcl_f30k_precomp_noise_inx_0.8.npy", 29000, 0.8),
        ("rcl_coco_precomp_noise_inx_0.2.npy", 113287, 0.2),
    ],
)
def test_published_noise_indices_read_as_they_are(name, num_images, ratio):
    pairing = load_noise_index(published_file(name), num_images, 5)
    assert pairing.shape == (num_images * 5,) and pairing.dtype == np.int64
    assert abs(clean_mask(pairing, 5).mean() - (1.0 - ratio)) < 0.03


RCL_FILES = [
    ("rcl_f30k_precomp_noise_inx_0.2.npy", 29000, 0.2),
    ("rcl_f30k_precomp_noise_inx_0.5.npy", 29000, 0.5),
    ("rcl_f30k_precomp_noise_inx_0.8.npy", 29000, 0.8),
    ("rcl_coco_precomp_noise_inx_0.2.npy", 113287, 0.2),
]


def _fixed_points_among_picked(index: np.ndarray, ratio: float) -> int:
    """``int(ratio * n)`` images picked (DECL's rule) less those that moved: the picked ones left on their own image."""
    return int(ratio * len(index)) - int((index != np.arange(len(index))).sum())


@pytest.mark.parametrize(("name", "num_images", "ratio"), RCL_FILES)
def test_published_decl_files_permute_the_picked_images_among_themselves(name, num_images, ratio):
    index = np.load(published_file(name), allow_pickle=False)
    assert index.shape == (num_images,) and index.dtype == np.int64
    np.testing.assert_array_equal(np.sort(index), np.arange(num_images))  # a permutation of the images
    moved = np.flatnonzero(index != np.arange(num_images))
    np.testing.assert_array_equal(np.sort(index[moved]), moved)  # the moved images take each other's places
    assert 0 <= _fixed_points_among_picked(index, ratio) <= 4  # int(ratio * n) picked; Poisson(1) fixed points
    pairing = load_noise_index(published_file(name), num_images, 5)
    assert (pairing.reshape(num_images, 5) == index[:, None]).all()  # all 5 captions of an image move together
    assert pairing_protocol(pairing, 5) == "decl-image"


def test_published_decl_files_are_not_derangements():
    """Measured 2026-12-06: 1, 0, 1 and 1 of the picked images stay on their own image (F30K 20 / 50 / 80%, COCO 20%):
    DECL's code shuffles the picked images, it does not forbid fixed points; so does the generator."""
    fixed = [_fixed_points_among_picked(np.load(published_file(name)), ratio) for name, _, ratio in RCL_FILES]
    assert fixed == [1, 0, 1, 1]


@pytest.mark.parametrize("ratio", [0.2, 0.4, 0.8])
def test_generated_decl_noise_is_the_published_kind(ratio):
    index = image_level_noise(5000, ratio, seed=3)
    shuffled, picked = shuffle_subset(np.arange(5000), ratio, seed=3)
    np.testing.assert_array_equal(index, shuffled)
    assert len(picked) == int(ratio * 5000)  # the picked fraction is exact
    np.testing.assert_array_equal(np.sort(index), np.arange(5000))
    moved = np.flatnonzero(index != np.arange(5000))
    assert set(moved) <= set(picked) and np.array_equal(np.sort(index[moved]), moved)
    assert _fixed_points_among_picked(index, ratio) == len(picked) - len(moved)


def test_generated_decl_fixed_points_follow_a_uniform_permutation_not_a_derangement():
    """A uniform permutation of m picked images leaves Poisson(1) of them in place (P(none) = 1/e); a derangement none.
    Over 2000 seeds: the share without a fixed point and the mean count, against 1/e and 1 (5 sd of the binomial)."""
    fixed = np.array([_fixed_points_among_picked(image_level_noise(200, 0.4, seed), 0.4) for seed in range(2000)])
    share_none, sd = (fixed == 0).mean(), np.sqrt(np.exp(-1) * (1 - np.exp(-1)) / 2000)
    assert abs(share_none - np.exp(-1)) < 5 * sd
    assert abs(fixed.mean() - 1.0) < 5 * np.sqrt(1.0 / 2000)


def test_pairing_protocol_names_each_protocol():
    assert pairing_protocol(make_noise("image", 100, 5, 0.4, 0), 5) == "decl-image"
    assert pairing_protocol(make_noise("caption", 100, 5, 0.4, 0), 5) == "ncr-caption"
    assert pairing_protocol(np.arange(500) // 5, 5) is None
    assert pairing_protocol(image_level_noise(100, 0.4, 0), 1) == "ncr-caption"  # one caption per image: the same
    assert protocol_names() == {"caption": "ncr-caption", "image": "decl-image"}


ANOTHER_CAPTION_PROTOCOL = NoiseProtocol(kind="caption", source="a test")
NOT_A_PROTOCOL = {"kind": "caption"}


def _registered(monkeypatch, entries):
    points = {name: EntryPoint(name, f"{__name__}:{attribute}", "hfncl.noise_protocols") for name, attribute in entries}
    monkeypatch.setattr(noise_module, "registered_entry_points", lambda group, what: points)


def test_protocol_names_come_from_the_entry_points_the_methods_register():
    registered = {e.name: e.value for e in entry_points(group="hfncl.noise_protocols")}
    assert registered == {
        "ncr-caption": "hfncl_plugins.ncr:CAPTION_NOISE",
        "decl-image": "hfncl_plugins.decl:IMAGE_NOISE",
    }


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([("a", "ANOTHER_CAPTION_PROTOCOL"), ("b", "ANOTHER_CAPTION_PROTOCOL")], "both draw 'caption' noise"),
        ([("a", "NOT_A_PROTOCOL")], "must be a NoiseProtocol"),
        ([("a", "ANOTHER_CAPTION_PROTOCOL")], "for kind(s) ['image']"),
    ],
)
def test_protocol_names_refuse_a_bad_registry_in_one_line(monkeypatch, entries, message):
    _registered(monkeypatch, entries)
    with pytest.raises(PluginError) as raised:
        protocol_names()
    assert message in str(raised.value) and "\n" not in str(raised.value)
