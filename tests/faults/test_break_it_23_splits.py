"""Break-it round 23, left by the fixer of P2 cause C5: a link from one split into another.

A link in an image folder from train into val (`train/a/x -> ../../val/b`, a file, a folder
or a whole class folder) put val's images in the training split too, so the run was measured
on images it had trained on, without a word; C5's check refused only links into a sibling
class folder of the same split. Each is now one line naming the link, exit 2, before any
image is read; a split that lies outside the others (its images kept elsewhere) is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_break_it_23_data_a import describe, write_folder
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.mark.parametrize(
    ("link", "to"),
    [
        ("train/a/x.png", "val/b/0.png"),  # a file
        ("train/a/seen", "val/b"),  # a folder inside a class folder
        ("val/b/again", "train/a"),  # val measured on training images
    ],
)
def test_a_link_into_another_split_is_refused_naming_it(
    cli: Cli, tmp_path: Path, link: str, to: str
) -> None:
    root = write_folder(tmp_path / "if")
    (root / link).symlink_to(root / to)
    r = describe(cli, "imagefolder", root, "data.image_size=8")
    other = to.split("/")[0]
    one_line(r, 2, f"{root / link} leads into the {other} split ({root / other})")
    assert "keep each image in one split" in r.err


def test_a_class_folder_that_is_a_link_into_another_split_is_refused(
    cli: Cli, tmp_path: Path
) -> None:
    root = write_folder(tmp_path / "if")
    (root / "train" / "b").rename(tmp_path / "gone")
    (root / "train" / "b").symlink_to(root / "val" / "b")  # train's b is val's b
    r = describe(cli, "imagefolder", root, "data.image_size=8")
    one_line(r, 2, f"{root / 'train' / 'b'} leads into the val split")


def test_a_split_kept_elsewhere_through_links_is_read(cli: Cli, tmp_path: Path) -> None:
    root = write_folder(tmp_path / "if")
    (root / "val").rename(tmp_path / "kept_val")
    (root / "val").symlink_to(tmp_path / "kept_val")  # the whole split, elsewhere
    r = describe(cli, "imagefolder", root, "data.image_size=8")
    assert r.code == 0, r.err
    assert json.loads(r.out)["classes"] == ["a", "b"]
