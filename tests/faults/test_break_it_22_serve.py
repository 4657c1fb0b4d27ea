"""Break-it round 22, serve: two items of round 21's Left list.

C1: an accept() that failed for want of files was one warning for the server's whole life:
once it was said, a later outage was silent, and nothing said when connections were accepted
again, so the log could not tell a server still locked out from one long recovered.
C2: a connection past --max-connections kept its file until it sent a request or its read
deadline (30 s) ran out: idle clients past the cap held the files the cap is there to save.

Real `dlperf serve` processes on 127.0.0.1 (C1's open-file limit lowered with prlimit once it
serves), raw sockets as the clients; every wait is for an event (a line, an answer, a closed
file), with EVENT_S as its deadline. The outage's once-a-minute rule is checked on
`_AcceptWatch` itself, with a clock the test moves.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import resource
import signal
import socket
from pathlib import Path

import httpx
import pytest

from dlperf.deploy.server import _AcceptWatch, _late_retry, _Listener
from tests.deploy.test_server import plain_model
from tests.faults.test_break_it_21_serve import EVENT_S, Served, serving, wait_for

PROC = Path("/proc")
linux_only = pytest.mark.skipif(not (PROC / "self" / "fd").is_dir(), reason="reads /proc")
SAID = "cannot accept connections"
AGAIN = "connections are accepted again"
BODY = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 0, 0, 0]}]}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return plain_model(tmp_path_factory.mktemp("bk22_serve") / "plain.onnx")


def files_open(pid: int) -> list[str]:
    """What each of the process's open files is (its /proc/PID/fd link)."""
    links = []
    for fd in os.listdir(PROC / str(pid) / "fd"):
        try:
            links.append(os.readlink(PROC / str(pid) / "fd" / fd))
        except FileNotFoundError:  # closed while listed
            continue
    return links


def connections(pid: int, server_port: int) -> set[int]:
    """The client ports of the connections the server has a file open for: its ends of them,
    in /proc/net/tcp, whose socket inodes are among its files (a socket its process closed
    lives on a while, orphaned, with inode 0)."""
    there = f":{server_port:04X}"
    files = set(files_open(pid))
    ports = set()
    for row in (PROC / str(pid) / "net" / "tcp").read_text().splitlines()[1:]:
        fields = row.split()
        local, remote, inode = fields[1], fields[2], fields[9]
        if local.endswith(there) and f"socket:[{inode}]" in files and inode != "0":
            ports.add(int(remote.rsplit(":", 1)[1], 16))
    return ports - {0}  # the listening socket's remote port is 0


def infer(served: Served) -> httpx.Response:
    return httpx.post(f"{served.url}/v2/models/plain/infer", json=BODY, timeout=EVENT_S)


# --- C1: an accept() that fails for want of files ----------------------------------------------


@linux_only
def test_an_accept_out_of_files_is_said_once_and_so_is_its_end(model: Path, tmp_path: Path) -> None:
    """The server's soft limit lowered to its open files + 6, ten idle clients: six are
    accepted, the seventh's accept() fails with EMFILE, and asyncio retries it every second
    (each time as often as the backlog is long). One line says so, naming the limit; once the
    clients leave, a request is served and one line says connections are accepted again.
    Before: the warning alone, once for the server's life, and nothing when it ended."""
    with serving(model, tmp_path, "--read-timeout-s", "600") as s:
        assert s.started(), s.err()
        pid = s.proc.pid
        limit = len(files_open(pid)) + 6
        hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
        held = [s.connect() for _ in range(10)]  # the kernel's backlog takes them all
        try:
            wait_for(lambda: SAID in s.err(), "the server to run out of files")
        finally:
            for sock in held:
                sock.close()
        response = infer(s)  # accepted at asyncio's next try, once the clients' files are free
        assert response.status_code == 200, response.text
        wait_for(lambda: AGAIN in s.err(), "the line saying connections are accepted again")
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=EVENT_S) == 143
    lines = s.err().splitlines()
    assert "Traceback" not in s.err(), s.err()[:3000]
    assert len(lines) == 3, lines[:20]  # serving; out of files; accepted again
    assert SAID in lines[1] and "Too many open files" in lines[1], lines[1]
    assert f"(ulimit -n {limit} is too low: raise it or lower --max-connections)" in lines[1]
    assert AGAIN + " (accept() failed for " in lines[2], lines[2]


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_said_at_most_once_a_minute_however_often_it_comes_and_goes() -> None:
    """A server at its limit under steady load flaps: an accept succeeds as a file frees and
    the next one fails. Each outage said with its end would be two lines a second; one said
    is not repeated, and its end is said, but another outage is said only a minute after the
    last line, so that one still going is never left looking recovered for longer."""
    clock = Clock()
    watch = _AcceptWatch(clock)
    out_of_files = OSError(errno.EMFILE, "Too many open files")
    first = watch.failed(out_of_files)
    assert first is not None and first.startswith("cannot accept connections: Too many")
    assert all(watch.failed(out_of_files) is None for _ in range(2048))  # the retries
    clock.now += 2.5
    assert watch.accepted() == "connections are accepted again (accept() failed for 2.5 s)"
    assert watch.accepted() is None  # no outage: nothing to say
    clock.now += 1
    assert watch.failed(out_of_files) is None  # a second outage, 1 s after the last line
    clock.now += 1
    assert watch.accepted() is None  # its end unsaid as it was
    clock.now += 10
    assert watch.failed(out_of_files) is None  # a third one, 11 s after the last line
    clock.now += 49
    assert watch.failed(out_of_files) is not None  # still failing, a minute after: said
    assert watch.failed(out_of_files) is None
    clock.now += 5
    assert watch.accepted() == "connections are accepted again (accept() failed for 54.0 s)"
    clock.now += 60
    assert watch.failed(out_of_files) is not None  # a minute later a new outage is said at once


def test_asyncio_s_retry_on_a_listener_closed_since_is_no_traceback() -> None:
    """After a failed accept() asyncio retries a second later, on the listener as it finds
    it: one the server closed meanwhile (it stopped within the second) fails with a
    ValueError, which the server's handler told from other errors and printed with its
    traceback, one for each failure of the last second (3,558 in a run of the test above that
    stopped a second after its outage). The retry is the one asyncio schedules, called on a
    real loop with a real listener, closed and open."""
    contexts: list[dict[str, object]] = []

    async def retried(listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: contexts.append(context))
        loop.call_soon(loop._start_serving, asyncio.Protocol, listener)  # type: ignore[attr-defined]
        await asyncio.sleep(0)  # the retry, queued before this task's wake-up, has run

    closed = _Listener.watching(socket.socket(), _AcceptWatch())
    closed.close()
    asyncio.run(retried(closed))
    (context,) = contexts
    assert isinstance(context["exception"], ValueError), context
    assert _late_retry(context)
    with socket.socket() as plain:  # not the server's listener: its errors are not ours
        plain.close()
        asyncio.run(retried(plain))
    assert len(contexts) == 2 and not _late_retry(contexts[1]), contexts


# --- C2: a connection past --max-connections --------------------------------------------------


@linux_only
def test_a_connection_past_max_connections_is_answered_and_closed_without_its_request(
    model: Path, tmp_path: Path
) -> None:
    """--max-connections 2 and three clients that send nothing: the third is answered 503
    at once and its file closed. Before: it held its file, with no answer, until it sent a
    request or 30 s (here 600) passed."""
    with serving(model, tmp_path, "--max-connections", "2", "--read-timeout-s", "600") as s:
        assert s.started(), s.err()
        pid, port = s.proc.pid, s.port
        wait_for(lambda: not connections(pid, port), "the probe's connection to close")
        first, second = s.connect(), s.connect()
        try:
            mine = {first.getsockname()[1], second.getsockname()[1]}
            wait_for(lambda: connections(pid, port) == mine, "the server to hold both")
            with s.connect() as third:
                received = b""
                while chunk := third.recv(65536):  # the answer, then the end of the connection
                    received += chunk
                wait_for(lambda: connections(pid, port) == mine, "its file to be closed")
            head, _, body = received.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 "), received
            assert b"\r\nretry-after: 1" in head.lower() and b"connection: close" in head.lower()
            message = json.loads(body)["error"]
            assert message == "too many connections: 2 are open (serve.max_connections)"
        finally:
            first.close()
            second.close()
        # Served once the two have gone: until the server has dropped them both it may still
        # be at the cap and answer 503 with Retry-After, which a client retries.
        answers: list[httpx.Response] = []

        def answered() -> bool:
            answers.append(infer(s))
            return answers[-1].status_code != 503

        wait_for(answered, "an answer other than 503")
        assert answers[-1].status_code == 200, answers[-1].text
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=EVENT_S) == 143
    assert len(s.err().splitlines()) == 1, s.err()  # the serving line alone
