"""`dlperf data samples`: PNG files holding a data set's own images, bad input one line."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlperf.config import DataConfig
from dlperf.data import load_data
from dlperf.data.samples import write_samples
from tests.conftest import CliResult
from tests.data.test_sources import write_cifar, write_jpegs

Cli = Callable[..., CliResult]


def png_pixels(path: str) -> np.ndarray:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return np.asarray(image)


def test_one_digit_per_class(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "samples"
    r = cli("data", "samples", "digits", "--per-class", "1", "--out", str(out), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert (doc["dataset"], doc["split"], doc["out"]) == ("digits", "test", str(out))
    assert [f["class"] for f in doc["files"]] == list("0123456789")
    assert sorted(p.name for p in out.iterdir()) == sorted(
        Path(f["path"]).name for f in doc["files"]
    )
    test = load_data(DataConfig(name="digits")).test
    for f in doc["files"]:
        assert Path(f["path"]).name == f"test-{f['index']:05d}-{f['class']}.png"
        assert int(test.labels[f["index"]]) == f["label"] == int(f["class"])
        # The image itself: 8 x 8 grey levels, as the loader holds it.
        assert np.array_equal(png_pixels(f["path"]), test.images[f["index"], 0].numpy())


def test_cifar_pickle_batches_written_as_their_rgb_images(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    cfg = DataConfig(name="cifar10", root=str(tmp_path))
    doc = write_samples(cfg, tmp_path / "out", per_class=2, classes=["c3", "c7"], split="train")
    assert [f["class"] for f in doc["files"]] == ["c3", "c3", "c7", "c7"]
    # Each file is a row of the batches the test wrote (channel-major R, G, B planes), with
    # that row's label: found in the files themselves, not through dlperf's reader.
    rows, labels = [], []
    for i in range(1, 6):
        batch = pickle.loads((tmp_path / "cifar-10-batches-py" / f"data_batch_{i}").read_bytes())
        rows.append(batch["data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        labels += batch["labels"]
    written = np.concatenate(rows)
    for f in doc["files"]:
        pixels = png_pixels(f["path"])
        assert pixels.shape == (32, 32, 3)
        match = [i for i in range(len(written)) if np.array_equal(written[i], pixels)]
        assert match and labels[match[0]] == f["label"]


def test_a_streamed_image_folder_reads_only_the_files_written(tmp_path: Path) -> None:
    write_jpegs(tmp_path / "pets")
    cfg = DataConfig(name="imagefolder", root=str(tmp_path / "pets"), image_size=16,
                     in_memory=False, num_workers=0)  # fmt: skip
    doc = write_samples(cfg, tmp_path / "out", per_class=1, split="test")  # root/val
    assert [f["class"] for f in doc["files"]] == ["cat", "dog"]
    assert all(png_pixels(f["path"]).shape == (16, 16, 3) for f in doc["files"])


def test_human_output_lists_the_files(cli: Cli, tmp_path: Path) -> None:
    r = cli("data", "samples", "digits", "--classes", "3,7", "--per-class", "2", "--out", "s")
    assert r.code == 0, r.err
    assert r.err == "wrote 4 images to s\n"
    rows = [line.split() for line in r.out.splitlines() if line.startswith("s/")]
    assert [row[2] for row in rows] == ["3", "3", "7", "7"]
    assert all((tmp_path / row[0]).is_file() for row in rows)


NO_CLASS = "error: --classes: digits has no class 'x' (give names or indices 0..9: " + ", ".join(
    "0123456789"
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--per-class", "0"], "error: --per-class must be at least 1, got 0"),
        (["--split", "dev"], "error: unknown split 'dev' (choose train, val, test)"),
        (["--classes", "x"], NO_CLASS + ")"),
        (
            ["--set", "train.lr=1"],
            "error: --set 'train.lr=1': only [data] keys apply here (data.KEY=V)",
        ),
    ],
)
def test_bad_input_is_one_line(cli: Cli, tmp_path: Path, args: list[str], message: str) -> None:
    r = cli("data", "samples", "digits", "--out", str(tmp_path / "s"), *args)
    assert (r.code, r.err) == (2, message + "\n")
