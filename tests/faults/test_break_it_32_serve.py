"""Break-it round 32 (P4), serve.

C1: a client's `Upgrade:` header (h2c or websocket) made `dlperf serve` log uvicorn's "Unsupported
upgrade request." and its advice to `pip install 'uvicorn[standard]'`, two lines per request: an
h2c upgrade got WebSocket advice, and any client could fill the operator's log.

Real servers on 127.0.0.1 (uvicorn in a thread, as `dlperf serve` runs it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from dlperf import system
from dlperf.deploy import runtime
from dlperf.deploy.server import create_app
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.deploy.test_server import tiny_classifier
from tests.deploy.test_server_limits import EVENT_S, serving

UPGRADES = [
    {"Connection": "Upgrade", "Upgrade": "h2c"},
    {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version": "13",
    },
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("bk32_serve") / "tiny.onnx")


def test_an_upgrade_request_is_answered_with_one_line_once_and_no_install_advice(
    tiny: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Before: per request, "WARNING:  Unsupported upgrade request." and "No supported WebSocket
    library detected. Please use "pip install 'uvicorn[standard]'"..." on the server's stderr."""
    with serving(create_app(tiny, threads=1), 60.0, 100) as (url, _):
        capfd.readouterr()  # the start's lines
        with httpx.Client(base_url=url, timeout=EVENT_S) as client:  # one keep-alive connection
            for headers in UPGRADES * 5:
                response = client.get("/v2/health/live", headers=headers)
                assert response.status_code == 200, response.text
                assert response.json() == {"live": True}
    said = capfd.readouterr().err + caplog.text
    assert "pip install" not in said and "WebSocket library" not in said, said
    assert "Unsupported upgrade" not in said, said
    lines = [line for line in said.splitlines() if "upgrade" in line.lower()]
    assert len(lines) == 1, said
    assert lines[0].endswith(
        "a client asked to upgrade the connection to h2c; dlperf serve speaks HTTP/1.1 only: "
        "answered without upgrading (said once)"
    ), said


def test_serve_refuses_more_ort_threads_than_usable_cores(
    tiny: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """P4 C9: `serve --threads 64` on one allowed core was taken silently (69 threads, single-row
    answers 50x slower), where `infer bench` and every training command refuse it: every ONNX
    Runtime session is checked now, with the line `set_threads` gives."""
    monkeypatch.setattr(system, "usable_cores", lambda: 1)
    with pytest.raises(UserError, match=r"^64 threads asked for, but this host has 1 usable"):
        runtime.session(tiny, 64)
    result = cli("serve", str(tiny), "--threads", "64", "--port", "0")
    assert result.code == 2, result
    assert result.err.startswith("error: 64 threads asked for, but this host has 1 usable cores")
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert runtime.session(tiny, 1) is not None  # what the host can run is still taken
