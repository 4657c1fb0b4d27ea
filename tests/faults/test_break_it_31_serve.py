"""Break-it round 31 (P4), serve.

C1: Content-Encoding was read on /v2 infer only, only its first field, and case-sensitively:
a gzip body on /predict was blamed as "not a readable image", `IDENTITY` (a plain body) was
refused 415, and `identity` then `gzip` (gzip applied) was read as malformed JSON.
C2: JSON data of the wrong kind was taken when mixed with values of the right kind: numpy
promoted `["abc", 5]` to strings ("5"), `[true, 2]` to integers and `[true, 0.5]` to floats, while
each wrong value alone was refused.
C4: a request the server had no memory for: ONNX Runtime's arena failing was a 500 carrying its
source path and an 80-line traceback on stderr; a MemoryError in h11's receive buffer was
asyncio's "Fatal error" traceback and a reset connection.

Real servers on 127.0.0.1 (uvicorn in a thread, as `dlperf serve` runs it).
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import onnx
import pytest
from onnx import TensorProto, helper
from onnxruntime.capi.onnxruntime_pybind11_state import Fail

from dlperf.deploy import routes
from dlperf.deploy.server import create_app
from tests.deploy.test_server import OPSET, metric, png, running, tiny_classifier
from tests.deploy.test_server_limits import answer, connect, read_until_closed, serving, wait_for

EVENT_S = 120.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("bk31_serve") / "tiny.onnx")


@pytest.fixture(scope="module")
def url(tiny: Path) -> Iterator[str]:
    with running(create_app(tiny, threads=1)) as address:
        yield address


def infer_json(rows: int = 1) -> bytes:
    data = [0.0] * (rows * 3 * 8 * 8)
    tensor = {"name": "input", "shape": [rows, 3, 8, 8], "datatype": "FP32", "data": data}
    return json.dumps({"inputs": [tensor]}).encode()


def post(url: str, path: str, body: bytes, headers: list[tuple[str, str]]) -> httpx.Response:
    return httpx.post(f"{url}{path}", content=body, headers=headers, timeout=EVENT_S)


# --- C1: Content-Encoding -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/predict", "/v2/models/tiny/infer", "/v2/repository/index"])
def test_a_compressed_body_is_415_on_every_route_that_reads_one(url: str, path: str) -> None:
    """/predict read a gzip body as the image (400 "not a readable image"), and a gzip label on
    a plain PNG was ignored; the repository index read it as JSON."""
    body = {"/predict": png(), "/v2/repository/index": b"{}"}.get(path, infer_json())
    response = post(url, path, gzip.compress(body), [("Content-Encoding", "gzip")])
    assert response.status_code == 415, response.text
    assert response.json() == {"error": "Content-Encoding gzip is not accepted; send it plain"}
    labelled = post(url, path, body, [("Content-Encoding", "br")])  # plain, labelled compressed
    assert labelled.status_code == 415, labelled.text


@pytest.mark.parametrize(
    "headers",
    [
        [("Content-Encoding", "IDENTITY")],
        [("Content-Encoding", "Identity ,identity")],
        [("Content-Encoding", "identity, identity")],
        [("Content-Encoding", "identity"), ("Content-Encoding", "identity")],
    ],
    ids=["upper case", "mixed case and spaces", "a list", "two fields"],
)
def test_identity_in_any_case_or_repeated_is_plain(url: str, headers: list[Any]) -> None:
    """Content codings are case-insensitive (RFC 9110 §8.4.1): `IDENTITY` was refused 415."""
    response = post(url, "/v2/models/tiny/infer", infer_json(), headers)
    assert response.status_code == 200, response.text
    image = post(url, "/predict", png(), headers)
    assert image.status_code == 200, image.text


@pytest.mark.parametrize(
    "headers",
    [
        [("Content-Encoding", "identity"), ("Content-Encoding", "GZIP")],
        [("Content-Encoding", "identity, gzip")],
    ],
    ids=["two fields", "one list"],
)
def test_gzip_after_identity_is_415_not_malformed_json(url: str, headers: list[Any]) -> None:
    """Repeated fields are one list (RFC 9110 §5.3): only the first was read, and the gzip body
    was then answered 400 "malformed request: Invalid JSON"."""
    response = post(url, "/v2/models/tiny/infer", gzip.compress(infer_json()), headers)
    assert response.status_code == 415, response.text
    assert response.json() == {"error": "Content-Encoding gzip is not accepted; send it plain"}


# --- C2: JSON data of mixed kinds -------------------------------------------------------------

KINDS = {"s": ("BYTES", TensorProto.STRING), "i": ("INT8", TensorProto.INT8)}
KINDS["f"] = ("FP32", TensorProto.FLOAT)
GOOD: dict[str, list[Any]] = {"s": ["abc", "5"], "i": [1, 2], "f": [1, 0.5]}


@pytest.fixture(scope="module")
def kinds_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A plain ONNX model that gives back its three [N, 2] inputs: BYTES s, INT8 i, FP32 f."""
    path = tmp_path_factory.mktemp("bk31_kinds") / "kinds.onnx"
    graph = helper.make_graph(
        [helper.make_node("Identity", [name], [f"{name}_out"]) for name in KINDS],
        "kinds",
        [helper.make_tensor_value_info(n, t, ["N", 2]) for n, (_, t) in KINDS.items()],
        [helper.make_tensor_value_info(f"{n}_out", t, ["N", 2]) for n, (_, t) in KINDS.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    with running(create_app(path, threads=1)) as address:
        yield address


def kinds_request(url: str, **data: list[Any]) -> httpx.Response:
    """Each input's data as given, else GOOD's; the shape is the data's."""
    inputs = []
    for name, (datatype, _) in KINDS.items():
        values = data.get(name, GOOD[name])
        shape = [len(values), 2] if isinstance(values[0], list) else [1, 2]
        inputs.append({"name": name, "shape": shape, "datatype": datatype, "data": values})
    body = json.dumps({"inputs": inputs}).encode()
    return post(url, "/v2/models/kinds/infer", body, [("Content-Type", "application/json")])


def test_data_of_the_right_kinds_is_served(kinds_url: str) -> None:
    response = kinds_request(kinds_url)
    assert response.status_code == 200, response.text
    got = {out["name"]: out["data"] for out in response.json()["outputs"]}
    assert got == {"s_out": ["abc", "5"], "i_out": [1, 2], "f_out": [1.0, 0.5]}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"s": ["abc", 5]}, "input 's' (BYTES): data must be strings; data[1] is 5"),
        ({"s": ["abc", True]}, "input 's' (BYTES): data must be strings; data[1] is true"),
        ({"i": [True, 2]}, "input 'i' (INT8): data must be integers; data[0] is true"),
        ({"f": [True, 0.5]}, "input 'f' (FP32): data must be numbers; data[0] is true"),
        (
            {"f": [[0.5, 1], [2, False]]},
            "input 'f' (FP32): data must be numbers; data[1][1] is false",
        ),
        ({"f": [0.5, None]}, "input 'f' (FP32): data must be numbers; data[1] is null"),
    ],
    ids=["number in BYTES", "bool in BYTES", "bool in INT8", "bool in FP32", "nested", "null"],
)
def test_a_value_of_the_wrong_kind_is_400_naming_it_whatever_else_the_data_holds(
    kinds_url: str, data: dict[str, list[Any]], message: str
) -> None:
    """Before: 200 with ["abc", "5"], ["abc", "True"], [1, 2] and [1.0, 0.5]."""
    response = kinds_request(kinds_url, **data)
    assert response.status_code == 400, response.text
    assert response.json() == {"error": message}


# --- C4: out of memory -------------------------------------------------------------------------

ARENA_FAILED = (
    "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Conv node. "
    "Name:'relu_1_nchwc' Status Message: /onnxruntime_src/onnxruntime/core/framework/"
    "bfc_arena.cc:360 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, "
    "onnxruntime::Stream*) Failed to allocate memory for requested buffer of size 122880000"
)


class Starved:
    """A session with no memory for more than `rows` rows: raises `error` as ONNX Runtime's
    arena does (a Fail), or as numpy or pybind11's std::bad_alloc do (MemoryError)."""

    def __init__(self, session: Any, rows: int, error: Exception) -> None:
        self.session, self.rows, self.error = session, rows, error

    def run(self, names: Any, feeds: dict[str, Any]) -> Any:
        if len(feeds["input"]) > self.rows:
            raise self.error
        return self.session.run(names, feeds)


def binary_request(rows: int) -> tuple[bytes, dict[str, str]]:
    data = bytes(rows * 3 * 8 * 8 * 4)
    tensor = {"name": "input", "shape": [rows, 3, 8, 8], "datatype": "FP32"}
    tensor["parameters"] = {"binary_data_size": len(data)}
    header = json.dumps({"inputs": [tensor]}).encode()
    return header + data, {"Inference-Header-Content-Length": str(len(header))}


def no_traceback(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    """What the server said on stderr and in its logs, checked to hold no traceback."""
    said = capfd.readouterr().err + caplog.text
    assert "Traceback" not in said and "Fatal error" not in said, said
    return said


@pytest.mark.parametrize(
    "error", [Fail(ARENA_FAILED), MemoryError()], ids=["ONNX Runtime's arena", "MemoryError"]
)
def test_a_request_the_model_has_no_memory_for_is_507_naming_its_rows(
    tiny: Path,
    error: Exception,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: 500 "internal error: Fail: [ONNXRuntimeError] ... /onnxruntime_src/...", and the
    traceback on stderr for each such request. The batch of two is run again request by
    request: only the large one fails."""
    app = create_app(tiny, threads=1, max_wait_ms=500)
    app.state.model.session = Starved(app.state.model.session, 100, error)

    async def pair(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=EVENT_S) as client:
            sent = [binary_request(rows) for rows in (300, 2)]
            return await asyncio.gather(
                *(client.post("/v2/models/tiny/infer", content=b, headers=h) for b, h in sent)
            )

    with running(app) as url:
        large, small = asyncio.run(pair(url))
        assert httpx.get(f"{url}/v2/health/ready").status_code == 200  # still serving
        text = httpx.get(f"{url}/metrics").text
    assert small.status_code == 200, small.text
    assert large.status_code == 507, large.text
    assert large.json() == {
        "error": "the model ran out of memory on a request of 300 rows (0.2 MiB of input) "
        "(send fewer rows per request, or give the server more memory)"
    }
    assert metric(text, "dlperf_errors_total", kind="out_of_memory") == 1
    said = no_traceback(capfd, caplog)
    assert said.count("ran out of memory") == 1  # one line for the operator


def test_a_route_out_of_memory_is_507_without_a_traceback(
    tiny: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A MemoryError in a route (reading the body, parsing it): before, 500 "internal error:
    MemoryError: " and Starlette's traceback."""

    def infer_request(body: bytes, length: str | None) -> Any:
        raise MemoryError

    monkeypatch.setattr(routes, "infer_request", infer_request)
    body, headers = binary_request(4)
    with running(create_app(tiny, threads=1)) as url:
        response = post(url, "/v2/models/tiny/infer", body, list(headers.items()))
    assert response.status_code == 507, response.text
    assert response.json() == {
        "error": f"the server ran out of memory on a request of {len(body):,} bytes "
        "(send less per request, or give the server more memory)"
    }
    no_traceback(capfd, caplog)


def test_a_body_the_server_cannot_hold_is_507_and_closed_not_reset(
    tiny: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """h11's receive buffer out of memory while the body arrives: before, asyncio's "Fatal
    error: protocol.data_received() call failed" with h11's traceback, and the connection reset
    under the client still sending. Now 507 marked `Connection: close`, the rest of the body
    read and dropped, and the server serves on."""
    import h11._receivebuffer

    extract = h11._receivebuffer.ReceiveBuffer.maybe_extract_at_most
    extracted = [0]

    def starved(self: Any, count: int) -> Any:
        """Out of memory once 1 MiB of the body is in."""
        if extracted[0] > 2**20:
            raise MemoryError
        data = extract(self, count)
        extracted[0] += len(data or b"")
        return data

    monkeypatch.setattr(h11._receivebuffer.ReceiveBuffer, "maybe_extract_at_most", starved)
    body = bytes(8 * 2**20)
    app = create_app(tiny, threads=1, max_body_bytes=64 * 2**20)
    with serving(app, read_timeout_s=60.0, max_connections=8) as (url, _):
        with connect(url) as c:
            c.sendall(
                b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body)
            )
            c.sendall(body)  # all of it: no reset while the client still sends
            status, headers, said = answer(read_until_closed(c))
        assert (status, headers["connection"]) == (507, "close"), said
        assert said == {
            "error": f"the server ran out of memory receiving a request of {len(body):,} bytes "
            "(send less per request, or give the server more memory)"
        }
        monkeypatch.undo()
        assert httpx.get(f"{url}/v2/health/ready", timeout=EVENT_S).status_code == 200

        def counted() -> bool:  # once the request's app has heard the connection close
            text = httpx.get(f"{url}/metrics", timeout=EVENT_S).text
            kind = "out_of_memory"
            return kind in text and metric(text, "dlperf_errors_total", kind=kind) == 1

        wait_for(counted, "the 507 to be counted")
    no_traceback(capfd, caplog)
