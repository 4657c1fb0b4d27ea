"""Break-it round 38 (T1): serve's names and the framing of its requests.

C1: a model named "stats" (stats.onnx) was served without a word, and its metadata was lost:
GET /v2/models/stats is Triton's statistics of every model, so tritonclient's
get_model_metadata('stats') got {"model_stats": [...]} (no inputs, no outputs).
C2: serve's "serving NAME (...) on URL" line was split in two by a newline in the model's file
name (its stem is the model's name).
C3: a request with both Content-Length and Transfer-Encoding: chunked was answered and its
connection kept open, the body read as chunked: a front proxy that reads the Content-Length
sees the rest as the next request (the CL.TE desync). RFC 9112 §6.1: the server MUST close it.
C6: two Inference-Header-Content-Length fields of different values: the first was used
silently (200), or the JSON header blamed (400 "Invalid JSON ... column 7").

A real server on 127.0.0.1 (`dlperf serve`'s, uvicorn in a thread), raw sockets as clients.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from dlperf.deploy.served_model import ServedModel
from dlperf.deploy.server import create_app
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.deploy.test_server import infer_body, tiny_classifier
from tests.deploy.test_server_limits import answer, connect, read_until_closed, serving


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("bk38_serve") / "tiny.onnx")


@pytest.fixture(scope="module")
def url(tiny: Path) -> Iterator[str]:
    with serving(create_app(tiny, threads=1), 60.0, 32) as (address, _):
        yield address


def test_a_model_named_stats_is_refused_as_it_starts(tmp_path: Path) -> None:
    path = tiny_classifier(tmp_path / "stats.onnx")
    with pytest.raises(UserError) as e:
        ServedModel(path, threads=1)
    assert e.value.message == (
        f"{path}: a model named 'stats' cannot be served: GET /v2/models/stats is the "
        "statistics of every model (Triton's statistics extension), not this model's metadata"
    )
    assert (
        e.value.hint == "rename the file: the model's name is the file's name without its extension"
    )


def test_the_serving_line_is_one_line_whatever_the_file_is_called(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dlperf.cli.serve as serve_cli
    import dlperf.deploy.server as server

    path = tiny_classifier(tmp_path / "nl\nx\x1b[31m.onnx")
    loopback = socket.create_server(("127.0.0.1", 0))
    monkeypatch.setattr(serve_cli, "_listen", lambda host, port: loopback)
    monkeypatch.setattr(server, "serve_forever", lambda *args: None)
    result = cli("serve", str(path), "--threads", "1")
    loopback.close()
    assert result.code == 0, result
    said = result.err.splitlines()
    assert len(said) == 1, result.err
    assert said[0].startswith("serving nl\\nx\\x1b[31m (classification; requests are batched"), said


def smuggled(body: bytes, after: bytes) -> bytes:
    """A POST with Content-Length 5 and a chunked body, then `after` on the same connection."""
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = (
        b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    return head + chunked + after


def test_content_length_with_chunked_is_refused_and_the_connection_closed(url: str) -> None:
    """RFC 9112 §6.1: refused (400, as h11 refuses two Content-Lengths), and nothing after it
    on the connection is read: the pipelined GET gets no answer."""
    x = np.zeros((1, 3, 8, 8), np.float32)
    after = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
    with connect(url) as sock:
        sock.sendall(smuggled(json.dumps(infer_body(x)).encode(), after))
        received = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 400 "), received
    assert received.count(b"HTTP/1.1") == 1, received
    assert b"\r\nconnection: close\r\n" in received.lower(), received


def binary_request(lengths: tuple[int, ...]) -> tuple[bytes, int]:
    """A binary-tensor infer with an Inference-Header-Content-Length field per length, and
    the length of its JSON header."""
    x = np.ones((1, 3, 8, 8), np.float32)
    spec = {"name": "input", "shape": [1, 3, 8, 8], "datatype": "FP32"}
    spec["parameters"] = {"binary_data_size": x.nbytes}
    header = json.dumps({"inputs": [spec]}).encode()
    body = header + x.tobytes()
    fields = b"".join(b"Inference-Header-Content-Length: %d\r\n" % n for n in lengths)
    head = (
        b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n%s\r\n" % (len(body), fields)
    )
    return head + body, len(header)


def send(url: str, request: bytes) -> tuple[int, dict[str, str]]:
    with connect(url) as sock:
        sock.sendall(request)
        status, _, body = answer(read_until_closed(sock))
    return status, body


@pytest.mark.parametrize("order", ["right first", "wrong first"])
def test_two_different_header_lengths_are_refused_by_name(url: str, order: str) -> None:
    _, right = binary_request(())
    lengths = (right, 7) if order == "right first" else (7, right)
    status, body = send(url, binary_request(lengths)[0])
    first, second = lengths
    assert (status, body) == (
        400,
        {
            "error": f"Inference-Header-Content-Length is given twice, '{first}' and "
            f"'{second}'; send it once"
        },
    )


def test_the_same_header_length_twice_is_taken_as_one(url: str) -> None:
    _, right = binary_request(())
    status, body = send(url, binary_request((right, right))[0])
    assert status == 200, body
