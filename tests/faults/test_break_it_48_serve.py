"""Break-it round 48, fixer G4: serve's 16 KiB head cap, a client that half-closes, and a log
pipe nobody reads.

T3 C4: the documented cap on a request's head (431 over 16,384 bytes) held only for a head that
arrived in pieces: h11 limits what it buffers of an *incomplete* head, and a head that arrived
whole in one read (20 KB, 100 KB) was parsed and answered 200. Now the head is measured whole,
as it arrived, and any head over the cap is answered 431, however it arrives.
T3 C3: a client that sent a whole request, then half-closed (`shutdown(SHUT_WR)`: done sending,
still reading) got no answer, and the request counted 499: asyncio closed the connection on the
client's FIN. Now its answer is sent, then the connection closed; a body cut short by the
half-close is answered 400 with the reason, where it got nothing.
T3 C2: `serve` whose stderr was a pipe nobody reads stopped answering once the pipe filled (its
event loop blocked writing a log line) and ignored every stop signal (SIGTERM, SIGTERM, SIGINT,
SIGINT: only SIGKILL ended it). Now log lines are written by a thread of their own from a
bounded queue (dropped and counted when it is full): the server answers on, and one SIGTERM
stops it, exit 143.

C3 and C4 on a real server on 127.0.0.1 (uvicorn in a thread, as `dlperf serve` runs it) with
raw sockets as clients; C2's writer on a real pipe, and a `dlperf serve` process whose stderr
is a full pipe, stopped by a real signal.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlperf.deploy.server import create_app
from tests.deploy.test_server import tiny_classifier
from tests.deploy.test_server_limits import (
    EVENT_S,
    answer,
    connect,
    read_until_closed,
    serving,
    wait_for,
)
from tests.faults.test_break_it_29_deploy import _requests

HEAD_OVER = "the request's head is over 16,384 bytes (its request line and headers together)"
BODY = json.dumps(
    {"inputs": [{"name": "input", "shape": [1, 3, 8, 8], "datatype": "FP32", "data": [0.5] * 192}]}
).encode()
INFER = b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
F_SETPIPE_SZ = 1031  # fcntl's, Linux only


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = tiny_classifier(tmp_path_factory.mktemp("bk48_serve") / "tiny.onnx")
    with serving(create_app(model, threads=1), 60.0, 32) as (url, _):
        yield url


# --- C4: a head over 16 KiB that arrives in one write ---------------------------------------


@pytest.mark.parametrize("size", [20_000, 100_000])
def test_a_head_over_16_kib_in_one_write_is_answered_431(server: str, size: int) -> None:
    """Before: 200 {"ready": true} (only 200 KB heads, more than one read, were refused)."""
    with connect(server) as sock:
        sock.sendall(
            b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n"
        )
        got, headers, body = answer(read_until_closed(sock))
    assert (got, body) == (431, {"error": HEAD_OVER})
    assert headers["connection"] == "close"


def test_a_head_under_16_kib_in_one_write_is_still_served(server: str) -> None:
    with connect(server) as sock:
        sock.sendall(
            b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "
            + b"a" * 16_000
            + b"\r\n\r\n"
        )
        assert answer(read_until_closed(sock))[::2] == (200, {"ready": True})


# --- C3: a client that half-closes after its request ----------------------------------------


@pytest.mark.parametrize("closing", [b"", b"Connection: close\r\n"], ids=["keep-alive", "close"])
def test_a_half_closed_client_gets_its_answer(server: str, closing: bytes) -> None:
    """Before: no answer (the connection closed), and the request counted 499."""
    before = _requests(server)
    key = ("/v2/models/{name}/infer", "200")
    with connect(server) as sock:
        sock.sendall(INFER + closing + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
        sock.shutdown(socket.SHUT_WR)  # done sending, still reading
        got, _, body = answer(read_until_closed(sock))  # then closed: nothing more can come
    assert got == 200
    assert body["outputs"][0]["shape"] == [1, 3]
    after = _requests(server)
    assert after.get(key, 0.0) == before.get(key, 0.0) + 1
    assert after.get(("/v2/models/{name}/infer", "499"), 0.0) == before.get(
        ("/v2/models/{name}/infer", "499"), 0.0
    )


def test_a_body_cut_short_by_a_half_close_is_answered_400(server: str) -> None:
    """Before: nothing (the read deadline's 408 never came either: the connection was gone),
    counted 499. Counted as the 400 the client was sent, under its route, once."""
    route = "/v2/models/{name}/infer"
    before = _requests(server)
    with connect(server) as sock:
        sock.sendall(INFER + b"Content-Length: 100\r\n\r\n" + BODY[:10])
        sock.shutdown(socket.SHUT_WR)
        got, headers, body = answer(read_until_closed(sock))
    assert got == 400
    assert headers["connection"] == "close"
    assert body == {
        "error": "the request could not be read as HTTP/1.1: peer closed connection without "
        "sending complete message body (received 10 bytes, expected 100)"
    }
    wait_for(
        lambda: _requests(server).get((route, "400"), 0.0) == before.get((route, "400"), 0.0) + 1,
        "the 400 to be counted",
    )
    assert _requests(server).get((route, "499"), 0.0) == before.get((route, "499"), 0.0)


# --- C2: a log pipe nobody reads ------------------------------------------------------------


def fill(write: int) -> None:
    """Fill the pipe of write end `write`, through a non-blocking description of its own, so
    that `write` (and the process it was given to) still blocks."""
    filler = os.open(f"/proc/self/fd/{write}", os.O_WRONLY | os.O_NONBLOCK)
    try:
        while True:
            os.write(filler, b"#" * 512)
    except BlockingIOError:
        pass
    finally:
        os.close(filler)


def small_pipe() -> tuple[int, int]:
    """A pipe (read end, write end) of one page."""
    read, write = os.pipe()
    fcntl.fcntl(write, F_SETPIPE_SZ, 4096)
    return read, write


def read_all(fd: int, until: bytes) -> bytes:
    """What the pipe gives until `until` has come (EVENT_S at most)."""
    got = b""
    deadline = time.monotonic() + EVENT_S
    os.set_blocking(fd, False)
    while until not in got:
        assert time.monotonic() < deadline, f"timed out waiting for {until!r} in {got[-300:]!r}"
        try:
            got += os.read(fd, 65536)
        except BlockingIOError:
            time.sleep(0.02)
    return got


linux_only = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="F_SETPIPE_SZ")


@linux_only
def test_log_lines_to_a_full_pipe_neither_block_nor_grow_without_bound() -> None:
    """The writer on a pipe nobody reads: `put` returns at once, a line past the queue is
    counted, the stop's wait gives up, and a reader that comes gets the lines and the count."""
    from dlperf.deploy.serve_log import Writer, unblocked  # new in round 48

    read, write = small_pipe()
    fill(write)
    stream = os.fdopen(write, "w", encoding="utf-8")
    logger = logging.getLogger("uvicorn.error")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False  # uvicorn's own handler: not here
    try:
        writer = Writer(lines=2)
        with unblocked(writer):
            logger.warning("line 0")  # taken by the writer, which blocks writing it
            deadline = time.monotonic() + EVENT_S
            while writer.queue.qsize():
                assert time.monotonic() < deadline, "the writer did not take the first line"
                time.sleep(0.01)
            for i in range(1, 6):  # two wait in the queue, three are dropped
                logger.warning("line %d", i)
            assert not writer.drain(stall_s=0.2)
        assert logger.handlers[-1] is handler  # put back
        got = read_all(read, b"line 2\n")
        assert writer.drain(stall_s=EVENT_S)
        writer.close()
        assert got.lstrip(b"#") == (
            b"line 0\nwarning: 3 log lines dropped: stderr was not read\nline 1\nline 2\n"
        )
    finally:
        logger.propagate = propagate
        logger.removeHandler(handler)
        stream.close()
        os.close(read)


@linux_only
def test_serve_whose_log_pipe_is_full_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    """Before: the first warning line blocked the event loop: no answer, and SIGTERM, SIGTERM,
    SIGINT, SIGINT left it running until SIGKILL."""
    model = tiny_classifier(tmp_path / "tiny.onnx")
    read, write = small_pipe()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DLPERF_DB": f"sqlite:///{tmp_path / 'db'}"}
    command = [sys.executable, "-m", "dlperf", "serve", str(model), "--port", "0",
               "--threads", "1"]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=write)
    try:
        said = read_all(read, b"Ctrl-C stops").decode()
        port = int(said.split(" on http://127.0.0.1:", 1)[1].split(" ", 1)[0])
        fill(write)  # nobody reads the log from here on
        for _ in range(5):  # each answered 501 and said in a warning line
            with socket.create_connection(("127.0.0.1", port), timeout=EVENT_S) as sock:
                sock.sendall(INFER + b"Transfer-Encoding: gzip\r\n\r\n")
                assert answer(read_until_closed(sock))[0] == 501
        with socket.create_connection(("127.0.0.1", port), timeout=EVENT_S) as sock:
            sock.sendall(b"GET /v2/health/ready HTTP/1.0\r\n\r\n")
            assert answer(read_until_closed(sock))[::2] == (200, {"ready": True})
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(EVENT_S) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(read)
        os.close(write)
