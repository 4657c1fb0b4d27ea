"""Break-it round 60, fixer G4: a SIGKILL as a TensorBoard export moves its runs into place
(T3 C1).

Before: `_swap_in` unlinked a run's old event files and only then moved its new ones in from
OUT/.dlperf-exporting. A SIGKILL between the two (seen for real as `runs export 1 2 3 --to
tensorboard` was killed) left OUT/run-ID-NAME empty, the new events waiting in the hidden
staging folder; the next export's first act removed that folder, so the run had no events at
all until it was exported again.
Now each run's new event files are moved in first and its old ones unlinked only after: a
SIGKILL at any point leaves every run its old events, its new ones, or (killed between the
two) both until it is exported again, never neither; what the next export removes with the
staging folder is never a run's only copy.

The child kills itself at a named point (before the Nth move or unlink of an event file), and
the test waits on its exit, not on a timer.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import dlperf
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

pytest.importorskip("tensorboard", reason="the tensorboard extra")

# Exports runs 1 and 2 of argv[1] to argv[2], SIGKILLing itself just before the argv[3]-th
# move or unlink of an event file (two runs of one file each: four operations in all).
KILLED_AT = r"""
import os, pathlib, shutil, signal, sys
from dlperf.exporters import export_tensorboard
from dlperf.store import RunStore

store = RunStore.open(sys.argv[1])
at, ops = int(sys.argv[3]), []

def counted(real):
    def op(path, *args):
        if pathlib.Path(path).name.startswith("events.out.tfevents."):
            ops.append(path)
            if len(ops) == at:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(path, *args)
    return op

shutil.move = counted(shutil.move)
pathlib.Path.unlink = counted(pathlib.Path.unlink)
export_tensorboard(store, [1, 2], sys.argv[2])
"""


def _events(out: Path) -> dict[str, set[str]]:
    """Each run directory's event file names."""
    return {
        d.name: {f.name for f in d.glob("events.out.tfevents.*")} for d in sorted(out.glob("run-*"))
    }


@pytest.mark.faults  # a child that imports torch for its SummaryWriter, and three exports
@pytest.mark.parametrize("at", [2, 4])  # after run 1's first file operation, after run 2's
def test_a_sigkill_as_the_tensorboard_runs_are_swapped_in_leaves_every_run_events(
    cli: Cli, db: str, tmp_path: Path, at: int
) -> None:
    for name in ("alpha", "beta"):
        with dlperf.track(name, {"lr": 0.1}, store=db) as run:
            for step in range(1, 4):
                run.log(step, loss=1.0 / step)
    out = tmp_path / "tb"
    assert cli("runs", "export", "1", "2", "--to", "tensorboard", "--out", "tb").code == 0
    old = _events(out)
    assert sorted(old) == ["run-1-alpha", "run-2-beta"]
    assert all(len(files) == 1 for files in old.values())

    child = subprocess.run(
        [sys.executable, "-c", KILLED_AT, db, str(out), str(at)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr  # it died at the point named
    after = _events(out)
    for directory, files in after.items():
        # before: at=2 left run-1-alpha empty, at=4 run-2-beta; now both hold old and new
        assert files, f"{directory} lost its events: {after}"
        assert files == old[directory] or files - old[directory], after

    # The next export (of run 1 only) removes the staging folder: run 2 keeps events there.
    assert cli("runs", "export", "1", "--to", "tensorboard", "--out", "tb").code == 0
    assert not (out / ".dlperf-exporting").exists()
    assert _events(out)["run-2-beta"], _events(out)
    # Exported again, every run holds one event file, its newest, as an unkilled export leaves.
    assert cli("runs", "export", "1", "2", "--to", "tensorboard", "--out", "tb").code == 0
    final = _events(out)
    assert all(len(files) == 1 for files in final.values()), final
    assert all(not (files & old[d]) for d, files in final.items()), final
