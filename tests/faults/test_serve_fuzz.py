"""Fuzz the request bodies of a real `dlperf serve` (a subprocess, over loopback HTTP).

Over a thousand bodies for `POST /predict` and `POST /v2/models/tiny/infer`: random bytes
under random content types, truncated and bit-flipped PNGs, PNG, JPEG and GIF headers that
declare huge images, real decompression bombs, JSON of every wrong shape and datatype,
shape/data mismatches, and binary tensor requests with their framing broken (header
lengths past the body, negative or huge binary_data_size, bytes left over or missing).
No answer may be a 5xx, neither one the client sees nor one the server counts; afterwards
the server must still answer correctly and its resident memory must not have run away.
Hypothesis runs derandomized (a fixed seed, no example database), so every run sends the
same requests.
"""

from __future__ import annotations

import io
import json
import math
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from dlperf.deploy import meta, runtime
from tests.cli.test_serve import serve
from tests.deploy.test_server import LABELS, SIZE, metric, png, png_header, tiny_classifier

MAX_PIXELS = 4_000_000  # the server's pixel cap in this test
MAX_BODY = 256 * 2**10
INFER = "/v2/models/tiny/infer"
HEADER_LENGTH = "Inference-Header-Content-Length"
RSS_GROWTH_LIMIT = 200 * 2**20
DATATYPES = ["FP32", "FP16", "FP64", "INT64", "INT32", "INT8", "UINT8", "BOOL", "BYTES"]


def fuzz(examples: int) -> Callable[[Any], Any]:
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@dataclass
class Target:
    """The server under fuzz, and every status it answered."""

    url: str
    client: httpx.Client
    model: Path
    session: Any  # the same model in ONNX Runtime, run here for the right answers
    statuses: Counter[int] = field(default_factory=Counter)
    baseline_rss: float = 0.0

    def post(
        self, path: str, body: bytes | Iterable[bytes], headers: dict[str, str] | None = None
    ) -> httpx.Response:
        r = self.client.post(path, content=body, headers=headers or {})
        self.statuses[r.status_code] += 1
        assert r.status_code < 500, f"{r.status_code} for {repr(body)[:200]}: {r.text[:300]}"
        return r

    def cases(self) -> int:
        return sum(self.statuses.values())

    def rss(self) -> float:
        return metric(self.client.get("/metrics").text, "process_resident_memory_bytes")

    def logits(self, x: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"input": x})[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("fuzz") / "tiny.onnx")


@pytest.fixture(scope="module")
def target(model: Path) -> Iterator[Target]:
    options = ["--max-wait-ms", "0", "--max-body-mb", str(MAX_BODY / 2**20),
               "--max-pixels", str(MAX_PIXELS)]  # fmt: skip
    with (
        serve(model, *options) as (url, _),
        httpx.Client(base_url=url, timeout=60, trust_env=False) as client,
    ):
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        server = Target(url, client, model, session)
        # Warm up every path once so that the memory baseline holds its one-time costs.
        assert server.post("/predict", png()).status_code == 200
        assert server.post("/predict", bomb(1900, 1900)).status_code == 200
        x = np.zeros((1, 3, SIZE, SIZE), np.float32)
        assert server.post(INFER, json_request(x)).status_code == 200
        server.baseline_rss = server.rss()
        yield server


# --- bodies ------------------------------------------------------------------------------------


def json_request(x: np.ndarray, **tensor: Any) -> bytes:
    doc = {"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}
    return json.dumps({"inputs": [{**doc, **tensor}]}).encode()


def binary_request(x: np.ndarray, size: Any, datatype: str) -> tuple[bytes, int]:
    """The JSON header, claiming binary_data_size `size`, followed by x's bytes."""
    tensor = {
        "name": "input",
        "shape": list(x.shape),
        "datatype": datatype,
        "parameters": {"binary_data_size": size},
    }
    header = json.dumps({"inputs": [tensor]}).encode()
    return header + x.tobytes(), len(header)


def bomb(width: int, height: int) -> bytes:
    """A real PNG of width x height black pixels: a few KB that decode to width * height bytes."""
    buffer = io.BytesIO()
    Image.new("L", (width, height)).save(buffer, format="PNG")
    return buffer.getvalue()


def jpeg_claiming(width: int, height: int) -> bytes:
    """A real 16x16 JPEG whose frame header (SOF0) says width x height."""
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 20, 30)).save(buffer, format="JPEG")
    data = bytearray(buffer.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def gif_claiming(width: int, height: int) -> bytes:
    """A real 4x4 GIF whose logical screen says width x height."""
    buffer = io.BytesIO()
    Image.new("P", (4, 4)).save(buffer, format="GIF")
    data = bytearray(buffer.getvalue())
    data[6:10] = struct.pack("<HH", width, height)
    return bytes(data)


SMALL_PNG = png(24, 20, seed=5)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=6),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


# --- the fuzz ----------------------------------------------------------------------------------


def server_statuses(target: Target) -> Counter[int]:
    """The statuses of all requests the server counted, by its /metrics."""
    text = target.client.get("/metrics").text
    counted: Counter[int] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dlperf_requests_total":
                counted[int(sample.labels["status"])] += int(sample.value)
    return counted


def test_random_bytes_under_any_content_type(target: Target) -> None:
    before = target.cases()
    content_types = [None, "image/png", "application/json", "application/octet-stream",
                     "multipart/form-data; boundary=xyz", "multipart/form-data",
                     "application/x-www-form-urlencoded"]  # fmt: skip

    @fuzz(250)
    @given(
        body=st.binary(max_size=2048),
        path=st.sampled_from(["/predict", INFER]),
        content_type=st.sampled_from(content_types),
        header_length=st.one_of(st.none(), st.from_regex(r"[!-~]{1,8}", fullmatch=True)),
    )
    def case(body: bytes, path: str, content_type: str | None, header_length: str | None) -> None:
        headers = {"content-type": content_type} if content_type else {}
        if header_length is not None:
            headers[HEADER_LENGTH] = header_length
        target.post(path, body, headers)

    case()
    assert target.cases() - before == 250


def test_broken_and_oversized_images(target: Target) -> None:
    before = target.cases()
    dims = st.tuples(st.integers(1, 2**31 - 1), st.integers(1, 2**31 - 1))
    dims16 = st.tuples(st.integers(1, 65535), st.integers(1, 65535))

    @fuzz(300)
    @given(
        kind=st.sampled_from(["truncated", "flipped", "png", "jpeg", "gif"]),
        cut=st.integers(0, len(SMALL_PNG) - 1),
        flips=st.lists(
            st.tuples(st.integers(0, len(SMALL_PNG) - 1), st.integers(1, 255)),
            min_size=1,
            max_size=4,
        ),
        size=dims,
        size16=dims16,
    )
    def case(
        kind: str,
        cut: int,
        flips: list[tuple[int, int]],
        size: tuple[int, int],
        size16: tuple[int, int],
    ) -> None:
        if kind == "truncated":  # without its IEND chunk a PNG may still decode
            assert target.post("/predict", SMALL_PNG[:cut]).status_code in (200, 400)
            return
        if kind == "flipped":
            data = bytearray(SMALL_PNG)
            for at, bits in flips:
                data[at] ^= bits
            target.post("/predict", bytes(data))
            return
        build = {"png": png_header, "jpeg": jpeg_claiming, "gif": gif_claiming}[kind]
        width, height = size if kind == "png" else size16
        r = target.post("/predict", build(width, height))
        if width * height > MAX_PIXELS:
            assert r.status_code == 413 and "pixels" in r.json()["error"], r.text
        else:
            assert r.status_code in (200, 400), r.text

    case()
    assert target.cases() - before == 300


@st.composite
def infer_bodies(draw: st.DrawFn) -> bytes:
    """Inference requests near the valid one: each part right, wrong or missing."""
    if draw(st.integers(0, 9)) == 0:
        return json.dumps(draw(json_values)).encode()
    shape = draw(
        st.one_of(
            st.sampled_from([[1, 3, SIZE, SIZE], [2, 3, SIZE, SIZE]]),
            st.lists(st.integers(-3, 2**65), max_size=6),
        )
    )
    count = math.prod(shape) if all(0 <= s <= 4096 for s in shape) else None
    seed = draw(st.integers(0, 2**32 - 1))
    values = np.random.default_rng(seed).normal(size=min(count or 3, 4096))
    data = draw(st.sampled_from(["exact", "nested", "short", "long", "junk", "strings", "absent"]))
    tensor: dict[str, Any] = {
        "name": draw(st.sampled_from(["input", "input", "pixels", ""])),
        "shape": shape,
        "datatype": draw(st.sampled_from(["FP32", "FP32", *DATATYPES, "fp32", ""])),
    }
    if data == "exact":
        tensor["data"] = values.tolist()
    elif data == "nested" and count == values.size:
        tensor["data"] = values.reshape(shape).tolist()
    elif data in ("short", "long"):
        tensor["data"] = values[:-1].tolist() if data == "short" else [*values.tolist(), 0.5]
    elif data == "junk":
        tensor["data"] = draw(st.lists(json_values, max_size=6))
    elif data == "strings":
        tensor["data"] = [str(v) for v in values.tolist()]
    if draw(st.booleans()):
        keys = st.sampled_from(["binary_data_size", "shared_memory_region", "classification"])
        tensor["parameters"] = draw(st.dictionaries(keys, json_values, max_size=2))
    body: dict[str, Any] = {"inputs": [tensor] * draw(st.integers(0, 2))}
    if draw(st.booleans()):
        body["id"] = draw(json_scalars)
    if draw(st.booleans()):
        name = st.sampled_from(["logits", "logits", "probabilities"])
        output = st.fixed_dictionaries({"name": name}, optional={"parameters": json_values})
        body["outputs"] = draw(st.lists(output, max_size=2))
    if draw(st.booleans()):
        body["parameters"] = {"binary_data_output": draw(json_scalars)}
    text = json.dumps(body).encode()
    return text[: draw(st.integers(0, len(text)))] if draw(st.integers(0, 9)) == 0 else text


def test_wrong_json_requests(target: Target) -> None:
    before = target.cases()

    @fuzz(300)
    @given(body=infer_bodies())
    def case(body: bytes) -> None:
        r = target.post(INFER, body, {"content-type": "application/json"})
        assert r.status_code in (200, 400), r.text

    case()
    assert target.cases() - before == 300


def test_broken_binary_framing(target: Target) -> None:
    before = target.cases()
    sizes = st.one_of(st.integers(-(2**70), 2**70), json_scalars)

    @fuzz(250)
    @given(
        rows=st.integers(1, 3),
        seed=st.integers(0, 2**32 - 1),
        mutation=st.sampled_from(
            ["none", "length", "junk length", "size", "cut", "extra", "datatype", "no header"]
        ),
        delta=st.integers(-60, 60).filter(bool),
        size=sizes,
        datatype=st.sampled_from(DATATYPES[1:]),
    )
    def case(rows: int, seed: int, mutation: str, delta: int, size: Any, datatype: str) -> None:
        x = np.random.default_rng(seed).normal(size=(rows, 3, SIZE, SIZE)).astype(np.float32)
        body, length = binary_request(
            x,
            size=size if mutation == "size" else x.nbytes,
            datatype=datatype if mutation == "datatype" else "FP32",
        )
        header: str | None = str(length)
        if mutation == "length":
            header = str(length + delta)
        elif mutation == "junk length":
            header = str(-abs(delta)) if delta % 2 else f"{length}.0"
        elif mutation == "no header":
            header = None
        elif mutation == "cut":
            body = body[: len(body) - abs(delta)]
        elif mutation == "extra":
            body += bytes(abs(delta))
        r = target.post(INFER, body, {HEADER_LENGTH: header} if header is not None else {})
        if mutation == "none":
            assert r.status_code == 200, r.text
            logits = np.array(r.json()["outputs"][0]["data"], np.float32).reshape(rows, 3)
            np.testing.assert_allclose(logits, target.logits(x), rtol=1e-5, atol=1e-5)
        elif mutation != "size" or size != x.nbytes:
            assert r.status_code == 400, r.text

    case()
    assert target.cases() - before == 250


@pytest.mark.parametrize(
    ("path", "body", "headers", "status"),
    [
        ("/predict", bomb(5000, 5000), {}, 413),  # 25 MP of zeros in 24 KB
        ("/predict", png_header(65535, 65535), {}, 413),
        ("/predict", jpeg_claiming(65000, 65000), {}, 413),  # over Pillow's own cap too
        ("/predict", gif_claiming(65535, 65535), {}, 413),
        ("/predict", b"", {}, 400),
        ("/predict", b"\x89PNG\r\n\x1a\n", {}, 400),
        ("/predict", b"--xyz\r\n", {"content-type": "multipart/form-data; boundary=xyz"}, 400),
        ("/predict", b"x" * (MAX_BODY + 1), {}, 413),
        (INFER, b"", {}, 400),
        (INFER, b"null", {}, 400),
        (INFER, b'{"inputs": null}', {}, 400),
        (INFER, b"[" * 100_000, {}, 400),
        (INFER, b"\xff\xfe{}", {}, 400),
        (INFER, json_request(np.zeros((1, 3, SIZE, SIZE)), shape=[2**64, 3, SIZE, SIZE]), {}, 400),
        # Past float64 (2**70, finite FP32, is data: tests/deploy/test_protocol.py)
        (
            INFER,
            json_request(np.zeros(192), shape=[1, 3, SIZE, SIZE], data=[10**400] * 192),
            {},
            400,
        ),
        (INFER, json_request(np.zeros((1, 3, SIZE, SIZE)), datatype="BYTES"), {}, 400),
        (INFER, b"{}", {HEADER_LENGTH: "99999999999999999999"}, 400),
        (INFER, b"{}", {HEADER_LENGTH: "-1"}, 400),
        (INFER, b"{}", {"content-encoding": "deflate"}, 415),
        (INFER, b"{" * (MAX_BODY + 1), {}, 413),
    ],
)
def test_hand_written_cases(
    target: Target, path: str, body: bytes, headers: dict[str, str], status: int
) -> None:
    r = target.post(path, body, headers)
    assert r.status_code == status, r.text
    assert r.json()["error"]


def test_streamed_body_over_the_limit_is_413(target: Target) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the server must count
        for _ in range(5):
            yield b"\0" * (MAX_BODY // 4)

    assert target.post(INFER, chunks()).status_code == 413


def test_a_client_that_hangs_up_is_no_server_error(target: Target) -> None:
    """It sends half the body it announced and closes: 400 in the metrics (the request cut
    short by the client's end of sending, as nginx counts it), not 500. 499 before round 48,
    which took the end of sending for a close before the answer (fixer G4)."""
    before = server_statuses(target)[400]
    host, port = target.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"POST {INFER} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000\r\n\r\n".encode()
            + b'{"inputs": ['
        )
        sock.shutdown(socket.SHUT_WR)
    target.statuses[400] += 1
    deadline = time.monotonic() + 30
    while server_statuses(target)[400] == before:
        assert time.monotonic() < deadline, "the abandoned request was never counted"
        time.sleep(0.02)


def test_the_server_survives_the_fuzz(
    target: Target, record_testsuite_property: Callable[[str, object], None]
) -> None:
    """Last in this file: still right, no 5xx anywhere, memory bounded."""
    x = np.random.default_rng(11).normal(size=(2, 3, SIZE, SIZE)).astype(np.float32)
    r = target.post(INFER, json_request(x))
    got = np.array(r.json()["outputs"][0]["data"], np.float32).reshape(2, 3)
    np.testing.assert_allclose(got, target.logits(x), rtol=1e-5, atol=1e-5)
    image = png(16, 12, seed=2)
    x = runtime.to_array(runtime.decode(image), meta.load(target.model).preprocess)[None]
    expected = runtime.topk(target.logits(x), 3, LABELS)[0]
    answer = target.post("/predict?topk=3", image).json()["predictions"]
    assert [p["label"] for p in answer] == [p["label"] for p in expected]

    counted = server_statuses(target)
    growth = target.rss() - target.baseline_rss
    # The figures, for `pytest --junitxml`.
    record_testsuite_property("fuzz_cases", target.cases())
    record_testsuite_property("fuzz_statuses", dict(sorted(counted.items())))
    record_testsuite_property("rss_growth_mib", round(growth / 2**20, 1))
    assert not [status for status in counted if status >= 500], counted
    assert counted.keys() <= {200, 400, 413, 415, 499}
    assert growth < RSS_GROWTH_LIMIT, f"resident memory grew {growth / 2**20:.0f} MiB"
