"""Break-it round 34 (P4): serve's stop and connection cap, bench, and names read as ASCII.

C1: requests that had arrived whole before the stop signal, but were not yet read (the server
paused, SIGSTOP/SIGCONT, or busy), were refused: answered 503 "the server is shutting down" on
a new connection, and dropped unanswered on a connection idle between requests; the batcher,
closed before the connections were, refused those read in the stop's own turn with the same
503. `serve --help` says a stop "finishes the queued requests".
C2: a connection over serve.max_connections was answered 503 and closed at once: a client that
wrote its request in two parts (httpx, `serve bench`) had its second write refused, the first
having met a closed socket (a reset), and never read the 503 waiting for it; bench said "N
ReadError (connection closed by the server)" while /metrics counted 503s.
C3: `serve bench` of a server whose serve.max_wait_ms was over bench's timeout (a lone request
waits that long for company) said "took the connection but sent no answer in 30 s (is the
server hung, or stopped? Restart or continue it...)": restarting changed nothing. And serve
took any max_wait_ms, 1e20 included (a lone request never answered).
C4: under a C locale with UTF-8 mode off (PYTHONUTF8=0, -X utf8=0) Python reads every byte over
127 of an argument as a surrogate escape: a UTF-8 name (`--db dé/sté.db`, `--set
run.name=café`) was refused as "not UTF-8" and told to rename the file, which cannot help.
C5: `converge fit RUN --y COL` (or --x) fitted val/loss without a word, --y and --x being CSV
columns; `--csv FILE --key K` likewise ignored --key.

A real server on 127.0.0.1 (`dlperf serve`'s, uvicorn in a thread), raw sockets as the clients.
C1's stop comes as after SIGCONT: the loop stands still while the requests arrive and the stop
is asked, and its first turn after sees no events (tests/faults/test_break_it_26_serve.py).
"""

from __future__ import annotations

import asyncio
import json
import select
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import uvicorn
from fastapi import FastAPI
from pydantic import ValidationError

import dlperf.deploy.server as server_module
from dlperf import stopping
from dlperf.config.base import Section, check_utf8_name
from dlperf.deploy import loadgen
from dlperf.deploy.server import _DrainingServer, create_app
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.deploy.test_server import infer_body, reference, tiny_classifier
from tests.deploy.test_server_limits import (
    EVENT_S,
    SLOW_BODY,
    answer,
    connect,
    infer_works,
    read_response,
    read_until_closed,
    serving,
    wait_for,
)
from tests.faults.test_break_it_26_serve import stand_still

Cli = Callable[..., CliResult]
# How often uvicorn's main loop looks for a stop asked (its `asyncio.sleep(0.1)`).
TICK_S = 0.1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("bk34_serve") / "tiny.onnx")


@contextmanager
def draining(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, uvicorn.Server]]:
    """`app` served by `dlperf serve`'s server from a thread (which takes no signals)."""
    monkeypatch.setattr(stopping, "taken", list)
    with serving(app, 600.0, 32, lambda c: _DrainingServer(c, app.state.batcher)) as served:
        yield served


def infer_request(x: np.ndarray) -> bytes:
    body = json.dumps(infer_body(x)).encode()
    return (
        b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    ) + body


def test_whole_requests_unread_when_the_stop_comes_are_served(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three new connections and three idle between requests each get a whole request while
    the loop stands still, and the stop is asked then: all six are answered 200 with the
    model's outputs, each connection closed after its answer; a request still arriving (its
    body short) is answered 503 as before. Before: 503 "the server is shutting down" on the
    new connections, nothing at all on the idle ones."""
    x = np.random.default_rng(34).normal(size=(1, 3, 8, 8)).astype(np.float32)
    request = infer_request(x)
    with draining(create_app(tiny, threads=1), monkeypatch) as (url, server):
        idle = [connect(url) for _ in range(3)]
        for c in idle:
            c.sendall(request)
            assert answer(read_response(c))[0] == 200
        new, slow = [connect(url) for _ in range(3)], connect(url)
        connections = server.server_state.connections
        wait_for(lambda: len(connections) == 7, "the server to accept every connection")
        loop = server.servers[0].get_loop()
        interrupted, resume = stand_still(loop)
        started = time.monotonic()
        for c in idle + new:
            c.sendall(request)
        slow.sendall(SLOW_BODY)
        server.should_exit = True
        while time.monotonic() - started < TICK_S:  # the main loop's look for a stop is due
            time.sleep(0.01)
        interrupted.armed = True
        resume.set()
        answers = [answer(read_until_closed(c)) for c in idle + new]  # closed after it
        slow_status, _, slow_body = answer(read_until_closed(slow))
        for c in [*idle, *new, slow]:
            c.close()
    assert [(status, body.get("error")) for status, _, body in answers] == [(200, None)] * 6
    for _, _, body in answers:
        (output,) = body["outputs"]
        got = np.array(output["data"], np.float32).reshape(output["shape"])
        np.testing.assert_allclose(got, reference({"tiny": tiny}, x), rtol=1e-5, atol=1e-6)
    assert (slow_status, slow_body) == (503, {"error": "the server is shutting down"})


def test_a_connection_over_the_cap_reads_its_503_after_writing_its_request_in_two_parts(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--max-connections 2, two connections held: a third, once its 503 has come, writes a
    request's head and then its body, and reads the 503 whole (before: BrokenPipeError or
    ConnectionResetError, the server's socket closed under the request). While it lingers,
    reading what its client sends, it is not one of the two: with one of them gone, a request
    is served."""
    monkeypatch.setattr(server_module, "REFUSED_LINGER_S", EVENT_S)  # the writes are not raced
    head, _, body = infer_request(np.zeros((1, 3, 8, 8), np.float32)).partition(b"\r\n\r\n")
    app = create_app(tiny, threads=1)
    with serving(app, read_timeout_s=600.0, max_connections=2) as (url, server):
        connections = server.server_state.connections
        wait_for(lambda: not connections, "the readiness probe's connection to close")
        first, second = connect(url), connect(url)
        wait_for(lambda: len(connections) == 2, "the server to hold both connections")
        with first, second, connect(url) as third:
            assert select.select([third], [], [], EVENT_S)[0], "no answer to the third"
            after_a_turn(server.servers[0].get_loop())  # it closed the socket, if it did
            third.sendall(head + b"\r\n\r\n")
            third.sendall(body)
            status, headers, error = answer(read_until_closed(third))
            assert (status, headers["connection"], headers["retry-after"]) == (503, "close", "1")
            assert error == {"error": "too many connections: 2 are open (serve.max_connections)"}
            first.close()
            wait_for(lambda: len(connections) == 2, "the server to drop the closed connection")
            infer_works(url, {"tiny": tiny})  # the second and the lingering third open


def after_a_turn(loop: asyncio.AbstractEventLoop) -> None:
    """Wait until the server's loop has run what it had queued by now: the callbacks that an
    answer sent queued (a transport's close among them) run before this one's second hop."""
    done = threading.Event()
    loop.call_soon_threadsafe(loop.call_soon, done.set)
    assert done.wait(EVENT_S), "the server's loop stands still"


def test_bench_of_a_server_holding_a_lone_request_past_its_timeout_names_max_wait_ms(
    tiny: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    """The probe, a lone request, waits the server's max_wait_ms for company (here 60 s, over
    bench's timeout, shortened to 1 s): bench names the setting and its fix, not a hung server."""
    monkeypatch.setattr(loadgen, "TIMEOUT_S", 1.0)
    app = create_app(tiny, threads=1, max_wait_ms=60_000)
    with draining(app, monkeypatch) as (url, _):
        r = cli("serve", "bench", url, "--concurrency", "1", "--duration", "1")
    assert (r.code, r.out) == (2, ""), r.err
    assert r.err == (
        f"error: {url}/predict sent no answer in 1 s: its server holds a lone request up to "
        "60000 ms for company (serve.max_wait_ms of model tiny, batches of up to 32), longer "
        "than bench waits for an answer (restart it with a smaller --max-wait-ms: the default "
        "is 5)\n"
    )


def test_serve_refuses_a_max_wait_ms_over_ten_minutes(
    tiny: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "serve_forever", lambda *args: None)  # were it taken
    r = cli("serve", str(tiny), "--max-wait-ms", "1e20")
    assert (r.code, r.out) == (2, "")
    assert r.err == "error: --max-wait-ms: serve.max_wait_ms: must be at most 600000 (got 1e+20)\n"


# 'café', its UTF-8 bytes as Python reads them under LC_ALL=C with UTF-8 mode off
READ_AS_ASCII = "caf\udcc3\udca9"
LOCALE_HINT = (
    "Python reads names as ASCII in a C or POSIX locale with UTF-8 mode off: run with "
    "PYTHONUTF8=1 or LC_ALL=C.UTF-8"
)


class Named(Section):
    name: str = ""


def test_a_utf8_name_read_as_ascii_is_told_to_change_the_locale_not_the_name() -> None:
    with pytest.raises(UserError) as refused:
        check_utf8_name("run store", f"{READ_AS_ASCII}/{READ_AS_ASCII}.db")
    assert (refused.value.message, refused.value.hint) == (
        "run store: is UTF-8, but Python read it as ASCII: 'café/café.db'",
        LOCALE_HINT,
    )
    with pytest.raises(ValidationError) as invalid:
        Named(name=READ_AS_ASCII)
    said = invalid.value.errors()[0]["msg"]
    assert said == f"is UTF-8, but Python read it as ASCII: 'café' ({LOCALE_HINT})"
    with pytest.raises(UserError) as latin1:  # bytes that are not UTF-8: renamed, as before
        check_utf8_name("run store", "caf\udce9.db")
    assert latin1.value.hint == "rename the file or folder so that its name is UTF-8"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["1", "--y", "train_loss"],
            "error: converge.y (--y) names a CSV column, and stored runs were given (a stored "
            "run's metric is converge.key, e.g. --key train/loss)\n",
        ),
        (
            ["1", "--x", "epoch", "--key", "val/loss"],
            "error: converge.x (--x) names a CSV column, and stored runs were given (a stored "
            "run's metric is converge.key, e.g. --key train/loss)\n",
        ),
        (
            ["--csv", "{csv}", "--y", "m", "--key", "train/loss"],
            "error: converge.key (--key) names a stored run's metric, and --csv was given (a CSV "
            "file's metric is its column, converge.y, e.g. --y m)\n",
        ),
    ],
    ids=["run with --y", "run with --x", "csv with --key"],
)
def test_converge_refuses_the_other_sources_options(
    cli: Cli, tmp_path: Path, args: list[str], said: str
) -> None:
    csv = tmp_path / "c.csv"
    csv.write_text("step,m\n1,2.0\n2,1.2\n3,0.9\n4,0.7\n5,0.6\n")
    r = cli("converge", "fit", *[a.format(csv=csv) for a in args])
    assert (r.code, r.out, r.err) == (2, "", said)
