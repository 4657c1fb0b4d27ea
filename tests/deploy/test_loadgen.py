"""dlperf.deploy.loadgen on its own: the loopback rule, the probe's one-line refusals and a
level's counts against a fake server (httpx's MockTransport in place of the network)."""

from __future__ import annotations

import asyncio
import io
import itertools
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from PIL import Image

from dlperf.deploy import loadgen
from dlperf.errors import UserError

PREDICTION = {"model_name": "m", "predictions": [{"index": 0, "label": "a", "probability": 1.0}]}


Handler = Callable[[httpx.Request], httpx.Response]
Fake = Callable[[Handler], list[httpx.Request]]


@pytest.fixture
def fake_server(monkeypatch: pytest.MonkeyPatch) -> Fake:
    """Route every client the load generator makes to `handler`; the requests it saw."""

    def install(handler: Handler) -> list[httpx.Request]:
        seen: list[httpx.Request] = []

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return handler(request)

        monkeypatch.setattr(
            loadgen, "_client", lambda: httpx.AsyncClient(transport=httpx.MockTransport(record))
        )
        return seen

    return install


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.9.8.7", True), ("::1", True), ("localhost", True),
     ("10.0.0.1", False), ("0.0.0.0", False), ("example.com", False), ("::", False)],
)  # fmt: skip
def test_is_loopback(host: str, loopback: bool) -> None:
    assert loadgen.is_loopback(host) is loopback


def test_target_defaults_to_predict_and_keeps_a_given_path() -> None:
    assert loadgen.target("http://127.0.0.1:8000") == "http://127.0.0.1:8000/predict"
    assert loadgen.target("http://localhost:8000/") == "http://localhost:8000/predict"
    assert loadgen.target("http://[::1]:9/v/p?x=1#frag") == "http://[::1]:9/v/p?x=1"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://127.0.0.1/", "'ftp://127.0.0.1/' is not an http:// URL"),
        ("127.0.0.1:8000", "is not an http:// URL"),
        ("http://192.168.1.5:8000", "192.168.1.5 is not a loopback address; serve bench only"),
        ("http://example.com", "example.com is not a loopback address"),
    ],
)
def test_target_refuses_what_is_not_this_machine(url: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        loadgen.target(url)


def test_sample_image_is_a_fixed_png() -> None:
    data = loadgen.sample_image()
    assert data == loadgen.sample_image()
    image = Image.open(io.BytesIO(data))
    assert (image.format, image.size, image.mode) == ("PNG", (32, 32), "RGB")


def test_run_refuses_a_missing_image_or_a_fifo_before_any_request(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^no image file "):
        loadgen.run("http://127.0.0.1:1", [1], 0.1, image=tmp_path / "none.png")
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match=r"pipe.png is not a regular file \(.*give an image file"):
        loadgen.run("http://127.0.0.1:1", [1], 0.1, image=fifo)


@contextmanager
def listening() -> Iterator[int]:
    """A TCP socket of this process listening on a free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux's /proc")
def test_listener_finds_the_process_on_a_port() -> None:
    with listening() as port:
        assert loadgen.listeners("127.0.0.1", port) == {os.getpid()}
    with socket.socket() as bound:  # bound but not listening: nobody serves there
        bound.bind(("127.0.0.1", 0))
        assert loadgen.listeners("127.0.0.1", bound.getsockname()[1]) == set()


def test_oneline_collapses_whitespace_and_cuts() -> None:
    assert loadgen._oneline("  a\n\n b\tc ", 10) == "a b c"
    assert loadgen._oneline("abcdefghij", 10) == "abcdefghij"
    assert loadgen._oneline("abcdefghijk", 10) == "abcdefg..."


@pytest.mark.parametrize(
    ("body", "prediction"),
    [
        (PREDICTION, True),
        ({"model_name": "m", "detections": []}, True),
        ({"model_name": "m"}, False),  # no predictions or detections
        ({"model_name": 3, "predictions": []}, False),
        ([PREDICTION], False),
    ],
)
def test_is_prediction_wants_dlperfs_answer(body: object, prediction: bool) -> None:
    assert loadgen._is_prediction(httpx.Response(200, json=body)) is prediction
    assert loadgen._is_prediction(httpx.Response(200, content=b"\xff not json")) is False


def test_refused_says_dlperfs_error_or_that_it_is_not_dlperf() -> None:
    url = "http://127.0.0.1:1/predict"
    ours = loadgen._refused(url, httpx.Response(400, json={"error": "no image in\nthe request"}))
    assert str(ours) == f"{url} answered 400: no image in the request"
    html = (
        "<html>\n  <body>\n    <h1>404 Not Found</h1>\n  </body>\n</html>" + " " * 100 + "x" * 100
    )
    theirs = loadgen._refused(url, httpx.Response(404, text=html))
    assert theirs.message == (
        # 53 characters of collapsed HTML, then 24 x: 77, and "..." make the 80
        f"{url} answered 404: '<html> <body> <h1>404 Not Found</h1> </body> </html> "
        + "x" * 24
        + "...'; it does not look like a dlperf server"
    )
    assert "dlperf serve MODEL.onnx" in str(theirs.hint)
    # a 200 with an "error" is not dlperf's (it never answers an error with a 2xx)
    assert "does not look like" in str(
        loadgen._refused(url, httpx.Response(200, json={"error": "x"}))
    )


def test_probe_makes_a_dead_or_wrong_server_one_line(fake_server: Fake) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    fake_server(down)
    with pytest.raises(UserError, match=r"^no server answers at http://x/predict \(ConnectError\)"):
        asyncio.run(loadgen._probe("http://x/predict", b"img"))
    fake_server(lambda request: httpx.Response(200, text="<html>hello</html>"))
    with pytest.raises(UserError, match="answered 200: '<html>hello</html>'; it does not look"):
        asyncio.run(loadgen._probe("http://x/predict", b"img"))


def test_a_level_counts_requests_errors_and_statuses(fake_server: Fake) -> None:
    statuses = itertools.cycle([200, 200, 503])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(next(statuses), json=PREDICTION)

    seen = fake_server(handler)
    # a long duration: the budget of 9 requests is what ends the level
    result = asyncio.run(loadgen._level("http://x/predict", b"img", 3, 60.0, 9))
    assert len(seen) == 3 + 9  # one warm-up request per client, not counted
    assert all(r.content == b"img" and r.method == "POST" for r in seen)
    assert (result.concurrency, result.requests) == (3, 9)
    # the warm-up took 200, 200, 503; the counted nine repeat that pattern three times
    assert result.statuses == {"200": 6, "503": 3}
    assert (result.ok, result.errors) == (6, 3)
    assert result.throughput == pytest.approx(6 / result.wall_s)
    assert result.p50_ms is not None and result.p50_ms <= result.p90_ms <= result.p99_ms  # type: ignore[operator]
    assert result.contention is not None and result.contention["process"] == "load generator"
    assert isinstance(result.reliable, bool)


def test_a_level_with_no_success_has_no_latencies(fake_server: Fake) -> None:
    # answered, but never a success (a server that times out ends the level: round 31)
    fake_server(lambda request: httpx.Response(503, json={"error": "busy"}))
    result = asyncio.run(loadgen._level("http://x/predict", b"img", 1, 60.0, 2))
    assert result.statuses == {"503": 2} and result.ok == 0 and result.throughput == 0
    assert (result.p50_ms, result.p90_ms, result.p99_ms) == (None, None, None)


def test_a_level_whose_duration_ends_before_any_request_says_so(fake_server: Fake) -> None:
    fake_server(lambda request: httpx.Response(200, json=PREDICTION))
    with pytest.raises(UserError, match="concurrency 2: no request was sent in --duration 0 s"):
        asyncio.run(loadgen._level("http://x/predict", b"img", 2, 0.0, None))


def test_run_probes_then_loads_each_level(fake_server: Fake) -> None:
    seen = fake_server(lambda request: httpx.Response(200, json=PREDICTION))
    results = loadgen.run("http://127.0.0.1:9/", [1, 2], duration_s=60.0, max_requests=2)
    assert [(r.concurrency, r.requests, r.ok) for r in results] == [(1, 2, 2), (2, 2, 2)]
    assert len(seen) == 1 + (1 + 2) + (2 + 2)  # the probe, then warm-ups and counted requests
    assert {str(r.url) for r in seen} == {"http://127.0.0.1:9/predict"}
    assert all(r.content == loadgen.sample_image() for r in seen)
