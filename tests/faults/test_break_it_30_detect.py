"""Break-it round 30, P2 causes C8, C9 and C10: detect's make-shapes and VOC split lists.

C8. `detect make-shapes --seed -1` was a traceback (NumPy's "expected non-negative integer").
Now one line, exit 2, before anything is written.
C9. `detect make-shapes --images 1000000000` wrote until the disk was full (about 8 TB at
--size 64). Now a count whose files would not fit the free space is refused before writing,
with the count that fits (`voc.image_bytes` a generous estimate of an image's bytes).
C10. A split list naming an image with no annotation was refused with no fix. Now: add the
file, or remove the id from the list.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import CliResult
from tests.faults.test_break_it_21_detect import shapes
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def test_a_negative_seed_is_refused_in_one_line(cli: Cli, tmp_path: Path) -> None:
    """Before: exit 1 and NumPy's traceback, ValueError: expected non-negative integer."""
    root = tmp_path / "sh"
    one_line(
        cli("detect", "make-shapes", str(root), "--images", "6", "--size", "64", "--seed=-1"),
        2,
        "error: --seed must be ≥ 0, got -1",
    )
    assert not root.exists()


def test_images_that_would_not_fit_the_disk_are_refused_before_writing(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk has room for two images of 64 px (12 KiB each, as estimated): 10^9 are refused
    with the count that fits, and nothing is written; two are written. Before: 43,109 images
    in 60 s, and on until the disk was full."""
    free = 2 * (64 * 64 + 2 * 4096)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=2**40, free=free))
    root = tmp_path / "big"
    one_line(
        cli("detect", "make-shapes", str(root), "--images", "1000000000", "--size", "64"),
        2,
        f"error: 1,000,000,000 images of 64×64 take about 11.2 TiB, and {tmp_path} has "
        "24.0 KiB free: about 2 fit (give --images 2 or fewer, or a folder on a disk with room)",
    )
    assert not root.exists()
    r = cli("detect", "make-shapes", str(root), "--images", "2", "--size", "64")
    assert r.code == 0, r.err
    assert len(list((root / "JPEGImages").iterdir())) == 2


def test_a_listed_image_with_no_annotation_says_how_to_fix_it(cli: Cli, tmp_path: Path) -> None:
    """Before: "split val lists 000099 but .../000099.xml is missing", no fix."""
    root = shapes(tmp_path)
    with open(root / "ImageSets" / "Main" / "val.txt", "a") as f:
        f.write("000099\n")
    weights = tmp_path / "det.pt"
    weights.touch()
    one_line(
        cli("detect", "eval", str(root), "--weights", str(weights), "--val-split", "val"),
        2,
        f"error: {root}: split val lists 000099 but {root}/Annotations/000099.xml is missing "
        "(add the file, or remove 000099 from ImageSets/Main/val.txt)",
    )
