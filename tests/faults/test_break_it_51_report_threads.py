"""Break-it round 51, fixer H2: `dlperf report` whose drawing pool cannot start a thread.

T3 C1: from 16 run pages on, `report` draws them in a pool of spawned workers, whose manager
thread starts the call queue's feeder thread as it hands the first page over. Under
`ulimit -v 210000` there was room for the manager's 8 MiB stack and not the feeder's: the
manager printed "Exception in thread ...: RuntimeError: can't start new thread" in a 13-line
traceback and died, and the report waited for ever (rc 124 under `timeout`). Now the feeder is
started by the report's own thread before the manager, so that either one's failure is the
report's: the workers it started are ended, and the report ends in one line naming the limit
and its fix, as the DataLoader's does ("error: the report could not start its drawing workers'
processes or threads (a memory limit, ulimit -v 210000, leaves no room for another thread's
8 MiB stack: raise it)"), exit 1, the old site as it was, no staging folder, no process left.
(Not drawn in-process instead: under that limit OpenBLAS ended the report's own process as it
drew, exit 1 with no error line.)

The pool is made to start for 2 pages (POOL_FROM), and the thread that cannot start is made
so by `threading.Thread.start` raising Python's own error for it: no ulimit, no timer.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import process
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dlperf.store import RunStore
from tests.faults.test_break_it_50_report_workers import pooled_report

if TYPE_CHECKING:
    from tests.conftest import CliResult


def _fails_to_start(which: str) -> Callable[[threading.Thread], None]:
    """`Thread.start` that cannot start the pool's `which` thread (as under a low ulimit -v)."""
    start = threading.Thread.start

    def refusing(thread: threading.Thread) -> None:
        feeder = thread.name == "QueueFeederThread"
        manager = isinstance(thread, process._ExecutorManagerThread)
        if (which == "feeder" and feeder) or (which == "manager" and manager):
            raise RuntimeError("can't start new thread")
        start(thread)

    return refusing


@pytest.mark.timeout(120)  # before the fix, the feeder's case waited for ever
@pytest.mark.parametrize("which", ["feeder", "manager"])
def test_c1_a_pool_that_cannot_start_its_threads_ends_the_report_in_one_line(
    cli: Callable[..., CliResult],
    store: RunStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    which: str,
) -> None:
    """Before: the feeder's case hung after a thread's traceback; the manager's ended in a
    traceback ("cannot join thread before it is started") with a worker left running."""
    old = pooled_report(store, tmp_path, monkeypatch)
    monkeypatch.setattr("dlperf.errors.address_limit", lambda: 210000 * 1024)
    monkeypatch.setattr("dlperf.errors.room", lambda size: False)
    monkeypatch.setattr("dlperf.errors._thread_stack", lambda: 8 * 2**20)  # ulimit -s 8192's
    monkeypatch.setattr(threading.Thread, "start", _fails_to_start(which))

    result = cli("report", "--out", "site")

    lines = result.err.strip().splitlines()
    assert result.code == 1, result.err
    assert "Traceback" not in result.err and len(lines) == 1, result.err
    assert lines[0] == (
        "error: the report could not start its drawing workers' processes or threads (a memory "
        "limit, ulimit -v 210000, leaves no room for another thread's 8 MiB stack: raise it)"
    ), result.err
    assert [p.name for p in old.iterdir()] == ["index.html"]  # no staging folder
    assert (old / "index.html").read_text() == "the old site"
    assert multiprocessing.active_children() == []  # every worker it started was ended
