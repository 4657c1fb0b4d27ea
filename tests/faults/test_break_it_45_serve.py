"""Break-it round 45, fixer F10: what serve answers a request HTTP/1.1 cannot read.

T2 C1: a request whose head h11 cannot parse (both Content-Length and Transfer-Encoding, two
Content-Lengths, `Content-Length: abc`, a 200 KB header, 20,000 headers) was answered 400
text/plain "Invalid HTTP request received.", uvicorn's words: the only error of the server that
was not `{"error": "..."}`, and it named nothing of what was wrong (dlperf's own reason for
Content-Length with Transfer-Encoding was raised and thrown away); the server's stderr said the
same line for each. The 200 KB head's client also met a reset. Now the answer is JSON with the
reason (h11's where it has one), with h11's status (431 for a head over its 16 KiB, 501 for a
transfer coding other than chunked, else 400), `Connection: close` and the connection's end;
the warning line says the same; /metrics counts it as before, under "(connection)", or under
its route for a body the route was reading (a bad chunk).

A real server on 127.0.0.1 (`dlperf serve`'s, uvicorn in a thread), raw sockets as clients.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlperf.deploy.server import create_app
from tests.deploy.test_server import tiny_classifier
from tests.deploy.test_server_limits import (
    answer,
    connect,
    read_response,
    read_until_closed,
    serving,
    wait_for,
)
from tests.faults.test_break_it_29_deploy import _requests

INFER = b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\n"
UNREAD = "the request could not be read as HTTP/1.1: "
HEAD_OVER = "the request's head is over 16,384 bytes (its request line and headers together)"
CASES = {
    "content-length and chunked": (
        INFER + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
        "a request with both Content-Length and Transfer-Encoding (RFC 9112 §6.1): send one",
    ),
    "two content-lengths": (
        INFER + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        400,
        UNREAD + "conflicting Content-Length headers",
    ),
    "content-length abc": (
        INFER + b"Content-Length: abc\r\n\r\n",
        400,
        UNREAD + "bad Content-Length",
    ),
    "gzip transfer coding": (
        INFER + b"Transfer-Encoding: gzip\r\n\r\n",
        501,
        UNREAD + "Only Transfer-Encoding: chunked is supported",
    ),
    "not http": (
        b"NOT HTTP\x1b[31m\r\n\r\n",
        400,
        UNREAD + r"illegal request line: 'NOT HTTP\x1b[31m'",
    ),
    "a long bad header line": (
        b"GET /v2 HTTP/1.1\r\nHost: x\r\n" + b"X" * 300 + b"\r\n\r\n",
        400,
        UNREAD + "illegal header line: '" + "X" * 60 + "…'",
    ),
    "a 200 KB header": (
        b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 200_000 + b"\r\n\r\n",
        431,
        HEAD_OVER,
    ),
    "20,000 headers": (
        b"GET /v2 HTTP/1.1\r\nHost: x\r\n" + b"X-A: a\r\n" * 20_000 + b"\r\n",
        431,
        HEAD_OVER,
    ),
}


class Said(logging.Handler):
    """The server's warning lines (uvicorn's logger), as they are written."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Said]]:
    app = create_app(
        tiny_classifier(tmp_path_factory.mktemp("bk45_serve") / "tiny.onnx"), threads=1
    )
    with serving(app, 60.0, 32) as (url, _):
        said = Said()  # after uvicorn's Config, which sets its loggers' handlers afresh
        logger = logging.getLogger("uvicorn.error")
        logger.addHandler(said)
        try:
            yield url, said
        finally:
            logger.removeHandler(said)


@pytest.mark.parametrize("case", CASES)
def test_a_request_http_cannot_read_is_answered_json_with_the_reason(
    server: tuple[str, Said], case: str
) -> None:
    """Before: 400 text/plain "Invalid HTTP request received." for each (the 200 KB head then
    reset), and that line on stderr."""
    url, said = server
    request, status, error = CASES[case]
    key = ("(connection)", str(status))
    before = _requests(url).get(key, 0.0)
    with connect(url) as sock:
        sock.sendall(request)
        received = read_until_closed(sock)
    got, headers, body = answer(received)  # one answer: its body is all that follows
    assert (got, body) == (status, {"error": error})
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    assert f"answered {status}: {error}" in said.lines
    wait_for(lambda: _requests(url).get(key, 0.0) == before + 1, f"{key} to be counted once")


def test_a_bad_chunk_is_named_and_counted_once_under_its_route(server: tuple[str, Said]) -> None:
    """The route was reading the body: its 400, as the client got it, counted once at once."""
    url, said = server
    key = ("/v2/models/{name}/infer", "400")
    before = _requests(url)
    with connect(url) as sock:
        sock.sendall(
            INFER + b"Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
            b'5\r\n{"inp\r\nZZZ\r\n\r\n'
        )
        received = read_until_closed(sock)
        error = UNREAD + r"illegal chunk header: 'ZZZ\r\n'"
        assert answer(received)[::2] == (400, {"error": error})
        # Counted while the client still holds the connection: the route heard of it at once.
        wait_for(lambda: _requests(url).get(key, 0.0) == before.get(key, 0.0) + 1, "the 400")
    assert f"answered 400: {error}" in said.lines
    assert _requests(url).get(("(connection)", "400"), 0.0) == before.get(
        ("(connection)", "400"), 0.0
    )


def test_the_server_serves_on_after_them(server: tuple[str, Said]) -> None:
    url, _ = server
    with connect(url) as sock:
        sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 200 ")


def test_a_kept_alive_connections_next_request_is_answered_too(server: tuple[str, Said]) -> None:
    """Content-Length with chunked after an answered request on the same connection: answered
    as on a new one (the last request's answer did not stand for it)."""
    url, _ = server
    with connect(url) as sock:
        sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200 ")
        request, status, error = CASES["content-length and chunked"]
        sock.sendall(request)
        assert answer(read_until_closed(sock))[::2] == (status, {"error": error})


def test_a_client_that_stays_is_closed_at_the_read_deadline(tmp_path: Path) -> None:
    """The answer's end is sent at once; the connection, its client silent, is closed when
    the read deadline runs out, not held for ever."""
    app = create_app(tiny_classifier(tmp_path / "tiny.onnx"), threads=1)
    with serving(app, read_timeout_s=1.0, max_connections=8) as (url, server):
        connections = server.server_state.connections
        wait_for(lambda: not connections, "the readiness probe's connection to close")
        with connect(url) as sock:
            sock.sendall(CASES["content-length abc"][0])
            assert answer(read_until_closed(sock))[0] == 400  # the answer's end: EOF
            wait_for(lambda: not connections, "the server to close the connection")
