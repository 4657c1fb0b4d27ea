"""Break-it round 69, C1: a stderr whose writes fail (`2>/dev/full`: every write ENOSPC).

Before: only a closed stderr (`2>&-`) or a broken pipe was taken for a stderr nobody reads. On
/dev/full the failed write of a bad input's error line made its exit code 2 into 1 (`runs show
99`, `run nonexist.toml`, with --debug too), and the first progress line of `run` or `sweep`
failed the work itself: the run stored `failed` with "OSError: [Errno 28] No space left on
device", exit 1, nothing on stdout.

Now: Python's own stderr goes quiet at its first failed write (dlperf.std_streams._Stderr puts
/dev/null over descriptor 2), as a closed one does: the work goes on and the exit code is the
outcome's (2 for bad input, 0 for a finished run), the result on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXP = """
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
out_dir = "out"
"""


def _dlperf(cwd: Path, *args: str, db: str = "s.db") -> subprocess.CompletedProcess[str]:
    """`dlperf --db DB ARGS 2>/dev/full` in `cwd`, its stdout read."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "dlperf", "--db", db, *args],
            stdout=subprocess.PIPE,
            stderr=full,
            text=True,
            cwd=cwd,
            env=env,
            timeout=300,
        )


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "show", "99"],
        ["--debug", "runs", "show", "99"],
        ["run", "nonexist.toml"],
        ["runs", "list", "--where", "bogus=1"],
    ],
)
def test_bad_input_keeps_exit_code_2_on_a_full_stderr(tmp_path: Path, args: list[str]) -> None:
    result = _dlperf(tmp_path, *args)
    assert result.returncode == 2
    assert result.stdout == ""


def test_a_warning_then_the_table_on_a_full_stderr(tmp_path: Path) -> None:
    """The warning's failed write (rich's console) ended `runs list` with exit 1, no table."""
    result = _dlperf(tmp_path, "runs", "list", db="nothere.db ")
    assert result.returncode == 0
    assert result.stdout.split()[:3] == ["id", "┃", "name"]


@pytest.mark.faults  # a whole run in a fresh process: over 10 s on a busy machine
def test_a_run_finishes_with_its_progress_on_a_full_stderr(tmp_path: Path) -> None:
    (tmp_path / "exp.toml").write_text(EXP)
    result = _dlperf(tmp_path, "run", "exp.toml", "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["status"] == "finished"
    stored = json.loads(_dlperf(tmp_path, "runs", "show", "1", "--json").stdout)
    assert (stored["status"], stored["error"]) == ("finished", None)
