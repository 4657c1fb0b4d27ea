"""The ninth break-it round (issue 41), serve: a second stop signal during the drain.

`dlperf serve` stopped by SIGINT and then, 0.1 s later while it drained, SIGTERM exited 143,
the second signal's code: uvicorn raises the signals it caught again last first, and the
server took the first one it was handed back. The documented code is 128 + the first.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from dlperf import stopping
from dlperf.deploy import server


def caught_in_order(self: server._DrainingServer, sockets: list[socket.socket]) -> None:
    """uvicorn's run with its serving left out: the two signals arrive, in this order, while
    its signal handlers are in force; leaving capture_signals raises them again, as uvicorn
    does once drained."""
    with self.capture_signals():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s


def test_the_first_of_two_stop_signals_is_the_one_serve_exits_by(
    monkeypatch: pytest.MonkeyPatch, sock: socket.socket
) -> None:
    monkeypatch.setattr(stopping, "_state", stopping._State())
    monkeypatch.setattr(server._DrainingServer, "run", caught_in_order)
    app = FastAPI()
    app.state.batcher = None
    assert server.serve_forever(app, sock) == signal.SIGINT
    assert stopping._state.received == signal.SIGINT
