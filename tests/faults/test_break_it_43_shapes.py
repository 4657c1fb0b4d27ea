"""Break-it round 43, fixer F3: a stopped `detect make-shapes` (T3 C3).

C3. `detect make-shapes sh1 --images 3000 --size 64` stopped by SIGTERM once its first JPEGs
were written left a half-made set (103 JPEGs and XMLs, an empty ImageSets/Main, no split
lists), said nothing and exited 143; a rerun into sh1 was refused as "sh1 already holds a VOC
set (...)", and `detect finetune sh1` said "no split file sh1/ImageSets/Main/train.txt". Now
the set is written in a hidden folder of sh1's own and moved into place once whole: a stop
leaves sh1 as it found it (none, if it made sh1), and the rerun writes the set. A SIGKILLed
writer's hidden folder is removed by the next make-shapes. A folder holding a set without its
split lists (an earlier dlperf's stop left one) is called an incomplete VOC set, by make-shapes
and by finetune alike, with the way out: remove it and make it again. Since the set is moved
into place at the end, a file or a symbolic link where it goes is refused before the work
(`make-shapes FILE` says "FILE is not a folder", where it said "cannot use FILE/Annotations:
Not a directory").

Every stop is raised at a named point (the third image's save), so no test races a timer.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf.detect import voc
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
LISTS = ["train.txt", "trainval.txt", "val.txt"]


def _stop_at_third_image(
    monkeypatch: pytest.MonkeyPatch, stop: Callable[[], None]
) -> Callable[[Any, Path], None]:
    """`stop` once make-shapes has saved its third JPEG (two whole images and their XMLs are
    written by then); returns the save it patched, to put back."""
    save = voc._save_jpeg
    saved: list[Path] = []

    def stopped(image: Any, path: Path) -> None:
        save(image, path)
        saved.append(path)
        if len(saved) == 3:
            stop()

    monkeypatch.setattr(voc, "_save_jpeg", stopped)
    return save


def _interrupt() -> None:
    raise KeyboardInterrupt


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("before", ["new", "empty", "other files"])
def test_a_stopped_make_shapes_leaves_the_folder_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: str
) -> None:
    """Before: sh1 held 2 JPEGs, 2 XMLs and an empty ImageSets/Main."""
    root = tmp_path / "sub" / "sh1"
    if before != "new":
        root.mkdir(parents=True)
    if before == "other files":
        (root / "notes.txt").write_text("mine\n")
        (root / "JPEGImages").mkdir()  # empty: written into, as an empty sh1 is
    was = _tree(root) if root.exists() else None
    save = _stop_at_third_image(monkeypatch, _interrupt)
    with pytest.raises(KeyboardInterrupt):
        voc.make_shapes(root, images=6, size=64)
    if was is None:
        assert not (tmp_path / "sub").exists()  # nor the parent it made
    else:
        assert _tree(root) == was
    monkeypatch.setattr(voc, "_save_jpeg", save)
    summary = voc.make_shapes(root, images=6, size=64)
    assert (summary["train"], summary["val"]) == (4, 2)
    assert sorted(p.name for p in (root / "ImageSets" / "Main").iterdir()) == LISTS
    assert len(list((root / "JPEGImages").iterdir())) == 6
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []


def test_make_shapes_stopped_by_sigterm_leaves_nothing_and_the_rerun_writes_the_set(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tester's case: a real SIGTERM, through dlperf's handler. Before: exit 143, then
    "sh1 already holds a VOC set (...)" and "no split file sh1/ImageSets/Main/train.txt"."""
    save = _stop_at_third_image(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))
    result = cli("detect", "make-shapes", "sh1", "--images", "6", "--size", "64")
    assert result.code == 143, result.err
    assert not (tmp_path / "sh1").exists()
    monkeypatch.setattr(voc, "_save_jpeg", save)
    result = cli("detect", "make-shapes", "sh1", "--images", "6", "--size", "64")
    assert result.code == 0, result.err
    assert voc.read_split(tmp_path / "sh1", "train") == [f"{n:06d}" for n in range(4)]


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_killed_writers_hidden_folder_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    """SIGKILL leaves the hidden folder (no cleanup runs): the next make-shapes removes it,
    not one of a writer still running (its parent process stands in for one)."""
    root = tmp_path / "sh1"
    host = socket.gethostname()
    dead = root / f".make-shapes-{host}-{_dead_pid()}-0123abcd"
    live = root / f".make-shapes-{host}-{os.getppid()}-4567cdef"
    for folder in (dead, live):
        (folder / "JPEGImages").mkdir(parents=True)
        (folder / "JPEGImages" / "000000.jpg").write_bytes(b"part")
    voc.make_shapes(root, images=2, size=64)
    assert not dead.exists()
    assert live.exists()
    assert voc.read_split(root, "trainval") == ["000000", "000001"]


def _incomplete(root: Path) -> None:
    """What a stopped make-shapes of an earlier dlperf left: images, annotations, and an
    empty ImageSets/Main."""
    voc.make_shapes(root, images=2, size=64)
    for name in LISTS:
        (root / "ImageSets" / "Main" / name).unlink()


def test_an_incomplete_set_is_called_one_by_make_shapes(cli: Cli, tmp_path: Path) -> None:
    """Before: "sh1 already holds a VOC set (...) (give a new or empty folder)"."""
    _incomplete(tmp_path / "sh1")
    result = cli("detect", "make-shapes", "sh1", "--images", "2", "--size", "64")
    one_line(
        result,
        2,
        "error: sh1 holds an incomplete VOC set (sh1/Annotations, sh1/ImageSets, "
        "sh1/JPEGImages): no split lists in sh1/ImageSets/Main (remove sh1 and make the set "
        "again, or give a new or empty folder)",
    )


def test_an_incomplete_set_is_called_one_by_finetune(cli: Cli, tmp_path: Path) -> None:
    """Before: "no split file sh1/ImageSets/Main/train.txt"."""
    _incomplete(tmp_path / "sh1")
    result = cli("detect", "finetune", "sh1", "--epochs", "1")
    one_line(
        result,
        2,
        "error: sh1 is an incomplete VOC set: sh1/ImageSets/Main holds no split lists (remove "
        "sh1 and make it again with `dlperf detect make-shapes`, or give a whole VOC set)",
    )


def test_a_missing_split_of_a_whole_set_is_still_named(tmp_path: Path) -> None:
    """A set with its lists, asked for a split it lacks, keeps its "no split file" line."""
    voc.make_shapes(tmp_path, images=2, size=64)
    with pytest.raises(voc.UserError, match=r"^no split file .*test\.txt$"):
        voc.read_split(tmp_path, "test")


@pytest.mark.parametrize(
    ("place", "said"),
    [
        ("sh1", "sh1 is not a folder (give a new or empty folder for the set)"),
        ("sh1/Annotations", "sh1/Annotations is not a folder: make-shapes moves its own"),
        ("sh1/JPEGImages@", "sh1/JPEGImages is a symbolic link: make-shapes moves its own"),
    ],
)
def test_what_the_finished_set_cannot_be_moved_over_is_refused_first(
    cli: Cli, tmp_path: Path, place: str, said: str
) -> None:
    """The set is moved into place at the end: a file or a link (to an empty folder, which
    make-shapes wrote through before) where it goes is refused before any image is made."""
    path = tmp_path / place.rstrip("@")
    path.parent.mkdir(parents=True, exist_ok=True)
    if place.endswith("@"):
        (tmp_path / "elsewhere").mkdir()
        path.symlink_to(tmp_path / "elsewhere")
    else:
        path.write_text("mine\n")
    result = cli("detect", "make-shapes", "sh1", "--images", "2", "--size", "64")
    one_line(result, 2, f"error: {said}")
    assert [p.name for p in tmp_path.glob("sh1/.*")] == []
