"""Break-it round 28, fixer B: writers that overwrite their input, and the wide CSV.

C1. (H) A CSV whose header line is over 131,072 characters without a tab (a wide CSV of short
    columns) was "a field of over 131,072 characters": sniffing a tab separator read the line
    as one field, over the csv module's limit.
C2. (I) `data samples` and `data describe` with --out inside a split folder of the imagefolder
    set they read wrote their PNGs into it: test images became training images of class cat.
C3. (K) `converge fit --to-csv` naming the --csv file replaced the curve by the β table, and
    `detect make-shapes` into a folder holding a VOC set overwrote its images and annotations,
    both without a word.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def curve(path: Path, sep: str = ",", columns: int = 0, points: int = 12) -> Path:
    """A loss curve step,loss (and `columns` more columns of zeros) of `points` rows."""
    extra = [f"c{i}" for i in range(columns)]
    zeros = [sep.join(["0"] * columns)] if columns else []
    rows = [sep.join(["step", "loss", *extra])]
    rows += [
        sep.join([str(k), str(1 / (0.01 * k + 1) + 0.1), *zeros])
        for k in range(10, 10 + 10 * points, 10)
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


# --- C1: a wide CSV -------------------------------------------------------------------------------


@pytest.mark.parametrize("sep", [",", "\t"])
def test_a_header_over_the_field_limit_of_short_columns_is_read(
    cli: Cli, tmp_path: Path, sep: str
) -> None:
    """Before (','): exit 2, "wide.csv:1: a field of over 131,072 characters"."""
    wide = curve(tmp_path / "wide.csv", sep, columns=30_000)
    assert len(wide.read_text().splitlines()[0]) > 131_072
    result = cli("converge", "fit", "--csv", str(wide), "--x", "step", "--y", "loss", "--json")
    assert result.code == 0, result.err
    fitted = json.loads(result.out)
    assert (fitted["n_points"], fitted["beta2"]) == (12, pytest.approx(0.1, abs=1e-6))


# --- C2: data samples / describe into the set being read -----------------------------------------


def image_set(root: Path) -> Path:
    """root/{train,val}/{cat,dog} with three 12x12 PNGs each."""
    rng = np.random.default_rng(28)
    for split in ("train", "val"):
        for name in ("cat", "dog"):
            (root / split / name).mkdir(parents=True)
            for i in range(3):
                pixels = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def write(cli: Cli, command: str, root: Path, out: str) -> CliResult:
    sets = ("--set", f"data.root={root}", "--set", "data.image_size=12")
    return cli("data", command, "imagefolder", *sets, "--out", out, "--json")


@pytest.mark.parametrize("command", ["samples", "describe"])
@pytest.mark.parametrize(
    ("out", "said"),
    [
        (
            "i/train/cat",
            "--out i/train/cat is inside the data set being read (i/train): its PNGs "
            "would become images of class cat",
        ),
        (
            "i/val/dog/new",
            "--out i/val/dog/new is inside the data set being read (i/val): its "
            "PNGs would become images of class dog",
        ),
        (
            "i/test",
            "--out i/test is inside the data set being read (i/test): its PNGs would "
            "land in the test split",
        ),
        (
            "link/sub",
            "--out link/sub is inside the data set being read (i/train): its PNGs "
            "would become images of class cat",
        ),
    ],
)
def test_an_out_inside_a_split_folder_is_refused(
    cli: Cli, tmp_path: Path, command: str, out: str, said: str
) -> None:
    """Before: exit 0, the PNGs written among the images of i/train/cat (or a test split made)."""
    root = image_set(tmp_path / "i")
    (tmp_path / "link").symlink_to(root / "train" / "cat")
    before = listing(root)
    result = write(cli, command, Path("i"), out)
    one_line(result, 2, said, "(give a folder outside i/train, i/val, i/test)")
    assert listing(root) == before


def test_an_out_at_the_root_beside_the_splits_is_written(cli: Cli, tmp_path: Path) -> None:
    """The root itself, beside the split folders, is not read as images: allowed."""
    image_set(tmp_path / "i")
    result = write(cli, "samples", Path("i"), "i")
    assert result.code == 0, result.err
    assert sorted(p.name for p in (tmp_path / "i").glob("*.png")) == [
        "test-00000-cat.png",
        "test-00003-dog.png",
    ]


# --- C3: writers over their own input -----------------------------------------------------------


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("named", ["same", "spelled", "symlink", "hardlink"])
def test_to_csv_that_is_the_csv_read_is_refused(cli: Cli, tmp_path: Path, named: str) -> None:
    """Before: exit 0, "saved curve.csv", the 40-point curve replaced by the β table."""
    given = curve(tmp_path / "curve.csv", points=40)
    kept = digest(given)
    out = {
        "same": "curve.csv",
        "spelled": "sub/../curve.csv",
        "symlink": "l.csv",
        "hardlink": "h.csv",
    }[named]
    (tmp_path / "sub").mkdir()
    if named == "symlink":
        (tmp_path / "l.csv").symlink_to(given)
    if named == "hardlink":
        os.link(given, tmp_path / "h.csv")
    result = cli(
        "converge", "fit", "--csv", "curve.csv", "--x", "step", "--y", "loss", "--to-csv", out
    )
    said = f"--to-csv {out} is the --csv file curve.csv: the β table would replace the curve"
    one_line(result, 2, f"error: {said} (give --to-csv another file)")
    assert digest(given) == kept


def test_make_shapes_into_a_voc_set_is_refused(cli: Cli, tmp_path: Path) -> None:
    """Before: exit 0, the user's 000000.jpg and 000001.xml replaced, ImageSets rewritten to 4
    ids while 12 JPEGs remained."""
    assert cli("detect", "make-shapes", "voc", "--images", "3", "--size", "64").code == 0
    mine = tmp_path / "voc" / "Annotations" / "000001.xml"
    mine.write_text("mine")
    files = {p: digest(p) for p in (tmp_path / "voc").rglob("*") if p.is_file()}
    result = cli("detect", "make-shapes", "voc", "--images", "2", "--size", "64", "--seed", "5")
    one_line(
        result,
        2,
        "voc already holds a VOC set (voc/Annotations, voc/ImageSets, voc/JPEGImages)",
        "give a new or empty folder",
    )
    assert {p: digest(p) for p in (tmp_path / "voc").rglob("*") if p.is_file()} == files
