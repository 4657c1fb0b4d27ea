"""Issue 42, tenth break-it round, `track` across threads and fork: threads logging to one run
lost and duplicated rows silently (the buffer was flushed while another thread filled it); a
child forked inside the block marked the parent's running run failed as it left the block and
wrote the parent's buffered rows a second time; each seen failing before its fix."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import dlperf
import dlperf.api
from dlperf.errors import UserError
from tests.conftest import fresh_store_url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store nobody has opened yet (tests.conftest.fresh_store_url)."""
    yield from fresh_store_url(request.param, tmp_path, "bk10t")


def _steps(url: str, run_id: int) -> list[int]:
    return sorted(step for step, _ in dlperf.Store(url).metrics(run_id, "loss"))


# --- threads --------------------------------------------------------------------------------

THREADS, STEPS = 3, 200


def test_threads_logging_to_one_run_store_every_row_once(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small batch: many flushes, each racing the other threads' log calls.
    monkeypatch.setattr(dlperf.api, "FLUSH_ROWS", 8)
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def loop(run: dlperf.api.TrackedRun, first: int) -> None:
        try:
            barrier.wait(timeout=60)
            for step in range(first, first + STEPS):
                run.log(step, loss=float(step))
        except BaseException as e:
            errors.append(e)

    with dlperf.track("threads", store=store_url) as run:
        threads = [
            threading.Thread(target=loop, args=(run, t * 1000), daemon=True) for t in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors
    expected = sorted(t * 1000 + i for t in range(THREADS) for i in range(STEPS))
    assert _steps(store_url, run.id) == expected  # every step, each exactly once
    assert dlperf.Store(store_url).run(run.id).status == "finished"


# --- fork -----------------------------------------------------------------------------------


def _forked_child(run: dlperf.api.TrackedRun, store: dlperf.Store, out: int) -> None:
    """In the child: log and phase on the parent's run (each to be refused), a run of its own
    in the same store, then leave the parent's block by SystemExit(0). Writes what it saw."""
    said = []
    for attempt in ("log", "phase"):
        try:
            if attempt == "log":
                run.log(2, loss=2.0)
            else:
                with run.phase("forward"):
                    pass
            said.append(f"{attempt}: no error")
        except UserError as e:
            said.append(f"{attempt}: {e}")
    with dlperf.track("child's own", store=store) as own:
        own.log(7, loss=7.0)
    said.append(f"own: {own.id}")
    os.write(out, "\n".join(said).encode())
    raise SystemExit(0)  # through the parent's `with dlperf.track` block


def test_a_forked_child_is_refused_and_leaves_the_parents_run_alone(store_url: str) -> None:
    parent = os.getpid()
    store = dlperf.Store(store_url)
    read_end, write_end = os.pipe()
    child = 0
    try:
        with dlperf.track("forked", store=store) as run:
            run.log(1, loss=1.0)  # held in memory: the child's copy must not write it
            child = os.fork()
            if child == 0:
                os.close(read_end)
                _forked_child(run, store, write_end)
            os.close(write_end)
            _, status = os.waitpid(child, 0)
            child = 0
            with os.fdopen(read_end) as f:
                said = f.read()
            assert os.waitstatus_to_exitcode(status) == 0, (status, said)
            assert dlperf.Store(store_url).run(run.id).status == "running"
            run.log(3, loss=3.0)
    except BaseException as e:
        if os.getpid() != parent:  # the child, whatever happened: never back into pytest
            code = 0 if isinstance(e, SystemExit) and e.code == 0 else 3
            os._exit(code)
        raise
    finally:
        if os.getpid() != parent:
            os._exit(4)  # the child left the block without an exception
        if child:  # an assertion failed before the wait: no child left behind
            os.waitpid(child, 0)
    lines = said.splitlines()
    assert len(lines) == 3, said
    refusal = (
        f"run {run.id} was opened by process {parent}; a forked child cannot log to it: "
        "open a run of its own with dlperf.track in the child"
    )
    assert lines[0] == f"log: {refusal}", said
    assert lines[1] == f"phase: {refusal}", said
    own = int(lines[2].removeprefix("own: "))
    back = dlperf.Store(store_url)
    assert back.run(run.id).status == "finished"
    assert _steps(store_url, run.id) == [1, 3]  # step 1 once: the child wrote nothing
    assert back.run(own).status == "finished"
    assert _steps(store_url, own) == [7]
