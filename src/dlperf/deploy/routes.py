"""The endpoints of `dlperf serve`: the Open Inference Protocol's REST side under /v2 (health,
metadata, Triton's model configuration, repository index and statistics, inference), the
image endpoint /predict and /metrics. Each reads the request, calls the model through the
batcher and answers; what they share is one `Serving`.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client.exposition import choose_encoder
from starlette.types import ASGIApp, Receive, Scope, Send

from dlperf.deploy import runtime
from dlperf.deploy.batcher import Batcher, QueueFull
from dlperf.deploy.images import detections, image_array, image_bytes
from dlperf.deploy.protocol import (
    HEADER_LENGTH,
    MODEL_VERSION,
    IndexRequest,
    infer_request,
    infer_response,
    parse,
)
from dlperf.deploy.serve_metrics import Metrics, Phases, Statistics
from dlperf.deploy.served_model import ServedModel
from dlperf.errors import UserError
from dlperf.version import dlperf_version

RETRY_AFTER_S = 1
# An absolute-form request target (RFC 9112 §3.2.2), as a client that has this server as
# its HTTP proxy sends it: scheme and authority, before the path.
ABSOLUTE_FORM = re.compile(rb"[a-z][a-z0-9+.-]*://[^/?#]*", re.IGNORECASE)


@dataclass
class Serving:
    """The served model, its batcher, what counts its requests, and the image decoders;
    `description` and `configuration` are its v2 metadata and Triton configuration."""

    model: ServedModel
    batcher: Batcher
    metrics: Metrics
    stats: Statistics
    decoder: ThreadPoolExecutor
    pixel_cap: int
    description: dict[str, Any]
    configuration: dict[str, Any]


def refuse_encoded(request: Request) -> None:
    """415 for a body sent with any content coding but `identity`: none is decoded here. The
    codings are case-insensitive (RFC 9110 §8.4.1), and repeated Content-Encoding fields are one
    list (§5.3): `identity` first and `gzip` after it is a gzip body."""
    codings = [
        coding.strip().lower()
        for field in request.headers.getlist("content-encoding")
        for coding in field.split(",")
        if coding.strip()
    ]
    applied = [coding for coding in codings if coding != "identity"]
    if applied:
        said = ", ".join(applied)
        raise HTTPException(415, f"Content-Encoding {said} is not accepted; send it plain")


def header_length(request: Request) -> str | None:
    """The request's Inference-Header-Content-Length, None where it has none; refused when
    given with different values: taking the first split the body where a proxy or a client
    that keeps the last would not, between the JSON and the binary data."""
    values = list(dict.fromkeys(request.headers.getlist(HEADER_LENGTH)))
    if len(values) > 1:
        said = " and ".join(repr(v) for v in values)
        times = "twice" if len(values) == 2 else f"{len(values)} times"
        raise UserError(f"{HEADER_LENGTH} is given {times}, {said}; send it once")
    return values[0] if values else None


class OriginForm:
    """Routes an absolute-form target (`GET http://host:port/v2/health/ready`) as its path:
    a server MUST accept it (RFC 9112 §3.2.2), and uvicorn hands it to the app as the path,
    so every route answered 404. Routes HEAD as GET: every general-purpose server MUST answer
    HEAD where it answers GET (RFC 9110 §9.1; a load balancer's health check asks it). Here,
    not as a HEAD method on each route, which OpenAPI would list twice under one operation id;
    uvicorn keeps its own scope's HEAD and sends the GET's headers without the body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw: bytes = scope.get("raw_path") or b""
        found = ABSOLUTE_FORM.match(raw) if scope["type"] == "http" else None
        if found is not None:
            path = raw[found.end() :] or b"/"
            # Percent-decoded as uvicorn decodes an origin-form path (latin-1: never fails).
            scope = {**scope, "raw_path": path, "path": unquote(path.decode("latin-1"))}
        if scope["type"] == "http" and scope["method"] == "HEAD":
            scope = {**scope, "method": "GET"}
        await self.app(scope, receive, send)


def add_routes(app: FastAPI, serving: Serving) -> None:
    model, batcher, stats = serving.model, serving.batcher, serving.stats
    app.add_middleware(OriginForm)  # outermost: the metrics' route label is the path's too

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
            answer: tuple[dict[str, np.ndarray], int] = await batcher.submit(feeds, rows)
            outputs, phases.compute_infer = answer
        except QueueFull as e:
            raise HTTPException(503, str(e), headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        phases.queue = time.perf_counter_ns() - start - phases.compute_infer
        return outputs

    @app.get("/v2")
    async def server_metadata() -> dict[str, Any]:
        extensions = ["binary_tensor_data", "model_configuration", "statistics"]
        return {"name": "dlperf", "version": dlperf_version(), "extensions": extensions}

    @app.get("/v2/health/live")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @app.get("/v2/health/ready")
    async def ready() -> JSONResponse:
        return JSONResponse({"ready": batcher.running}, 200 if batcher.running else 503)

    @app.post("/v2/repository/index")
    async def repository_index(request: Request) -> list[dict[str, str]]:
        refuse_encoded(request)
        body = await request.body()
        wanted = parse(IndexRequest, body) if body.strip() else IndexRequest()
        entry = {"name": model.name, "version": MODEL_VERSION, "state": "READY"}
        if not batcher.running:
            entry.update(state="UNAVAILABLE", reason="the server is shutting down")
        return [] if wanted.ready and not batcher.running else [entry]

    async def model_statistics() -> dict[str, Any]:
        return stats.document(model.name)

    # Before the model's routes: /v2/models/{name} would take "stats" for a model's name (a
    # model named so is refused as the server starts: ServedModel).
    app.add_api_route("/v2/models/stats", model_statistics, methods=["GET"])

    async def model_metadata() -> dict[str, Any]:
        return serving.description

    async def model_config() -> dict[str, Any]:
        return serving.configuration

    async def model_ready() -> JSONResponse:
        doc = {"name": model.name, "ready": batcher.running}
        return JSONResponse(doc, 200 if batcher.running else 503)

    class Counted(APIRoute):
        """A route whose every request for this model is one of the statistics' requests, a
        success or a failure, whatever refused it: a compressed body, or a query FastAPI
        validates before the endpoint runs (`/predict?topk=0`), as well as what the endpoint
        refuses. Those went uncounted, and `fail` fell short of the 4xx /metrics counted. A
        request for another model (404) is none of this one's. The endpoint finds its
        request's phases in `request.state.phases`."""

        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handle = super().get_route_handler()

            async def counted(request: Request) -> Response:
                if "name" in request.path_params:
                    served(request)
                with stats.request() as phases:
                    request.state.phases = phases
                    return await handle(request)

            return counted

    async def infer_tensors(request: Request) -> Response:
        phases: Phases = request.state.phases
        refuse_encoded(request)
        body = await request.body()
        with phases.timing("compute_input"):
            parsed, binary = infer_request(body, header_length(request))
            wanted = model.requested(parsed)
            feeds, rows = model.tensors(parsed, binary)
        outputs = await infer(feeds, rows, phases)
        with phases.timing("compute_output"):
            return infer_response(model.name, parsed.id, wanted, outputs)

    # The model's routes with and without /versions/{version}, each its own route (and label).
    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        checked = [Depends(served)]
        app.add_api_route(prefix, model_metadata, methods=["GET"], dependencies=checked)
        app.add_api_route(f"{prefix}/ready", model_ready, methods=["GET"], dependencies=checked)
        app.add_api_route(f"{prefix}/config", model_config, methods=["GET"], dependencies=checked)
        app.add_api_route(
            f"{prefix}/stats", model_statistics, methods=["GET"], dependencies=checked
        )
        # Checked by Counted, before it counts the request.
        app.router.add_api_route(
            f"{prefix}/infer", infer_tensors, methods=["POST"], route_class_override=Counted
        )

    async def predict(
        request: Request,
        topk: int = Query(5, ge=1, description="Classes to return (classifiers)."),
        score_threshold: float = Query(0.5, ge=0, le=1, description="Detectors: lowest score."),
    ) -> dict[str, Any]:
        phases: Phases = request.state.phases
        refuse_encoded(request)
        described = model.described("/predict")
        data = await image_bytes(request)
        with phases.timing("compute_input"):
            x, size = await asyncio.get_running_loop().run_in_executor(
                serving.decoder, image_array, data, described, serving.pixel_cap
            )
        outputs = await infer({model.inputs[0].name: x[None]}, 1, phases)
        with phases.timing("compute_output"):
            if described.task == "detection":
                found = detections(outputs, described, size, score_threshold)
                return {"model_name": model.name, "image_size": list(size), "detections": found}
            logits = outputs[model.output_names[0]]
            ranked = bool(described.probabilities)  # said once, as the server starts
            predictions = runtime.topk(logits, topk, described.labels, ranked)[0]
            return {"model_name": model.name, "predictions": predictions}

    app.router.add_api_route("/predict", predict, methods=["POST"], route_class_override=Counted)

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encode(serving.metrics.registry), media_type=content_type)
