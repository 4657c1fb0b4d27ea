"""Break-it round 31 (P4), serve.

C1: Content-Encoding was read on /v2 infer only, only its first field, and case-sensitively:
a gzip body on /predict was blamed as "not a readable image", `IDENTITY` (a plain body) was
refused 415, and `identity` then `gzip` (gzip applied) was read as malformed JSON.
C2: JSON data of the wrong kind was taken when mixed with values of the right kind: numpy
promoted `["abc", 5]` to strings ("5"), `[true, 2]` to integers and `[true, 0.5]` to floats, while
each wrong value alone was refused.

Real servers on 127.0.0.1 (uvicorn in a thread, as `dlperf serve` runs it).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import onnx
import pytest
from onnx import TensorProto, helper

from dlperf.deploy.server import create_app
from tests.deploy.test_server import OPSET, png, running, tiny_classifier

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
