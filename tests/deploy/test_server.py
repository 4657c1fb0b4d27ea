"""The inference server (dlperf.deploy.server) on a real socket: uvicorn in a thread,
tiny ONNX graphs built with onnx.helper, httpx as the client."""

from __future__ import annotations

import asyncio
import io
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import uvicorn
from fastapi import FastAPI
from onnx import TensorProto, helper, numpy_helper
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from dlperf.cli.serve import _listen
from dlperf.deploy import meta, runtime
from dlperf.deploy.batcher import Batcher, QueueFull
from dlperf.deploy.images import image_array
from dlperf.deploy.served_model import ServedModel
from dlperf.deploy.server import create_app
from dlperf.errors import UserError

LABELS = ["cat", "dog", "bird"]
SIZE = 8  # classifier input: 3 x 8 x 8
DET_SIZE = (20, 40)  # detector input (height, width)
DET_BOXES = [[4, 2, 20, 10], [0, 0, 40, 20], [10, 5, 30, 15]]
DET_SCORES = [0.9, 0.3, 0.6]
DET_LABELS = [1, 2, 5]
OPSET = [helper.make_opsetid("", 17)]  # IR 10: what every onnxruntime of recent years reads


def flat_classifier(
    path: Path,
    channels: int,
    classes: int,
    name: str,
    *,
    batch: int | str = "N",
    std: float = 0.5,
    labels: list[str] | None = None,
    seed: int = 0,
    bias: list[float] | None = None,
    model_kwargs: dict[str, Any] | None = None,
) -> Path:
    """input [batch, channels, 8, 8] -> Flatten -> Gemm -> logits [batch, classes] (weights
    drawn from `seed`, `bias` or zeros), plus dlperf's metadata naming model `name` (pixels
    normalized by mean 0.5 and `std`): written with onnx's helper, as export would write a
    flat classifier, in a fraction of an export's time."""
    weight = np.random.default_rng(seed).normal(size=(channels * SIZE * SIZE, classes))
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("Gemm", ["flat", "W", "B"], ["logits"]),
        ],
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, channels, SIZE, SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        [
            numpy_helper.from_array(weight.astype(np.float32), "W"),
            numpy_helper.from_array(np.array(bias or [0.0] * classes, np.float32), "B"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta.Preprocess((SIZE, SIZE), channels, (0.5,) * channels, (std,) * channels)
    shape = (channels, SIZE, SIZE)
    kept = meta.ModelMeta(
        "classification", name, "input", shape, pre, labels or [], model_kwargs=model_kwargs
    )
    meta.save(path, kept)
    return path


def tiny_classifier(path: Path, batch: int | str = "N") -> Path:
    """input [batch, 3, 8, 8] -> Flatten -> Gemm -> logits [batch, 3], plus dlperf metadata."""
    return flat_classifier(
        path, 3, 3, "tiny", batch=batch, std=0.25, labels=LABELS, bias=[0.1, -0.2, 0.3]
    )


def plain_model(path: Path, batch: int | str = "N") -> Path:
    """x FP32 [batch, 4] -> y = x @ W FP32 [batch, 2], n = ArgMax INT64 [batch]: an ONNX file
    of someone else's, without dlperf's metadata."""
    weight = np.arange(8, dtype=np.float32).reshape(4, 2) / 8
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["y"]),
            helper.make_node("ArgMax", ["y"], ["n"], axis=1, keepdims=0),
        ],
        "plain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2]),
            helper.make_tensor_value_info("n", TensorProto.INT64, [batch]),
        ],
        [numpy_helper.from_array(weight, "W")],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    return path


def tiny_detector(path: Path) -> Path:
    """The detector signature: image [1, 3, H, W] -> boxes [N, 4], scores [N], labels [N];
    fixed boxes, scores that still depend on the image (plus 0 x its mean)."""
    height, width = DET_SIZE
    consts = [
        numpy_helper.from_array(np.array(DET_BOXES, np.float32), "B"),
        numpy_helper.from_array(np.array(DET_SCORES, np.float32), "S"),
        numpy_helper.from_array(np.array(DET_LABELS, np.int64), "L"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["image"], ["mean"], keepdims=0),
            helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
            helper.make_node("Add", ["S", "nothing"], ["scores"]),
            helper.make_node("Identity", ["B"], ["boxes"]),
            helper.make_node("Identity", ["L"], ["labels"]),
        ],
        "tinydet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, height, width])],
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["n", 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("labels", TensorProto.INT64, ["n"]),
        ],
        consts,
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta.Preprocess(DET_SIZE, 3, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    labels = ["background", "circle", "square"]
    meta.save(path, meta.ModelMeta("detection", "tinydet", "image", (3, *DET_SIZE), pre, labels))
    return path


def block_detector(path: Path) -> Path:
    """A detector that finds the white: image [1, 3, 20, 40] -> one box around the pixels
    over 0.5 (x1, y1 = the first such column and row, x2, y2 = one past the last), score
    0.9, label 1. Its box is where the model saw the object, so the test sees the input's
    geometry."""
    height, width = DET_SIZE
    consts = [
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([1, 4], np.int64), "shape"),
        numpy_helper.from_array(np.array([0.9], np.float32), "S"),
        numpy_helper.from_array(np.array([1], np.int64), "L"),
    ]
    nodes = []
    for axis, keep in (("x", [0, 1, 2]), ("y", [0, 1, 3])):
        nodes += [
            helper.make_node("ReduceMax", ["image"], [f"{axis}max"], axes=keep, keepdims=0),
            helper.make_node("Greater", [f"{axis}max", "half"], [f"{axis}on"]),
            helper.make_node("Cast", [f"{axis}on"], [f"{axis}mask"], to=TensorProto.FLOAT),
            helper.make_node("ArgMax", [f"{axis}mask"], [f"{axis}1"], axis=0),
            helper.make_node(
                "ArgMax", [f"{axis}mask"], [f"{axis}last"], axis=0, select_last_index=1
            ),
            helper.make_node("Add", [f"{axis}last", "one"], [f"{axis}2"]),
        ]
    nodes += [
        helper.make_node("Concat", ["x1", "y1", "x2", "y2"], ["corners"], axis=0),
        helper.make_node("Cast", ["corners"], ["flat"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["flat", "shape"], ["boxes"]),
        helper.make_node("Identity", ["S"], ["scores"]),
        helper.make_node("Identity", ["L"], ["labels"]),
    ]
    graph = helper.make_graph(
        nodes,
        "blockdet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, height, width])],
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("labels", TensorProto.INT64, [1]),
        ],
        consts,
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta.Preprocess(DET_SIZE, 3, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    labels = ["background", "block"]
    meta.save(path, meta.ModelMeta("detection", "blockdet", "image", (3, *DET_SIZE), pre, labels))
    return path


def block_png() -> bytes:
    """80 wide, 10 high, black with a white block at x 40-50: twice the detector's aspect
    ratio, so a crop and a stretch put the block in different places."""
    pixels = np.zeros((10, 80, 3), np.uint8)
    pixels[:, 40:50] = 255
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def png(width: int = 16, height: int = 12, seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def wait_ready(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} not ready within {timeout_s} s")


@contextmanager
def running(app: FastAPI) -> Iterator[str]:
    """Serve `app` on a free 127.0.0.1 port from a thread; stopped on exit."""
    sock = _listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        wait_ready(url)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()
    assert not thread.is_alive(), "server thread did not stop"


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the /metrics samples called `name` whose labels include `labels`."""
    values = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    ]
    assert values, f"{name} {labels} not in /metrics"
    return sum(values)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "tiny": tiny_classifier(root / "tiny.onnx"),
        "fixed": tiny_classifier(root / "fixed.onnx", batch=1),
        "det": tiny_detector(root / "det.onnx"),
        "block": block_detector(root / "block.onnx"),
    }


@pytest.fixture(scope="module")
def server(models: dict[str, Path]) -> Iterator[str]:
    """The classifier, batched up to 32 rows within 100 ms, bodies up to 64 KiB."""
    app = create_app(
        models["tiny"], max_batch=32, max_wait_ms=100, threads=1, max_body_bytes=64 * 2**10
    )
    with running(app) as url:
        yield url


def reference(models: dict[str, Path], x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(models["tiny"]), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": x})[0]


def test_health_and_metadata(server: str) -> None:
    assert httpx.get(f"{server}/v2/health/live").json() == {"live": True}
    assert httpx.get(f"{server}/v2/health/ready").json() == {"ready": True}
    doc = httpx.get(f"{server}/v2/models/tiny").json()
    assert doc["name"] == "tiny" and doc["platform"] == "onnxruntime_onnx"
    assert doc["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 8, 8]}]
    assert doc["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 3]}]
    assert doc["preprocessing"] == {
        "size": [8, 8],
        "channels": 3,
        "mean": [0.5, 0.5, 0.5],
        "std": [0.25, 0.25, 0.25],
    }
    assert doc["labels"] == LABELS and doc["task"] == "classification"
    assert doc["batching"]["dynamic"] is True and doc["batching"]["max_batch"] == 32
    missing = httpx.get(f"{server}/v2/models/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


def test_predict_png_upload_and_raw_body(server: str, models: dict[str, Path]) -> None:
    image = png(16, 12)
    upload = httpx.post(f"{server}/predict?topk=2", files={"file": ("x.png", image, "image/png")})
    assert upload.status_code == 200, upload.text
    predictions = upload.json()["predictions"]
    assert len(predictions) == 2 and predictions[0]["label"] in LABELS
    # Same preprocessing, same session: the answer of ONNX Runtime run by hand.
    pre = meta.load(models["tiny"]).preprocess
    x = runtime.to_array(runtime.decode(image), pre)[None]
    expected = runtime.topk(reference(models, x), 2, LABELS)[0]
    assert [p["label"] for p in predictions] == [p["label"] for p in expected]
    assert predictions[0]["probability"] == pytest.approx(expected[0]["probability"], rel=1e-5)
    raw = httpx.post(f"{server}/predict", content=image, headers={"content-type": "image/png"})
    assert raw.status_code == 200 and len(raw.json()["predictions"]) == 3  # topk capped at 3
    assert raw.json()["predictions"][0]["label"] == predictions[0]["label"]


def test_bad_images_and_queries_are_400(server: str) -> None:
    garbage = httpx.post(f"{server}/predict", content=b"this is not an image at all")
    assert garbage.status_code == 400 and "not a readable image" in garbage.json()["error"]
    empty = httpx.post(f"{server}/predict", content=b"")
    assert empty.status_code == 400 and "no image" in empty.json()["error"]
    no_file = httpx.post(f"{server}/predict", data={"x": "1"}, files={"y": ("y.txt", b"")})
    assert no_file.status_code == 400
    bad_topk = httpx.post(f"{server}/predict?topk=0", content=png())
    assert bad_topk.status_code == 400 and "topk" in bad_topk.json()["error"]
    bomb = httpx.post(f"{server}/predict", content=png_header(20000, 10000))
    assert bomb.status_code == 413 and "too large to decode" in bomb.json()["error"]


def test_an_image_pillow_cannot_convert_is_bad_input() -> None:
    """A grey TIFF with premultiplied alpha decodes as mode La, which Pillow cannot convert:
    the TIFF tag ExtraSamples (338) set from 2 (unassociated, as Pillow writes it) to 1."""
    la = io.BytesIO()
    Image.fromarray(np.full((4, 4, 2), 100, np.uint8), "LA").save(la, format="TIFF")
    unassociated = b"\x52\x01\x03\x00\x01\x00\x00\x00\x02\x00"
    premultiplied = la.getvalue().replace(unassociated, unassociated[:-2] + b"\x01\x00")
    gray = meta.Preprocess((4, 4), 1, (0.0,), (1.0,))
    model = meta.ModelMeta("classification", "gray", "input", (1, 4, 4), gray, ["a"])
    with pytest.raises(UserError, match=r"^the uploaded file: cannot decode image mode La"):
        image_array(premultiplied, model, max_pixels=100)


def png_header(width: int, height: int) -> bytes:
    """65 bytes that claim a width x height grayscale PNG (a decompression bomb's header)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b""))
        + chunk(b"IEND", b"")
    )


def test_oversized_body_413_declared_and_streamed(server: str) -> None:
    big = b"\0" * (100 * 2**10)
    declared = httpx.post(f"{server}/predict", content=big)
    assert declared.status_code == 413 and "limit" in declared.json()["error"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server must count
        for _ in range(10):
            yield b"\0" * (10 * 2**10)

    streamed = httpx.post(f"{server}/v2/models/tiny/infer", content=chunks())
    assert streamed.status_code == 413


def infer_body(x: np.ndarray, **changes: Any) -> dict[str, Any]:
    tensor = {
        "name": "input",
        "shape": list(x.shape),
        "datatype": "FP32",
        "data": x.ravel().tolist(),
    }
    tensor.update(changes)
    return {"id": "r1", "inputs": [tensor]}


def test_kserve_infer_matches_onnxruntime(server: str, models: dict[str, Path]) -> None:
    x = np.random.default_rng(1).normal(size=(2, 3, SIZE, SIZE)).astype(np.float32)
    r = httpx.post(f"{server}/v2/models/tiny/infer", json=infer_body(x))
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["model_name"] == "tiny" and doc["id"] == "r1"
    (out,) = doc["outputs"]
    assert out["name"] == "logits" and out["shape"] == [2, 3] and out["datatype"] == "FP32"
    got = np.array(out["data"], np.float32).reshape(2, 3)
    np.testing.assert_allclose(got, reference(models, x), rtol=1e-5, atol=1e-6)
    nested = httpx.post(f"{server}/v2/models/tiny/infer", json=infer_body(x, data=x.tolist()))
    assert nested.status_code == 200 and nested.json()["outputs"][0]["data"] == out["data"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "malformed request"),
        (b'{"inputs": []}', "malformed request: inputs"),
        (b'{"inputs": [{"name": "input"}]}', "malformed request: inputs.0.shape"),
        ({"shape": [1, 3, 4, 4]}, "shape [1, 3, 4, 4]; expected [-1, 3, 8, 8]"),
        ({"shape": [1, 3, 8]}, "shape"),
        ({"datatype": "INT64"}, "datatype INT64; expected FP32"),
        ({"data": [1.0, 2.0]}, "has 2 values; shape [1, 3, 8, 8] needs 192"),
        ({"data": ["a"] * 192}, "data must be numbers"),
        ({"data": [[1.0] * 96, [1.0] * 95]}, "not a flat or evenly nested list"),
        ({"data": None}, "has no data and no binary_data_size"),
        ({"name": "pixels"}, "unknown input 'pixels'"),
    ],
)
def test_kserve_bad_requests_are_400(server: str, body: Any, message: str) -> None:
    url = f"{server}/v2/models/tiny/infer"
    if isinstance(body, bytes):
        r = httpx.post(url, content=body, headers={"content-type": "application/json"})
    else:
        r = httpx.post(url, json=infer_body(np.zeros((1, 3, SIZE, SIZE), np.float32), **body))
    assert r.status_code == 400
    assert message in r.json()["error"]


def test_concurrent_requests_are_batched(server: str) -> None:
    before = httpx.get(f"{server}/metrics").text
    image = png(seed=3)

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=server, timeout=30) as client:
            replies = await asyncio.gather(
                *(client.post("/predict", content=image) for _ in range(12))
            )
        return [r.status_code for r in replies]

    assert asyncio.run(burst()) == [200] * 12
    after = httpx.get(f"{server}/metrics").text
    batches = metric(after, "dlperf_batch_size_count") - metric(before, "dlperf_batch_size_count")
    rows = metric(after, "dlperf_batch_size_sum") - metric(before, "dlperf_batch_size_sum")
    singles = metric(after, "dlperf_batch_size_bucket", le="1.0") - metric(
        before, "dlperf_batch_size_bucket", le="1.0"
    )
    assert rows == 12
    assert batches < 12 and singles < batches  # some batch held more than one request
    assert metric(after, "dlperf_requests_total", route="/predict", status="200") >= 12
    assert metric(after, "dlperf_request_duration_seconds_count", route="/predict") >= 12
    assert metric(after, "dlperf_queue_depth") == 0


def test_metrics_are_prometheus_with_process_metrics(server: str, models: dict[str, Path]) -> None:
    httpx.post(f"{server}/predict", content=b"garbage")
    text = httpx.get(f"{server}/metrics").text
    assert metric(text, "dlperf_errors_total", route="/predict", kind="bad_request") >= 1
    assert metric(text, "dlperf_requests_total", route="/predict", status="400") >= 1
    types = {family.name: family.type for family in text_string_to_metric_families(text)}
    assert types["dlperf_requests"] == "counter" and types["dlperf_queue_depth"] == "gauge"
    assert types["dlperf_request_duration_seconds"] == types["dlperf_batch_size"] == "histogram"
    assert metric(text, "process_resident_memory_bytes") > 2**20
    assert metric(text, "python_info") == 1
    # Every app has its own registry: a second server in this process starts from zero.
    with running(create_app(models["tiny"], threads=1)) as other:
        fresh = httpx.get(f"{other}/metrics").text
    assert "dlperf_errors_total{" not in fresh and metric(fresh, "process_open_fds") > 0


def test_request_metrics_carry_the_model(server: str) -> None:
    """Per-request series have a `model` label, so several servers' requests keep apart."""
    httpx.post(f"{server}/predict", content=png())
    httpx.post(f"{server}/predict", content=b"garbage")
    text = httpx.get(f"{server}/metrics").text
    route = {"model": "tiny", "route": "/predict"}
    assert metric(text, "dlperf_requests_total", **route, status="200") >= 1
    assert metric(text, "dlperf_errors_total", **route, kind="bad_request") >= 1
    assert metric(text, "dlperf_request_duration_seconds_count", **route) >= 2


def test_full_queue_is_503_with_retry_after(models: dict[str, Path]) -> None:
    # One waiting request fills the queue; the first batch waits 1 s for a second row.
    app = create_app(models["tiny"], max_batch=2, max_wait_ms=1000, queue=1, threads=1)
    image = png()

    async def burst(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            return await asyncio.gather(*(client.post("/predict", content=image) for _ in range(4)))

    with running(app) as url:
        replies = asyncio.run(burst(url))
        codes = sorted(r.status_code for r in replies)
        assert codes[0] == 200 and 503 in codes, codes
        refused = next(r for r in replies if r.status_code == 503)
        assert refused.headers["retry-after"] == "1"
        assert "queue is full" in refused.json()["error"]
        text = httpx.get(f"{url}/metrics").text
        assert metric(text, "dlperf_errors_total", route="/predict", kind="overloaded") >= 1


def test_fixed_batch_model_runs_one_at_a_time(models: dict[str, Path]) -> None:
    served = ServedModel(models["fixed"], threads=1)
    assert not served.batchable and "one at a time" in served.note
    x = np.ones((1, 3, SIZE, SIZE), np.float32)
    outs = served.run([{"input": x}, {"input": 2 * x}])
    assert [o["logits"].shape for o in outs] == [(1, 3), (1, 3)]
    np.testing.assert_allclose(outs[1]["logits"], reference(models, 2 * x), rtol=1e-5)


def test_a_plain_onnx_file_with_a_fixed_first_dimension_runs_one_at_a_time(
    tmp_path: Path,
) -> None:
    served = ServedModel(plain_model(tmp_path / "plain.onnx", batch=2), threads=1)
    assert served.meta is None and not served.batchable
    x = np.ones((2, 4), np.float32)
    (outputs,) = served.run([{"x": x}])
    np.testing.assert_allclose(outputs["y"], x @ (np.arange(8).reshape(4, 2) / 8))


def test_detector_boxes_scaled_to_the_image(models: dict[str, Path]) -> None:
    app = create_app(models["det"], max_batch=32, max_wait_ms=5, threads=1)
    # Model input 40 x 20: x scaled by 2, y by 3. The upload is stretched to the input (as
    # fine-tuning and `detect eval` resize an image), so scaling x and y apart is the exact
    # way back; this detector's boxes are fixed, so the geometry of what it saw is tested
    # in test_a_detector_sees_the_upload_stretched_and_its_box_lands_on_the_object.
    image = png(width=80, height=60)
    with running(app) as url:
        doc = httpx.get(f"{url}/v2/models/det").json()
        assert doc["batching"]["max_batch"] == 1 and doc["batching"]["dynamic"] is False
        r = httpx.post(f"{url}/predict", content=image)
        assert r.status_code == 200, r.text
        found = r.json()
        assert found["image_size"] == [80, 60]
        assert found["detections"] == [
            {
                "box": [8.0, 6.0, 40.0, 30.0],
                "score": pytest.approx(0.9),
                "index": 1,
                "label": "circle",
            },
            {
                "box": [20.0, 15.0, 60.0, 45.0],
                "score": pytest.approx(0.6),
                "index": 5,
                "label": "5",
            },
        ]
        low = httpx.post(f"{url}/predict?score_threshold=0.2", content=image).json()
        assert len(low["detections"]) == 3
        assert low["detections"][1]["box"] == [0.0, 0.0, 80.0, 60.0]
        assert low["detections"][1]["label"] == "square"
        x = np.zeros((1, 3, *DET_SIZE), np.float32)
        r = httpx.post(f"{url}/v2/models/det/infer", json=infer_body(x, name="image"))
        by_name = {o["name"]: o for o in r.json()["outputs"]}
        assert by_name["labels"]["datatype"] == "INT64" and by_name["labels"]["data"] == DET_LABELS
        assert by_name["boxes"]["shape"] == [3, 4]


def test_a_detector_sees_the_upload_stretched_and_its_box_lands_on_the_object(
    models: dict[str, Path],
) -> None:
    """Training and `detect eval` hand the detector the whole image, which its transform
    stretches to the input size (torchvision's fixed_size, no crop), and map its boxes back
    by the same stretch. /predict centre-cropped instead and then scaled back as if it had
    stretched: the block at x 40-50 came back at [40, 0, 80, 10]."""
    app = create_app(models["block"], max_batch=1, max_wait_ms=5, threads=1)
    with running(app) as url:
        r = httpx.post(f"{url}/predict", content=block_png())
        assert r.status_code == 200, r.text
        found = r.json()
    assert found["image_size"] == [80, 10]
    # The model saw the block at [20, 0, 25, 20] of its 40 x 20 input: x / 2, y x 2.
    assert found["detections"] == [
        {"box": [40.0, 0.0, 50.0, 10.0], "score": pytest.approx(0.9), "index": 1, "label": "block"}
    ]


def lookup_model(path: Path) -> Path:
    """ids INT64 [N] -> rows FP32 [N, 2], rows of a 4-row table: an id past 3 is refused by
    ONNX Runtime itself, at run time."""
    table = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(4, 2), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0)],
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["N", 2])],
        [table],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    pre = meta.Preprocess((1, 1), 1, (0.0,), (1.0,))
    meta.save(path, meta.ModelMeta("classification", "lookup", "ids", (), pre, []))
    return path


def test_a_request_the_model_refuses_is_400_and_fails_alone(tmp_path: Path) -> None:
    # Both requests wait up to 1 s for company, so they share a batch that ONNX Runtime
    # refuses; run again one by one, only the bad one fails (the batcher's part is
    # test_a_failed_batch_runs_again_request_by_request).
    app = create_app(lookup_model(tmp_path / "lookup.onnx"), max_wait_ms=1000, threads=1)

    def body(ids: list[int]) -> dict[str, Any]:
        return {"inputs": [{"name": "ids", "shape": [len(ids)], "datatype": "INT64", "data": ids}]}

    async def pair(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            return await asyncio.gather(
                client.post("/v2/models/lookup/infer", json=body([1, 3])),
                client.post("/v2/models/lookup/infer", json=body([7])),
            )

    with running(app) as url:
        good, bad = asyncio.run(pair(url))
        text = httpx.get(f"{url}/metrics").text
    assert good.status_code == 200 and good.json()["outputs"][0]["data"] == [2, 3, 6, 7]
    assert bad.status_code == 400
    assert "the model refused the input" in bad.json()["error"] and "idx=7" in bad.json()["error"]
    assert metric(text, "dlperf_requests_total", status="400") == 1


def test_batcher_respects_max_batch_and_drains_on_close() -> None:
    calls: list[list[int]] = []

    def run(payloads: list[int]) -> list[int]:
        calls.append(payloads)
        return [2 * p for p in payloads]

    async def scenario() -> list[int]:
        # A 30 s wait that close() must cut short: queued requests are served, not dropped.
        batcher = Batcher(run, max_batch=4, max_wait_s=30, queue_size=8)
        batcher.start()
        rows = [3, 2, 2, 5]
        waiting = [asyncio.ensure_future(batcher.submit(r, rows=r)) for r in rows]
        await asyncio.sleep(0)
        assert batcher.depth == 4
        await batcher.close()
        with pytest.raises(QueueFull, match="shutting down"):
            await batcher.submit(1)
        return [w.result() for w in waiting]

    assert asyncio.run(asyncio.wait_for(scenario(), timeout=20)) == [6, 4, 4, 10]
    assert calls == [[3], [2, 2], [5]]  # 3+2 > 4 rows; a 5-row request runs alone


def test_a_failed_batch_runs_again_request_by_request() -> None:
    calls: list[list[int]] = []

    def run(payloads: list[int]) -> list[int]:
        calls.append(payloads)
        if 13 in payloads:
            raise ValueError("13 refused")
        return [2 * p for p in payloads]

    async def scenario() -> list[Any]:
        batcher = Batcher(run, max_batch=4, max_wait_s=30, queue_size=8)
        batcher.start()
        waiting = [asyncio.ensure_future(batcher.submit(p)) for p in (1, 13, 2)]
        await asyncio.sleep(0)
        await batcher.close()  # drains the three as one batch at once
        return await asyncio.gather(*waiting, return_exceptions=True)

    first, refused, last = asyncio.run(asyncio.wait_for(scenario(), timeout=20))
    assert (first, last) == (2, 4) and str(refused) == "13 refused"
    assert calls == [[1, 13, 2], [1], [13], [2]]


def test_a_failing_model_call_is_500_for_its_batch(models: dict[str, Path]) -> None:
    class Broken:
        def run(self, names: Any, feeds: Any) -> Any:
            raise RuntimeError("out of memory")

    app = create_app(models["tiny"], max_batch=8, max_wait_ms=200, threads=1)
    app.state.model.session = Broken()
    image = png()

    async def burst(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            return await asyncio.gather(*(client.post("/predict", content=image) for _ in range(3)))

    with running(app) as url:
        replies = asyncio.run(burst(url))
        assert [r.status_code for r in replies] == [500] * 3
        assert replies[0].json() == {"error": "internal error: RuntimeError: out of memory"}
        text = httpx.get(f"{url}/metrics").text
        assert metric(text, "dlperf_errors_total", route="/predict", kind="server_error") == 3
        assert httpx.get(f"{url}/v2/health/ready").status_code == 200  # the worker lives on
