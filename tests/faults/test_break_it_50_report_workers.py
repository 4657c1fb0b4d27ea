"""Break-it round 50, fixer G1: a drawing worker of `dlperf report` that dies.

T3 C1: from 16 run pages on, `report` draws them in a pool of spawned workers; one that died
(SIGKILL, the OOM killer's signal; a SIGTERM sent to it; OpenBLAS ending it under `ulimit -v`)
ended the report with Python's 49-line traceback ending in BrokenProcessPool, exit 1, and no
`error:` line. Now it is one line, exit 1, naming the worker and how it ended in the words sweep
uses for its dead workers ("killed by SIGKILL (out of memory? dmesg says)"), with the old site
as it was and no staging folder left.

The pool is made to start for 2 pages (POOL_FROM), and its workers draw with a task of this
module, which each imports by name: it ends its own process as it begins its page. No timer.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dlperf.report import site
from dlperf.store import RunStore

if TYPE_CHECKING:  # not imported by the workers, which import this module for `_ending_page`
    from tests.conftest import CliResult

# How the worker ends itself (in its environment, which spawn copies from this process's).
HOW_ENV = "DLPERF_TEST_WORKER_ENDS"


def _ending_page(task: Any) -> str:
    """The drawing task, in a worker: it ends its process as `HOW_ENV` says."""
    how = os.environ[HOW_ENV]
    if how == "exit":  # as OpenBLAS ends a process short of memory: exit(1)
        os._exit(1)
    os.kill(os.getpid(), signal.Signals[how])
    raise AssertionError("not ended")  # pragma: no cover


@pytest.mark.timeout(300)
def pooled_report(store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two finished runs, whose report the pool draws (from 2 pages, on 2 cores), and an old
    site in tmp_path/site that a failed report must leave as it was."""
    for i in range(2):
        run_id = store.create_run(f"r{i}", "run", {})
        store.log_metrics(run_id, [("train/loss", step, 1 / step) for step in range(1, 4)])
        store.finish_run(run_id, "finished")
    old = tmp_path / "site"
    old.mkdir()
    (old / "index.html").write_text("the old site")
    monkeypatch.setattr(site, "POOL_FROM", 2)
    monkeypatch.setattr("dlperf.system.usable_cores", lambda: 2)
    return old


def test_c1_a_drawing_worker_killed_ends_the_report_in_one_line(
    cli: Callable[..., CliResult],
    store: RunStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: rc 1, a BrokenProcessPool traceback and no `error:` line."""
    old = pooled_report(store, tmp_path, monkeypatch)
    (old / "run-1.html").write_text("an old page")
    monkeypatch.setattr(site, "_write_run_page", _ending_page)
    monkeypatch.setenv(HOW_ENV, "SIGKILL")
    result = cli("report", "--out", "site")
    lines = result.err.strip().splitlines()
    assert result.code == 1, result.err
    assert "Traceback" not in result.err and len(lines) == 1, result.err
    assert lines[0].startswith("error: a report drawing worker (pid "), result.err
    assert "was killed by SIGKILL (out of memory? dmesg says)" in lines[0], result.err
    assert sorted(p.name for p in old.iterdir()) == ["index.html", "run-1.html"]  # no staging
    assert (old / "index.html").read_text() == "the old site"
    assert (old / "run-1.html").read_text() == "an old page"


@dataclass
class _Ended:
    """A joined worker, as the pool's table holds it."""

    exitcode: int


@pytest.mark.parametrize(
    ("codes", "limit", "said"),
    [
        # SIGTERM sent to one worker: the pool sent the others the same
        ({7: -15, 8: -15}, None, "a report drawing worker (pid 7) was killed by SIGTERM"),
        # OpenBLAS's exit(1) short of memory, under ulimit -v
        (
            {7: -15, 8: 1},
            200 * 2**20,
            "a report drawing worker (pid 8) ended with code 1 (a memory limit, ulimit -v "
            "204800 may be too low)",
        ),
    ],
    ids=["sigterm", "exit-under-ulimit-v"],
)
def test_c1_the_worker_that_died_is_named_with_how_it_ended(
    monkeypatch: pytest.MonkeyPatch, codes: dict[int, int], limit: int | None, said: str
) -> None:
    """Which worker died, read off the pool's joined workers (the others it SIGTERMed): the
    cases a real pool would take another two workers' start-up each to show."""
    monkeypatch.setattr("dlperf.errors.address_limit", lambda: limit)
    workers = {pid: _Ended(code) for pid, code in codes.items()}

    assert site._died(workers) == said  # type: ignore[arg-type]
