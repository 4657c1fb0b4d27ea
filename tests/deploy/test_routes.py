"""dlperf.deploy.routes on its own: the endpoints over one `Serving` put together here (tiny
ONNX models, a real Batcher, a fake decoder pool of one thread), called in-process through
httpx's ASGITransport: no socket, no server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
import numpy as np
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from dlperf.deploy.batcher import Batcher
from dlperf.deploy.routes import Serving, add_routes
from dlperf.deploy.serve_metrics import Metrics, Statistics
from dlperf.deploy.served_model import ServedModel
from dlperf.errors import UserError
from tests.deploy.test_server import plain_model, png, tiny_classifier

T = TypeVar("T")
Client = httpx.AsyncClient


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("routes")
    return {"plain": plain_model(root / "plain.onnx"), "tiny": tiny_classifier(root / "tiny.onnx")}


def serve(
    path: Path,
    scenario: Callable[[Client, Serving], Awaitable[T]],
    start: bool = True,
    queue: int = 8,
) -> T:
    """Run `scenario` against the routes of the model at `path`, the batcher started or not."""
    model = ServedModel(path, threads=1)
    stats = Statistics()

    def execute(payloads: list[dict[str, np.ndarray]]) -> list[tuple[dict[str, np.ndarray], int]]:
        return [(outputs, 1000) for outputs in model.run(payloads)]  # 1 µs a call, said

    async def go() -> T:
        batcher = Batcher(execute, 4, 0.001, queue, on_batch=stats.batch)
        decoder = ThreadPoolExecutor(1)
        app = FastAPI()

        @app.exception_handler(UserError)
        async def bad(request: Request, exc: UserError) -> JSONResponse:
            return JSONResponse({"error": str(exc)}, 400)

        metrics = Metrics(model.name, lambda: batcher.depth)
        description = {"described": model.name}
        configuration = {"configured": model.name}
        serving = Serving(
            model, batcher, metrics, stats, decoder, 10_000, description, configuration
        )
        add_routes(app, serving)
        if start:
            batcher.start()
        try:
            transport = httpx.ASGITransport(app=app)
            async with Client(transport=transport, base_url="http://test") as client:
                return await scenario(client, serving)
        finally:
            await batcher.close()
            decoder.shutdown(wait=True)

    return asyncio.run(asyncio.wait_for(go(), timeout=30))


def infer_body(rows: int = 1) -> dict[str, Any]:
    x = np.arange(4 * rows, dtype=np.float32).reshape(rows, 4)
    return {"id": "r1", "inputs": [{"name": "x", "shape": [rows, 4], "datatype": "FP32",
                                    "data": x.ravel().tolist()}]}  # fmt: skip


def test_health_metadata_and_index_of_a_running_server(paths: dict[str, Path]) -> None:
    async def scenario(client: Client, serving: Serving) -> None:
        server = (await client.get("/v2")).json()
        assert server["name"] == "dlperf" and "binary_tensor_data" in server["extensions"]
        assert (await client.get("/v2/health/live")).json() == {"live": True}
        ready = await client.get("/v2/health/ready")
        assert (ready.status_code, ready.json()) == (200, {"ready": True})
        index = (await client.post("/v2/repository/index")).json()
        assert index == [{"name": "plain", "version": "1", "state": "READY"}]
        # metadata and config are the documents Serving carries, with or without a version
        assert (await client.get("/v2/models/plain")).json() == {"described": "plain"}
        versioned = await client.get("/v2/models/plain/versions/1/config")
        assert versioned.json() == {"configured": "plain"}
        model_ready = await client.get("/v2/models/plain/ready")
        assert model_ready.json() == {"name": "plain", "ready": True}

    serve(paths["plain"], scenario)


def test_a_server_whose_batcher_is_not_running_is_not_ready(paths: dict[str, Path]) -> None:
    async def scenario(client: Client, serving: Serving) -> None:
        assert (await client.get("/v2/health/ready")).status_code == 503
        assert (await client.get("/v2/models/plain/ready")).json()["ready"] is False
        index = (await client.post("/v2/repository/index", content=b"  ")).json()
        assert index[0]["state"] == "UNAVAILABLE"
        assert index[0]["reason"] == "the server is shutting down"
        only_ready = await client.post("/v2/repository/index", json={"ready": True})
        assert only_ready.json() == []

    serve(paths["plain"], scenario, start=False)


def test_other_models_and_versions_are_404_naming_what_is_served(paths: dict[str, Path]) -> None:
    async def scenario(client: Client, serving: Serving) -> None:
        other = await client.get("/v2/models/resnet/ready")
        assert other.status_code == 404
        assert other.json()["detail"] == "unknown model 'resnet'; this server serves 'plain'"
        version = await client.post("/v2/models/plain/versions/2/infer", json=infer_body())
        assert version.status_code == 404
        assert version.json()["detail"] == "unknown version '2' of model 'plain'; it has '1'"
        # "stats" is the statistics of every model, not a model called stats
        stats = await client.get("/v2/models/stats")
        assert stats.status_code == 200 and stats.json()["model_stats"][0]["name"] == "plain"
        assert serving.stats.fail.count == 0  # a 404 never reached the model's statistics

    serve(paths["plain"], scenario)


def test_infer_answers_and_counts_the_request(paths: dict[str, Path]) -> None:
    async def scenario(client: Client, serving: Serving) -> dict[str, Any]:
        response = await client.post("/v2/models/plain/infer", json=infer_body(rows=2))
        assert response.status_code == 200, response.text
        doc: dict[str, Any] = response.json()
        stats = (await client.get("/v2/models/plain/stats")).json()["model_stats"][0]
        assert stats["inference_count"] == 2 and stats["execution_count"] == 1
        spent = stats["inference_stats"]
        assert spent["success"]["count"] == 1 and spent["compute_infer"]["ns"] == 1000
        assert spent["queue"]["count"] == 1 and spent["queue"]["ns"] >= 0
        return doc

    doc = serve(paths["plain"], scenario)
    assert doc["model_name"] == "plain" and doc["id"] == "r1"
    y = next(o for o in doc["outputs"] if o["name"] == "y")
    # rows [0, 1, 2, 3] and [4, 5, 6, 7] @ arange(8).reshape(4, 2) / 8
    assert y["shape"] == [2, 2]
    assert y["data"] == pytest.approx([28 / 8, 34 / 8, 76 / 8, 98 / 8])


def test_bad_requests_fail_with_their_status(paths: dict[str, Path]) -> None:
    async def scenario(client: Client, serving: Serving) -> None:
        gzip = await client.post(
            "/v2/models/plain/infer", content=b"{}", headers={"content-encoding": "gzip"}
        )
        assert gzip.status_code == 415
        assert gzip.json()["detail"] == "Content-Encoding gzip is not accepted; send it plain"
        broken = await client.post("/v2/models/plain/infer", content=b'{"inputs": []}')
        assert broken.status_code == 400
        assert broken.json()["error"].startswith("malformed request: inputs:")
        # each is a failure (the encoding's refusal went uncounted before round 58)
        assert serving.stats.fail.count == 2 and serving.stats.success.count == 0

    serve(paths["plain"], scenario)


def test_a_full_queue_is_503_with_retry_after(paths: dict[str, Path]) -> None:
    async def scenario(client: Client, serving: Serving) -> httpx.Response:
        return await client.post("/v2/models/plain/infer", json=infer_body())

    response = serve(paths["plain"], scenario, queue=0)  # no room for anyone
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert response.json()["detail"] == "the request queue is full"


def test_predict_ranks_the_classes_of_an_image(paths: dict[str, Path]) -> None:
    async def scenario(client: Client, serving: Serving) -> dict[str, Any]:
        response = await client.post("/predict?topk=2", content=png())
        assert response.status_code == 200, response.text
        too_many = await client.post("/predict?topk=0", content=png())
        assert too_many.status_code == 422  # FastAPI's own answer: the app adds no handler
        result: dict[str, Any] = response.json()
        return result

    doc = serve(paths["tiny"], scenario)
    assert doc["model_name"] == "tiny" and len(doc["predictions"]) == 2
    first, second = doc["predictions"]
    assert first["probability"] >= second["probability"]
    assert {first["label"], second["label"]} <= {"cat", "dog", "bird"}


def test_predict_needs_the_dlperf_metadata(paths: dict[str, Path]) -> None:
    async def scenario(client: Client, serving: Serving) -> httpx.Response:
        return await client.post("/predict", content=png())

    response = serve(paths["plain"], scenario)
    assert response.status_code == 400
    assert response.json()["error"].startswith("/predict needs the dlperf metadata")


def test_metrics_are_prometheus_text(paths: dict[str, Path]) -> None:
    async def scenario(client: Client, serving: Serving) -> httpx.Response:
        return await client.get("/metrics")

    started = time.perf_counter()
    response = serve(paths["plain"], scenario)
    assert response.headers["content-type"].startswith("text/plain")
    assert 'dlperf_queue_depth{model="plain"} 0.0' in response.text
    assert time.perf_counter() - started < 20
