"""Break-it round 31, reviewer 3 on `serve bench` (192f3a2f).

F6: a stop (Ctrl-C) landing in a task that the HTTP client started for a request (anyio's
connect, a task group of its own) left the client's tasks finished with a BaseExceptionGroup
holding the KeyboardInterrupt, and asyncio.run's shutdown printed each as "unhandled exception
during asyncio.run() shutdown", ~200 lines, after the exit's one line.
F2: a server stopped before `serve bench` started was "no server answers ... start one with
`dlperf serve`" (exit 2) after 30 s; one stopped between levels cost 60 s (the next level's
warm-up and then its timed requests each waited TIMEOUT_S).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Iterator

import anyio
import httpx
import pytest

from dlperf import procs
from dlperf.deploy import loadgen
from dlperf.progress import NullReporter
from tests.conftest import CliResult
from tests.faults.test_break_it_31_serve2 import EVENT_S, child_server, per_client

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


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    yield from child_server(stop_after=0)  # it never stops itself


def stop(pid: int) -> None:
    """SIGSTOP `pid`, and wait until the kernel has stopped it."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + EVENT_S
    while not procs.stopped(pid):
        assert time.monotonic() < deadline, f"pid {pid} never stopped"
        time.sleep(0.01)


def hint(pid: int) -> str:
    return (
        f"the server (pid {pid}) is stopped (SIGSTOP or Ctrl-Z): continue it (kill -CONT "
        f"{pid}, or fg), then bench again"
    )


def test_a_server_stopped_before_bench_is_named_at_once(cli: Cli, server: tuple[str, int]) -> None:
    url, pid = server
    stop(pid)
    began = time.perf_counter()
    r = cli("serve", "bench", url, "--concurrency", "1", "--max-requests", "1")
    assert (r.code, r.out) == (1, ""), r.err
    assert r.err == (
        f"error: {url}/predict cannot answer before its first request: its server is stopped "
        f"({hint(pid)})\n"
    )
    assert time.perf_counter() - began < 20  # no request waited TIMEOUT_S (30 s)


def test_a_server_stopped_between_levels_is_named_at_once(server: tuple[str, int]) -> None:
    url, pid = server

    class StopAfterALevel(NullReporter):
        def log(self, message: str) -> None:  # said as a level ends
            stop(pid)

    began = time.perf_counter()
    with pytest.raises(loadgen.ServerGone) as gone:
        loadgen.run(url, [1, 2], 600.0, max_requests=2, reporter=StopAfterALevel())
    assert time.perf_counter() - began < 20
    assert gone.value.message == (
        f"{url}/predict cannot answer before concurrency 2: its server is stopped"
    )
    assert gone.value.hint == hint(pid)


def test_a_probe_unanswered_is_a_server_that_took_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """It was "no server answers ... start one with `dlperf serve`": one is there, listening."""
    per_client(monkeypatch, httpx.ReadTimeout)
    with pytest.raises(loadgen.ServerGone) as gone:
        asyncio.run(loadgen._probe("http://x/predict", b"img"))
    assert gone.value.exit_code == 1
    assert gone.value.message == ("http://x/predict took the connection but sent no answer in 30 s")
    assert gone.value.hint == (
        "is the server hung, or stopped? Restart or continue it, then bench again"
    )


def test_a_warm_up_no_client_got_an_answer_to_ends_the_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The timed requests then waited TIMEOUT_S once more."""
    per_client(monkeypatch, httpx.ReadTimeout, httpx.ConnectError)
    with pytest.raises(loadgen.ServerGone) as gone:
        asyncio.run(loadgen._level("http://x/predict", b"img", 2, 600.0, None))
    assert gone.value.message == (
        "http://x/predict stopped answering at concurrency 2, in its warm-up: connection "
        "refused (1 of 2 requests); no answer in 30 s (1 of 2 requests timed out)"
    )
    assert re.match("is the server hung", gone.value.hint or "")
