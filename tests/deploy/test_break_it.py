"""Break-it round of issue 41 on `dlperf infer` and `dlperf serve`: each test reproduces a
case that failed (a connection held open for ever, a 500, an image read unlike training)."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from dlperf.cli.serve import _listen
from dlperf.deploy import meta, runtime
from dlperf.deploy.protocol import HEADER_LENGTH, split
from dlperf.deploy.server import create_app
from dlperf.errors import UserError
from tests.deploy.test_server import tiny_classifier
from tests.deploy.test_server_limits import (
    answer,
    connect,
    read_response,
    read_until_closed,
    serving,
)

BODY = json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [0]}]})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("models") / "tiny.onnx")


def request_head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v2/models/tiny/infer", b"[" * 5000, 413),  # a Content-Length over max_body_bytes
        ("/v2/models/nope/infer", BODY.encode(), 404),  # an unknown model
    ],
    ids=["413 over the body limit", "404 before the body"],
)
def test_a_connection_answered_before_its_body_is_read_is_closed_once_idle(
    tiny: Path, path: str, body: bytes, status: int
) -> None:
    """uvicorn cancels its keep-alive timer on the rest of an early-answered body and never
    arms it again: such a connection, idle, was held open for ever (found: > 20 s with a
    5 s read timeout and uvicorn's 5 s keep-alive)."""
    app = create_app(tiny, threads=1, max_body_bytes=1000)
    with serving(app, read_timeout_s=1.0, max_connections=8) as (url, _), connect(url) as c:
        c.sendall(request_head(path, len(body)))
        assert answer(read_response(c))[0] == status  # the answer comes before the body
        c.sendall(body)
        assert read_until_closed(c) == b""  # EVENT_S at most; raises TimeoutError if held


def test_a_header_length_of_thousands_of_digits_is_400() -> None:
    """int() refuses over 4,300 digits: the request was a 500 (ValueError) instead of a 400."""
    with pytest.raises(UserError, match=f"{HEADER_LENGTH} is 5000 digits long"):
        split(b"{}", "9" * 5000)
    header, binary = split(b"{}abc", "0" * 5000 + "2")  # leading zeros still count as 2
    assert header == b"{}" and binary is not None and bytes(binary) == b"abc"


def test_a_16_bit_image_is_read_over_its_own_range_as_training_reads_it() -> None:
    """`dlperf infer` and /predict clipped 16-bit grey at 255 (almost white) where the
    training reader scales 65535 to 255: the exported model saw another image."""
    samples = np.array([[0, 16384], [32768, 65535]], np.uint16)
    buf = io.BytesIO()
    Image.fromarray(samples).save(buf, format="PNG")
    decoded = runtime.decode(buf.getvalue())
    assert decoded.mode.startswith("I")
    for channels in (1, 3):
        pre = meta.Preprocess(size=(2, 2), channels=channels, mean=(0.0,) * channels,
                              std=(1.0,) * channels)  # fmt: skip
        x = runtime.to_array(decoded, pre)
        expected = np.rint(samples / 65535 * 255) / 255
        np.testing.assert_allclose(x, np.broadcast_to(expected, x.shape), atol=1 / 255)


def test_a_float_image_outside_0_1_is_one_line_naming_the_image() -> None:
    image = Image.fromarray(np.full((2, 2), 7.5, np.float32))
    pre = meta.Preprocess(size=(2, 2), channels=1, mean=(0.0,), std=(1.0,))
    with pytest.raises(UserError, match=r"^upload\.tiff: image mode F holds values 7\.5\.\.7\.5"):
        runtime.to_array(image, pre, "upload.tiff")


@pytest.mark.parametrize(
    ("host", "hint"),
    [
        ("no.such.host.invalid", "give --host an address of this machine"),
        ("192.0.2.1", "give --host an address of this machine"),  # TEST-NET-1: not ours
    ],
)
def test_a_host_that_is_not_ours_is_blamed_not_the_port(host: str, hint: str) -> None:
    """`serve --host no.such.host.invalid` said "pick another --port"."""
    with pytest.raises(UserError, match=f"^cannot listen on {host}:0: .*\\({hint}"):
        _listen(host, 0)


def test_a_taken_port_still_asks_for_another_port() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=r"Address already in use \(pick another --port\)$"):
            _listen("127.0.0.1", port)


def test_an_opset_the_exporter_cannot_reach_is_refused_and_leaves_no_file(tmp_path: Path) -> None:
    """`dlperf export smallcnn --opset 999` (or 5) exited 0 with an opset-18 file: the dynamo
    exporter keeps its own opset, with a warning dlperf hides, when it cannot convert."""
    from dlperf.deploy.export import export, from_registry

    out = tmp_path / "m.onnx"
    with pytest.raises(UserError, match=r"^export\.opset 999: the exporter wrote opset \d+ inst"):
        export(from_registry("smallcnn", (1, 8, 8)), out, opset=999)
    assert list(tmp_path.iterdir()) == []
    reached = export(from_registry("smallcnn", (1, 8, 8)), out, opset=17)
    assert reached["opset"] == 17 and reached["parity"]


@pytest.mark.parametrize(
    "data", [b"", b"hello", b"\x89PNG\r\n\x1a\n\x00\x00"], ids=["empty", "text", "cut"]
)
def test_an_unreadable_image_says_what_to_give(data: bytes) -> None:
    """`dlperf infer m.onnx trunc.png` said what was wrong but not how to mend it."""
    with pytest.raises(UserError) as caught:
        runtime.decode(data, "cut.png")
    assert str(caught.value).startswith("cut.png is not a readable image (")
    assert str(caught.value).endswith(
        ") (give a PNG, JPEG or another image file Pillow opens, whole)"
    )


def test_an_export_killed_before_its_check_leaves_no_model_under_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGKILLed `dlperf export` (no cleanup runs) left MODEL.onnx, its weights and its
    metadata, never checked or compared, and `dlperf infer` used them with exit 0. Now the
    files sit in a hidden directory until compared: during the comparison, where a SIGKILL
    could land, nothing is under the model's name yet."""
    from dlperf.deploy import export as export_module

    out = tmp_path / "m.onnx"
    real_compare = export_module.compare
    seen: list[list[str]] = []

    def compare_and_look(*args: Any, **kwargs: Any) -> Any:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        return real_compare(*args, **kwargs)

    monkeypatch.setattr(export_module, "compare", compare_and_look)
    result = export_module.export(export_module.from_registry("smallcnn", (1, 8, 8)), out)
    assert seen and all(names == [".m.onnx.exporting"] for names in seen)
    assert result["parity"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data", "m.onnx.json"]
    assert runtime.session(out) is not None  # its weights found beside it after the move


def test_bench_without_a_server_says_how_to_start_one() -> None:
    """`dlperf serve bench http://127.0.0.1:1` said no server answers, not what to do."""
    import asyncio

    from dlperf.deploy import loadgen

    with socket.socket() as closed:  # a port bound but not listening: nobody answers
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/predict"
        with pytest.raises(UserError) as caught:
            asyncio.run(loadgen._probe(url, b""))
    assert str(caught.value) == (
        f"no server answers at {url} (ConnectError) "
        "(start one with `dlperf serve MODEL.onnx --port PORT` and give its URL)"
    )


def test_a_bench_level_that_sent_nothing_is_an_error_not_a_row_of_zeros(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`serve bench --concurrency 2000 --duration 1` on a busy machine: the 2,000 clients took
    longer to settle than the level's duration, and the table showed 0 requests, 0 req/s,
    exit 0. A level of no duration sends nothing the same way (its warm-up answered: one
    that no client got an answer to ends the level as the server's)."""
    import asyncio

    import httpx

    from dlperf.deploy import loadgen

    answer = httpx.Response(200, json={"model_name": "m", "predictions": []})
    transport = httpx.MockTransport(lambda request: answer)
    monkeypatch.setattr(loadgen, "_client", lambda: httpx.AsyncClient(transport=transport))
    with pytest.raises(UserError) as caught:
        asyncio.run(loadgen._level("http://x/predict", b"", 2, 0.0, None))
    assert str(caught.value) == (
        "concurrency 2: no request was sent in --duration 0 s (starting 2 clients took longer) "
        "(give a longer --duration, or fewer clients in --concurrency)"
    )
