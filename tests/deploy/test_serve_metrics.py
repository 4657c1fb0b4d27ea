"""dlperf.deploy.serve_metrics on its own: Triton-shaped statistics, Prometheus series read
from the registry, and the ASGI middleware around a two-route app (httpx's ASGITransport)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, HTTPException, Request

from dlperf.deploy.serve_metrics import Instrumented, Metrics, Phases, Statistics


def test_statistics_count_successes_failures_phases_and_batches() -> None:
    stats = Statistics()
    with stats.request() as phases:
        phases.queue = 7
        phases.compute_infer = 11
    with pytest.raises(ValueError), stats.request() as phases:
        phases.queue = 1000  # a failed request's phases are not added
        raise ValueError("bad input")
    stats.batch(4, 0.5)
    stats.batch(1, 0.25)
    stats.batch(4, 0.000_000_002)
    (doc,) = stats.document("m")["model_stats"]
    assert (doc["name"], doc["version"]) == ("m", "1")
    assert doc["inference_count"] == 9 and doc["execution_count"] == 3
    spent = doc["inference_stats"]
    assert spent["success"]["count"] == 1 and spent["fail"]["count"] == 1
    assert spent["queue"] == {"count": 1, "ns": 7}
    assert spent["compute_infer"] == {"count": 1, "ns": 11}
    assert spent["compute_input"] == {"count": 1, "ns": 0}
    # by batch size, ascending, each with its model calls' summed time in ns
    assert doc["batch_stats"] == [
        {"batch_size": 1, "compute_infer": {"count": 1, "ns": 250_000_000}},
        {"batch_size": 4, "compute_infer": {"count": 2, "ns": 500_000_002}},
    ]
    assert doc["last_inference"] > 0


def test_phases_timing_adds_to_the_phase() -> None:
    phases = Phases(compute_output=5)
    with phases.timing("compute_output"):
        pass
    with phases.timing("compute_output"):
        pass
    assert phases.compute_output > 5 and phases.queue == 0


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"model": metrics.model, **labels})


def test_requests_are_counted_by_route_status_and_error_kind() -> None:
    metrics = Metrics("m", lambda: 0)
    for status in (200, 200, 404, 413, 418, 499, 501, 502, 503):
        metrics.request("/r", status, 0.003)
    count = {
        s: value(metrics, "dlperf_requests_total", route="/r", status=s) for s in ("200", "418")
    }
    assert count == {"200": 2.0, "418": 1.0}
    kinds = [
        "not_found",
        "too_large",
        "client_error",
        "client_closed",
        "server_error",
        "overloaded",
        "unsupported",  # a transfer coding other than chunked: the client's, not a fault
    ]
    assert [value(metrics, "dlperf_errors_total", route="/r", kind=k) for k in kinds] == [1.0] * 7
    assert value(metrics, "dlperf_errors_total", route="/r", kind="bad_request") is None
    assert value(metrics, "dlperf_request_duration_seconds_count", route="/r") == 9
    # 0.003 s falls in the 0.005 bucket, not in 0.0025
    assert value(metrics, "dlperf_request_duration_seconds_bucket", route="/r", le="0.0025") == 0
    assert value(metrics, "dlperf_request_duration_seconds_bucket", route="/r", le="0.005") == 9


def test_batch_series_exist_before_the_first_batch_and_queue_depth_is_live() -> None:
    depth = [3]
    metrics = Metrics("m", lambda: depth[0])
    assert value(metrics, "dlperf_batch_size_count") == 0
    assert value(metrics, "dlperf_batch_duration_seconds_count") == 0
    assert value(metrics, "dlperf_queue_depth") == 3
    depth[0] = 5
    assert value(metrics, "dlperf_queue_depth") == 5
    metrics.batch(3, 0.02)
    assert value(metrics, "dlperf_batch_size_sum") == 3
    assert value(metrics, "dlperf_batch_size_bucket", le="2.0") == 0
    assert value(metrics, "dlperf_batch_size_bucket", le="4.0") == 1
    # two servers in one process keep apart
    assert Metrics("other", lambda: 0).registry is not metrics.registry


def instrumented(limit: int) -> tuple[Any, Metrics]:
    app = FastAPI()

    @app.post("/items/{item}")
    async def upload(item: str, request: Request) -> dict[str, int]:
        return {"bytes": len(await request.body())}

    @app.get("/teapot")
    async def teapot() -> None:
        raise HTTPException(418, "short and stout")

    metrics = Metrics("m", lambda: 0)
    return Instrumented(app, metrics, max_body_bytes=limit), metrics


def send(app: Any, method: str, url: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.request(method, url, **kwargs)

    return asyncio.run(go())


def test_middleware_counts_each_request_under_its_route_template() -> None:
    app, metrics = instrumented(limit=10)
    assert send(app, "POST", "/items/a", content=b"12345").json() == {"bytes": 5}
    assert send(app, "POST", "/items/b", content=b"").status_code == 200
    assert send(app, "GET", "/teapot").status_code == 418
    assert send(app, "GET", "/nowhere").status_code == 404
    count = "dlperf_requests_total"
    assert value(metrics, count, route="/items/{item}", status="200") == 2
    assert value(metrics, count, route="/teapot", status="418") == 1
    assert value(metrics, count, route="other", status="404") == 1  # no route matched


def test_middleware_refuses_a_body_over_the_limit_declared_or_streamed() -> None:
    app, metrics = instrumented(limit=10)
    declared = send(app, "POST", "/items/a", content=b"x" * 11)
    assert declared.status_code == 413
    assert declared.json()["detail"] == "request body over the 10-byte limit"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the bytes are counted
        for _ in range(3):
            yield b"x" * 4

    streamed = send(app, "POST", "/items/a", content=chunks())
    assert streamed.status_code == 413
    assert send(app, "POST", "/items/a", content=b"x" * 10).status_code == 200  # at the limit
    too_large = value(metrics, "dlperf_errors_total", route="/items/{item}", kind="too_large")
    assert too_large == 2
