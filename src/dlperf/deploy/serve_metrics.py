"""What `dlperf serve` counts: Prometheus metrics (`GET /metrics`) kept by an ASGI middleware
that also enforces the body-size limit, and the inference statistics of the protocol's
statistics extension, in the shape Triton reports them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any

from fastapi import HTTPException
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dlperf.deploy.protocol import MODEL_VERSION

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
ERROR_KINDS = {
    400: "bad_request",
    404: "not_found",
    408: "read_timeout",
    413: "too_large",
    431: "too_large",  # a request head over h11's limit
    499: "client_closed",
    # h11's answer to a transfer coding other than chunked: the client's choice, so not a
    # server_error, although 5xx by the protocol
    501: "unsupported",
    503: "overloaded",
    507: "out_of_memory",
}

# The route label of an answer the HTTP protocol gives before any route sees a request: a
# connection past the cap (503), a request whose headers did not arrive in time (408), one
# h11 cannot parse (400; 431 a head over its limit, 501 a transfer coding other than chunked).
CONNECTION_ROUTE = "(connection)"
# The scope key under which the protocol leaves the status it answered a request with while the
# app still read its body (a 408 at the read deadline, a 503 as the server stops): the app then
# hears a disconnect and answers nobody, and that answer is not what the client got.
ANSWERED = "dlperf.answered"

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


class Statistics:
    """Inference statistics of the served model in the shape of Triton's
    `get_inference_statistics`. Requests are those that run the model (v2 infer and
    /predict): success or fail with their whole time, and, for a success, its phases. A
    batch adds its rows to inference_count and its model call to execution_count and to
    the batch_stats of its size. Updated on the event loop only, so no lock."""

    def __init__(self) -> None:
        self.success = _Duration()
        self.fail = _Duration()
        self.phases = {f.name: _Duration() for f in fields(Phases)}
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
        for phase, ns in asdict(phases).items():
            self.phases[phase].add(ns)
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


# --- Prometheus metrics ----------------------------------------------------------------------


class Metrics:
    """Prometheus metrics in a registry of this app's own, so that several servers in one
    process (tests) keep apart; process and platform collectors included. Every dlperf series
    (requests, batches, queue) has the served model's name as its `model` label, so that
    several servers scraped into one Prometheus keep apart."""

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
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.batch_seconds = Histogram(
            "dlperf_batch_duration_seconds",
            "Time of one model call.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        depth = Gauge(
            "dlperf_queue_depth", "Requests waiting for a batch.", ["model"], registry=self.registry
        )
        depth.labels(model).set_function(queue_depth)
        # The batch series exist, at zero, before the first batch: a rate over a scrape
        # taken before it then has a start, as the unlabelled histograms had.
        self.batch_size.labels(model)
        self.batch_seconds.labels(model)

    def request(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(self.model, route, str(status)).inc()
        if status >= 400:
            kind = ERROR_KINDS.get(status, "server_error" if status >= 500 else "client_error")
            self.errors.labels(self.model, route, kind).inc()
        self.latency.labels(self.model, route).observe(seconds)

    def batch(self, rows: int, seconds: float) -> None:
        self.batch_size.labels(self.model).observe(rows)
        self.batch_seconds.labels(self.model).observe(seconds)


class Instrumented:
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
            answered = scope.get(ANSWERED, status)
            self.metrics.request(route, answered, time.perf_counter() - start)
