"""Break-it round 31 (P4), serve: the load generator and the listening address.

C5: `serve bench` of a server that stopped answering without refusing (SIGSTOP, a hang) was a
normal level, exit 0: each client waited 30 s for its request, the level overran --duration,
the timed-out requests were in no percentile, and `contention.stops` said 0 for a server whose
continuations nothing counted.
C7: an empty or blank `serve.host` (`--host ''`, `--set 'serve.host= '`) listened on every
interface, said as "listening on :" and `http://:PORT`.

Real HTTP on 127.0.0.1: the server is a stdlib one in a child process, so that it can be
stopped (it stops itself after answering a given number of requests: no timer to race).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from dlperf import procs
from dlperf.config.serve import ServeConfig
from dlperf.deploy import loadgen
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
PREDICTION = {"model_name": "m", "predictions": []}
EVENT_S = 120.0

# A single-threaded HTTP/1.0 server answering dlperf's prediction to every POST; after the
# STOP_AFTER-th answer (0: never) it stops itself with SIGSTOP, as `kill -STOP` would: its
# listening socket stays open, so new connections wait in the backlog and none is refused.
SERVER = r"""
import http.server, json, os, signal, sys

STOP_AFTER = int(sys.argv[1])
BODY = json.dumps({"model_name": "m", "predictions": []}).encode()


class Handler(http.server.BaseHTTPRequestHandler):
    answered = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
        type(self).answered += 1
        if type(self).answered == STOP_AFTER:
            os.kill(os.getpid(), signal.SIGSTOP)

    def log_message(self, format, *args):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def child_server(stop_after: int) -> Iterator[tuple[str, int]]:
    """The URL and pid of a SERVER in a child process; continued and killed after the test."""
    child = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(stop_after)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        yield f"http://127.0.0.1:{port}", child.pid
    finally:
        child.send_signal(signal.SIGCONT)
        child.kill()
        child.wait(timeout=EVENT_S)


ANSWERED = 5  # the probe, one warm-up and three timed requests; then the server stops


@pytest.fixture
def stopping_server() -> Iterator[tuple[str, int]]:
    yield from child_server(stop_after=ANSWERED)


class StoppedThenShort(httpx.AsyncBaseTransport):
    """Real HTTP whose requests wait EVENT_S for an answer, so that a loaded machine's slow
    one is still an answer; the ones sent after the server's ANSWERED-th answer wait, first,
    until the server is stopped (its SIGSTOP lands after it wrote the answer), then 1 s: a
    stopped server's requests, the only ones that time out."""

    def __init__(self, pid: int, sent: Iterator[int]) -> None:
        self.pid, self.sent = pid, sent
        self.http = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if next(self.sent) >= ANSWERED:
            deadline = time.monotonic() + EVENT_S
            while not procs.stopped(self.pid):
                assert time.monotonic() < deadline, f"the server (pid {self.pid}) never stopped"
                await asyncio.sleep(0.01)
            request.extensions["timeout"] = httpx.Timeout(1.0).as_dict()
        return await self.http.handle_async_request(request)

    async def aclose(self) -> None:
        await self.http.aclose()


@pytest.fixture
def another_process() -> Iterator[tuple[str, int]]:
    yield from child_server(stop_after=0)


def test_bench_of_a_server_that_stops_answering_ends_the_level_and_exits_1(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, stopping_server: tuple[str, int]
) -> None:
    """It waited TIMEOUT_S (30 s) per request, ran on to the end of --duration, and printed a
    normal table, exit 0. One client, so that no request is in flight as the server stops."""
    url, pid = stopping_server
    sent = itertools.count()
    monkeypatch.setattr(
        loadgen,
        "_client",
        lambda: httpx.AsyncClient(transport=StoppedThenShort(pid, sent), timeout=EVENT_S),
    )
    monkeypatch.setattr(loadgen, "TIMEOUT_S", 1.0)  # as said: the stopped server's requests'
    r = cli("serve", "bench", url, "--concurrency", "1", "--duration", "600")
    assert (r.code, r.out) == (1, ""), r.err  # no table of a level the server stopped in
    said = re.fullmatch(
        rf"error: {url}/predict stopped answering at concurrency 1 after \d+\.\d s: no answer "
        r"in 1 s \(1 of 4 requests timed out\) \(the server \(pid "
        rf"{pid}\) is stopped \(SIGSTOP or Ctrl-Z\): continue it \(kill -CONT {pid}, or fg\), "
        r"then bench again\)",
        r.err.splitlines()[-1],
    )
    assert said is not None, r.err  # the three timed requests it answered, then one timed out


def test_bench_of_a_server_in_another_process_leaves_its_stops_unmeasured(
    cli: Cli, another_process: tuple[str, int]
) -> None:
    """`contention.stops` was 0, as if measured: neither the server's continuations nor the
    load generator's are counted by serve bench."""
    url, _ = another_process
    r = cli("serve", "bench", url, "--concurrency", "1", "--max-requests", "3", "--json")
    assert r.code == 0, r.err
    (level,) = json.loads(r.out)["levels"]
    assert level["ok"] == 3
    assert level["contention"]["stops"] is None and level["contention"]["stopped_s"] is None


def per_client(
    monkeypatch: pytest.MonkeyPatch,
    *raised: type[httpx.HTTPError] | None,
    warm_up_answered: bool = False,
) -> None:
    """The load generator's n-th client answered by a handler in this process: it raises
    `raised[n]`, or answers a prediction where that is None (and to each client's first
    request, its warm-up, if `warm_up_answered`). Each request yields to the event loop, as
    one over the network does, so that the clients take turns."""
    made = itertools.count()

    def client() -> httpx.AsyncClient:
        error = raised[next(made) % len(raised)]
        sent = itertools.count()

        async def handler(request: httpx.Request) -> httpx.Response:
            await asyncio.sleep(0)
            if error is not None and not (warm_up_answered and next(sent) == 0):
                raise error("no", request=request)
            return httpx.Response(200, json=PREDICTION)

        return httpx.AsyncClient(transport=httpx.MockTransport(handler))

    monkeypatch.setattr(loadgen, "_client", client)


def test_a_level_goes_on_while_some_client_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only every client's last request unanswered ends a level: one client's timeouts are
    errors of a level the server still answers."""
    per_client(monkeypatch, httpx.ReadTimeout, None)
    result = asyncio.run(loadgen._level("http://x/predict", b"img", 2, 600.0, 20))
    assert result.requests == 20 and result.statuses == {"ReadTimeout": 10, "200": 10}
    assert (result.ok, result.errors) == (10, 10)


def test_refusals_and_timeouts_are_named_together(monkeypatch: pytest.MonkeyPatch) -> None:
    per_client(monkeypatch, httpx.ConnectError, httpx.ReadTimeout, warm_up_answered=True)
    with pytest.raises(loadgen.ServerGone) as gone:
        asyncio.run(loadgen._level("http://x/predict", b"img", 2, 600.0, None))
    said = re.fullmatch(
        r"http://x/predict stopped answering at concurrency 2 after \d+\.\d s: connection "
        r"refused \((\d+) of (\d+) requests\); no answer in 30 s \((\d+) of (\d+) requests "
        r"timed out\)",
        gone.value.message,
    )
    assert said is not None, gone.value.message
    refused, ended, timed_out, ended_too = map(int, said.groups())
    assert refused >= 1 and timed_out == 1 and refused + timed_out == ended == ended_too
    assert gone.value.hint == (
        "is the server hung, or stopped? Restart or continue it, then bench again"
    )


@pytest.mark.parametrize(
    ("given", "where", "got"),
    [
        (["--host", ""], "--host", "''"),
        (["--host", " "], "--host", "' '"),
        (["--set", "serve.host= "], "config with --set", "''"),  # --set strips a value
        (["--set", "serve.host=\t"], "config with --set", "''"),
    ],
)
def test_a_blank_host_is_refused_in_one_line(
    cli: Cli, tmp_path: Path, given: list[str], where: str, got: str
) -> None:
    """It listened on every interface (the socket's "" is INADDR_ANY), said as "listening on :"
    and `http://:PORT`."""
    r = cli("serve", str(tmp_path / "m.onnx"), *given, "--port", "0")
    assert r.code == 2, (r.out, r.err)
    assert r.err == (
        f"error: {where}: serve.host: give an address, e.g. 127.0.0.1, or 0.0.0.0 for all "
        f"(got {got})\n"
    )


def test_a_blank_host_in_a_config_file_is_refused(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('[serve]\nhost = ""\n')
    r = cli("serve", str(tmp_path / "m.onnx"), "--config", str(config))
    assert r.code == 2, (r.out, r.err)
    assert r.err.startswith(f"error: {config}: serve.host: give an address"), r.err
    assert len(r.err.splitlines()) == 1, r.err
    assert ServeConfig(host="0.0.0.0").host == "0.0.0.0"  # every interface, said as such
