"""Break-it round 57 (found by the final test suite): a stop right after "serving" was lost.

`test_break_it_52_serve_idle.py` signalled `dlperf serve` as soon as it said it served, and
under load the server served on for ever (2 tries in 3 with a core hogged): a SIGTERM that came
after `serve_forever` put its own handler in (which only notes the signal) and before uvicorn
put in its own was noted and never told to uvicorn. The server now stops, draining as for any
stop, once it has started, by the first such signal, and exits by it.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dlperf import stopping
from dlperf.deploy import server
from tests.deploy.test_server import tiny_classifier


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s


@pytest.mark.timeout(60)  # before: served on for ever
def test_a_stop_before_uvicorn_takes_the_signals_stops_the_server(
    monkeypatch: pytest.MonkeyPatch, sock: socket.socket, tmp_path: Path
) -> None:
    monkeypatch.setattr(stopping, "_state", stopping._State())
    app = server.create_app(tiny_classifier(tmp_path / "tiny.onnx"), threads=1)
    real = server.uvicorn_config

    def signalled_then_configured(*args: Any, **kwargs: Any) -> Any:
        # serve_forever's own handler is in force here; uvicorn's is not yet
        signal.raise_signal(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(server, "uvicorn_config", signalled_then_configured)
    assert server.serve_forever(app, sock) == signal.SIGTERM
