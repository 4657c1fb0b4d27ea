"""The Open Inference Protocol (KServe v2) side of the server, driven by a stock client:
tritonclient's HTTP `InferenceServerClient`, against a real server on 127.0.0.1, with
every answer compared to ONNX Runtime run directly on the same model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from dlperf.deploy import meta
from dlperf.deploy.server import create_app
from tests.deploy.test_server import OPSET, SIZE, plain_model, png, running, tiny_classifier

MIXED_INPUTS = {"a": "FP16", "b": "INT32", "u": "UINT8", "flag": "BOOL", "text": "BYTES"}


def mixed_model(path: Path) -> Path:
    """Five inputs of five datatypes -> total (FP64) = flag ? a + b + u : 0, half (FP16) =
    a * a, text_out (BYTES) = text; every tensor has a dynamic batch dimension."""
    pair = ["N", 2]
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["a"], ["a64"], to=TensorProto.DOUBLE),
            helper.make_node("Cast", ["b"], ["b64"], to=TensorProto.DOUBLE),
            helper.make_node("Cast", ["u"], ["u64"], to=TensorProto.DOUBLE),
            helper.make_node("Add", ["a64", "b64"], ["ab"]),
            helper.make_node("Add", ["ab", "u64"], ["abu"]),
            helper.make_node("Where", ["flag", "abu", "zero"], ["total"]),
            helper.make_node("Mul", ["a", "a"], ["half"]),
            helper.make_node("Identity", ["text"], ["text_out"]),
        ],
        "mixed",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT16, pair),
            helper.make_tensor_value_info("b", TensorProto.INT32, pair),
            helper.make_tensor_value_info("u", TensorProto.UINT8, pair),
            helper.make_tensor_value_info("flag", TensorProto.BOOL, pair),
            helper.make_tensor_value_info("text", TensorProto.STRING, ["N"]),
        ],
        [
            helper.make_tensor_value_info("total", TensorProto.DOUBLE, pair),
            helper.make_tensor_value_info("half", TensorProto.FLOAT16, pair),
            helper.make_tensor_value_info("text_out", TensorProto.STRING, ["N"]),
        ],
        [numpy_helper.from_array(np.array(0.0), "zero")],
    )
    onnx.save(helper.make_model(graph, opset_imports=OPSET, ir_version=10), path)
    # The server reads the task (anything but "detection" batches); the rest is for /predict.
    pre = meta.Preprocess((1, 1), 1, (0.0,), (1.0,))
    meta.save(path, meta.ModelMeta("classification", "mixed", "a", (2,), pre, []))
    return path


def mixed_inputs(rows: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "a": rng.normal(size=(rows, 2)).astype(np.float16),
        "b": rng.integers(-1000, 1000, (rows, 2), dtype=np.int32),
        "u": rng.integers(0, 256, (rows, 2), dtype=np.uint8),
        "flag": rng.random((rows, 2)) < 0.5,
        "text": np.array([f"row {i}: naïve ✓" for i in range(rows)], dtype=object),
    }


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kserve")
    return {"tiny": tiny_classifier(root / "tiny.onnx"), "mixed": mixed_model(root / "mixed.onnx")}


@pytest.fixture(scope="module")
def urls(models: dict[str, Path]) -> Iterator[dict[str, str]]:
    tiny = create_app(models["tiny"], max_batch=8, max_wait_ms=2, threads=1)
    mixed = create_app(models["mixed"], max_batch=8, max_wait_ms=2, threads=1)
    with running(tiny) as tiny_url, running(mixed) as mixed_url:
        yield {"tiny": tiny_url, "mixed": mixed_url}


@pytest.fixture(scope="module")
def client(urls: dict[str, str]) -> Iterator[triton.InferenceServerClient]:
    """The stock client for the classifier's server (it takes host:port, no scheme)."""
    stock = triton.InferenceServerClient(urls["tiny"].removeprefix("http://"))
    yield stock
    stock.close()


def ort_run(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def test_server_health_and_metadata(client: triton.InferenceServerClient) -> None:
    assert client.is_server_live() and client.is_server_ready()
    doc = client.get_server_metadata()
    assert doc["name"] == "dlperf" and doc["version"]
    assert "binary_tensor_data" in doc["extensions"]


def test_model_ready_and_metadata_with_and_without_version(
    client: triton.InferenceServerClient,
) -> None:
    assert client.is_model_ready("tiny") and client.is_model_ready("tiny", "1")
    assert not client.is_model_ready("tiny", "2") and not client.is_model_ready("nope")
    plain = client.get_model_metadata("tiny")
    assert client.get_model_metadata("tiny", model_version="1") == plain
    assert plain["versions"] == ["1"] and plain["platform"] == "onnxruntime_onnx"
    assert plain["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 3, 8, 8]}]
    with pytest.raises(InferenceServerException) as unknown:
        client.get_model_metadata("tiny", model_version="2")
    assert unknown.value.status() == "404"
    assert "unknown version '2' of model 'tiny'" in unknown.value.message()


@pytest.mark.parametrize("binary_in", [False, True])
@pytest.mark.parametrize("binary_out", [False, True])
def test_infer_matches_onnxruntime(
    client: triton.InferenceServerClient,
    models: dict[str, Path],
    binary_in: bool,
    binary_out: bool,
) -> None:
    x = np.random.default_rng(3).normal(size=(4, 3, SIZE, SIZE)).astype(np.float32)
    tensor = triton.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary_in)
    wanted = [triton.InferRequestedOutput("logits", binary_data=binary_out)]
    result = client.infer("tiny", [tensor], outputs=wanted, request_id="req-7", model_version="1")
    response = result.get_response()
    assert response["id"] == "req-7" and response["model_version"] == "1"
    (out,) = response["outputs"]
    assert ("binary_data_size" in out.get("parameters", {})) is binary_out
    assert ("data" in out) is not binary_out
    expected = ort_run(models["tiny"], {"input": x})["logits"]
    np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("binary", [False, True])
def test_mixed_datatypes_match_onnxruntime(
    urls: dict[str, str], models: dict[str, Path], binary: bool
) -> None:
    feeds = mixed_inputs()
    tensors = []
    for name, datatype in MIXED_INPUTS.items():
        tensor = triton.InferInput(name, list(feeds[name].shape), datatype)
        tensors.append(tensor.set_data_from_numpy(feeds[name], binary_data=binary))
    stock = triton.InferenceServerClient(urls["mixed"].removeprefix("http://"))
    try:
        # No `outputs`: the client asks for all of them as binary (binary_data_output).
        result = (
            stock.infer("mixed", tensors)
            if binary
            else stock.infer(
                "mixed",
                tensors,
                outputs=[
                    triton.InferRequestedOutput(n, binary_data=False) for n in ("total", "half")
                ],
            )
        )
    finally:
        stock.close()
    expected = ort_run(models["mixed"], feeds)
    outputs = {o["name"]: o for o in result.get_response()["outputs"]}
    assert outputs["total"]["datatype"] == "FP64" and outputs["half"]["datatype"] == "FP16"
    np.testing.assert_allclose(result.as_numpy("total"), expected["total"], rtol=1e-12)
    np.testing.assert_allclose(result.as_numpy("half"), expected["half"], rtol=1e-3)
    if binary:
        assert outputs["text_out"]["datatype"] == "BYTES"
        texts = [t.decode() for t in result.as_numpy("text_out")]
        assert texts == list(expected["text_out"]) == list(feeds["text"])
    else:
        assert set(outputs) == {"total", "half"}  # only what was asked for


def v2_post(url: str, body: bytes, header_length: int | str | None = None) -> httpx.Response:
    headers = {"content-type": "application/octet-stream"}
    if header_length is not None:
        headers["Inference-Header-Content-Length"] = str(header_length)
    return httpx.post(f"{url}/v2/models/tiny/infer", content=body, headers=headers)


def binary_request(x: np.ndarray, **parameters: Any) -> tuple[bytes, int]:
    header = {
        "inputs": [
            {
                "name": "input",
                "shape": list(x.shape),
                "datatype": "FP32",
                "parameters": {"binary_data_size": x.nbytes, **parameters},
            }
        ]
    }
    text = json.dumps(header).encode()
    return text + x.tobytes(), len(text)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda body, n: (body, n + len(body)), "but the body has only"),
        (lambda body, n: (body, "12x"), "expected a byte count"),
        (lambda body, n: (body + b"\0\0\0\0", n), "4 bytes after the JSON header belong to no"),
        (lambda body, n: (body[:-4], n), "runs past the end of the body"),
        (lambda body, n: (body[:n], None), "has no Inference-Header-Content-Length header"),
    ],
)
def test_binary_framing_errors_are_400(urls: dict[str, str], change: Any, message: str) -> None:
    body, length = change(*binary_request(np.zeros((1, 3, SIZE, SIZE), np.float32)))
    r = v2_post(urls["tiny"], body, length)
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]


@pytest.mark.parametrize(
    ("size", "message"),
    [(-1, "greater than or equal to 0"), (2**70, "runs past the end"), ("8", "valid integer")],
)
def test_bad_binary_data_size_is_400(urls: dict[str, str], size: Any, message: str) -> None:
    body, length = binary_request(np.zeros((1, 3, SIZE, SIZE), np.float32), binary_data_size=size)
    r = v2_post(urls["tiny"], body, length)
    assert r.status_code == 400 and message in r.json()["error"]


def test_protocol_errors_have_their_status(urls: dict[str, str]) -> None:
    url = urls["tiny"]
    unknown = httpx.post(f"{url}/v2/models/tiny/versions/3/infer", json={"inputs": []})
    assert unknown.status_code == 404
    assert unknown.json() == {"error": "unknown version '3' of model 'tiny'; it has '1'"}
    squeezed = httpx.post(
        f"{url}/v2/models/tiny/infer", content=b"\x1f\x8b", headers={"content-encoding": "gzip"}
    )
    assert squeezed.status_code == 415 and "Content-Encoding gzip" in squeezed.json()["error"]
    shared = binary_request(np.zeros(1, np.float32), shared_memory_region="r0")
    refused = v2_post(url, *shared)
    assert refused.status_code == 400 and "no shared-memory extension" in refused.json()["error"]
    assert httpx.get(f"{url}/v2/models/tiny/infer").status_code == 405


def test_nan_outputs_stay_readable(
    client: triton.InferenceServerClient, models: dict[str, Path]
) -> None:
    """NaN is no JSON number: it goes out as Python's json writes it, which clients read. The
    inputs are finite (non-finite ones are refused); the model overflows on them."""
    x = np.full((1, 3, SIZE, SIZE), 3e38, np.float32)
    tensor = triton.InferInput("input", list(x.shape), "FP32").set_data_from_numpy(
        x, binary_data=False
    )
    wanted = [triton.InferRequestedOutput("logits", binary_data=False)]
    got = client.infer("tiny", [tensor], outputs=wanted).as_numpy("logits")
    expected = ort_run(models["tiny"], {"input": x})["logits"]
    assert not np.isfinite(expected).any()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_400(
    client: triton.InferenceServerClient, value: float, binary: bool
) -> None:
    """NaN and infinities were answered 200 with NaN logits (docs/deploy.md said refused)."""
    x = np.zeros((2, 3, SIZE, SIZE), np.float32)
    x[1, 2, 3, 4] = value
    tensor = triton.InferInput("input", list(x.shape), "FP32").set_data_from_numpy(
        x, binary_data=binary
    )
    with pytest.raises(InferenceServerException) as info:
        client.infer("tiny", [tensor])
    assert info.value.status() == "400"
    assert "input 'input' (FP32): values must be finite and within ±3.403e+38" in str(info.value)


@pytest.mark.parametrize("value", ["3.5e38", "-1e39", "1e400", "NaN", "Infinity", "-Infinity"])
def test_out_of_range_json_numbers_are_400(urls: dict[str, str], value: str) -> None:
    """As a raw client writes them: beyond FP32's range (3.5e38 became inf), beyond a double's
    (1e400), and Python's json literals for NaN and the infinities."""
    data = ", ".join(["0.5"] * (3 * SIZE * SIZE - 1) + [value])
    body = f'{{"inputs": [{{"name": "input", "shape": [1, 3, {SIZE}, {SIZE}], '
    body += f'"datatype": "FP32", "data": [{data}]}}]}}'
    r = httpx.post(f"{urls['tiny']}/v2/models/tiny/infer", content=body.encode())
    assert r.status_code == 400, r.text
    assert "values must be finite and within ±3.403e+38" in r.json()["error"]


def test_fp16_beyond_its_range_is_400(urls: dict[str, str]) -> None:
    inputs = mixed_inputs(1)
    request = {
        "inputs": [
            {"name": name, "shape": list(inputs[name].shape), "datatype": kind,
             "data": inputs[name].ravel().tolist()}
            for name, kind in MIXED_INPUTS.items()
        ]
    }  # fmt: skip
    request["inputs"][0]["data"] = [70000.0, 1.0]  # FP16 holds at most 65504
    r = httpx.post(f"{urls['mixed']}/v2/models/mixed/infer", json=request)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "input 'a' (FP16): values must be finite and within ±6.55e+04"


def test_model_config_in_tritons_shape(urls: dict[str, str], models: dict[str, Path]) -> None:
    """Triton's model configuration: dims without the batch dimension when max_batch_size
    is over 0 (a batching model), with it when 0 (a model served one request at a time)."""
    stock = triton.InferenceServerClient(urls["mixed"].removeprefix("http://"))
    fixed = create_app(tiny_classifier(models["tiny"].with_name("fixed.onnx"), batch=1), threads=1)
    try:
        config = stock.get_model_config("mixed")
        assert stock.get_model_config("mixed", "1") == config
        with running(fixed) as fixed_url:
            single = triton.InferenceServerClient(fixed_url.removeprefix("http://"))
            try:
                unbatched = single.get_model_config("fixed")
            finally:
                single.close()
        with pytest.raises(InferenceServerException) as unknown:
            stock.get_model_config("nope")
    finally:
        stock.close()
    assert unknown.value.status() == "404" and "unknown model 'nope'" in unknown.value.message()
    assert (config["name"], config["platform"], config["backend"]) == (
        "mixed",
        "onnxruntime_onnx",
        "onnxruntime",
    )
    assert config["max_batch_size"] == 8
    assert config["input"][0] == {"name": "a", "data_type": "TYPE_FP16", "dims": [2]}
    assert config["input"][4] == {
        "name": "text",
        "data_type": "TYPE_STRING",
        "dims": [1],
        "reshape": {"shape": []},
    }
    assert [o["data_type"] for o in config["output"]] == ["TYPE_FP64", "TYPE_FP16", "TYPE_STRING"]
    assert config["dynamic_batching"] == {
        "max_queue_delay_microseconds": 2000,
        "default_queue_policy": {"max_queue_size": 256},
    }
    assert config["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}]
    assert unbatched["max_batch_size"] == 0 and "dynamic_batching" not in unbatched
    assert unbatched["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": [1, 3, 8, 8]}]


def test_repository_index_lists_the_model(client: triton.InferenceServerClient) -> None:
    assert client.get_model_repository_index() == [
        {"name": "tiny", "version": "1", "state": "READY"}
    ]


def test_repository_index_ready_filter(urls: dict[str, str]) -> None:
    url = f"{urls['tiny']}/v2/repository/index"
    assert httpx.post(url, json={"ready": True}).json()[0]["state"] == "READY"
    bad = httpx.post(url, content=b"[1]")
    assert bad.status_code == 400 and "malformed request" in bad.json()["error"]


def infer_rows(client: triton.InferenceServerClient, rows: int) -> None:
    x = np.zeros((rows, 3, SIZE, SIZE), np.float32)
    tensor = triton.InferInput("input", list(x.shape), "FP32").set_data_from_numpy(x)
    client.infer("tiny", [tensor])


def test_inference_statistics_count_requests_rows_and_batches(
    client: triton.InferenceServerClient,
) -> None:
    def stats() -> dict[str, Any]:
        (doc,) = client.get_inference_statistics("tiny")["model_stats"]
        return doc

    before = stats()
    infer_rows(client, 3)  # one after the other: each request is its own batch
    infer_rows(client, 2)
    infer_rows(client, 3)
    wrong = triton.InferInput("input", [1, 3, SIZE, 1], "FP32")
    with pytest.raises(InferenceServerException):
        client.infer("tiny", [wrong.set_data_from_numpy(np.zeros((1, 3, SIZE, 1), np.float32))])
    after = stats()
    assert (after["name"], after["version"]) == ("tiny", "1")
    assert after["inference_count"] - before["inference_count"] == 8
    assert after["execution_count"] - before["execution_count"] == 3
    assert after["last_inference"] >= before["last_inference"] and after["last_inference"] > 0
    grown = {
        key: (after["inference_stats"][key]["count"] - before["inference_stats"][key]["count"])
        for key in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
    }
    assert grown == {
        "success": 3,
        "fail": 1,
        "queue": 3,
        "compute_input": 3,
        "compute_infer": 3,
        "compute_output": 3,
    }
    spent = after["inference_stats"]
    parts = sum(
        spent[k]["ns"] for k in ("queue", "compute_input", "compute_infer", "compute_output")
    )
    assert spent["compute_infer"]["ns"] > 0 and parts <= spent["success"]["ns"]
    batches = {b["batch_size"]: b["compute_infer"]["count"] for b in after["batch_stats"]}
    earlier = {b["batch_size"]: b["compute_infer"]["count"] for b in before["batch_stats"]}
    assert batches[3] - earlier.get(3, 0) == 2 and batches[2] - earlier.get(2, 0) == 1
    assert client.get_inference_statistics()["model_stats"][0]["name"] == "tiny"
    assert client.get_inference_statistics("tiny", "1")["model_stats"][0]["name"] == "tiny"
    with pytest.raises(InferenceServerException) as unknown:
        client.get_inference_statistics("nope")
    assert unknown.value.status() == "404"


def test_a_plain_onnx_file_serves_tensors(tmp_path: Path) -> None:
    """No dlperf metadata: names, datatypes and shapes come from the graph; the tensor
    endpoint answers as ONNX Runtime does, /predict says what it lacks."""
    path = plain_model(tmp_path / "plain.onnx")
    x = np.random.default_rng(5).normal(size=(3, 4)).astype(np.float32)
    with running(create_app(path, max_batch=8, max_wait_ms=2, threads=1)) as url:
        stock = triton.InferenceServerClient(url.removeprefix("http://"))
        try:
            doc = stock.get_model_metadata("plain")
            config = stock.get_model_config("plain")
            tensor = triton.InferInput("x", list(x.shape), "FP32").set_data_from_numpy(x)
            result = stock.infer("plain", [tensor])
        finally:
            stock.close()
        image = httpx.post(f"{url}/predict", content=png())
    assert doc["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert doc["outputs"] == [
        {"name": "y", "datatype": "FP32", "shape": [-1, 2]},
        {"name": "n", "datatype": "INT64", "shape": [-1]},
    ]
    assert doc["task"] is None and doc["preprocessing"] is None and doc["labels"] is None
    assert doc["batching"]["dynamic"] is True
    assert config["max_batch_size"] == 8
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}]
    expected = ort_run(path, {"x": x})
    np.testing.assert_allclose(result.as_numpy("y"), expected["y"], rtol=1e-6)
    np.testing.assert_array_equal(result.as_numpy("n"), expected["n"])
    assert image.status_code == 400
    assert image.json() == {
        "error": "/predict needs the dlperf metadata (task, preprocessing, labels) that model "
        "'plain' does not carry; send tensors to /v2/models/plain/infer, or export the model "
        "with `dlperf export`"
    }
