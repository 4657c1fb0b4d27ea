"""Break-it round 32 (P4), serve.

C1: a client's `Upgrade:` header (h2c or websocket) made `dlperf serve` log uvicorn's "Unsupported
upgrade request." and its advice to `pip install 'uvicorn[standard]'`, two lines per request: an
h2c upgrade got WebSocket advice, and any client could fill the operator's log.

Real servers on 127.0.0.1 (uvicorn in a thread, as `dlperf serve` runs it).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from dlperf import system
from dlperf.deploy import loadgen, runtime
from dlperf.deploy.server import client_url, create_app, is_wildcard
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


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("::", "http://[::1]:8000"),
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("::1", "http://[::1]:8000"),
        ("localhost", "http://localhost:8000"),
    ],
)
def test_the_url_serve_gives_is_one_a_client_can_use(host: str, url: str) -> None:
    """P4 C11: `serve --host 0.0.0.0` said it served on http://0.0.0.0:PORT, a URL its own
    `serve bench` refuses ("not a loopback address")."""
    assert client_url(host, 8000) == url
    assert is_wildcard(host) == (host in ("0.0.0.0", "::"))


def test_serve_on_every_interface_names_the_loopback_url_and_the_bench_takes_it(
    tiny: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line, through the command; the socket itself stays on loopback (tests never listen
    on other addresses), and the server stops at once."""
    import dlperf.cli.serve as serve_cli
    import dlperf.deploy.server as server

    loopback = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setattr(serve_cli, "_listen", lambda host, port: loopback)
    monkeypatch.setattr(server, "serve_forever", lambda *args: None)
    result = cli("serve", str(tiny), "--host", "0.0.0.0", "--threads", "1")
    loopback.close()
    assert result.code == 0, result
    said = [line for line in result.err.splitlines() if line.startswith("serving ")]
    assert len(said) == 1, result.err
    url = said[0].split(" on ", 1)[1].split(" ", 1)[0]  # a URL a copy can take whole
    assert url.startswith("http://127.0.0.1:") and url[-1].isdigit(), said
    assert said[0].endswith(
        " (listening on every interface, 0.0.0.0) - Ctrl-C stops after the queued requests"
    ), said
    loadgen.target(f"{url}/predict")  # serve bench takes it (it refused 0.0.0.0)


def test_an_upgrade_value_is_logged_with_its_control_characters_escaped(
    tiny: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Reviewer 1 F4: the client's Upgrade value went to the operator's log raw: U+009B (CSI,
    obs-text to h11) reached the terminal as a colour code."""
    with serving(create_app(tiny, threads=1), 60.0, 100) as (url, _):
        capfd.readouterr()  # the start's lines
        with httpx.Client(base_url=url, timeout=EVENT_S) as client:
            headers = {"Connection": "Upgrade", "Upgrade": b"\x9b31mRED\x9b0m"}
            assert client.get("/v2/health/live", headers=headers).status_code == 200
    said = capfd.readouterr().err + caplog.text
    assert "\x9b" not in said, said
    assert "upgrade the connection to \\x9b31mred\\x9b0m; dlperf serve speaks" in said, said
