"""dlperf.paths: outputs checked before the work, and writes a reader sees whole or not at all."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from dlperf.paths import (
    atomic_write,
    check_writable,
    made_dir,
    no_file_of_bytes,
    replaced,
    told,
)


def test_check_writable_leaves_no_file_and_keeps_an_existing_one(tmp_path: Path) -> None:
    new = tmp_path / "out.json"
    assert check_writable(new) == new and not new.exists()
    old = tmp_path / "old.json"
    old.write_text("kept")
    check_writable(old)
    assert old.read_text() == "kept"  # opened for appending: not truncated


def test_check_writable_refuses_a_missing_directory_unless_it_is_dlperf_s(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        check_writable(tmp_path / "typo" / "out.json")
    assert not (tmp_path / "typo").exists()
    made = check_writable(tmp_path / "runs" / "a" / "out.json", make_parents=True)
    assert made.parent.is_dir() and not made.exists()


def test_check_writable_fails_where_no_file_can_be(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        check_writable(tmp_path / "file" / "out.json")
    with pytest.raises(IsADirectoryError):
        check_writable(tmp_path)


def test_replaced_swaps_the_whole_file_in_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "weights.npz"
    path.write_text("old")
    with replaced(path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith("weights.part-")
        assert tmp.suffix == ".npz"  # the suffix kept last (numpy's savez adds one)
        tmp.write_text("new")
        assert path.read_text() == "old"  # a reader meanwhile sees the old file whole
    assert path.read_text() == "new" and not tmp.exists()


def test_a_failed_block_leaves_the_old_file_and_no_part(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), replaced(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_atomic_write_takes_text_or_bytes(tmp_path: Path) -> None:
    path = tmp_path / "pid"
    atomic_write(path, "123\n")
    assert path.read_bytes() == b"123\n"
    atomic_write(path, b"\x00\xff", fsync=True)
    assert path.read_bytes() == b"\x00\xff"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pid"]


def test_told_says_an_os_error_in_one_line_and_whether_it_is_bad_input(tmp_path: Path) -> None:
    """The command line's OSError line (it lived in dlperf.cli until it outgrew the module)."""
    missing = OSError(errno.ENOENT, os.strerror(errno.ENOENT), str(tmp_path / "x"))
    assert told(missing) == (f"cannot use {tmp_path / 'x'}: No such file or directory", True)
    big = OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(tmp_path / "y"))
    said, bad = told(big)
    assert "a file size limit (ulimit -f) stopped the write" in said and not bad
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    looped = OSError(errno.EEXIST, os.strerror(errno.EEXIST), str(tmp_path / "loop"))
    assert told(looped) == (
        f"cannot use {tmp_path / 'loop'}: Too many levels of symbolic links",
        True,
    )
    nameless = OSError(errno.EIO, os.strerror(errno.EIO))
    assert told(nameless) == (
        "Input/output error (the system named no file: dlperf --debug ... shows where)",
        False,
    )


def test_no_file_of_bytes_tells_what_reads_as_size_0_but_is_no_empty_file(tmp_path: Path) -> None:
    """A FIFO, a device and a /proc file read as size 0, as an empty file does."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert no_file_of_bytes(fifo) == "a FIFO"
    assert no_file_of_bytes("/dev/null") == "a character device"
    assert no_file_of_bytes("/proc/self/status") == "a file of the kernel's, whose size reads 0"
    empty, full = tmp_path / "empty.db", tmp_path / "full.db"
    empty.touch()
    full.write_bytes(b"SQLite format 3\0")
    assert no_file_of_bytes(empty) is None and no_file_of_bytes(full) is None
    assert no_file_of_bytes(tmp_path / "missing") is None


def test_a_file_written_between_its_stat_and_its_read_is_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight processes opening a new store at once: one stat'ed the file at 0 bytes as
    another wrote its header, read that header, and refused the store as "a file of the
    kernel's" (2 runs in 12 of the round-5 test, under load). Here the stat is made to
    come before the write."""
    store = tmp_path / "new.db"
    store.write_bytes(b"SQLite format 3\0")
    real = os.stat

    def stat_before_the_write(path: str | os.PathLike[str], **kwargs: bool) -> os.stat_result:
        seen = real(path, **kwargs)
        if Path(path) != store:
            return seen
        return os.stat_result((seen.st_mode, *seen[1:6], 0, *seen[7:]))

    monkeypatch.setattr(os, "stat", stat_before_the_write)
    assert no_file_of_bytes(store) is None
    monkeypatch.undo()
    assert no_file_of_bytes("/proc/self/status") == "a file of the kernel's, whose size reads 0"


def test_made_dir_removes_the_empty_directories_it_made_when_the_block_fails(
    tmp_path: Path,
) -> None:
    with made_dir(tmp_path / "a" / "b") as where:
        (where / "kept.png").write_bytes(b"")
    assert (tmp_path / "a" / "b" / "kept.png").exists()  # a block that ends well keeps all
    with pytest.raises(ValueError), made_dir(tmp_path / "x" / "y" / "z"):
        raise ValueError
    assert list(tmp_path.iterdir()) == [tmp_path / "a"]  # x/y/z, all made by it, gone
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "other").write_text("not ours")
    with pytest.raises(KeyboardInterrupt), made_dir(tmp_path / "x" / "y"):
        raise KeyboardInterrupt
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["other"]  # x was there


def test_an_error_about_the_temporary_file_names_the_file_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    with pytest.raises(IsADirectoryError) as e, replaced(path) as tmp:
        tmp.mkdir()  # where the temporary file goes
        tmp.write_text("new")
    assert e.value.filename == str(path)  # not result.part-....json, a file the caller never sees
    path.mkdir()
    with pytest.raises(OSError) as e, replaced(path) as tmp:
        tmp.write_text("new")  # the rename onto a directory fails
    assert e.value.filename == str(path) and e.value.filename2 is None
