"""Break-it round 31 (P4), serve.

C1: Content-Encoding was read on /v2 infer only, only its first field, and case-sensitively:
a gzip body on /predict was blamed as "not a readable image", `IDENTITY` (a plain body) was
refused 415, and `identity` then `gzip` (gzip applied) was read as malformed JSON.

Real servers on 127.0.0.1 (uvicorn in a thread, as `dlperf serve` runs it).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dlperf.deploy.server import create_app
from tests.deploy.test_server import png, running, tiny_classifier

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
