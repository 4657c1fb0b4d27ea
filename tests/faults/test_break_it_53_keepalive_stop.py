"""Break-it round 53, fixer G2: `serve`'s stop reset its keep-alive clients' next request.

T2 C2. On SIGTERM (SIGINT, SIGHUP) the server went on answering requests on kept-alive
    connections, 200 without `Connection: close`, until uvicorn's next tick (up to 0.1 s),
    then closed each idle one at once: the request its client had just sent on it, as the
    last answer allowed, met a reset (ConnectionResetError, BrokenPipeError) and was never
    answered; 8 of 8 keep-alive clients, every run. A POST reset after it was sent whole
    leaves its client unable to tell whether it ran. Now every answer from the stop's signal
    on says `Connection: close` (h11's keep-alive off at once, for every connection), and a
    connection idle between requests when the stop reaches it is not closed under its client:
    a request arriving on it within STOP_GRACE_S is answered 503 with `Connection: close`,
    then the server sends its end and reads and drops what still comes before it closes.

A real `dlperf serve` process (the signal is the point), keep-alive http.client clients; the
grace's 503 on a server in a thread, its grace made long so that no timer is raced.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import dlperf
from dlperf.deploy import server as server_module
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

SOURCE = str(Path(dlperf.__file__).parents[1])  # the dlperf under test, in the subprocess too
CLIENTS = 4


@contextmanager
def _serve(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """`dlperf serve` of a tiny classifier in a process of its own, once it says it serves;
    killed at the end if it is still running."""
    model = tiny_classifier(tmp_path / "tiny.onnx")
    env = dict(os.environ, PYTHONPATH=SOURCE, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "dlperf", "serve", str(model), "--port", "0",
               "--threads", "1"]  # fmt: skip
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        said = proc.stderr.readline()  # its "serving ..." line, or its error
        assert said.startswith("serving tiny "), said + proc.stderr.read()
        yield proc, int(said.split(" on http://127.0.0.1:", 1)[1].split(" ", 1)[0])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=EVENT_S)


def _client(port: int, body: bytes, answered: threading.Event, ends: list[str]) -> None:
    """Post /predict on one kept-alive connection until an answer says `Connection: close`;
    how the loop ended goes in `ends`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=EVENT_S)
    kept_alive = False
    try:
        while True:
            try:
                conn.request("POST", "/predict?topk=1", body=body)
                response = conn.getresponse()
                response.read()
            except ConnectionRefusedError:
                assert not kept_alive
                ends.append("refused")  # a new connection after the listener closed
                return
            except OSError as error:  # a reset, a broken pipe, RemoteDisconnected
                kept = "on a kept-alive connection" if kept_alive else "on a new connection"
                ends.append(f"{type(error).__name__} {kept}")
                return
            answered.set()
            closing = (response.getheader("connection") or "").lower() == "close"
            if response.status not in (200, 503) or (response.status == 503 and not closing):
                ends.append(f"{response.status}, Connection: {response.getheader('connection')}")
                return
            if closing:
                ends.append(f"{response.status} close")
                return
            kept_alive = True
    finally:
        conn.close()


def test_a_stop_answers_every_kept_alive_client(tmp_path: Path) -> None:
    """Before: each client's request sent after the stop, on the connection the last answer
    had kept alive, met ConnectionResetError or BrokenPipeError, never answered."""
    body = png(seed=1)
    with _serve(tmp_path) as (proc, port):
        events = [threading.Event() for _ in range(CLIENTS)]
        ends: list[str] = []
        threads = [
            threading.Thread(target=_client, args=(port, body, event, ends), daemon=True)
            for event in events
        ]
        for thread in threads:
            thread.start()
        for event in events:
            assert event.wait(EVENT_S), "a client had no first answer"
        proc.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(EVENT_S)
        assert proc.wait(EVENT_S) == 143
    assert len(ends) == CLIENTS, ends
    assert all(end in ("200 close", "503 close") for end in ends), ends


def test_a_request_on_an_idle_connection_after_the_stop_is_answered(tmp_path: Path) -> None:
    """Sent on a connection kept alive before the stop, once the stop has come: answered,
    with `Connection: close` (200 if it came before the stop reached the connection, else
    503), not reset; and a connection its client leaves idle gets the server's end, not a
    reset, and does not hold the stop."""
    body = png(seed=2)
    with _serve(tmp_path) as (proc, port):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=EVENT_S)
        idle = socket.create_connection(("127.0.0.1", port), timeout=EVENT_S)
        try:
            idle.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(idle).startswith(b"HTTP/1.1 200 ")
            for _ in range(2):  # kept alive: the second on the first's connection
                conn.request("POST", "/predict?topk=1", body=body)
                response = conn.getresponse()
                response.read()
                assert response.status == 200 and response.getheader("connection") is None
            proc.send_signal(signal.SIGTERM)
            conn.request("POST", "/predict?topk=1", body=body)
            response = conn.getresponse()
            response.read()
            assert response.status in (200, 503)
            assert response.getheader("connection") == "close"
            assert idle.recv(65536) == b""  # the server's end, after its grace
            assert proc.wait(EVENT_S) == 143
        finally:
            conn.close()
            idle.close()


def test_a_request_within_the_grace_is_answered_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop has reached a connection idle between requests: its client's next request,
    sent on it as the last answer allowed, is answered 503 with `Connection: close`, and the
    connection ends once its client closes. Before: the connection was closed as the stop
    reached it, and the request met a reset."""
    monkeypatch.setattr(server_module, "STOP_GRACE_S", EVENT_S)  # no timer raced
    app = create_app(tiny_classifier(tmp_path / "tiny.onnx"), threads=1)
    with (
        serving(app, read_timeout_s=600.0, max_connections=8) as (url, server),
        connect(url) as sock,
    ):
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"connection:" not in read_response(sock).lower()  # kept alive
        server.should_exit = True
        connections = server.server_state.connections
        wait_for(
            lambda: (
                bool(connections) and all(getattr(c, "awaiting_late", False) for c in connections)
            ),
            "the stop to reach the idle connection",
        )
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, body = answer(read_until_closed(sock))
    assert (status, headers["connection"], headers["retry-after"]) == (503, "close", "1")
    assert body == {"error": "the server is shutting down"}
