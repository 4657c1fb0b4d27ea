"""Break-it round 53, fixer G5: a report stopped with its drawing workers prints no traceback.

T1 C1. A SIGTERM sent to `dlperf report` and its drawing workers at once (`timeout`, a closing
terminal, a scheduler's kill of the group) ended the report with exit 143 and no site, as it
should, but about 1 try in 3 stderr also carried CPython's "Exception in thread Thread-1: ...
InvalidStateError: CANCELLED: <Future ... state=cancelled>". The pages' iterator was
`pool.map`'s, which cancels the pages not yet started, in the report's thread, as the stop cuts
it; the pool's manager thread, seeing the workers die, set BrokenProcessPool on every page it
held, cancelled ones too, which Python 3.11's `Future.set_exception` refuses. The iterator now
cancels nothing: the pages not yet started are cancelled by the report's
`shutdown(cancel_futures=True)`, which the manager thread does itself, so it never fails a page
it has cancelled. The test makes the race certain, with no timer: pages cancelled by the
iterator's end while a worker waits on a FIFO and the call queue is full (so the manager cannot
drop them), then that worker SIGKILLed. No thread dies of an exception now.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from dlperf.report import site

SPAWN = multiprocessing.get_context("spawn")  # as the report's pool
WAIT_S = 120  # generous: a busy machine starts a spawned interpreter slowly


def _waited(ready: Callable[[], bool], what: str) -> None:
    """Wait for `ready()` to hold, up to WAIT_S (an event another process causes)."""
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def _writer(fifo: Path) -> int:
    """The write end of `fifo`, opened once a reader has opened it (a worker in that page)."""
    fd: list[int] = []

    def opened() -> bool:
        try:
            fd.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
            return False
        return True

    _waited(opened, "the worker to open the FIFO")
    return fd[0]


def test_pool_stopped_as_its_worker_dies_prints_no_thread_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    died: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    # The report's pages, with a stand-in for drawing one: read a file. The second page is a
    # FIFO, which keeps the one worker in it until it is killed.
    monkeypatch.setattr(site, "_write_run_page", Path.read_text)
    first = tmp_path / "first.txt"
    first.write_text("first")
    fifo = tmp_path / "blocks"
    os.mkfifo(fifo)
    rest = [tmp_path / f"page-{i}.txt" for i in range(12)]
    for page in rest:
        page.write_text(page.name)
    pool = ProcessPoolExecutor(1, SPAWN)
    internals: Any = pool
    try:
        pages: Any = site._submitted(pool, [first, fifo, *rest])  # type: ignore[list-item]
        assert next(pages) == "first"
        fd = _writer(fifo)
        # Full, with the worker held, the call queue takes no more: the manager leaves the
        # remaining pages in its table, where it drops cancelled ones only as it fills it.
        # It fills the queue as it wakes, and the worker may have taken the FIFO's page after
        # its last wake (a busy machine): a submit wakes it again.
        pool.submit(str, "wake")
        _waited(internals._call_queue.full, "the call queue to fill")
        pages.close()  # the stop: what cut the report's wait ends its iterator
        (pid,) = internals._processes
        os.kill(pid, signal.SIGKILL)  # the group's signal, reaching the worker
        internals._executor_manager_thread.join(WAIT_S)
        os.close(fd)
    finally:
        for worker in list((internals._processes or {}).values()):
            worker.kill()  # one left in the FIFO's page would hold the shutdown for ever
        pool.shutdown(cancel_futures=True)
    assert [args.exc_type for args in died] == []
    assert "Traceback" not in capfd.readouterr().err
