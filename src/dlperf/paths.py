"""Output paths, checked before the work that fills them."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """What `path` is when it is there (through links) but is not a regular file: "a FIFO",
    "a directory", "a character device" (a link to /dev/zero), "a block device", "a socket";
    None for a regular file, or for nothing there (the caller says "no such file" its way).
    Stat'ed, never opened: opening a FIFO waits for a writer, forever when there is none."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, a dangling link, a NUL in the name
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = {
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISDIR: "a directory",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((kind for test, kind in kinds.items() if test(mode)), "of another kind")


def unnamed_cwd() -> tuple[str, str] | None:
    """What keeps the working directory from being named, and the fix; None when nothing
    does. Deleted, os.getcwd() fails. Deeper than PATH_MAX, Python's getcwd still names it (in
    steps, as glibc does) but the kernel's refuses it, Path.resolve() cannot reach a file in
    it, and oneMKL ends the process at `import torch` ("Cannot load .../libtorch_cpu.so")."""
    try:
        where = os.getcwd()
    except FileNotFoundError:
        return "the working directory was deleted", "cd somewhere that exists"
    except OSError as e:  # a C library that does not name a directory past PATH_MAX
        return f"the working directory cannot be named ({e.strerror})", "cd to a shorter path"
    length, limit = len(os.fsencode(where)), os.pathconf("/", "PC_PATH_MAX")
    if length >= limit:  # the limit counts the terminating NUL
        said = f"the working directory's path is {length:,} bytes, more than the system's"
        return f"{said} {limit - 1:,}", "cd to a shorter path"
    return None


def check_writable(path: Path, make_parents: bool = False) -> Path:
    """Make sure `path` can be written, so an unusable output fails at once (main() prints
    the OSError in one line) rather than after minutes of work. Leaves no empty file behind.
    A missing directory is refused (a typo in it would otherwise create a tree at the root)
    unless `make_parents`, for dlperf's own directories."""
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    existed = path.exists()
    with open(path, "ab"):
        pass
    if not existed:
        path.unlink()
    return path


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Name `path` in an OSError of the block that names no file, as a write refused by a
    file size limit (EFBIG), a descriptor limit (EMFILE) or a full disk (ENOSPC) names none:
    the one error line then says what the command was writing. An error that names its own
    file keeps it."""
    try:
        yield
    except OSError as e:
        if e.filename is None:
            e.filename = os.fspath(path)
        raise


@contextmanager
def replaced(path: Path) -> Iterator[Path]:
    """A temporary file beside `path` that becomes `path` by one rename when the block ends
    without error, so that a reader (another process, a resumed run) sees the whole file or
    none; a failed block leaves no partial file. The temporary name keeps the suffix, since
    numpy's savez appends ".npz" to a name without it."""
    tmp = path.with_name(f"{path.stem}.part{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # already gone after the replace


def atomic_write(path: Path, data: bytes | str, fsync: bool = False) -> None:
    """Write `data` to `path` by rename (see `replaced`); `fsync` also survives a power cut."""
    with replaced(path) as tmp, open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
