"""Break-it round 36, the user's data (docs/faults.md, the thirty-sixth round).

C1: an image folder's train/ or val/ that is a loop of symbolic links, a link to nothing or a
file was "set/train not found", and of a relative data.root with "a relative data.root is read
from the current directory ... give an absolute path", though the root was found and an
absolute path changes nothing. Each is now said to be what it is, as a data.root is; the
relative-path hint is given only where data.root itself is not there.

C2 (found fixing C1): a test/ that is a loop of symbolic links was "a link to nothing (test)".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


# --- C1: train/ or val/ a loop, a link to nothing or a file -----------------------------------


def split_folders(root: Path) -> Path:
    """root/train and root/val, empty: each is refused before any image is read."""
    for split in ("train", "val"):
        (root / split).mkdir(parents=True)
    return root


def describe(cli: Cli, root: Path | str) -> CliResult:
    sets = ("--set", f"data.root={root}", "--set", "data.image_size=8")
    return cli("data", "describe", "imagefolder", *sets)


def loop(root: Path, split: str) -> None:
    (root / split).rmdir()
    (root / split).symlink_to("loop2")
    (root / "loop2").symlink_to(split)


def dangling(root: Path, split: str) -> None:
    (root / split).rmdir()
    (root / split).symlink_to("/nonexistent/x")


def file(root: Path, split: str) -> None:
    (root / split).rmdir()
    (root / split).write_text("x")


@pytest.mark.parametrize("split", ["train", "val"])
@pytest.mark.parametrize(
    ("make", "said"),
    [
        (loop, "{p} is a loop of symbolic links ({p} -> loop2 -> {s})"),
        (dangling, "{p} is a link to /nonexistent/x, which is not there"),
        (file, "{p} is a file, not a folder"),
    ],
)
def test_c1_a_split_folder_that_is_no_folder_is_said_to_be_what_it_is(
    cli: Cli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    split: str,
    make: Callable[[Path, str], None],
    said: str,
) -> None:
    """Before: "set/train not found: a relative data.root is read from the current directory,
    ... give an absolute path", and "/abs/set/train not found" of an absolute one."""
    make(split_folders(tmp_path / "set"), split)
    monkeypatch.chdir(tmp_path)
    for root in ("set", tmp_path / "set"):
        r = describe(cli, root)
        one_line(r, 2, said.format(p=f"{root}/{split}", s=split))
        assert "not found" not in r.err and "relative data.root" not in r.err


def test_c1_a_missing_split_of_a_relative_root_that_is_there_has_no_relative_path_hint(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "set/train not found: a relative data.root is read from the current directory,
    ...": the root was read from there, and found."""
    (split_folders(tmp_path / "set") / "train").rmdir()
    monkeypatch.chdir(tmp_path)
    r = describe(cli, "set")
    one_line(r, 2, "set/train not found", "imagefolder wants root/train and root/val")
    assert "relative data.root" not in r.err
    # a relative data.root not there keeps it
    r = describe(cli, "gone")
    one_line(r, 2, "gone/train not found: a relative data.root is read from the current")


# --- C2: test/ a loop of links ----------------------------------------------------------------


def test_c2_a_test_folder_that_is_a_loop_of_links_is_said_to_be_one(
    cli: Cli, tmp_path: Path
) -> None:
    """Before: "set/test is a link to nothing (test)", of a link that points at itself."""
    root = split_folders(tmp_path / "set")
    (root / "test").symlink_to("test")
    r = describe(cli, root)
    one_line(r, 2, f"{root}/test is a loop of symbolic links ({root}/test -> test)")
    assert "link to nothing" not in r.err and "remove test/ to test on val/" in r.err
