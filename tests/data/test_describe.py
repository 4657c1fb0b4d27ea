"""`dlperf data describe`: its counts are the data set's, its figures decode, bad input is
one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from PIL import Image

from dlperf.config import AugmentConfig, DataConfig
from dlperf.data import load_data
from dlperf.data.describe import describe
from tests.data.test_sources import write_jpegs


def test_digits_described_as_loaded(cli: Callable, tmp_path: Path) -> None:
    r = cli("data", "describe", "digits", "--out", str(tmp_path / "fig"), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    data = load_data(DataConfig(name="digits"))
    assert doc["classes"] == list("0123456789")
    counts = torch.bincount(data.train.labels, minlength=10).tolist()
    assert list(doc["counts"].values()) == counts and sum(counts) == len(data.train)
    assert doc["splits"] == {"train": len(data.train), "val": len(data.val), "test": 359}
    assert doc["image_shape"] == [1, 8, 8]
    assert doc["mean"] == pytest.approx(list(data.mean)) and len(doc["std"]) == 1
    for path in doc["plots"].values():
        with Image.open(path) as image:
            image.verify()  # a whole PNG, not a stub
        assert Path(path).parent == tmp_path / "fig"


@pytest.mark.parametrize("in_memory", [True, False])
def test_image_folder_rows_are_its_classes(tmp_path: Path, in_memory: bool) -> None:
    write_jpegs(tmp_path)
    cfg = DataConfig(
        name="imagefolder", root=str(tmp_path), image_size=16, in_memory=in_memory, num_workers=0
    )
    desc = describe(cfg, per_class=3)
    doc = desc.summary()
    assert doc["classes"] == ["cat", "dog"] and doc["in_memory"] is in_memory
    assert sum(doc["counts"].values()) == doc["splits"]["train"]
    assert doc["image_shape"] == [3, 16, 16] and len(doc["mean"]) == 3
    assert [tuple(s.shape) for s in desc.samples] == [(3, 3, 16, 16)] * 2
    assert desc.augmented is None


def test_human_output_names_the_figures(cli: Callable, tmp_path: Path) -> None:
    r = cli("data", "describe", "digits", "--per-class", "2")
    assert r.code == 0, r.err
    table = [line.split() for line in r.out.splitlines()]
    assert ["3", "│", "139"] in table  # class 3 of the bundled digits' training split
    assert "saved dlperf_runs/data-digits/digits-samples.png" in r.err
    assert (tmp_path / "dlperf_runs" / "data-digits" / "digits-counts.png").is_file()


def _grid_width(path: str) -> int:
    with Image.open(path) as grid:
        return grid.size[0]


def test_augmented_samples_beside_their_originals(cli: Callable, tmp_path: Path) -> None:
    docs = []
    for m, extra in enumerate([[], ["--set", "augment.cutout=8"], ["--set", "augment.cutout=8",
                               "--set", "augment.batch_aug_m=3"]]):  # fmt: skip
        r = cli("data", "describe", "digits", "--classes", "2", "--per-class", "3",
                "--out", str(tmp_path / str(m)), "--json", *extra)  # fmt: skip
        assert r.code == 0, r.err
        docs.append(json.loads(r.out))
    assert [d["sample_classes"] for d in docs] == [["0", "1"]] * 3 and docs[0]["augment"] is None
    assert docs[2]["augment"] == {"crop_padding": 0, "flip": False, "cutout": 8, "batch_aug_m": 3}
    # 3 columns; 3 originals, each followed by its copy; then by its 3 copies.
    widths = [_grid_width(d["plots"]["samples"]) for d in docs]
    assert widths[0] < widths[1] < widths[2]


def test_cutout_and_flip_are_the_training_transforms() -> None:
    data = DataConfig(name="digits")
    desc = describe(data, AugmentConfig(cutout=8, batch_aug_m=2), classes=["1", "3"], per_class=4)
    assert desc.shown == ["1", "3"]
    painted = round(desc.mean[0] * 255)  # Cutout paints the data mean, as training does
    for originals, copies in zip(desc.samples, desc.augmented, strict=True):
        assert copies.shape == (2, *originals.shape) and copies.dtype == torch.uint8
        for copy in copies:
            changed = copy != originals
            assert (copy[changed] == painted).all()
            # A side-8 square centred on an 8x8 image covers at least 4x4 pixels.
            assert ((copy == painted).flatten(1).sum(1) >= 16).all()
    desc = describe(data, AugmentConfig(flip=True), classes=2, per_class=8)
    originals, (copy,) = desc.samples[0], desc.augmented[0]
    flipped = (copy == originals.flip(-1)).flatten(1).all(1)
    assert (flipped | (copy == originals).flatten(1).all(1)).all()
    assert 0 < int(flipped.sum()) < 8  # some flipped, some not: a coin per image


@pytest.mark.parametrize(("spec", "shown"), [("2", ["0", "1"]), ("3,7", ["3", "7"]), ("9,", ["9"])])
def test_classes_by_count_or_name(cli: Callable, tmp_path: Path, spec: str, shown: list) -> None:
    r = cli("data", "describe", "digits", "--classes", spec, "--per-class", "1", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["sample_classes"] == shown


def test_image_folder_classes_by_name_or_index(tmp_path: Path) -> None:
    write_jpegs(tmp_path)
    cfg = DataConfig(name="imagefolder", root=str(tmp_path), image_size=16, num_workers=0)
    assert describe(cfg, classes=["dog"], per_class=1).shown == ["dog"]
    assert describe(cfg, classes=["1", "cat"], per_class=1).shown == ["dog", "cat"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["imagenet"], "error: unknown dataset 'imagenet'"),
        (["digits", "--set", "train.lr=1"], "error: --set 'train.lr=1': only [data] and [augment]"),
        (["digits", "--set", "augment.cutout=-1"], "augment.cutout: must be at least 0"),
        (["digits", "--set", "data.val_fraction=2"], "data.val_fraction: must be less than 1"),
        (["digits", "--per-class", "0"], "error: --per-class must be at least 1, got 0"),
        (["digits", "--classes", "0"], "error: --classes must be at least 1, got 0"),
        (["digits", "--classes", "11"], "error: --classes 11: digits has 10 classes"),
        (["digits", "--classes", "3,cow"], "error: --classes: digits has no class 'cow'"),
        (["digits", "--classes", ","], "error: --classes names no class"),
        (["digits", "--out", "/proc/forbidden/fig"], "error: cannot use /proc/forbidden"),
    ],
)
def test_bad_input_is_one_line(cli: Callable, args: list[str], message: str) -> None:
    r = cli("data", "describe", *args)
    assert r.code == 2, r.err
    assert message in r.err and r.err.count("\n") == 1
