"""The HTTP inference server behind `dlperf serve`: FastAPI in front of one ONNX Runtime session.

It speaks the REST side of the Open Inference Protocol (KServe v2): server and model health,
server and model metadata, Triton's model configuration, repository index and statistics,
and inference on JSON tensors or on binary tensors (the
`binary_tensor_data` extension: a JSON header of `Inference-Header-Content-Length` bytes,
then the raw little-endian tensors), at `/v2/models/NAME[/versions/1]/...`. Besides it,
`POST /predict` takes an image and `GET /metrics` exposes Prometheus metrics. Requests meet
in a `Batcher`: a model with a dynamic batch dimension runs concurrent requests as one
batch; a detector, or a model without one, runs them one at a time. Every error answers
`{"error": message}`: 400 bad input, 404 unknown model or version, 413 too large, 415 a
compressed body, 503 overloaded or shutting down.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dlperf import __version__
from dlperf.config import ServeConfig
from dlperf.deploy import meta as meta_io
from dlperf.deploy import runtime
from dlperf.deploy.batcher import Batcher, QueueFull
from dlperf.errors import UserError

# v2 datatype -> (ONNX Runtime type, numpy type); BYTES elements are str, as ORT gives them.
DATATYPES: dict[str, tuple[str, Any]] = {
    "BOOL": ("tensor(bool)", np.bool_),
    "UINT8": ("tensor(uint8)", np.uint8),
    "UINT16": ("tensor(uint16)", np.uint16),
    "UINT32": ("tensor(uint32)", np.uint32),
    "UINT64": ("tensor(uint64)", np.uint64),
    "INT8": ("tensor(int8)", np.int8),
    "INT16": ("tensor(int16)", np.int16),
    "INT32": ("tensor(int32)", np.int32),
    "INT64": ("tensor(int64)", np.int64),
    "FP16": ("tensor(float16)", np.float16),
    "FP32": ("tensor(float)", np.float32),
    "FP64": ("tensor(double)", np.float64),
    "BYTES": ("tensor(string)", np.object_),
}
ORT_TYPES = {ort: name for name, (ort, _) in DATATYPES.items()}
V2_TYPES = {np.dtype(t): name for name, (_, t) in DATATYPES.items()}
# The kinds of numpy array (np.asarray of the JSON data) each datatype accepts; the
# integer datatypes, not listed, take integers ("iu") only.
JSON_KINDS = {"BOOL": "b", "BYTES": "U", "FP16": "iuf", "FP32": "iuf", "FP64": "iuf"}
MODEL_VERSION = "1"
HEADER_LENGTH = "Inference-Header-Content-Length"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
ERROR_KINDS = {
    400: "bad_request",
    404: "not_found",
    413: "too_large",
    499: "client_closed",
    503: "overloaded",
}
RETRY_AFTER_S = 1
# Each decode may hold a whole image of up to max_pixels: a few at a time bound the memory.
DECODE_THREADS = min(4, os.cpu_count() or 1)


# --- the model -------------------------------------------------------------------------------


class ServedModel:
    """One ONNX model, its dlperf metadata if it has any, and how its requests may be batched.

    A plain ONNX file (no dlperf metadata) is served on the tensor endpoints, its inputs and
    outputs as its graph declares them; /predict, which needs the preprocessing and labels,
    refuses it."""

    def __init__(self, path: Path, threads: int | None) -> None:
        self.name = path.stem
        self.meta = meta_io.find(path)
        self.task = self.meta.task if self.meta else None
        self.session = runtime.session(path, threads)
        self.inputs = self.session.get_inputs()
        self.outputs = self.session.get_outputs()
        self.output_names = [o.name for o in self.outputs]
        batch_dim = self.inputs[0].shape[0] if self.inputs[0].shape else None
        # /predict feeds one image: a fixed batch of more would refuse every upload.
        if self.meta and isinstance(batch_dim, int) and batch_dim != 1:
            raise UserError(
                f"{path} has a fixed batch size of {batch_dim}; the server needs 1 or a "
                "dynamic batch dimension",
                "export it with `dlperf export --dynamic-batch`",
            )
        # Rows split back along the outputs' first dimension, so it must be dynamic too:
        # a plain ONNX file may well reduce over the batch.
        dynamic = all(a.shape and not isinstance(a.shape[0], int) for a in self.inputs)
        dynamic = dynamic and all(a.shape and not isinstance(a.shape[0], int) for a in self.outputs)
        # Detector outputs ([N, 4] boxes, ...) have no batch dimension to split along.
        self.batchable = self.task != "detection" and dynamic
        if self.task == "detection":
            self.note = "detection models run one image at a time"
        elif not self.batchable:
            self.note = "the model has no dynamic batch dimension: requests run one at a time"
        else:
            self.note = "requests are batched along the dynamic batch dimension"

    def described(self, endpoint: str) -> meta_io.ModelMeta:
        """The dlperf metadata that `endpoint` needs, or a UserError saying it is missing."""
        if self.meta is None:
            raise UserError(
                f"{endpoint} needs the dlperf metadata (task, preprocessing, labels) that "
                f"model '{self.name}' does not carry; send tensors to "
                f"/v2/models/{self.name}/infer, or export the model with `dlperf export`"
            )
        return self.meta

    def run(self, payloads: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Called on the inference thread with one batch of requests' input tensors."""
        if not self.batchable:
            return [dict(zip(self.output_names, self._call(p), strict=True)) for p in payloads]
        feeds = {i.name: np.concatenate([p[i.name] for p in payloads]) for i in self.inputs}
        outputs = self._call(feeds)
        bounds = np.cumsum([len(p[self.inputs[0].name]) for p in payloads])[:-1]
        parts = [np.split(o, bounds) for o in outputs]
        return [dict(zip(self.output_names, row, strict=True)) for row in zip(*parts, strict=True)]

    def _call(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self.session.run(self.output_names, feeds)
        except InvalidArgument as e:
            # ONNX Runtime checks values as well as shapes (an index out of range, ...).
            raise UserError(
                f"the model refused the input: {str(e).strip().splitlines()[0]}"
            ) from None

    def metadata(self, max_batch: int, max_wait_ms: float, queue: int) -> dict[str, Any]:
        """The v2 model metadata, plus preprocessing, labels and the batching in force."""

        def tensors(args: list[Any]) -> list[dict[str, Any]]:
            return [
                {"name": a.name, "datatype": ORT_TYPES.get(a.type, a.type), "shape": _dims(a)}
                for a in args
            ]

        return {
            "name": self.name,
            "versions": [MODEL_VERSION],
            "platform": "onnxruntime_onnx",
            "inputs": tensors(self.inputs),
            "outputs": tensors(self.outputs),
            "task": self.task,
            "model": self.meta.model if self.meta else None,
            "preprocessing": asdict(self.meta.preprocess) if self.meta else None,
            "labels": self.meta.labels if self.meta else None,
            "batching": {
                "dynamic": self.batchable,
                "max_batch": max_batch,
                "max_wait_ms": max_wait_ms,
                "queue": queue,
                "note": self.note,
            },
        }

    def config(self, max_batch: int, max_wait_ms: float, queue: int) -> dict[str, Any]:
        """The model configuration as Triton writes it (`get_model_config`): a batching model
        has max_batch_size over 0 and dims without the batch dimension; any other, 0 and
        its whole shape."""
        skip = 1 if self.batchable else 0

        def tensors(args: list[Any]) -> list[dict[str, Any]]:
            return [
                {"name": a.name, "data_type": _config_type(a.type), "dims": _dims(a)[skip:]}
                for a in args
            ]

        gpu = "CUDAExecutionProvider" in self.session.get_providers()
        doc: dict[str, Any] = {
            "name": self.name,
            "platform": "onnxruntime_onnx",
            "backend": "onnxruntime",
            "max_batch_size": max_batch if self.batchable else 0,
            "input": tensors(self.inputs),
            "output": tensors(self.outputs),
            "instance_group": [{"count": 1, "kind": "KIND_GPU" if gpu else "KIND_CPU"}],
        }
        if self.batchable:
            doc["dynamic_batching"] = {
                "max_queue_delay_microseconds": round(max_wait_ms * 1000),
                "default_queue_policy": {"max_queue_size": queue},
            }
        return doc

    def tensors(
        self, request: InferRequest, binary: memoryview | None
    ) -> tuple[dict[str, np.ndarray], int]:
        """The request's inputs checked against the model's (names, datatypes, shapes) and
        decoded from JSON or from their share of the binary data; and the batch's rows."""
        args = {i.name: i for i in self.inputs}
        feeds: dict[str, np.ndarray] = {}
        for spec, raw in zip(request.inputs, _binary_parts(request.inputs, binary), strict=True):
            if spec.name not in args:
                raise UserError(f"unknown input '{spec.name}'; the model takes {list(args)}")
            if spec.name in feeds:
                raise UserError(f"input '{spec.name}' is given twice")
            feeds[spec.name] = _tensor(spec, args[spec.name], raw)
        missing = [name for name in args if name not in feeds]
        if missing:
            raise UserError(f"missing input '{missing[0]}'; the model takes {list(args)}")
        if not self.batchable:
            return feeds, 1
        rows = {len(x) for x in feeds.values()}
        if len(rows) > 1:
            raise UserError(f"inputs differ in batch size: {sorted(rows)}")
        return feeds, rows.pop()

    def requested(self, request: InferRequest) -> list[tuple[str, bool]]:
        """(output name, as binary?) for each output to return, in the order asked."""
        default = request.parameters.binary_data_output
        if not request.outputs:
            return [(name, default) for name in self.output_names]
        wanted = []
        for out in request.outputs:
            if out.name not in self.output_names:
                raise UserError(f"unknown output '{out.name}'; the model has {self.output_names}")
            _refuse_unsupported(out.parameters, f"output '{out.name}'")
            binary = out.parameters.binary_data
            wanted.append((out.name, default if binary is None else binary))
        return wanted


def _dims(arg: Any) -> list[int]:
    """A tensor's shape with dynamic dimensions as -1, as the v2 protocol writes them."""
    return [d if isinstance(d, int) else -1 for d in arg.shape]


def _config_type(ort_type: str) -> str:
    """Triton's name of a datatype in a model configuration: TYPE_ and the v2 name, except
    that BYTES is TYPE_STRING there."""
    name = ORT_TYPES.get(ort_type, ort_type)
    return "TYPE_STRING" if name == "BYTES" else f"TYPE_{name}"


# --- the protocol: requests ------------------------------------------------------------------


class Parameters(BaseModel):
    """The parameters this server reads; the protocol allows any others, which are ignored,
    except those of extensions it does not have (refused rather than silently dropped)."""

    model_config = ConfigDict(extra="allow")
    binary_data_size: StrictInt | None = Field(None, ge=0)  # on an input
    binary_data: StrictBool | None = None  # on a requested output
    binary_data_output: StrictBool = False  # on the request
    shared_memory_region: Any = None
    classification: Any = None


class TensorIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    shape: list[StrictInt]
    datatype: str
    parameters: Parameters = Field(default_factory=Parameters)
    data: list[Any] | None = None


class OutputIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    parameters: Parameters = Field(default_factory=Parameters)


class InferRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str | None = None
    parameters: Parameters = Field(default_factory=Parameters)
    inputs: list[TensorIn] = Field(min_length=1)
    outputs: list[OutputIn] | None = None


class IndexRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    ready: StrictBool = False  # list only the models ready for inference


Parsed = TypeVar("Parsed", bound=BaseModel)


def _parse(model: type[Parsed], text: bytes) -> Parsed:
    try:
        return model.model_validate_json(text)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(
            f"malformed request: {where + ': ' if where else ''}{first['msg']}"
        ) from None


def _split(body: bytes, header_length: str | None) -> tuple[bytes, memoryview | None]:
    """The JSON header and the binary data after it (None: the request has no binary part)."""
    if header_length is None:
        return body, None
    if not (header_length.isascii() and header_length.isdigit()):
        raise UserError(f"{HEADER_LENGTH} is {header_length!r}; expected a byte count")
    length = int(header_length)
    if length > len(body):
        raise UserError(f"{HEADER_LENGTH} is {length} but the body has only {len(body)} bytes")
    return body[:length], memoryview(body)[length:]


def _refuse_unsupported(parameters: Parameters, what: str) -> None:
    if parameters.shared_memory_region is not None:
        raise UserError(f"{what}: this server has no shared-memory extension; send the data")
    if parameters.classification is not None:
        raise UserError(f"{what}: this server has no classification extension")


def _binary_parts(inputs: list[TensorIn], binary: memoryview | None) -> list[memoryview | None]:
    """Each input's slice of the binary data (in the order of the inputs), or None for an
    input sent as JSON; every byte must belong to an input."""
    parts: list[memoryview | None] = []
    offset = 0
    for spec in inputs:
        _refuse_unsupported(spec.parameters, f"input '{spec.name}'")
        size = spec.parameters.binary_data_size
        if size is None:
            parts.append(None)
            continue
        if binary is None:
            raise UserError(
                f"input '{spec.name}' has binary_data_size but the request has no "
                f"{HEADER_LENGTH} header"
            )
        if offset + size > len(binary):
            raise UserError(
                f"input '{spec.name}': binary_data_size {size} runs past the end of the body "
                f"({len(binary) - offset} bytes left)"
            )
        parts.append(binary[offset : offset + size])
        offset += size
    if binary is not None and offset != len(binary):
        raise UserError(
            f"{len(binary) - offset} bytes after the JSON header belong to no input; the "
            "inputs' binary_data_size must add up to the binary data"
        )
    return parts


def _tensor(spec: TensorIn, arg: Any, raw: memoryview | None) -> np.ndarray:
    datatype = ORT_TYPES.get(arg.type)
    if datatype is None:
        raise UserError(f"input '{spec.name}' is a {arg.type}, which this server cannot feed")
    if spec.datatype != datatype:
        raise UserError(f"input '{spec.name}' has datatype {spec.datatype}; expected {datatype}")
    dims = _dims(arg)
    fits = len(spec.shape) == len(dims) and all(
        s >= 1 and d in (-1, s) for s, d in zip(spec.shape, dims, strict=True)
    )
    if not fits:
        raise UserError(f"input '{spec.name}' has shape {spec.shape}; expected {dims}")
    count = math.prod(spec.shape)
    if raw is not None:
        if spec.data is not None:
            raise UserError(f"input '{spec.name}' has both data and binary_data_size")
        array = _from_binary(raw, datatype, count, spec.name)
    elif spec.data is not None:
        array = _from_json(spec.data, datatype, spec.name)
    else:
        raise UserError(f"input '{spec.name}' has no data and no binary_data_size")
    if array.size != count:
        raise UserError(
            f"input '{spec.name}' has {array.size} values; shape {spec.shape} needs {count}"
        )
    return array.reshape(spec.shape)


def _from_json(data: list[Any], datatype: str, name: str) -> np.ndarray:
    """JSON numbers, booleans or strings (flat or nested) to the datatype, refusing values
    it cannot hold rather than wrapping or truncating them."""
    dtype = np.dtype(DATATYPES[datatype][1])
    try:
        values = np.asarray(data)
    except ValueError:  # ragged nesting, or deeper than numpy's 64 dimensions
        raise UserError(f"input '{name}': data is not a flat or evenly nested list") from None
    kinds = JSON_KINDS.get(datatype, "iu")
    if values.size and values.dtype.kind not in kinds:
        wanted = {"b": "true or false", "U": "strings", "iu": "integers"}.get(kinds, "numbers")
        raise UserError(f"input '{name}' ({datatype}): data must be {wanted}")
    if dtype.kind in "iu" and values.size:
        info = np.iinfo(dtype)
        if values.min() < info.min or values.max() > info.max:
            raise UserError(
                f"input '{name}' ({datatype}): values must lie in [{info.min}, {info.max}]"
            )
    return values.astype(dtype)


def _from_binary(raw: memoryview, datatype: str, count: int, name: str) -> np.ndarray:
    """Row-major little-endian elements; BOOL one byte each, BYTES a uint32 length and
    the bytes (UTF-8 text, as ONNX Runtime's strings are) each."""
    if datatype == "BYTES":
        return _bytes_elements(raw, name)
    dtype = np.dtype(DATATYPES[datatype][1])
    if len(raw) != count * dtype.itemsize:
        raise UserError(
            f"input '{name}': binary_data_size is {len(raw)} bytes; {count} {datatype} "
            f"values take {count * dtype.itemsize}"
        )
    if datatype == "BOOL":
        return np.frombuffer(raw, np.uint8) != 0
    return np.frombuffer(raw, dtype.newbyteorder("<")).astype(dtype, copy=False)


def _bytes_elements(raw: memoryview, name: str) -> np.ndarray:
    items = []
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise UserError(f"input '{name}': BYTES data ends inside an element's length")
        (size,) = struct.unpack_from("<I", raw, offset)
        offset += 4
        if offset + size > len(raw):
            raise UserError(f"input '{name}': a BYTES element runs past binary_data_size")
        try:
            items.append(bytes(raw[offset : offset + size]).decode())
        except UnicodeDecodeError:
            raise UserError(f"input '{name}': BYTES elements must be UTF-8 text") from None
        offset += size
    return np.array(items, dtype=object)


# --- the protocol: responses -----------------------------------------------------------------


def _infer_response(
    model_name: str,
    request_id: str | None,
    wanted: list[tuple[str, bool]],
    outputs: dict[str, np.ndarray],
) -> Response:
    """The v2 inference response; outputs asked for as binary follow the JSON header."""
    doc: dict[str, Any] = {"model_name": model_name, "model_version": MODEL_VERSION}
    if request_id is not None:
        doc["id"] = request_id
    doc["outputs"] = []
    binary = []
    for name, as_binary in wanted:
        array = outputs[name]
        out: dict[str, Any] = {
            "name": name,
            "datatype": V2_TYPES.get(array.dtype, str(array.dtype)),
            "shape": list(array.shape),
        }
        if as_binary:
            binary.append(_to_binary(array))
            out["parameters"] = {"binary_data_size": len(binary[-1])}
        else:
            out["data"] = array.ravel().tolist()
        doc["outputs"].append(out)
    # NaN and infinities come out as Python's json writes them (NaN, Infinity), which
    # Python clients, tritonclient among them, read back; binary outputs avoid the question.
    header = json.dumps(doc).encode()
    if not binary:
        return Response(header, media_type="application/json")
    return Response(
        b"".join([header, *binary]),
        media_type="application/octet-stream",
        headers={HEADER_LENGTH: str(len(header))},
    )


def _to_binary(array: np.ndarray) -> bytes:
    if array.dtype == object:  # BYTES
        encoded = [str(item).encode() for item in array.ravel()]
        return b"".join(struct.pack("<I", len(e)) + e for e in encoded)
    return np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()


# --- statistics (the protocol's statistics extension, as Triton reports it) ------------------


@dataclass
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns


@dataclass
class Phases:
    """Where one successful request's time went, in nanoseconds: decoding its inputs,
    waiting for its batch, its batch's model call, encoding the answer."""

    compute_input: int = 0
    queue: int = 0
    compute_infer: int = 0
    compute_output: int = 0

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        start = time.perf_counter_ns()
        yield
        setattr(self, phase, getattr(self, phase) + time.perf_counter_ns() - start)


PHASES = [f.name for f in fields(Phases)]


class Statistics:
    """Inference statistics of the served model in the shape of Triton's
    `get_inference_statistics`. Requests are those that run the model (v2 infer and
    /predict): success or fail with their whole time, and, for a success, its phases. A
    batch adds its rows to inference_count and its model call to execution_count and to
    the batch_stats of its size. Updated on the event loop only, so no lock."""

    def __init__(self) -> None:
        self.success = _Duration()
        self.fail = _Duration()
        self.phases = {phase: _Duration() for phase in PHASES}
        self.batches: dict[int, _Duration] = {}
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0

    @contextmanager
    def request(self) -> Iterator[Phases]:
        """Times the request in the block, a success unless the block raises."""
        start = time.perf_counter_ns()
        phases = Phases()
        try:
            yield phases
        except BaseException:
            self.fail.add(time.perf_counter_ns() - start)
            raise
        self.success.add(time.perf_counter_ns() - start)
        for phase, spent in self.phases.items():
            spent.add(getattr(phases, phase))
        self.last_inference_ms = time.time_ns() // 1_000_000

    def batch(self, rows: int, seconds: float) -> None:
        self.inference_count += rows
        self.execution_count += 1
        self.batches.setdefault(rows, _Duration()).add(round(seconds * 1e9))

    def document(self, name: str) -> dict[str, Any]:
        spent = {"success": self.success, "fail": self.fail, **self.phases}
        return {
            "model_stats": [
                {
                    "name": name,
                    "version": MODEL_VERSION,
                    "last_inference": self.last_inference_ms,
                    "inference_count": self.inference_count,
                    "execution_count": self.execution_count,
                    "inference_stats": {key: asdict(d) for key, d in spent.items()},
                    "batch_stats": [
                        {"batch_size": rows, "compute_infer": asdict(d)}
                        for rows, d in sorted(self.batches.items())
                    ],
                }
            ]
        }


# --- metrics ---------------------------------------------------------------------------------


class Metrics:
    """Prometheus metrics in a registry of this app's own, so that several servers in one
    process (tests) keep apart; process and platform collectors included. The per-request
    series have the served model's name as their `model` label, so that several servers
    scraped into one Prometheus keep their requests apart."""

    def __init__(self, model: str, queue_depth: Callable[[], int]) -> None:
        self.model = model
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.requests = Counter(
            "dlperf_requests",
            "HTTP requests by route and status.",
            ["model", "route", "status"],
            registry=self.registry,
        )
        self.errors = Counter(
            "dlperf_errors",
            "Failed requests by route and kind.",
            ["model", "route", "kind"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "dlperf_request_duration_seconds",
            "Request latency, arrival to last byte sent.",
            ["model", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "dlperf_batch_size",
            "Rows per model call.",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.batch_seconds = Histogram(
            "dlperf_batch_duration_seconds",
            "Time of one model call.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        depth = Gauge("dlperf_queue_depth", "Requests waiting for a batch.", registry=self.registry)
        depth.set_function(queue_depth)

    def request(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(self.model, route, str(status)).inc()
        if status >= 400:
            kind = ERROR_KINDS.get(status, "server_error" if status >= 500 else "client_error")
            self.errors.labels(self.model, route, kind).inc()
        self.latency.labels(self.model, route).observe(seconds)

    def batch(self, rows: int, seconds: float) -> None:
        self.batch_size.observe(rows)
        self.batch_seconds.observe(seconds)


class _Instrumented:
    """Every request: the body-size limit (Content-Length first, then the bytes as they
    stream in) and its count and latency. Pure ASGI, so it sees the final status of every
    response, and the matched route (the route label) once routing has run."""

    def __init__(self, app: ASGIApp, metrics: Metrics, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        received = 0
        limit = self.max_body_bytes
        declared = dict(scope["headers"]).get(b"content-length", b"")

        # Raised while an endpoint reads its body, so the route is known and the exception
        # handler answers; a body that is never read costs nothing.
        async def limited() -> Message:
            nonlocal received
            if declared.isdigit() and int(declared) > limit:
                raise HTTPException(413, f"request body over the {limit}-byte limit")
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(413, f"request body over the {limit}-byte limit")
            return message

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, limited, sent)
        finally:
            route = getattr(scope.get("route"), "path", "other")
            self.metrics.request(route, status, time.perf_counter() - start)


# --- the application -------------------------------------------------------------------------


_DEFAULTS = ServeConfig()


def create_app(
    model_path: Path,
    max_batch: int = _DEFAULTS.max_batch,
    max_wait_ms: float = _DEFAULTS.max_wait_ms,
    queue: int = _DEFAULTS.queue,
    threads: int | None = _DEFAULTS.threads,
    max_body_bytes: int = int(_DEFAULTS.max_body_mb * 2**20),
    max_pixels: int | None = _DEFAULTS.max_pixels,
) -> FastAPI:
    """The server for one model; loads the session now so a bad model fails before serving.
    The options are those of the [serve] config section (dlperf.config.ServeConfig), with
    their defaults; `max_pixels` caps the images /predict decodes (None: `runtime.MAX_PIXELS`)."""
    model = ServedModel(model_path, threads)
    batch = max_batch if model.batchable else 1
    pixel_cap = runtime.MAX_PIXELS if max_pixels is None else max_pixels
    metrics = Metrics(model.name, lambda: batcher.depth)
    stats = Statistics()

    def execute(payloads: list[dict[str, np.ndarray]]) -> list[tuple[dict[str, np.ndarray], int]]:
        """The model call, each request's outputs with the call's time (ns) beside them."""
        start = time.perf_counter_ns()
        results = model.run(payloads)
        spent = time.perf_counter_ns() - start
        return [(outputs, spent) for outputs in results]

    def on_batch(rows: int, seconds: float) -> None:
        metrics.batch(rows, seconds)
        stats.batch(rows, seconds)

    batcher = Batcher(execute, batch, max_wait_ms / 1000, queue, on_batch=on_batch)
    decoder = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="decode")
    description = model.metadata(batch, max_wait_ms, queue)
    configuration = model.config(batch, max_wait_ms, queue)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        await batcher.close()  # uvicorn has stopped accepting: finish what is queued
        decoder.shutdown(wait=True)

    app = FastAPI(title=f"dlperf serve {model.name}", lifespan=lifespan)
    app.add_middleware(_Instrumented, metrics=metrics, max_body_bytes=max_body_bytes)
    app.state.model = model
    app.state.batcher = batcher

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)

    @app.exception_handler(UserError)
    async def bad_input(request: Request, exc: UserError) -> JSONResponse:
        status = 413 if isinstance(exc, runtime.ImageTooLarge) else 400
        return JSONResponse({"error": str(exc)}, status)

    @app.exception_handler(ClientDisconnect)
    async def gone(request: Request, exc: ClientDisconnect) -> Response:
        # Nobody reads this answer; 499 (nginx's "client closed request") keeps the
        # metrics from counting a client that hung up as a server error.
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def failure(request: Request, exc: Exception) -> JSONResponse:
        # Starlette still logs the traceback; the client gets the same JSON shape as always.
        return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, 500)

    @app.exception_handler(RequestValidationError)
    async def bad_query(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return JSONResponse({"error": f"{where}: {first['msg']}"}, 400)

    def served(request: Request) -> None:
        """404 unless the path names this model and, if it names one, its version."""
        name = request.path_params["name"]
        version = request.path_params.get("version", MODEL_VERSION)
        if name != model.name:
            raise HTTPException(404, f"unknown model '{name}'; this server serves '{model.name}'")
        if version != MODEL_VERSION:
            raise HTTPException(
                404, f"unknown version '{version}' of model '{name}'; it has '{MODEL_VERSION}'"
            )

    async def infer(
        feeds: dict[str, np.ndarray], rows: int, phases: Phases
    ) -> dict[str, np.ndarray]:
        start = time.perf_counter_ns()
        try:
            outputs, phases.compute_infer = await batcher.submit(feeds, rows)
        except QueueFull as e:
            raise HTTPException(503, str(e), headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        phases.queue = time.perf_counter_ns() - start - phases.compute_infer
        return outputs

    @app.get("/v2")
    async def server_metadata() -> dict[str, Any]:
        extensions = ["binary_tensor_data", "model_configuration", "statistics"]
        return {"name": "dlperf", "version": __version__, "extensions": extensions}

    @app.get("/v2/health/live")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @app.get("/v2/health/ready")
    async def ready() -> JSONResponse:
        return JSONResponse({"ready": batcher.running}, 200 if batcher.running else 503)

    @app.post("/v2/repository/index")
    async def repository_index(request: Request) -> list[dict[str, str]]:
        body = await request.body()
        wanted = _parse(IndexRequest, body) if body.strip() else IndexRequest()
        entry = {"name": model.name, "version": MODEL_VERSION, "state": "READY"}
        if not batcher.running:
            entry.update(state="UNAVAILABLE", reason="the server is shutting down")
        return [] if wanted.ready and not batcher.running else [entry]

    # Before the model's routes: /v2/models/{name} would take "stats" for a model's name.
    @app.get("/v2/models/stats")
    async def all_statistics() -> dict[str, Any]:
        return stats.document(model.name)

    async def model_metadata() -> dict[str, Any]:
        return description

    async def model_config() -> dict[str, Any]:
        return configuration

    async def model_statistics() -> dict[str, Any]:
        return stats.document(model.name)

    async def model_ready() -> JSONResponse:
        doc = {"name": model.name, "ready": batcher.running}
        return JSONResponse(doc, 200 if batcher.running else 503)

    async def infer_tensors(request: Request) -> Response:
        encoding = request.headers.get("content-encoding", "identity")
        if encoding != "identity":
            raise HTTPException(415, f"Content-Encoding {encoding} is not accepted; send it plain")
        with stats.request() as phases:
            header, binary = _split(await request.body(), request.headers.get(HEADER_LENGTH))
            with phases.timing("compute_input"):
                parsed = _parse(InferRequest, header)
                wanted = model.requested(parsed)
                feeds, rows = model.tensors(parsed, binary)
            outputs = await infer(feeds, rows, phases)
            with phases.timing("compute_output"):
                return _infer_response(model.name, parsed.id, wanted, outputs)

    # The model's routes with and without /versions/{version}, each its own route (and label).
    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        checked = {"dependencies": [Depends(served)]}
        app.add_api_route(prefix, model_metadata, methods=["GET"], **checked)
        app.add_api_route(f"{prefix}/ready", model_ready, methods=["GET"], **checked)
        app.add_api_route(f"{prefix}/config", model_config, methods=["GET"], **checked)
        app.add_api_route(f"{prefix}/stats", model_statistics, methods=["GET"], **checked)
        app.add_api_route(f"{prefix}/infer", infer_tensors, methods=["POST"], **checked)

    @app.post("/predict")
    async def predict(
        request: Request,
        topk: int = Query(5, ge=1, description="Classes to return (classifiers)."),
        score_threshold: float = Query(0.5, ge=0, le=1, description="Detectors: lowest score."),
    ) -> dict[str, Any]:
        described = model.described("/predict")
        with stats.request() as phases:
            data = await _image_bytes(request)
            with phases.timing("compute_input"):
                x, (width, height) = await asyncio.get_running_loop().run_in_executor(
                    decoder, _image_array, data, described.preprocess, pixel_cap
                )
            outputs = await infer({model.inputs[0].name: x[None]}, 1, phases)
            with phases.timing("compute_output"):
                if described.task == "detection":
                    found = _detections(outputs, described, (width, height), score_threshold)
                    size = [width, height]
                    return {"model_name": model.name, "image_size": size, "detections": found}
                logits = outputs[model.output_names[0]]
                predictions = runtime.topk(logits, topk, described.labels)[0]
                return {"model_name": model.name, "predictions": predictions}

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(metrics.registry), media_type=content_type)

    return app


async def _image_bytes(request: Request) -> bytes:
    """The uploaded file of a multipart form (field `file`, else the first file), or the
    raw body."""
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        async with request.form() as form:
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                upload = next((v for v in form.values() if isinstance(v, UploadFile)), None)
            if upload is None:
                raise UserError("the multipart form has no file; send the image as field 'file'")
            data = await upload.read()
    else:
        data = await request.body()
    if not data:
        raise UserError("no image in the request; send it as the body or a 'file' upload")
    return data


def _image_array(
    data: bytes, pre: meta_io.Preprocess, max_pixels: int
) -> tuple[np.ndarray, tuple[int, int]]:
    image = runtime.decode(data, "the uploaded file", max_pixels=max_pixels)
    try:
        return runtime.to_array(image, pre), image.size
    except ValueError as e:  # Pillow converts most colour modes to RGB, not all (LAB)
        raise UserError(f"the uploaded file cannot be used: {e}") from None


def _detections(
    outputs: dict[str, np.ndarray],
    meta: meta_io.ModelMeta,
    image_size: tuple[int, int],
    threshold: float,
) -> list[dict[str, Any]]:
    """Boxes over the threshold, from model-input pixels back to the uploaded image's."""
    (in_h, in_w), (width, height), labels = meta.preprocess.size, image_size, meta.labels
    scale = np.array([width / in_w, height / in_h, width / in_w, height / in_h])
    limit = np.array([width, height, width, height])
    boxes = np.clip(outputs["boxes"].reshape(-1, 4) * scale, 0, limit)
    found = []
    for box, score, label in zip(boxes, outputs["scores"], outputs["labels"], strict=True):
        if score >= threshold:
            index = int(label)
            found.append(
                {
                    "box": [round(float(v), 2) for v in box],
                    "score": float(score),
                    "index": index,
                    "label": labels[index] if 0 <= index < len(labels) else str(index),
                }
            )
    return found


class _DrainingServer(uvicorn.Server):
    """uvicorn waits for the requests in flight before it runs the app's shutdown; a request
    waiting out --max-wait-ms for company would hold the stop that long. Telling the
    batcher first makes it run what is queued at once."""

    def __init__(self, config: uvicorn.Config, batcher: Batcher) -> None:
        super().__init__(config)
        self.batcher = batcher

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.batcher.close()
        await super().shutdown(sockets)


def serve_forever(app: FastAPI, sock: socket.socket) -> int | None:
    """Serve `app` on the bound socket until SIGINT or SIGTERM, then stop accepting, answer
    every queued request and return the number of the signal that stopped it (None if
    none did)."""
    stopped_by: list[int] = []

    def note(signum: int, frame: object) -> None:
        stopped_by.append(signum)

    # Once drained, uvicorn raises the signal that stopped it again, for the handler in
    # force before it ran: dlperf's turns SIGTERM into KeyboardInterrupt (exit 130), so
    # this one only notes which signal it was, for the caller to exit by it.
    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        _DrainingServer(config, app.state.batcher).run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stopped_by[0] if stopped_by else None
