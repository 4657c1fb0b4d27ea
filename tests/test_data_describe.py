"""`dlperf data describe`: its counts are the data set's, its figures decode, bad input is
one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from PIL import Image

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.data.describe import describe
from tests.test_data import write_jpegs


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
    doc = describe(cfg, tmp_path / "fig", per_class=3)
    assert doc["classes"] == ["cat", "dog"] and doc["in_memory"] is in_memory
    assert sum(doc["counts"].values()) == doc["splits"]["train"]
    assert doc["image_shape"] == [3, 16, 16] and len(doc["mean"]) == 3
    with Image.open(doc["plots"]["samples"]) as grid:
        assert grid.size[0] > 0 and grid.size[1] > 0


def test_human_output_names_the_figures(cli: Callable, tmp_path: Path) -> None:
    r = cli("data", "describe", "digits", "--per-class", "2")
    assert r.code == 0, r.err
    table = [line.split() for line in r.out.splitlines()]
    assert ["3", "│", "139"] in table  # class 3 of the bundled digits' training split
    assert "saved dlperf_runs/data-digits/digits-samples.png" in r.err
    assert (tmp_path / "dlperf_runs" / "data-digits" / "digits-counts.png").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["imagenet"], "error: unknown dataset 'imagenet'"),
        (["digits", "--set", "train.lr=1"], "error: --set 'train.lr=1': only [data] keys apply"),
        (["digits", "--set", "data.val_fraction=2"], "data.val_fraction: must be less than 1"),
        (["digits", "--per-class", "0"], "error: --per-class must be at least 1, got 0"),
        (["digits", "--out", "/proc/forbidden/fig"], "error: cannot use /proc/forbidden"),
    ],
)
def test_bad_input_is_one_line(cli: Callable, args: list[str], message: str) -> None:
    r = cli("data", "describe", *args)
    assert r.code == 2, r.err
    assert message in r.err and r.err.count("\n") == 1
