"""The 21st break-it round (issue 41), serve: a second Ctrl-C during the drain, and the
open-file limit.

S1: a second SIGINT while `dlperf serve` drained made uvicorn force its exit: the app's
shutdown was skipped (a 12-line CancelledError traceback) and the requests in flight were cut.
S2: under a low `ulimit -n`, every failed accept() was a traceback, hundreds of thousands a
second; now a limit too low for serve.max_connections is raised to the hard limit or refused
up front in one line, and an accept that still fails is one line.

Real `dlperf serve` processes on 127.0.0.1, raw sockets as the clients; every wait is for an
event (a line, a refused connection, an answer), with EVENT_S as its deadline.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.deploy.test_server import OPSET, plain_model

EVENT_S = 120.0  # how long a busy machine may take to get somewhere: a deadline, not a wait
WIDE = 8_000_000  # floats in each row of `wide_model`'s output: 32 MB, far over socket buffers


def wide_model(path: Path) -> Path:
    """x FP32 [N, 1] -> y = x broadcast to FP32 [N, WIDE]: a small request, a large answer."""
    shape = numpy_helper.from_array(np.array([1, WIDE], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["y"])],
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", WIDE])],
        [shape],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("bk21_serve")
    return {"wide": wide_model(where / "wide.onnx"), "plain": plain_model(where / "plain.onnx")}


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + EVENT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Served:
    """A `dlperf serve` process; its stderr goes to a file (a flood must not block it)."""

    def __init__(self, proc: subprocess.Popen[bytes], stderr: Path) -> None:
        self.proc = proc
        self.stderr = stderr
        self.url = ""
        self.port = 0

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")

    def started(self) -> bool:
        """Waits for the server's first line (or its exit); True if it serves."""
        wait_for(lambda: "serving " in self.err() or self.proc.poll() is not None, "serve")
        if self.proc.poll() is not None:
            return False
        line = self.err().splitlines()[0]
        self.url = line.split(" on ", 1)[1].split(" ", 1)[0]
        self.port = int(self.url.rsplit(":", 1)[1])
        deadline = time.monotonic() + EVENT_S
        while True:  # the port is bound before the line: ready once it answers
            try:
                if httpx.get(f"{self.url}/v2/health/ready", timeout=EVENT_S).status_code == 200:
                    return True
            except httpx.TransportError:
                assert time.monotonic() < deadline, f"{self.url} not ready: {self.err()}"
                time.sleep(0.05)

    def connect(self, rcvbuf: int | None = None) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connecting: a small window the kernel does not grow
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(EVENT_S)
        sock.connect(("127.0.0.1", self.port))
        return sock


@contextmanager
def serving(
    model: Path, tmp_path: Path, *options: str, nofile: tuple[int, int] | None = None
) -> Iterator[Served]:
    """`dlperf serve MODEL --port 0 ...`, under the open-file limit `nofile` (soft, hard)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DLPERF_DB": f"sqlite:///{tmp_path / 'db'}"}
    command = [sys.executable, "-m", "dlperf", "serve", str(model), "--port", "0",
               "--threads", "1", *options]  # fmt: skip

    def limited() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    stderr = tmp_path / "stderr.txt"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=limited
        )
    try:
        yield Served(proc, stderr)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def refused(served: Served) -> None:
    """Waits until the server no longer accepts connections: its drain has begun."""

    def closed() -> bool:
        try:
            served.connect().close()
        except ConnectionRefusedError:
            return True
        return False

    wait_for(closed, "the server to stop accepting")


def read_answer(sock: socket.socket) -> tuple[bytes, int, bytes]:
    """One HTTP answer: its head, the Content-Length it announced, and the body received
    until that length or the connection's end, whichever comes first."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed before the answer's head: {received!r}"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    fields = dict(line.split(b": ", 1) for line in head.lower().split(b"\r\n")[1:])
    length = int(fields[b"content-length"])
    chunks = [body]
    got = len(body)
    while got < length and (chunk := sock.recv(1 << 20)):
        chunks.append(chunk)
        got += len(chunk)
    return head, length, b"".join(chunks)


# --- S1: a second Ctrl-C during the drain -------------------------------------------------------


def test_a_second_ctrl_c_during_the_drain_cuts_neither_the_drain_nor_the_answers(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """A client slow to read a 32 MB answer holds the drain; the second SIGINT lands while it
    does. Before: uvicorn forced its exit, the app's shutdown was cancelled (a 12-line
    traceback on stderr) and the answer was cut."""
    request = json.dumps(
        {
            "inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [0.5]}],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    with serving(models["wide"], tmp_path) as served:
        assert served.started(), served.err()
        with served.connect(rcvbuf=4096) as slow:
            slow.sendall(
                b"POST /v2/models/wide/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(request), request)
            )
            # Nothing is read yet: once the answer has begun, the rest waits in the server.
            assert slow.recv(1, socket.MSG_PEEK), "closed without an answer"
            served.proc.send_signal(signal.SIGINT)
            refused(served)  # the first signal's drain is under way
            served.proc.send_signal(signal.SIGINT)
            head, length, body = read_answer(slow)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert len(body) == length > 4 * WIDE, (len(body), length)  # every byte of the answer
        assert served.proc.wait(timeout=EVENT_S) == 130  # by the first signal
    err = served.err()
    assert "Traceback" not in err and "CancelledError" not in err, err
    assert len(err.splitlines()) <= 2, err  # the serving line, and one line at most


# --- S2: the open-file limit ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "wanted"),
    [((), "--max-connections 512"), (("--max-connections", "30"), "--max-connections 30")],
    ids=["default 512", "30"],
)
def test_an_open_file_limit_too_low_for_max_connections_is_one_line_up_front(
    models: dict[str, Path], tmp_path: Path, options: tuple[str, ...], wanted: str
) -> None:
    """The hard limit too is 64, so the soft one cannot be raised: refused before serving.
    Before: it served, and a hundred idle clients flooded stderr with accept tracebacks."""
    with serving(models["plain"], tmp_path, *options, nofile=(64, 64)) as served:
        assert not served.started(), served.err()
        assert served.proc.wait(timeout=EVENT_S) == 2
    lines = served.err().splitlines()
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("error: ") and wanted in line, line
    assert line.endswith("(ulimit -n 64 is too low: raise it or lower --max-connections)"), line


def test_a_soft_open_file_limit_under_max_connections_is_raised_to_the_hard_one(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """Soft 64, hard 4,096: the server raises its soft limit and holds 100 idle connections
    while it still answers. Before: each accept past the 64th file failed, with a traceback.

    Then, in the same server: an accept that fails for want of files is one line and the
    server recovers. Its limit lowered to 100 files once it serves (prlimit), 150 idle
    clients under --max-connections: accept() fails with EMFILE. Before: a traceback for
    every attempt, thousands a second. (Round 22: it began under a limit of 100 with
    --max-connections 8, the clients past the cap holding their files until they sent a
    request; a connection past the cap is closed as it opens now.)"""
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 0, 0, 0]}]}
    with serving(models["plain"], tmp_path, "--read-timeout-s", "600", nofile=(64, 4096)) as s:
        assert s.started(), s.err()
        held = [s.connect() for _ in range(100)]
        try:
            r = httpx.post(f"{s.url}/v2/models/plain/infer", json=body, timeout=EVENT_S)
            assert r.status_code == 200, r.text
            limits = Path(f"/proc/{s.proc.pid}/limits")
            if limits.exists():
                row = next(x for x in limits.read_text().splitlines() if "open files" in x)
                assert row.split()[3:5] == ["4096", "4096"], row
        finally:
            for sock in held:
                sock.close()
        # (nothing said of the 100 held: the three lines asserted at the end are the serving
        # line and the two of the accepts that fail below)

        resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, (100, 100))
        held = [s.connect() for _ in range(150)]  # the kernel's backlog takes them all
        try:
            wait_for(lambda: "Too many open files" in s.err(), "the server to run out of files")
        finally:
            for sock in held:
                sock.close()
        # Served again once the idle clients have gone (asyncio retries accept every second):
        # until the server has dropped them all it may still be over the cap, and answer 503
        # with Retry-After, which a client retries.
        answers: list[httpx.Response] = []

        def answered() -> bool:
            answers.append(httpx.post(f"{s.url}/v2/models/plain/infer", json=body, timeout=EVENT_S))
            return answers[-1].status_code != 503

        wait_for(answered, "an answer other than 503")
        assert answers[-1].status_code == 200, answers[-1].text
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=EVENT_S) == 143
    lines = s.err().splitlines()
    assert "Traceback" not in s.err(), s.err()[:3000]
    assert len(lines) == 3, lines[:20]  # the serving line, the one below, and its end (round 22)
    assert "Too many open files" in lines[1], lines[1]
    assert "(ulimit -n 100 is too low: raise it or lower --max-connections)" in lines[1], lines[1]
