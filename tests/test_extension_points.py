"""Data formats, similarity heads, towers and label layouts are extension points: a package registers them in the
``hfncl.data_formats``, ``hfncl.similarity_heads``, ``hfncl.text_towers`` / ``hfncl.image_towers`` and
``hfncl.label_layouts`` entry-point groups, and a run uses them by name, with no change to hfncl.

``tests/extension_package`` is such a package (an ``npz_pairs`` format, a ``bilinear`` head, a ``bow`` text tower
and an ``npz_views`` label layout); the end-to-end tests install it with pip, as a user would, and train with them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import pip_installed, tiny_config

from hfncl import choices, registry
from hfncl.arguments import CategoryModelArguments, LabelDataArguments, ModelArguments
from hfncl.choices import check_format_name, check_layout_name
from hfncl.data import DataFormatError, formats, load_labelled_dataset
from hfncl.data.formats import detect_format, get_format
from hfncl.data.synthetic_labels import LabelledSyntheticConfig, generate_labelled, generate_labelled_arrays
from hfncl.experiment import run_experiment
from hfncl.models import NCLConfig, NCLModel, heads
from hfncl.recipe import run_recipe

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "tests" / "extension_package"
INSTALLED_HEADS = heads.installed_heads()
INSTALLED_LAYOUTS = choices.installed_layouts()
INSTALLED_FORMATS = choices.installed_formats()
TINY_LABELLED = LabelledSyntheticConfig(train_per_class=12, valid_per_class=4, test_per_class=4, seed=2)


def npz_benchmark(precomp_dir: Path, out: Path) -> Path:
    """The splits of a precomp directory rewritten as ``{split}.npz`` (regions and k captions per image)."""
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        regions = np.load(precomp_dir / f"{split}_ims.npy")
        captions = (precomp_dir / f"{split}_caps.txt").read_text().splitlines()
        np.savez(out / f"{split}.npz", regions=regions, captions=np.array(captions).reshape(len(regions), -1))
    return out


def npz_views_file(path: Path) -> Path:
    """The tiny generated labelled benchmark in the example's ``npz_views`` layout (validation split as ``val_``)."""
    arrays = generate_labelled_arrays(TINY_LABELLED)
    content = {}
    for split, prefix in (("train", "train"), ("valid", "val"), ("test", "test")):
        content |= {f"{prefix}_view1": arrays[split]["img"], f"{prefix}_view2": arrays[split]["txt"]}
        content[f"{prefix}_y"] = arrays[split]["img_lab"]
    np.savez(path, **content)
    return path


@pytest.fixture
def example_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example package importable and its entry points served as installed (no pip)."""
    monkeypatch.syspath_prepend(str(PACKAGE))
    npz = EntryPoint("npz_pairs", "hfncl_extension_example.formats:NPZ_PAIRS", "hfncl.data_formats")
    monkeypatch.setattr(choices, "installed_formats", lambda: {**INSTALLED_FORMATS, "npz_pairs": npz})
    head = EntryPoint("bilinear", "hfncl_extension_example.heads:BILINEAR", "hfncl.similarity_heads")
    monkeypatch.setattr(heads, "installed_heads", lambda: {**INSTALLED_HEADS, "bilinear": head})
    layout = EntryPoint("npz_views", "hfncl_extension_example.layouts:NPZ_VIEWS", "hfncl.label_layouts")
    monkeypatch.setattr(choices, "installed_layouts", lambda: {**INSTALLED_LAYOUTS, "npz_views": layout})
    tower = EntryPoint("bow", "hfncl_extension_example.towers:build_bow_tower", "hfncl.text_towers")
    installed = registry.entry_points
    monkeypatch.setattr(
        registry, "entry_points", lambda group: [*installed(group=group), *([tower] if group == tower.group else [])]
    )


def test_unknown_names_are_refused_in_one_line_listing_what_there_is() -> None:
    unknown_format = r"^DataArguments.data_format must be one of \('auto', 'imagefolder', 'precomp'\), got 'parquet' \("
    with pytest.raises(ValueError, match=unknown_format):
        check_format_name("parquet")
    with pytest.raises(
        heads.UnknownHeadError, match=r"^NCLConfig.similarity must be one of \('cosine', 'saf', 'scan', 'sgr'"
    ):
        NCLConfig(similarity="bilinear")
    with pytest.raises(ValueError, match=r"^NCLConfig.text_tower must be one of \('gru', 'transformer'\), got 'bow' "):
        NCLConfig(text_tower="bow")
    with pytest.raises(ValueError, match=r"^NCLConfig.image_tower must be one of \('regions', 'transformer'\), got 'v"):
        NCLConfig(image_tower="vit")
    refused = r"^LabelDataArguments.layout must be one of \('imgs_deep', 'per_file', 'tr_te'\), got 'npz_views' \("
    with pytest.raises(ValueError, match=refused):
        check_layout_name("npz_views")
    with pytest.raises(ValueError, match=refused):
        LabelDataArguments(data_path="features.npz", layout="npz_views")


def test_the_built_in_formats_are_entry_points_and_auto_refuses_data_two_of_them_recognise(
    micro_data_dir: Path, tmp_path: Path
) -> None:
    points = {name: point.value for name, point in choices.installed_formats().items()}
    assert points == {"imagefolder": "hfncl.data.formats:IMAGEFOLDER", "precomp": "hfncl.data.formats:PRECOMP"}
    for part, built_in in (("text", "gru"), ("image", "regions")):
        towers = {name: point.value for name, point in registry.installed_towers(part).items()}
        assert sorted(towers) == [built_in, "transformer"] and towers["transformer"].startswith("hfncl.models.towers:")
    assert get_format("precomp") is formats.PRECOMP and get_format("imagefolder") is formats.IMAGEFOLDER
    assert detect_format(micro_data_dir, "train") == "precomp" and detect_format(tmp_path, "train") == "precomp"
    both = tmp_path / "both"
    shutil.copytree(micro_data_dir, both)
    (both / "train").mkdir()
    (both / "train" / "metadata.jsonl").write_text("")
    assert detect_format(both, "dev") == "precomp"
    with pytest.raises(DataFormatError, match=r"formats \['imagefolder', 'precomp'\] all recognise split 'train'"):
        detect_format(both, "train")


def test_a_registered_format_is_detected_and_read_and_a_registered_head_scores(
    example_registered: None, micro_data_dir: Path, tmp_path: Path
) -> None:
    data_dir = npz_benchmark(micro_data_dir, tmp_path / "npz")
    assert detect_format(data_dir, "train") == "npz_pairs" and detect_format(micro_data_dir, "train") == "precomp"
    train = get_format("npz_pairs").load_split(
        data_dir, "train", feature_dtype="float32", image_processor=None, like=None
    )
    assert train.num_images == 16 and train.captions_per_image == 5 and train.image_shape == (6, 8)
    precomp = get_format("precomp").load_split(
        micro_data_dir, "train", feature_dtype="float32", image_processor=None, like=None
    )
    assert list(train.captions) == list(precomp.captions)
    np.testing.assert_array_equal(train.image_inputs([3, 0]), precomp.image_inputs([3, 0]))

    model = NCLModel(NCLConfig(similarity="bilinear", image_dim=8, vocab_size=20, embed_dim=8, word_dim=8))
    assert type(model.networks[0].head).__name__ == "BilinearHead"
    images = model.networks[0].encode_image(torch.rand(4, 6, 8, generator=torch.Generator().manual_seed(0)))
    assert images.shape == (4, 6, 9) and model.networks[0].head(images, images).shape == (4, 4)


def test_a_registered_text_tower_encodes_as_its_contract_says_and_reloads(example_registered: None, tmp_path: Path):
    assert ModelArguments(text_tower="bow").explicit() == {"text_tower": "bow"}
    torch.manual_seed(0)
    model = NCLModel(NCLConfig(text_tower="bow", image_dim=8, vocab_size=20, embed_dim=8, word_dim=6))
    tower = model.networks[0].text_encoder
    assert type(tower).__name__ == "BagOfWords"
    captions, lengths = torch.tensor([[3, 5, 7], [4, 2, 0]]), torch.tensor([3, 2])
    words = tower.fc.weight @ tower.embed.weight.t() + tower.fc.bias[:, None]  # W x_w + b of every word w, (8, 20)
    expected = torch.stack([words[:, [3, 5, 7]].mean(dim=1), words[:, [4, 2]].mean(dim=1)])
    encoded = model.encode_text(captions, lengths)[0]
    torch.testing.assert_close(encoded, expected / expected.norm(dim=1, keepdim=True))
    model.save_pretrained(tmp_path / "bow")
    torch.testing.assert_close(NCLModel.from_pretrained(tmp_path / "bow").encode_text(captions, lengths)[0], encoded)


def test_a_registered_head_declares_its_options_and_a_bare_build_callable_is_a_head_without_options(
    example_registered: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = {"image_dim": 8, "vocab_size": 20, "embed_dim": 4, "word_dim": 8}
    config = NCLConfig(similarity="bilinear", head_options={"bilinear.scale": 2}, **sizes)
    assert config.head_options == {"bilinear.scale": 2.0} and NCLConfig(similarity="bilinear").head_options == {
        "bilinear.scale": 1.0
    }
    torch.testing.assert_close(NCLModel(config).networks[0].head.weight.data, 2 * torch.eye(4))
    for given, message in (
        ({"bilinear.rank": 3}, r"\['bilinear.rank'\] are not options of the similarity head 'bilinear' \(its options: "
         r"\['bilinear.scale'\]\)"),
        ({"bilinear.scale": 0}, r"^NCLConfig.head_options: Option 'bilinear.scale' must be > 0, got 0.0$"),
    ):
        with pytest.raises(ValueError, match=message):
            NCLConfig(similarity="bilinear", head_options=given)
    bare = EntryPoint("bilinear", "hfncl_extension_example.heads:build_bilinear_head", "hfncl.similarity_heads")
    monkeypatch.setattr(heads, "installed_heads", lambda: {**INSTALLED_HEADS, "bilinear": bare})
    assert heads.head_plugin("bilinear").options is None and NCLConfig(similarity="bilinear").head_options == {}
    with pytest.raises(ValueError, match=r"are not options of the similarity head 'bilinear' \(its options: none\)"):
        NCLConfig(similarity="bilinear", head_options={"bilinear.scale": 2.0})


def test_an_installed_package_adds_a_format_a_head_and_a_tower_and_trains_with_them(
    micro_data_dir: Path, tmp_path: Path
) -> None:
    env = pip_installed(PACKAGE, tmp_path)
    data_dir = npz_benchmark(micro_data_dir, tmp_path / "npz")
    trained = subprocess.run(
        [sys.executable, "-m", "hfncl.cli", "train", "--plugins", "vsepp", "--data-dir", str(data_dir)]
        + ["--data-format", "npz_pairs", "--similarity", "bilinear", "--head_options", '{"bilinear.scale": 2}']
        + ["--text-tower", "bow"]
        + ["--output-dir", str(tmp_path / "run")]
        + ["--epochs", "1", "--batch-size", "8", "--embed-dim", "8", "--word-dim", "8", "--noise-ratio", "0.2"]
        + ["--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["history"][0]["val/rsum"] > 0 and results["test"]["rsum"] > 0
    config = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert (config["similarity"], config["text_tower"]) == ("bilinear", "bow")
    assert config["head_options"] == {"bilinear.scale": 2.0}


def test_the_layout_flag_offers_the_installed_layouts(example_registered: None, capsys: pytest.CaptureFixture) -> None:
    arguments = ["--data-path", "features.npz", "--output-dir", "run", "--layout", "csv"]
    assert run_recipe("", plugins=["prototype_ce"], defaults={}, argv=arguments) == 2
    error = capsys.readouterr().err
    offered = re.search(r"^error: argument --layout: invalid choice: 'csv' \(choose from (.*)\)$", error)
    assert offered and offered[1].replace("'", "") == "imgs_deep, npz_views, per_file, tr_te"


def test_a_registered_label_layout_is_detected_and_reads_what_the_built_in_one_reads(
    example_registered: None, tmp_path: Path
) -> None:
    npz = npz_views_file(tmp_path / "features.npz")
    views = load_labelled_dataset(npz, cache_dir=tmp_path / "cache")
    directory = generate_labelled(tmp_path / "per_file", TINY_LABELLED)
    per_file = load_labelled_dataset(directory, cache_dir=tmp_path / "cache")
    assert (views.layout, per_file.layout, views.valid_rule) == ("npz_views", "per_file", "file")
    for split in ("train", "valid", "test"):
        for modality in ("image", "text"):
            np.testing.assert_array_equal(views[split].labels(modality), per_file[split].labels(modality))
            rows = list(range(views[split].num_samples))
            read = views[split].features(modality, rows)
            np.testing.assert_array_equal(read, per_file[split].features(modality, rows))
    with pytest.raises(DataFormatError, match=r"features\.npz: missing key 'tr_img' \(train image\)"):
        load_labelled_dataset(npz, layout="tr_te", cache_dir=tmp_path / "cache")
    np.savez(tmp_path / "odd.npz", train_view1=np.zeros((2, 2)))
    with pytest.raises(DataFormatError, match=r"odd\.npz: missing key 'train_view2' \(layout npz_views\)"):
        load_labelled_dataset(tmp_path / "odd.npz")
    np.savez(tmp_path / "other.npz", features=np.zeros((2, 2)))
    unknown = r"other\.npz: cannot tell the layout.*npz_views: one \.npz archive.*keys present: \['features'\]$"
    with pytest.raises(DataFormatError, match=unknown):
        load_labelled_dataset(tmp_path / "other.npz")


def test_a_label_method_trains_on_a_registered_layout_as_on_the_same_arrays_in_a_built_in_one(
    example_registered: None, tmp_path: Path
) -> None:
    npz = npz_views_file(tmp_path / "features.npz")
    sources = {"npz_views": npz, "per_file": generate_labelled(tmp_path / "dir", TINY_LABELLED)}
    results = {}
    for layout, source in sources.items():
        config = tiny_config(tmp_path / layout, ["prototype_ce"], epochs=1, batch_size=20, lr_decay_epochs=[])
        data = LabelDataArguments(data_path=str(source), noise_ratio=0.2)
        results[layout] = run_experiment(data, config, CategoryModelArguments(embed_dim=16, hidden_dim=32))
    assert results["npz_views"]["test"]["mean_map"] > 0.0
    for key in ("history", "test", "true_noise_ratio"):
        assert json.dumps(results["npz_views"][key]) == json.dumps(results["per_file"][key])


@pytest.mark.slow
def test_an_installed_package_adds_a_label_layout_and_trains_with_it(tmp_path: Path) -> None:
    env = pip_installed(PACKAGE, tmp_path)
    npz = npz_views_file(tmp_path / "features.npz")
    recipe = "import sys; from hfncl.recipe import run_recipe; sys.exit(run_recipe('', ['prototype_ce'], {}))"
    trained = subprocess.run(
        [sys.executable, "-c", recipe, "--data-path", str(npz), "--layout", "npz_views"]
        + ["--output-dir", str(tmp_path / "run")]
        + ["--epochs", "1", "--batch-size", "20", "--embed-dim", "16", "--hidden-dim", "32", "--noise-ratio", "0.2"]
        + ["--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["test"]["mean_map"] > 0.0 and results["true_noise_ratio"] == {"image": 0.2, "text": 0.2}
