"""The HTTP inference server behind `dlperf serve`: FastAPI in front of one ONNX Runtime session.

Endpoints follow the KServe v2 / Open Inference Protocol where it has one (health, model
metadata, JSON tensor inference) plus `POST /predict` for an image and `GET /metrics` in
the Prometheus text format. Requests meet in a `Batcher`: a classifier with a dynamic batch
dimension runs concurrent requests as one batch; a detector, or a model exported with a
fixed batch of 1, runs them one at a time. Every error answers `{"error": message}`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dlperf.deploy import meta as meta_io
from dlperf.deploy import runtime
from dlperf.deploy.batcher import Batcher, QueueFull
from dlperf.errors import UserError

ORT_TYPES = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(int64)": "INT64",
    "tensor(int32)": "INT32",
    "tensor(int8)": "INT8",
    "tensor(uint8)": "UINT8",
    "tensor(bool)": "BOOL",
}
NUMPY_TYPES = {
    "FP32": np.float32,
    "FP64": np.float64,
    "FP16": np.float16,
    "INT64": np.int64,
    "INT32": np.int32,
    "INT8": np.int8,
    "UINT8": np.uint8,
    "BOOL": np.bool_,
}
V2_TYPES = {np.dtype(t): name for name, t in NUMPY_TYPES.items()}
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
ERROR_KINDS = {400: "bad_request", 404: "not_found", 413: "too_large", 503: "overloaded"}
RETRY_AFTER_S = 1


# --- the model -------------------------------------------------------------------------------


class ServedModel:
    """One ONNX model, its dlperf metadata, and how its requests may be batched."""

    def __init__(self, path: Path, threads: int | None) -> None:
        self.name = path.stem
        self.meta = meta_io.load(path)
        self.session = runtime.session(path, threads)
        self.inputs = self.session.get_inputs()
        self.outputs = self.session.get_outputs()
        self.output_names = [o.name for o in self.outputs]
        batch_dim = self.inputs[0].shape[0] if self.inputs[0].shape else None
        if isinstance(batch_dim, int) and batch_dim != 1:
            raise UserError(
                f"{path} has a fixed batch size of {batch_dim}; the server needs 1 or a "
                "dynamic batch dimension",
                "export it with `dlperf export --dynamic-batch`",
            )
        # Detector outputs ([N, 4] boxes, ...) have no batch dimension to split along.
        self.batchable = self.meta.task != "detection" and not isinstance(batch_dim, int)
        if self.meta.task == "detection":
            self.note = "detection models run one image at a time"
        elif not self.batchable:
            self.note = "the model's batch dimension is fixed at 1: requests run one at a time"
        else:
            self.note = "requests are batched along the dynamic batch dimension"

    def run(self, payloads: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """Called on the inference thread with one batch of requests' input tensors."""
        if not self.batchable:
            return [
                dict(zip(self.output_names, self.session.run(self.output_names, p), strict=True))
                for p in payloads
            ]
        feeds = {i.name: np.concatenate([p[i.name] for p in payloads]) for i in self.inputs}
        outputs = self.session.run(self.output_names, feeds)
        bounds = np.cumsum([len(p[self.inputs[0].name]) for p in payloads])[:-1]
        parts = [np.split(o, bounds) for o in outputs]
        return [dict(zip(self.output_names, row, strict=True)) for row in zip(*parts, strict=True)]

    def metadata(self, max_batch: int, max_wait_ms: float, queue: int) -> dict[str, Any]:
        """The v2 model metadata, plus preprocessing, labels and the batching in force."""

        def tensors(args: list[Any]) -> list[dict[str, Any]]:
            return [
                {"name": a.name, "datatype": ORT_TYPES.get(a.type, a.type), "shape": _dims(a)}
                for a in args
            ]

        return {
            "name": self.name,
            "versions": ["1"],
            "platform": "onnxruntime_onnx",
            "inputs": tensors(self.inputs),
            "outputs": tensors(self.outputs),
            "task": self.meta.task,
            "model": self.meta.model,
            "preprocessing": asdict(self.meta.preprocess),
            "labels": self.meta.labels,
            "batching": {
                "dynamic": self.batchable,
                "max_batch": max_batch,
                "max_wait_ms": max_wait_ms,
                "queue": queue,
                "note": self.note,
            },
        }

    def tensors(self, request: InferRequest) -> tuple[dict[str, np.ndarray], int]:
        """The request's inputs checked against the model's: names, datatypes, shapes."""
        given = {t.name: t for t in request.inputs}
        expected = [i.name for i in self.inputs]
        unknown = sorted(set(given) - set(expected))
        if unknown:
            raise UserError(f"unknown input '{unknown[0]}'; the model takes {expected}")
        feeds = {}
        for arg in self.inputs:
            if arg.name not in given:
                raise UserError(f"missing input '{arg.name}'; the model takes {expected}")
            feeds[arg.name] = _tensor(given[arg.name], arg)
        rows = {len(x) for x in feeds.values()}
        if len(rows) > 1:
            raise UserError(f"inputs differ in batch size: {sorted(rows)}")
        return feeds, rows.pop()


def _dims(arg: Any) -> list[int]:
    """A tensor's shape with dynamic dimensions as -1, as the v2 protocol writes them."""
    return [d if isinstance(d, int) else -1 for d in arg.shape]


def _tensor(spec: TensorIn, arg: Any) -> np.ndarray:
    datatype = ORT_TYPES.get(arg.type, arg.type)
    if spec.datatype != datatype:
        raise UserError(f"input '{spec.name}' has datatype {spec.datatype}; expected {datatype}")
    dims = _dims(arg)
    fits = len(spec.shape) == len(dims) and all(
        s >= 1 and d in (-1, s) for s, d in zip(spec.shape, dims, strict=True)
    )
    if not fits:
        raise UserError(f"input '{spec.name}' has shape {spec.shape}; expected {dims}")
    try:
        array = np.asarray(spec.data, dtype=NUMPY_TYPES[datatype])
    except (ValueError, TypeError):
        raise UserError(
            f"input '{spec.name}': data is not a flat or nested list of numbers"
        ) from None
    if array.size != math.prod(spec.shape):
        raise UserError(
            f"input '{spec.name}' has {array.size} values; shape {spec.shape} needs "
            f"{math.prod(spec.shape)}"
        )
    return array.reshape(spec.shape)


class TensorIn(BaseModel):
    model_config = ConfigDict(extra="ignore")  # `parameters` and the like are accepted, unused
    name: str
    shape: list[int]
    datatype: str
    data: list[Any]


class OutputIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str


class InferRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str | None = None
    inputs: list[TensorIn] = Field(min_length=1)
    outputs: list[OutputIn] | None = None


# --- metrics ---------------------------------------------------------------------------------


class Histogram:
    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts = [0] * len(buckets)  # cumulative, as Prometheus buckets are
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        for i, upper in enumerate(self.buckets):
            if value <= upper:
                self.counts[i] += 1
        self.count += 1
        self.sum += value

    def lines(self, name: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        out = [
            f'{name}_bucket{{{labels}{sep}le="{upper:g}"}} {n}'
            for upper, n in zip(self.buckets, self.counts, strict=True)
        ]
        braces = f"{{{labels}}}" if labels else ""
        out += [
            f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.count}',
            f"{name}_sum{braces} {self.sum:.6g}",
            f"{name}_count{braces} {self.count}",
        ]
        return out


class Metrics:
    """Counters and histograms in the Prometheus text format (version 0.0.4), written here
    because prometheus_client is not a dependency. Only the event loop updates them."""

    def __init__(self, queue_depth: Callable[[], int]) -> None:
        self.queue_depth = queue_depth
        self.requests: Counter[tuple[str, int]] = Counter()
        self.errors: Counter[tuple[str, str]] = Counter()
        self.latency: dict[str, Histogram] = {}
        self.batch_size = Histogram(BATCH_BUCKETS)
        self.batch_seconds = Histogram(LATENCY_BUCKETS)

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests[endpoint, status] += 1
        if status >= 400:
            kind = ERROR_KINDS.get(status, "server_error" if status >= 500 else "client_error")
            self.errors[endpoint, kind] += 1
        self.latency.setdefault(endpoint, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def batch(self, rows: int, seconds: float) -> None:
        self.batch_size.observe(rows)
        self.batch_seconds.observe(seconds)

    def render(self) -> str:
        def head(name: str, kind: str, text: str) -> list[str]:
            return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]

        lines = head("dlperf_requests_total", "counter", "HTTP requests by endpoint and status.")
        lines += [
            f'dlperf_requests_total{{endpoint="{e}",status="{s}"}} {n}'
            for (e, s), n in sorted(self.requests.items())
        ]
        lines += head("dlperf_errors_total", "counter", "Failed requests by endpoint and kind.")
        lines += [
            f'dlperf_errors_total{{endpoint="{e}",kind="{k}"}} {n}'
            for (e, k), n in sorted(self.errors.items())
        ]
        name = "dlperf_request_duration_seconds"
        lines += head(name, "histogram", "Request latency, arrival to last byte sent.")
        for endpoint, hist in sorted(self.latency.items()):
            lines += hist.lines(name, f'endpoint="{endpoint}"')
        lines += head("dlperf_batch_size", "histogram", "Rows per model call.")
        lines += self.batch_size.lines("dlperf_batch_size")
        name = "dlperf_batch_duration_seconds"
        lines += head(name, "histogram", "Time of one model call.")
        lines += self.batch_seconds.lines(name)
        lines += head("dlperf_queue_depth", "gauge", "Requests waiting for a batch.")
        lines.append(f"dlperf_queue_depth {self.queue_depth()}")
        return "\n".join(lines) + "\n"


class _Instrumented:
    """Every request: the body-size limit (Content-Length first, then the bytes as they
    stream in) and its count and latency. Pure ASGI, so it sees the final status of every
    response, and the matched route (the endpoint label) once routing has run."""

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
            route = scope.get("route")
            endpoint = getattr(route, "path", "other")
            self.metrics.request(endpoint, status, time.perf_counter() - start)


# --- the application -------------------------------------------------------------------------


def create_app(
    model_path: Path,
    max_batch: int = 32,
    max_wait_ms: float = 5.0,
    queue: int = 256,
    threads: int | None = None,
    max_body_bytes: int = 8 * 2**20,
) -> FastAPI:
    """The server for one model; loads the session now so a bad model fails before serving."""
    model = ServedModel(model_path, threads)
    batch = max_batch if model.batchable else 1
    metrics = Metrics(lambda: batcher.depth)
    batcher = Batcher(model.run, batch, max_wait_ms / 1000, queue, on_batch=metrics.batch)
    description = model.metadata(batch, max_wait_ms, queue)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        await batcher.close()  # uvicorn has stopped accepting: finish what is queued

    app = FastAPI(title=f"dlperf serve {model.name}", lifespan=lifespan)
    app.add_middleware(_Instrumented, metrics=metrics, max_body_bytes=max_body_bytes)
    app.state.model = model
    app.state.batcher = batcher

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)

    @app.exception_handler(UserError)
    async def bad_input(request: Request, exc: UserError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, 400)

    @app.exception_handler(Exception)
    async def failure(request: Request, exc: Exception) -> JSONResponse:
        # Starlette still logs the traceback; the client gets the same JSON shape as always.
        return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, 500)

    @app.exception_handler(RequestValidationError)
    async def bad_query(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return JSONResponse({"error": f"{where}: {first['msg']}"}, 400)

    def check_name(name: str) -> None:
        if name != model.name:
            raise HTTPException(404, f"unknown model '{name}'; this server serves '{model.name}'")

    async def infer(feeds: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        try:
            return await batcher.submit(feeds, rows)
        except QueueFull:
            raise HTTPException(
                503, "the request queue is full", headers={"Retry-After": str(RETRY_AFTER_S)}
            ) from None

    @app.get("/v2/health/live")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @app.get("/v2/health/ready")
    async def ready() -> JSONResponse:
        return JSONResponse({"ready": batcher.running}, 200 if batcher.running else 503)

    @app.get("/v2/models/{name}")
    async def model_metadata(name: str) -> dict[str, Any]:
        check_name(name)
        return description

    @app.post("/v2/models/{name}/infer")
    async def infer_tensors(name: str, request: Request) -> dict[str, Any]:
        check_name(name)
        body = await request.body()
        try:
            parsed = InferRequest.model_validate_json(body)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UserError(
                f"malformed request: {where + ': ' if where else ''}{first['msg']}"
            ) from None
        wanted = [o.name for o in parsed.outputs] if parsed.outputs else model.output_names
        missing = sorted(set(wanted) - set(model.output_names))
        if missing:
            raise UserError(f"unknown output '{missing[0]}'; the model has {model.output_names}")
        feeds, rows = model.tensors(parsed)
        outputs = await infer(feeds, rows)
        response: dict[str, Any] = {"model_name": model.name, "model_version": "1"}
        if parsed.id is not None:
            response["id"] = parsed.id
        response["outputs"] = [
            {
                "name": n,
                "shape": list(outputs[n].shape),
                "datatype": V2_TYPES.get(outputs[n].dtype, str(outputs[n].dtype)),
                "data": outputs[n].ravel().tolist(),
            }
            for n in wanted
        ]
        return response

    @app.post("/predict")
    async def predict(
        request: Request,
        topk: int = Query(5, ge=1, description="Classes to return (classifiers)."),
        score_threshold: float = Query(0.5, ge=0, le=1, description="Detectors: lowest score."),
    ) -> dict[str, Any]:
        data = await _image_bytes(request)
        x, (width, height) = await asyncio.to_thread(_image_array, data, model.meta.preprocess)
        outputs = await infer({model.inputs[0].name: x[None]}, 1)
        if model.meta.task == "detection":
            found = _detections(outputs, model.meta, (width, height), score_threshold)
            return {"model_name": model.name, "image_size": [width, height], "detections": found}
        logits = outputs[model.output_names[0]]
        return {
            "model_name": model.name,
            "predictions": runtime.topk(logits, topk, model.meta.labels)[0],
        }

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

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


def _image_array(data: bytes, pre: meta_io.Preprocess) -> tuple[np.ndarray, tuple[int, int]]:
    image = runtime.decode(data, "the uploaded file")
    return runtime.to_array(image, pre), image.size


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
