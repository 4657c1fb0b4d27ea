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


