"""Every dlperf series of `dlperf serve`'s /metrics carries the served model's name as its
`model` label, the batch and queue series as the request series do, so that several servers
scraped into one Prometheus keep apart. A real server on 127.0.0.1 (uvicorn in a thread)
serving a real ONNX classifier; /metrics read with prometheus_client's own text parser."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from dlperf.deploy.server import create_app
from tests.deploy.test_server import metric, png, running, tiny_classifier


def test_batch_and_queue_series_carry_the_model_as_request_series_do(tmp_path: Path) -> None:
    model = tiny_classifier(tmp_path / "tiny.onnx")
    with running(create_app(model, max_batch=8, max_wait_ms=10, threads=1)) as url:
        before = httpx.get(f"{url}/metrics", timeout=60).text
        assert httpx.post(f"{url}/predict", content=png(), timeout=60).status_code == 200
        text = httpx.get(f"{url}/metrics", timeout=60).text

    ours = [f for f in text_string_to_metric_families(text) if f.name.startswith("dlperf_")]
    names = {f.name for f in ours}
    assert names >= {"dlperf_requests", "dlperf_batch_size", "dlperf_batch_duration_seconds",
                     "dlperf_queue_depth"}  # fmt: skip
    unlabelled = [s.name for f in ours for s in f.samples if s.labels.get("model") != "tiny"]
    assert unlabelled == []
    # The batch series are there from the start, at zero, so a rate has its first point.
    assert metric(before, "dlperf_batch_size_count", model="tiny") == 0
    assert metric(text, "dlperf_batch_size_count", model="tiny") == 1
    assert metric(text, "dlperf_batch_duration_seconds_count", model="tiny") == 1
    assert metric(text, "dlperf_queue_depth", model="tiny") == 0
