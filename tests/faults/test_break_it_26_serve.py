"""Break-it round 26 (P4), serve: early answers and a paused server.

C5: a request answered before its body was read (413 for a Content-Length over the limit, to a
client that sent `Expect: 100-continue` and waits, as RFC 9110 clients do) kept its connection
open without `Connection: close`, and the read deadline then sent a second, unsolicited 408 on
it: a client that reused the connection had its next request read as the refused body.
C6: a server paused longer than --read-timeout-s (SIGSTOP/SIGCONT, `docker pause`, a debugger)
answered 408 to a request that had arrived whole during the pause. epoll_wait fails with EINTR
after SIGSTOP/SIGCONT; Python's retry finds its timeout past and returns no events, so the
loop's first turn runs the expired deadline before it reads the socket.

Real servers on 127.0.0.1 (uvicorn in a thread, as `dlperf serve` runs it), raw sockets as the
clients; every wait is for an event, with EVENT_S as its deadline.
"""

from __future__ import annotations

import asyncio
import selectors
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from dlperf.deploy.server import create_app
from tests.deploy.test_server import png, tiny_classifier
from tests.deploy.test_server_limits import (
    EVENT_S,
    answer,
    connect,
    read_response,
    read_until_closed,
    serving,
    wait_for,
)

READ_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("bk26_serve") / "tiny.onnx")


def test_an_early_answer_closes_its_connection_and_is_the_only_answer(tiny: Path) -> None:
    """An `Expect: 100-continue` POST over the body limit gets 413 marked `Connection: close`,
    and the connection ends after it: the GET the client then sends on it is neither read as
    the refused body nor answered 408 a read timeout later (before: 413 without the mark,
    then 408 "the request took over 1 s to arrive" for the GET)."""
    app = create_app(tiny, threads=1, max_body_bytes=1000)
    with serving(app, READ_TIMEOUT_S, max_connections=8) as (url, _), connect(url) as c:
        c.sendall(
            b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
            b"Content-Length: 900000000\r\n\r\n"
        )
        status, headers, body = answer(read_response(c))
        assert (status, headers.get("connection")) == (413, "close"), (status, headers, body)
        assert "over the 1000-byte limit" in body["error"]
        c.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_until_closed(c) == b""  # no 408, no answer to the GET: the end


class Interrupted:
    """The server loop's selector, as epoll_wait leaves it after SIGSTOP/SIGCONT once armed:
    its next select returns no events (Python's retry after EINTR, its timeout past)."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector
        self.select = selector.select
        self.armed = False

    def __call__(self, timeout: float | None = None) -> list[Any]:
        if self.armed:
            self.armed = False
            return []
        return self.select(timeout)


def test_a_request_that_arrived_during_a_pause_longer_than_the_read_timeout_is_served(
    tiny: Path,
) -> None:
    """Headers in, then the server's loop stalls (as a stopped process's does) while the body
    arrives, past the read deadline; when it resumes, its first turn sees no events, as after
    SIGCONT. The request arrived in time and is answered 200 (before: 408 "the request took
    over 1 s to arrive", the client blamed for the server's stall)."""
    image = png()
    app = create_app(tiny, threads=1)
    with serving(app, READ_TIMEOUT_S, max_connections=8) as (url, server), connect(url) as c:
        c.sendall(
            b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: image/png\r\n"
            b"Content-Length: %d\r\n\r\n" % len(image)
        )
        wait_for(lambda: bool(server_tasks(server)), "the request's headers to be read")
        loop = next(iter(server_tasks(server))).get_loop()
        interrupted, resume = stand_still(loop)
        c.sendall(image)  # the whole request is in, while the loop stands still
        started = time.monotonic()
        while time.monotonic() - started < 2 * READ_TIMEOUT_S:  # the pause: the deadline passes
            time.sleep(0.05)
        interrupted.armed = True
        resume.set()
        status, _, body = answer(read_response(c))
    assert status == 200, body
    assert body["predictions"], body


def stand_still(loop: asyncio.AbstractEventLoop) -> tuple[Interrupted, threading.Event]:
    """The server's event loop held still, as a stopped process's is, until `resume` is set;
    then its next select is interrupted once `interrupted.armed` (as SIGCONT's EINTR does)."""
    stalled, resume = threading.Event(), threading.Event()

    def stall() -> None:
        stalled.set()
        resume.wait(EVENT_S)

    interrupted = Interrupted(loop._selector)  # type: ignore[attr-defined]
    loop._selector.select = interrupted  # type: ignore[attr-defined]
    loop.call_soon_threadsafe(stall)
    assert stalled.wait(EVENT_S)
    return interrupted, resume


def server_tasks(server: uvicorn.Server) -> set[asyncio.Task[None]]:
    return server.server_state.tasks
