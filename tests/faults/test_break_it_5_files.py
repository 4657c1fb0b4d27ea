"""Break-it round 5 (issue 41): trace and checkpoint files that are not what they should be.

A trace that is a FIFO blocked `runs trace` and `report` forever in open(), and one that is a
link to /dev/zero was read up to the 256 MiB cap; a checkpoint removed, or replaced by a FIFO,
a directory or a link to /dev/zero, was said to be one the run never wrote ("it stopped
before its first epoch ended"); a SIGKILL mid-save leaves `checkpoint.part.pt` behind.

The commands that could block run under a guard: a regression that blocks fails its test
instead of hanging the suite (a guard, not a timing assertion). `runs trace` and `report`
(two pages: no drawing workers) read their traces in this thread: they run in this process
under pytest-timeout, whose signal ends a blocked open(), as test_break_it_5_resume.py's
commands on the killed run do.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import digits, one_line
from tests.test_trace_caps import gz, step_events, traced_run

Cli = Callable[..., CliResult]
GUARD_S = 300  # far past what each command takes on the busy shared machine


def fifo(path: Path) -> None:
    os.mkfifo(path)


def link_to_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def directory(path: Path) -> None:
    path.mkdir()


def remove(path: Path) -> None:
    """Whatever lies at `path`: a file, a link, a FIFO or an empty directory."""
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)


# --- traces -----------------------------------------------------------------------------------


@pytest.mark.timeout(GUARD_S)
@pytest.mark.parametrize("make", [fifo, link_to_dev_zero], ids=["fifo", "dev-zero"])
def test_a_trace_that_is_not_a_regular_file_is_refused_unopened(
    cli: Cli, store: RunStore, tmp_path: Path, make: Callable[[Path], None]
) -> None:
    """Before: a FIFO blocked in open() forever; /dev/zero was read to the 256 MiB cap and
    refused as too large."""
    trace = tmp_path / "run" / "rank0.pt.trace.json.gz"
    trace.parent.mkdir()
    make(trace)
    run_id = traced_run(store, trace)
    one_line(cli("runs", "trace", str(run_id)), 2, f"the trace {trace} is not a regular file")


@pytest.mark.faults  # over 10 s under load: make test-faults
@pytest.mark.timeout(GUARD_S)
def test_a_fifo_trace_costs_the_report_only_its_own_tables(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    for folder in (good, bad):
        folder.mkdir()
    good_id = traced_run(
        store, gz(good / "rank0.pt.trace.json.gz", f'{{"traceEvents": [{step_events()}]}}')
    )
    trace = bad / "rank0.pt.trace.json.gz"
    fifo(trace)
    bad_id = traced_run(store, trace)

    site = tmp_path / "site"
    result = cli("report", str(good_id), str(bad_id), "--out", str(site))
    assert result.code == 0, result.err
    page = {run_id: (site / f"run-{run_id}.html").read_text() for run_id in (good_id, bad_id)}
    assert "1 steps profiled on cpu" in page[good_id]
    assert f"the trace {trace} is not a regular file" in page[bad_id]
    assert "self CPU ms/step" not in page[bad_id]


# --- checkpoints ------------------------------------------------------------------------------


# A killed run's checkpoint gone or not a file, said as such: in test_break_it_5_resume.py's
# test_a_model_file_changed_since_the_run_is_one_line_and_the_run_stays_resumable, on the
# killed run that test makes anyway.


@pytest.mark.parametrize(
    ("checkpointing", "epoch_ended", "said"),
    [
        # Stopped in epoch 1: the path was recorded as the run started, and never written.
        (True, False, "run 1 has no checkpoint to resume from (it stopped before its first"),
        (True, True, "run 1's checkpoint {path} is missing (put the run's checkpoint back"),
        # A sweep deletes the final weights of its points without run.checkpoint.
        (False, True, "run 1 has no checkpoint to resume from"),
    ],
)
def test_a_checkpoint_not_on_disk_is_missing_only_once_written(
    cli: Cli, store: RunStore, tmp_path: Path, checkpointing: bool, epoch_ended: bool, said: str
) -> None:
    path = tmp_path / "run-1" / "checkpoint.pt"
    config = digits().to_dict()
    config["run"]["checkpoint"] = checkpointing
    run_id = store.create_run("stopped", "run", config, "cafe")
    store.add_artifact(run_id, "checkpoint", path)
    if epoch_ended:
        store.log_metrics(run_id, [("epoch/train_loss", 1, 0.5)])
    store.finish_run(run_id, "killed", error="interrupted")
    one_line(cli("run", "--resume", str(run_id)), 2, said.format(path=path))


def test_runs_delete_removes_a_partial_checkpoint_left_by_a_kill(
    cli: Cli, store: RunStore, tmp_path: Path
) -> None:
    """A SIGKILL during the first save leaves only `checkpoint.part.pt` in the run's
    directory; deleting the run removes it with the directory."""
    own = store.artifact_dir(tmp_path / "runs") / "run-1"
    own.mkdir(parents=True)
    (own / "checkpoint.part.pt").write_bytes(b"half a checkpoint")
    run_id = store.create_run("stopped", "run", digits().to_dict(), "cafe")
    store.add_artifact(run_id, "checkpoint", own / "checkpoint.pt")
    store.finish_run(run_id, "killed", error="interrupted")
    deleted = cli("runs", "delete", str(run_id), "--yes")
    assert deleted.code == 0, deleted.err
    assert not own.exists()
