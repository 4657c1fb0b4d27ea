"""The eighteenth break-it round, part H2: paths and working directories that cannot be used.

- F2: a store path that is not UTF-8 (`--db $'s\\xff.db'`) failed `run` with a
  UnicodeEncodeError traceback from rendering its URL; it is refused in one line, exit 2.
- F5: a `run.out_dir` in a loop of symbolic links failed with "RuntimeError: Symlink loop";
  it now says "cannot use DIR: Too many levels of symbolic links", exit 2, no run stored.
- F9: from a working directory deeper than PATH_MAX, oneMKL's "FATAL ERROR: Cannot load
  .../libtorch_cpu.so" ended any command that imports torch; it is refused in one line.
- F10: `runs list` (the default store) from a deleted working directory said "No such file
  or directory (the system named no file ...)"; every command that opens a store named
  relative to the working directory now says that the directory is gone (or too deep).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
batch_size = 32
lr = 0.05
[run]
threads = 1
warmup_steps = 1
"""


@pytest.fixture
def base(tmp_path: Path) -> Path:
    path = tmp_path / "base.toml"
    path.write_text(BASE)
    return path


# --- F2: a store path that is not UTF-8 ---------------------------------------------------------


@pytest.mark.parametrize("command", [("run", "BASE"), ("runs", "list"), ("doctor",)])
@pytest.mark.parametrize("as_url", [False, True])
def test_a_store_path_that_is_not_utf8_is_refused(
    cli: Cli, tmp_path: Path, base: Path, command: tuple[str, ...], as_url: bool
) -> None:
    """Before: `run` failed with a UnicodeEncodeError traceback, exit 1."""
    path = f"{tmp_path}/s\udcff.db"  # the byte 0xff of a file name, as Python reads argv
    db = f"sqlite:///{path}" if as_url else path
    args = [str(base) if arg == "BASE" else arg for arg in command]
    result = cli("--db", db, *args)
    shown = f"{tmp_path}/s\\xff.db"
    assert result.err == (
        f"error: run store: is not UTF-8: '{'sqlite:///' if as_url else ''}{shown}' "
        "(rename the file or folder so that its name is UTF-8)\n"
    )
    assert result.code == 2
    assert not os.path.lexists(path)


# --- F5: an out_dir in a loop of symbolic links -------------------------------------------------


def _loop(tmp_path: Path) -> Path:
    """Two links, each to the other."""
    (tmp_path / "lB").symlink_to("lA")
    (tmp_path / "lA").symlink_to("lB")
    return tmp_path / "lA"


@pytest.mark.parametrize("checkpoint", ["true", "false"])
def test_an_out_dir_in_a_symlink_loop_is_refused_before_the_run(
    cli: Cli, store: RunStore, base: Path, tmp_path: Path, checkpoint: str
) -> None:
    """Before: 'RuntimeError: Symlink loop from ...' and its traceback, exit 1."""
    loop = _loop(tmp_path)
    sets = ["--set", f"run.out_dir={loop}", "--set", f"run.checkpoint={checkpoint}"]
    result = cli("run", str(base), *sets)
    assert result.err == f"error: cannot use {loop}: Too many levels of symbolic links\n"
    assert result.code == 2
    assert store.list_runs() == []  # checked before the run was recorded


def test_artifact_dir_says_a_symlink_loop_as_the_os_does(store: RunStore, tmp_path: Path) -> None:
    loop = _loop(tmp_path)
    with pytest.raises(OSError, match="Too many levels of symbolic links") as raised:
        store.artifact_dir(loop / "below")
    assert raised.value.filename == str(loop / "below")


# --- F9 and F10: a working directory that cannot be named ---------------------------------------

# Makes DEPTH directories of 100 letters, each inside the last, from the directory it is given,
# goes into the deepest (relative steps: no path longer than PATH_MAX is ever used) and runs
# the command that follows there.
DEEP = """
import os, sys
os.chdir(sys.argv[1])
for _ in range({depth}):
    os.mkdir("d" * 100)
    os.chdir("d" * 100)
os.execv(sys.argv[2], sys.argv[2:])
"""
DEPTH = 45  # 4,545 bytes and more: past Linux's PATH_MAX of 4,096
DLPERF = [sys.executable, "-m", "dlperf"]
DELETED = (
    "error: the working directory was deleted, and the run store {} is named relative to it "
    "(cd somewhere that exists, or give --db an absolute path)\n"
)


def _env() -> dict[str, str]:
    """The test's environment, without DLPERF_DB: the default store, ./dlperf.db."""
    env = {k: v for k, v in os.environ.items() if k != "DLPERF_DB"}
    return {**env, "OMP_NUM_THREADS": "1"}


def _done(command: list[str]) -> CliResult:
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=240)
    return CliResult(done.returncode, done.stdout, done.stderr)


def _from_a_deep_directory(tmp_path: Path, *args: str) -> CliResult:
    deep = tmp_path / "deep"
    deep.mkdir()
    try:
        return _done([sys.executable, "-c", DEEP.format(depth=DEPTH), str(deep), *DLPERF, *args])
    finally:
        shutil.rmtree(deep)  # by descriptors: no path it walks is longer than PATH_MAX


def _from_a_deleted_directory(tmp_path: Path, *args: str) -> CliResult:
    """`python -m dlperf ARGS` started in a directory that is removed just before."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    return _done(["sh", "-c", script, "-", str(gone), *DLPERF, *args])


def _too_deep(tmp_path: Path) -> str:
    """How the working directory made by DEEP is told."""
    length = len(os.fsencode(os.path.realpath(tmp_path / "deep"))) + DEPTH * 101
    limit = os.pathconf("/", "PC_PATH_MAX") - 1
    return f"the working directory's path is {length:,} bytes, more than the system's {limit:,}"


def test_torch_from_a_directory_deeper_than_path_max_says_so(tmp_path: Path) -> None:
    """Before: 'Intel oneMKL FATAL ERROR: Cannot load .../libtorch_cpu.so.', exit 2."""
    described = _from_a_deep_directory(
        tmp_path, "data", "describe", "digits", "--per-class", "1", "--classes", "2"
    )
    assert described.err == (
        f"error: {_too_deep(tmp_path)}, and torch cannot load there (cd to a shorter path)\n"
    )
    assert described.code == 2


def test_the_default_store_from_a_directory_deeper_than_path_max_says_so(tmp_path: Path) -> None:
    """Before: 'cannot use /.../dlperf.db: File name too long', naming 4,556 bytes of path."""
    listed = _from_a_deep_directory(tmp_path, "runs", "list")
    assert listed.err == (
        f"error: {_too_deep(tmp_path)}, and the run store dlperf.db is named relative to it "
        "(cd to a shorter path, or give --db an absolute path)\n"
    )
    assert listed.code == 2


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("runs", "list"), "dlperf.db"),  # the listing read with sqlite3
        (("runs", "list", "--json"), "dlperf.db"),
        (("runs", "show", "1"), "dlperf.db"),  # the store opened the long way
        (("doctor",), "dlperf.db"),
        (("--db", "sub/x.db", "runs", "list"), "sub/x.db"),
        (("--db", "sqlite:///x.db", "runs", "show", "1"), "x.db"),
    ],
)
def test_a_store_named_relative_to_a_deleted_directory_says_so(
    tmp_path: Path, args: tuple[str, ...], named: str
) -> None:
    """Before: `runs list` said 'No such file or directory (the system named no file ...)',
    `runs show` 'cannot open run store sqlite:///dlperf.db: [Errno 2] No such file or
    directory'."""
    listed = _from_a_deleted_directory(tmp_path, *args)
    assert listed.err == DELETED.format(named)
    assert listed.code == 2


def test_an_absolute_store_still_lists_from_a_deleted_directory(tmp_path: Path) -> None:
    listed = _from_a_deleted_directory(tmp_path, "--db", str(tmp_path / "a.db"), "runs", "list")
    assert (listed.code, listed.err) == (0, "")
