"""Category-labelled feature files (h5py / .mat / .npy readers) and symmetric / asymmetric label noise."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import scipy.sparse
from _shared_data import shared_data_dir
from scipy import stats

from hfncl.data import (
    DataFormatError,
    LabelNoise,
    asymmetric_label_noise,
    inject_label_noise,
    load_label_noise,
    load_labelled_arrays,
    load_labelled_dataset,
    next_class_transition,
    symmetric_label_noise,
)

RNG = np.random.default_rng(0)


def _split_arrays(n: int, num_classes: int, image_dim: int = 6, text_dim: int = 4) -> dict[str, np.ndarray]:
    labels = RNG.integers(0, num_classes, size=n)
    labels[:num_classes] = np.arange(num_classes)  # every class present
    return {
        "img": RNG.normal(size=(n, image_dim)).astype(np.float32),
        "txt": RNG.normal(size=(n, text_dim)).astype(np.float64),
        "lab": labels,
    }


def _one_hot(labels: np.ndarray, num_classes: int) -> np.ndarray:
    return np.eye(num_classes)[labels]


def _write_h5(path: Path, content: dict[str, np.ndarray], userblock: bytes | None = None) -> Path:
    with h5py.File(path, "w", userblock_size=512 if userblock else 0) as handle:
        for key, value in content.items():
            handle[key] = value
    if userblock:
        with open(path, "r+b") as raw:
            raw.write(userblock)
    return path


def _imgs_deep_file(path: Path, train: dict, test: dict, text_key: str = "texts") -> Path:
    content = {}
    for split, arrays in (("train", train), ("test", test)):
        content[f"{split}_imgs_deep"] = arrays["img"]
        content[f"{split}_{text_key}"] = arrays["txt"]
        content[f"{split}_imgs_labels"] = arrays["lab"] + 1  # counted from 1, as in the Wikipedia file
        content[f"{split}_texts_labels"] = arrays["lab"] + 1
    return _write_h5(path, content)


# ---------------------------------------------------------------- readers


def test_imgs_deep_h5_with_one_based_labels_and_the_head_of_test_as_validation(tmp_path):
    train, test = _split_arrays(30, 4), _split_arrays(12, 4)
    path = _imgs_deep_file(tmp_path / "wiki.h5py", train, test, text_key="text")
    data = load_labelled_dataset(path, label_base=1)
    assert (data.layout, data.valid_rule, data.num_classes) == ("imgs_deep", "head of test", 4)
    assert [data[s].num_samples for s in ("train", "valid", "test")] == [30, 6, 6]
    np.testing.assert_allclose(data.train.image_features, train["img"])
    np.testing.assert_allclose(data.train.text_features, train["txt"].astype(np.float32))
    np.testing.assert_array_equal(data.train.image_labels, train["lab"])
    np.testing.assert_allclose(data.valid.features("text"), test["txt"][:6].astype(np.float32))
    np.testing.assert_array_equal(data.test.text_labels, test["lab"][6:])
    np.testing.assert_allclose(data.test.features("image", [1, 0]), test["img"][[7, 6]])
    assert data.train.data.features["image"].length == 6 and data.train.feature_dim("text") == 4
    assert data.train.data.features["image_label"].num_classes == 4


def test_imgs_deep_without_label_base_names_the_out_of_range_label(tmp_path):
    path = _imgs_deep_file(tmp_path / "wiki.h5", _split_arrays(10, 3), _split_arrays(4, 3))
    with pytest.raises(
        DataFormatError, match=r"wiki\.h5\['.*_labels'\]: label 3 at row \d+ is out of range: expected 0\.\.2"
    ):
        load_labelled_dataset(path, num_classes=3)


def test_valid_size_moves_the_validation_boundary(tmp_path):
    path = _imgs_deep_file(tmp_path / "d.h5", _split_arrays(10, 3), _split_arrays(10, 3))
    data = load_labelled_dataset(path, label_base=1, valid_size=3)
    assert (data.valid.num_samples, data.test.num_samples) == (3, 7)
    with pytest.raises(ValueError, match=r"valid_size must be 0 \(no validation\) or in 1..9"):
        load_labelled_dataset(path, label_base=1, valid_size=10)


def test_valid_size_zero_keeps_the_whole_462_sample_wikipedia_test_split(tmp_path):
    """DMCM's Wikipedia protocol: all 462 test samples test, no validation split (Table 1 of the paper)."""
    train, test = _split_arrays(40, 10), _split_arrays(462, 10)
    path = _imgs_deep_file(tmp_path / "wiki.h5", train, test)
    halved = load_labelled_dataset(path, label_base=1)
    assert (halved.valid_rule, halved.valid.num_samples, halved.test.num_samples) == ("head of test", 231, 231)
    full = load_labelled_dataset(path, label_base=1, valid_size=0)
    assert (full.valid_rule, full.valid, full.train.num_samples, full.test.num_samples) == ("none", None, 40, 462)
    np.testing.assert_array_equal(full.test.image_labels, test["lab"])
    np.testing.assert_allclose(full.test.image_features, test["img"])
    with pytest.raises(KeyError, match="no 'valid' split"):
        full["valid"]


def test_tr_te_mat_with_one_hot_labels_sparse_texts_and_its_own_validation_split(tmp_path):
    splits = {"tr": _split_arrays(20, 5), "val": _split_arrays(6, 5), "te": _split_arrays(8, 5)}
    content = {}
    for prefix, arrays in splits.items():
        content |= {f"{prefix}_img": arrays["img"], f"{prefix}_txt": scipy.sparse.csc_matrix(arrays["txt"])}
        content |= {f"{prefix}_img_lab": _one_hot(arrays["lab"], 5), f"{prefix}_txt_lab": arrays["lab"][:, None]}
    scipy.io.savemat(tmp_path / "inria.mat", content)
    data = load_labelled_dataset(tmp_path / "inria.mat")
    assert (data.layout, data.valid_rule, data.num_classes) == ("tr_te", "file", 5)
    for split, prefix in (("train", "tr"), ("valid", "val"), ("test", "te")):
        np.testing.assert_array_equal(data[split].image_labels, splits[prefix]["lab"])
        np.testing.assert_array_equal(data[split].text_labels, splits[prefix]["lab"])
        np.testing.assert_allclose(data[split].image_features, splits[prefix]["img"])
        np.testing.assert_allclose(data[split].text_features, splits[prefix]["txt"].astype(np.float32))


def test_per_file_mat_directory_shares_image_labels_with_texts(tmp_path):
    for split, arrays in (("train", _split_arrays(16, 3)), ("test", _split_arrays(8, 3))):
        for name, value in (("img", arrays["img"]), ("txt", arrays["txt"]), ("img_lab", _one_hot(arrays["lab"], 3))):
            scipy.io.savemat(tmp_path / f"{split}_{name}.mat", {f"{split}_{name}": value})
        if split == "test":
            expected = arrays["lab"]
    data = load_labelled_dataset(tmp_path)
    assert (data.layout, data.num_classes) == ("per_file", 3)
    np.testing.assert_array_equal(data.test.text_labels, expected[4:])
    np.testing.assert_array_equal(data.test.image_labels, expected[4:])


def test_per_file_npy_directory_and_a_mat_file_with_the_wrong_variable(tmp_path):
    for split, arrays in (("train", _split_arrays(10, 2)), ("val", _split_arrays(4, 2)), ("test", _split_arrays(4, 2))):
        for name in ("img", "txt"):
            np.save(tmp_path / f"{split}_{name}.npy", arrays[name])
        np.save(tmp_path / f"{split}_img_lab.npy", arrays["lab"])
        np.save(tmp_path / f"{split}_txt_lab.npy", arrays["lab"])
    data = load_labelled_dataset(tmp_path)
    assert data.valid_rule == "file" and data.valid.num_samples == 4
    (tmp_path / "test_txt.npy").unlink()
    scipy.io.savemat(tmp_path / "test_txt.mat", {"texts": np.zeros((4, 4))})
    with pytest.raises(DataFormatError, match=r"test_txt\.mat: missing key 'test_txt'.*\['texts'\]"):
        load_labelled_dataset(tmp_path)


def test_matlab_v73_file_is_read_through_h5py_and_transposed(tmp_path):
    train, test = _split_arrays(9, 3), _split_arrays(4, 3)
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, HDF5 schema 1.00 .".ljust(116) + b"\0" * 8 + b"\0\x02IM"
    content = {}
    for prefix, arrays in (("tr", train), ("te", test)):  # MATLAB writes column-major: stored transposed
        content |= {f"{prefix}_img": arrays["img"].T, f"{prefix}_txt": arrays["txt"].T}
        content |= {
            f"{prefix}_img_lab": arrays["lab"][None, :].astype(float),
            f"{prefix}_txt_lab": arrays["lab"][None, :],
        }
    path = _write_h5(tmp_path / "big.mat", content, userblock=header)
    data = load_labelled_dataset(path)
    np.testing.assert_allclose(data.train.image_features, train["img"])
    np.testing.assert_array_equal(data.train.text_labels, train["lab"])
    np.testing.assert_allclose(data.test.text_features, test["txt"][2:].astype(np.float32))


def test_arrays_split_per_class_in_file_order(tmp_path):
    labels = np.repeat(np.arange(4), 10)[np.r_[0:40:2, 1:40:2]]  # two interleaved halves
    np.save(tmp_path / "labels.npy", labels[:, None])
    image = np.arange(40 * 3, dtype=np.float32).reshape(40, 3)
    np.save(tmp_path / "a.npy", image)
    np.save(tmp_path / "b.npy", -image[:, :2])
    data = load_labelled_arrays(tmp_path / "a.npy", tmp_path / "b.npy", tmp_path / "labels.npy")
    assert (data.layout, data.valid_rule, data.num_classes) == ("arrays", "per-class file order", 4)
    for split, (low, high) in (("train", (0, 8)), ("valid", (8, 9)), ("test", (9, 10))):
        rows = np.sort(np.concatenate([np.flatnonzero(labels == c)[low:high] for c in range(4)]))
        np.testing.assert_allclose(data[split].image_features, image[rows])
        np.testing.assert_array_equal(data[split].text_labels, labels[rows])
    with pytest.raises(ValueError, match="split_fractions"):
        load_labelled_arrays(
            tmp_path / "a.npy", tmp_path / "b.npy", tmp_path / "labels.npy", split_fractions=(0.5, 0.2, 0.2)
        )


def test_cache_is_reused_and_float16_storage_is_a_separate_entry(tmp_path):
    path = _imgs_deep_file(tmp_path / "d.h5", _split_arrays(10, 3), _split_arrays(4, 3))
    first = load_labelled_dataset(path, label_base=1, cache_dir=tmp_path / "cache")
    again = load_labelled_dataset(path, label_base=1, cache_dir=tmp_path / "cache")
    assert first.train.data.cache_files == again.train.data.cache_files
    half = load_labelled_dataset(path, label_base=1, cache_dir=tmp_path / "cache", feature_dtype="float16")
    assert half.train.data.cache_files != first.train.data.cache_files
    assert half.train.data.features["image"].feature.dtype == "float16"
    np.testing.assert_allclose(half.train.image_features, first.train.image_features, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda c: c.pop("train_imgs_labels"), r"d\.h5: missing key 'train_imgs_labels' \(train image_labels\)"),
        (
            lambda c: c.update(test_texts=c["test_texts"][:3]),
            r"d\.h5\['test_texts'\]: 3 feature rows but .*'test_texts_labels'\] has 4 labels",
        ),
        (
            lambda c: c.update(train_imgs_labels=c["train_imgs_labels"][:-1]),
            "has 9 labels but .* has 10: the modalities",
        ),
        (lambda c: c.update(train_imgs_labels=c["train_imgs_labels"] - 1), r"label 0 at row \d+ is below label_base=1"),
        (
            lambda c: c.update(train_imgs_labels=c["train_imgs_labels"] + 0.5),
            r"label \d\.5 at row 0 is not a whole number",
        ),
        (lambda c: c.update(train_imgs_labels=np.ones((10, 3))), "one-hot row 0 has 3 ones, expected exactly 1"),
        (lambda c: c.update(train_imgs_labels=np.full((10, 3), 2)), "must hold only 0 and 1"),
        (
            lambda c: c.update(train_imgs_deep=c["train_imgs_deep"][:, :, None]),
            r"features of shape \(10, 6, 1\), expected \(N, D\)",
        ),
        (
            lambda c: c.update(test_imgs_deep=c["test_imgs_deep"][:, :5]),
            r"feature dimensions \(5, 4\) differ from the train split's \(6, 4\)",
        ),
    ],
)
def test_malformed_files_name_the_file_key_and_expectation(tmp_path, edit, match):
    train, test = _split_arrays(10, 3), _split_arrays(4, 3)
    content = {}
    for split, arrays in (("train", train), ("test", test)):
        content |= {f"{split}_imgs_deep": arrays["img"], f"{split}_texts": arrays["txt"]}
        content |= {f"{split}_imgs_labels": arrays["lab"] + 1.0, f"{split}_texts_labels": arrays["lab"] + 1}
    edit(content)
    with pytest.raises(DataFormatError, match=match):
        load_labelled_dataset(_write_h5(tmp_path / "d.h5", content), label_base=1)


def test_nan_feature_and_unknown_layout_are_rejected(tmp_path):
    train, test = _split_arrays(10, 3), _split_arrays(4, 3)
    train["img"][7, 2] = np.nan
    path = _imgs_deep_file(tmp_path / "d.h5", train, test)
    with pytest.raises(DataFormatError, match=r"d\.h5\['train_imgs_deep'\]: row 7 has a NaN"):
        load_labelled_dataset(path, label_base=1)
    odd = _write_h5(tmp_path / "odd.h5", {"features": np.zeros((2, 2))})
    with pytest.raises(DataFormatError, match=r"odd\.h5: cannot tell the layout.*\['features'\]"):
        load_labelled_dataset(odd)
    with pytest.raises(DataFormatError, match="not found"):
        load_labelled_dataset(tmp_path / "absent.h5")


def test_a_named_layout_reads_what_several_recognise_and_a_layout_that_does_not_fit_is_named(tmp_path):
    train, test = _split_arrays(10, 3), _split_arrays(4, 3)
    content = {"tr_img": train["img"], "tr_txt": train["txt"], "tr_img_lab": train["lab"]}
    content |= {"te_img": test["img"], "te_txt": test["txt"], "te_img_lab": test["lab"]}
    content |= {"train_imgs_deep": np.zeros((2, 6))}
    np.savez(tmp_path / "both.npz", **content)
    with pytest.raises(DataFormatError, match=r"both\.npz: the layouts \['imgs_deep', 'tr_te'\] all recognise it"):
        load_labelled_dataset(tmp_path / "both.npz")
    data = load_labelled_dataset(tmp_path / "both.npz", layout="tr_te")
    assert (data.layout, data.train.num_samples, data.num_classes) == ("tr_te", 10, 3)
    np.testing.assert_allclose(data.train.image_features, train["img"])
    np.testing.assert_array_equal(data.train.text_labels, train["lab"])
    with pytest.raises(DataFormatError, match=r"both\.npz: layout per_file reads a directory"):
        load_labelled_dataset(tmp_path / "both.npz", layout="per_file")
    with pytest.raises(ValueError, match=r"^LabelDataArguments.layout must be one of \('imgs_deep', 'per_file',"):
        load_labelled_dataset(tmp_path / "both.npz", layout="csv")
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(DataFormatError, match=r"broken\.npz: cannot tell the layout, expected one of \(imgs_deep: "):
        load_labelled_dataset(tmp_path / "broken.npz")


def test_pascal_sentence_shared_features():
    directory = shared_data_dir() / "pascal_sentence"
    if not (directory / "labels.npy").is_file():
        pytest.skip(f"shared data {directory} is not available")
    data = load_labelled_arrays(
        directory / "sentence_features.npy",
        directory / "sentence_features_doc2vec_bert_768.npy",
        directory / "labels.npy",
    )
    assert data.num_classes == 20
    assert [data[s].num_samples for s in ("train", "valid", "test")] == [800, 100, 100]
    assert (data.train.feature_dim("image"), data.train.feature_dim("text")) == (384, 768)
    for split, per_class in (("train", 40), ("valid", 5), ("test", 5)):
        np.testing.assert_array_equal(np.bincount(data[split].image_labels), np.full(20, per_class))
    raw = np.load(directory / "sentence_features.npy", mmap_mode="r")
    np.testing.assert_allclose(data.valid.features("image", [0]), raw[[40]])


# ---------------------------------------------------------------- label noise


@pytest.mark.parametrize("ratio", [0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
def test_symmetric_noise_exact_rate_in_range_and_never_a_self_flip(ratio):
    clean = np.repeat(np.arange(10), 100)
    noisy = symmetric_label_noise(clean, 10, ratio, np.random.default_rng(1))
    assert (noisy != clean).sum() == round(ratio * 1000)
    assert noisy.min() >= 0 and noisy.max() <= 9 and noisy.dtype == np.int64


def test_symmetric_noise_is_uniform_over_the_other_classes():
    clean = np.zeros(40000, dtype=np.int64)
    noisy = symmetric_label_noise(clean, 5, 1.0, np.random.default_rng(2))
    counts = np.bincount(noisy, minlength=5)
    assert counts[0] == 0
    assert stats.chisquare(counts[1:]).pvalue > 1e-3  # uniform over classes 1..4


def test_asymmetric_noise_follows_the_transition():
    clean = np.repeat(np.arange(4), 50)
    noisy = asymmetric_label_noise(clean, 4, 0.3, np.random.default_rng(0))
    flipped = noisy != clean
    assert flipped.sum() == 60
    np.testing.assert_array_equal(noisy[flipped], (clean[flipped] + 1) % 4)
    np.testing.assert_array_equal(next_class_transition(3), [1, 2, 0])
    mapped = asymmetric_label_noise(clean, 4, 1.0, np.random.default_rng(0), {0: 2, 2: 0})  # 1 and 3 stay
    np.testing.assert_array_equal(mapped, np.array([2, 1, 0, 3])[clean])
    with pytest.raises(ValueError, match=r"transition\[1\] is 7, expected a class in 0..3"):
        asymmetric_label_noise(clean, 4, 0.5, np.random.default_rng(0), [1, 7, 3, 0])


def test_injection_is_seeded_and_independent_per_modality():
    clean = {"image": np.repeat(np.arange(5), 40), "text": np.repeat(np.arange(5), 40)}
    noise = inject_label_noise(clean, 5, 0.5, seed=3)
    again = inject_label_noise(clean, 5, 0.5, seed=3)
    other = inject_label_noise(clean, 5, 0.5, seed=4)
    for modality in ("image", "text"):
        np.testing.assert_array_equal(noise.noisy[modality], again.noisy[modality])
        assert noise.realised_ratio(modality) == 0.5
    assert not np.array_equal(noise.noisy_mask("image"), noise.noisy_mask("text"))
    assert not np.array_equal(noise.noisy["image"], other.noisy["image"])
    with pytest.raises(ValueError, match="kind must be one of"):
        inject_label_noise(clean, 5, 0.5, kind="pairflip")
    with pytest.raises(ValueError, match=r"labels\['text'\]\[0\] is 5, expected a class in 0..4"):
        inject_label_noise({"text": [5]}, 5, 0.5)


def test_label_noise_saves_and_reloads_with_its_clean_labels(tmp_path):
    clean = {"image": np.arange(30) % 3, "text": np.arange(30) % 3}
    noise = inject_label_noise(clean, 3, 0.4, kind="asymmetric", seed=0)
    path = noise.save(tmp_path / "noise")
    assert path.name == "noise.json"
    loaded = load_label_noise(path, clean_labels=clean)
    assert (loaded.kind, loaded.ratio, loaded.seed, loaded.num_classes) == ("asymmetric", 0.4, 0, 3)
    np.testing.assert_array_equal(loaded.transition, [1, 2, 0])
    for modality, labels in clean.items():
        np.testing.assert_array_equal(loaded.noisy[modality], noise.noisy[modality])
        np.testing.assert_array_equal(loaded.clean[modality], labels)
    with pytest.raises(DataFormatError, match=r"labels\.image\.clean differ from the dataset's labels"):
        load_label_noise(path, clean_labels={"image": np.zeros(30, int), "text": clean["text"]})


def test_list_of_lists_noise_file_is_read_with_the_clean_labels(tmp_path):
    clean = {"image": [0, 1, 2, 0], "text": [0, 1, 2, 0]}
    path = tmp_path / "noise_labels_0.5_sym.json"
    path.write_text(json.dumps([[1, 1, 2, 0], [0, 1, 0, 0]]))
    noise = load_label_noise(path, clean_labels=clean, num_classes=3)
    assert isinstance(noise, LabelNoise) and noise.kind == "file" and noise.ratio == 0.25
    np.testing.assert_array_equal(noise.noisy_mask("image"), [True, False, False, False])
    with pytest.raises(DataFormatError, match="needs clean_labels and num_classes"):
        load_label_noise(path)
    path.write_text(json.dumps([[1, 1, 2, 0], [0, 1, 3, 0]]))
    with pytest.raises(DataFormatError, match=r"list 1 \(text\)\[2\] is 3, expected a class in 0..2"):
        load_label_noise(path, clean_labels=clean, num_classes=3)


def test_malformed_noise_files_are_rejected(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(DataFormatError, match="bad.json: not a JSON file"):
        load_label_noise(path)
    path.write_text(json.dumps({"format": "hfncl.label_noise", "version": 1, "kind": "symmetric"}))
    with pytest.raises(DataFormatError, match="bad.json: missing or malformed field 'num_classes'"):
        load_label_noise(path)
    with pytest.raises(DataFormatError, match="not found"):
        load_label_noise(tmp_path / "absent.json")
