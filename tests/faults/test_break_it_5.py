"""The fifth break-it round (issue 41): each defect reproduced first through the real entry
point, in a process of its own where the defect lives in how the process ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("args", [["models"], ["devices"]])
def test_a_closed_pipe_ends_a_command_quietly(args: list[str], tmp_path: Path) -> None:
    """`dlperf models | head -c1`: the reader gone before anything is written, so that every
    write meets the closed pipe (rich then exits 1, as Python's own tools do)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlperf", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    # before: "error: console.py:2042 called sys.exit(1) (code that cannot go on ...)"
    assert (proc.wait(timeout=300), err) == (1, "")
