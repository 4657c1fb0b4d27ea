"""What `dlperf serve` allows a client (issue 41): a request must arrive, headers and body,
within serve.read_timeout_s, or it is answered 408 and disconnected; past
serve.max_connections open connections a request is answered 503 and its connection closed.
Real servers on 127.0.0.1 (uvicorn in a thread, and `dlperf serve` as a process), raw sockets
as the clients."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import h11
import httpx
import numpy as np
import pytest
import uvicorn
from fastapi import FastAPI

from dlperf.cli.serve import _listen
from dlperf.deploy.server import create_app, uvicorn_config
from tests.deploy.test_server import infer_body, reference, tiny_classifier, wait_ready

EVENT_S = 120.0  # how long a busy machine may take to get somewhere: a deadline, not a wait
SLOW_BODY = (
    b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    b'{"inputs": ['  # 12 of the 1,000 bytes promised, and then nothing
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {"tiny": tiny_classifier(tmp_path_factory.mktemp("models") / "tiny.onnx")}


@contextmanager
def serving(
    app: FastAPI,
    read_timeout_s: float,
    max_connections: int,
    server_of: Callable[[uvicorn.Config], uvicorn.Server] = uvicorn.Server,
) -> Iterator[tuple[str, uvicorn.Server]]:
    """`app` served as `dlperf serve` serves it, on a free 127.0.0.1 port, from a thread, by
    uvicorn's server or `server_of` (dlperf serve's draining one)."""
    sock = _listen("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # before the server takes the socket over
    server = server_of(uvicorn_config(app, read_timeout_s, max_connections))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_ready(url, EVENT_S)
        yield url, server
    finally:
        server.should_exit = True
        thread.join(timeout=EVENT_S)
        sock.close()
    assert not thread.is_alive(), "server thread did not stop"


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=EVENT_S)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (EVENT_S at most)."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def read_response(sock: socket.socket) -> bytes:
    """One response on a connection that stays open: its head, and the body it announces."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    length = int(re.search(rb"content-length: (\d+)", received.lower()).group(1))  # type: ignore[union-attr]
    while len(received.partition(b"\r\n\r\n")[2]) < length:
        received += sock.recv(65536)
    return received


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + EVENT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def answer(raw: bytes) -> tuple[int, dict[str, str], dict[str, str]]:
    """The status, headers and JSON body of one raw HTTP response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers, json.loads(body)


def infer_works(url: str, models: dict[str, Path]) -> None:
    x = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float32)
    response = httpx.post(f"{url}/v2/models/tiny/infer", json=infer_body(x), timeout=EVENT_S)
    assert response.status_code == 200, response.text
    (output,) = response.json()["outputs"]
    got = np.array(output["data"], np.float32).reshape(output["shape"])
    np.testing.assert_allclose(got, reference(models, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "sent",
    [SLOW_BODY, b"", b"POST /v2/models/tiny/infer HTTP/1.1\r\nContent-Le"],
    ids=["body slower than its content-length", "nothing at all", "half the headers"],
)
def test_a_request_slower_than_the_read_timeout_gets_408_and_is_closed(
    models: dict[str, Path], sent: bytes
) -> None:
    app = create_app(models["tiny"], threads=1)
    with serving(app, read_timeout_s=1.0, max_connections=8) as (url, server):
        start = time.monotonic()
        with connect(url) as slow:
            slow.sendall(sent)
            received = read_until_closed(slow)
        waited = time.monotonic() - start
        status, headers, body = answer(received)
        assert (status, headers["connection"]) == (408, "close")
        assert body == {"error": "the request took over 1 s to arrive"}
        assert waited >= 1.0  # the deadline, not an early close
        wait_for(lambda: not server.server_state.connections, "the server to drop it")
        infer_works(url, models)


def test_a_request_within_the_deadline_is_served_even_in_pieces(models: dict[str, Path]) -> None:
    """The deadline covers the whole request, not each read: a body sent in pieces that
    arrives in time is answered, and a keep-alive connection's next request gets its own."""
    x = np.zeros((1, 3, 8, 8), np.float32)
    body = json.dumps(infer_body(x)).encode()
    request = (
        b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    app = create_app(models["tiny"], threads=1)
    with serving(app, 60.0, 8) as (url, _), connect(url) as client:
        for _ in range(2):
            client.sendall(request)
            for i in range(0, len(body), 100):
                client.sendall(body[i : i + 100])
            reply = read_response(client)
            status, headers, document = answer(reply)
            assert status == 200 and headers.get("connection") != "close", reply
            assert document["outputs"][0]["shape"] == [1, 3]


def test_a_connection_past_the_limit_gets_503_and_the_rest_are_served(
    models: dict[str, Path],
) -> None:
    app = create_app(models["tiny"], threads=1)
    with serving(app, read_timeout_s=60.0, max_connections=2) as (url, server):
        connections = server.server_state.connections
        wait_for(lambda: not connections, "the readiness probe's connection to close")
        first, second = connect(url), connect(url)
        try:
            first.sendall(SLOW_BODY)  # both held open, well within their deadline
            second.sendall(SLOW_BODY)
            wait_for(lambda: len(connections) == 2, "the server to hold both connections")
            with connect(url) as third:
                third.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                status, headers, body = answer(read_until_closed(third))
            assert (status, headers["connection"], headers["retry-after"]) == (503, "close", "1")
            assert body == {"error": "too many connections: 2 are open (serve.max_connections)"}
            first.close()
            wait_for(lambda: len(connections) == 1, "the server to drop the closed connection")
            infer_works(url, models)
        finally:
            first.close()
            second.close()


def test_a_stopping_server_cuts_a_request_still_arriving(models: dict[str, Path]) -> None:
    """uvicorn waits for every open connection before it stops: a slow client held a stop (a
    Ctrl-C) for ever, and under the deadline alone would hold it up to read_timeout_s. A
    request still arriving is answered 503 at once instead."""
    app = create_app(models["tiny"], threads=1)
    with serving(app, read_timeout_s=600.0, max_connections=8) as (url, server):
        connections = server.server_state.connections
        with connect(url) as slow:
            slow.sendall(SLOW_BODY)
            wait_for(
                lambda: any(c.conn.their_state is h11.SEND_BODY for c in connections),
                "the server to read the slow request's headers",
            )
            start = time.monotonic()
            server.should_exit = True
            status, headers, body = answer(read_until_closed(slow))
        assert (status, headers["retry-after"]) == (503, "1")
        assert body == {"error": "the server is shutting down"}
    assert time.monotonic() - start < EVENT_S / 2  # stopped, without waiting out the deadline


def test_dlperf_serve_takes_both_limits_as_flags(models: dict[str, Path], tmp_path: Path) -> None:
    """The flags reach the server that `dlperf serve` runs: a slow body is cut after
    --read-timeout-s, normal requests are served, and Ctrl-C still ends it with 130."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DLPERF_DB": f"sqlite:///{tmp_path / 'db'}"}
    command = [sys.executable, "-m", "dlperf", "serve", str(models["tiny"]), "--port", "0",
               "--threads", "1", "--read-timeout-s", "0.5", "--max-connections", "4"]  # fmt: skip
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with open(tmp_path / "stderr.txt", "wb") as err:
            proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        stderr = tmp_path / "stderr.txt"
        wait_for(lambda: "serving tiny" in stderr.read_text() or proc.poll() is not None, "serve")
        found = re.search(r"on (http://127\.0\.0\.1:\d+)", stderr.read_text())
        assert found, stderr.read_text()
        url = found.group(1)
        start = time.monotonic()
        with connect(url) as slow:
            slow.sendall(SLOW_BODY)
            status, _, body = answer(read_until_closed(slow))
        assert time.monotonic() - start >= 0.5
        assert (status, body) == (408, {"error": "the request took over 0.5 s to arrive"})
        infer_works(url, models)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=EVENT_S) == 130, stderr.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
