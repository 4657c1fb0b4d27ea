"""Break-it round 31, reviewer 3 on `serve bench` (192f3a2f).

F6: a stop (Ctrl-C) landing in a task that the HTTP client started for a request (anyio's
connect, a task group of its own) left the client's tasks finished with a BaseExceptionGroup
holding the KeyboardInterrupt, and asyncio.run's shutdown printed each as "unhandled exception
during asyncio.run() shutdown", ~200 lines, after the exit's one line.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
from collections.abc import Callable

import anyio
import httpx
import pytest

from dlperf.deploy import loadgen
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
PREDICTION = {"model_name": "m", "predictions": []}


def test_a_stop_in_a_task_of_the_http_client_ends_bench_in_one_line(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The 10th request's connect (in a task group of the client's, as anyio's is) gets the
    SIGINT: no timer, the stop lands there every time."""
    requests = itertools.count()

    def client() -> httpx.AsyncClient:
        async def handler(request: httpx.Request) -> httpx.Response:
            async def connect() -> None:
                await asyncio.sleep(0)
                if next(requests) == 10:
                    signal.raise_signal(signal.SIGINT)

            async with anyio.create_task_group() as group:
                group.start_soon(connect)
            return httpx.Response(200, json=PREDICTION)

        return httpx.AsyncClient(transport=httpx.MockTransport(handler))

    monkeypatch.setattr(loadgen, "_client", client)
    r = cli("serve", "bench", "http://127.0.0.1:1", "--concurrency", "2", "--duration", "600")
    assert r.code == 130, (r.out, r.err)
    assert r.out == ""
    assert len(r.err.splitlines()) <= 1, r.err  # the progress line at most
    said = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert said == []


def test_one_rule_says_whether_a_process_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """F5: serve bench, a launch's watch and `runs delete` each read /proc/PID/stat by a rule
    of their own, and disagreed on a tracer's stop (state t: a debugger's)."""
    from dlperf import procs
    from dlperf.distributed import launch
    from dlperf.store import query

    for state, stopped in [("T", True), ("t", True), ("S", False), ("R", False)]:
        monkeypatch.setattr(procs, "proc_stat", lambda pid, state=state: (state, 1))
        assert procs.stopped(7) is stopped
        assert ("kill -CONT 7" in loadgen._gone_hint(7, timed_out=True)) is stopped
        assert query._waiting_for(1, 7, 60.0).startswith("pid 7 is stopped") is stopped
    monkeypatch.setattr(procs, "proc_stat", lambda pid: None)  # gone, or no /proc
    assert not procs.stopped(7)
    assert launch.is_stopped is procs.stopped  # its watch of a launch's processes
