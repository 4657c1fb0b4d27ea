"""`dlperf serve` as a real process (port 0, SIGTERM with requests queued) and
`dlperf serve bench` against it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from dlperf.cli.serve import _listen
from dlperf.deploy import loadgen
from tests.deploy.test_server import LABELS, metric, plain_model, png, tiny_classifier, wait_ready

Cli = Callable[..., Any]


@contextmanager
def serve(model: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`dlperf serve MODEL --port 0 ...`; the URL comes from its first line on stderr."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "dlperf", "serve", str(model), "--port", "0",
               "--threads", "1", *options]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # EOF (an empty line) if the server died instead
        found = re.search(r"on (http://127\.0\.0\.1:\d+) ", line)
        assert found, f"unexpected first line: {line!r}"
        url = found.group(1)
        wait_ready(url)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a server that ignores SIGTERM must not outlive us
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("cli") / "tiny.onnx")


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[str]:
    """Configured by a file's [serve] section, and a flag that overrides one of its keys."""
    config = model.with_name("serve.toml")
    config.write_text("[serve]\nmax_batch = 8\nmax_wait_ms = 1000\n")
    with serve(model, "--config", str(config), "--max-wait-ms", "2") as (url, _):
        yield url


def test_cli_server_labels_an_image(server: str) -> None:
    r = httpx.post(f"{server}/predict?topk=1", files={"file": ("a.png", png(), "image/png")})
    assert r.status_code == 200, r.text
    (best,) = r.json()["predictions"]
    assert best["label"] in LABELS and 0 < best["probability"] <= 1
    batching = httpx.get(f"{server}/v2/models/tiny").json()["batching"]
    assert (batching["max_batch"], batching["max_wait_ms"]) == (8, 2)


def test_bench_reports_each_level(server: str, cli: Cli) -> None:
    r = cli("serve", "bench", server, "--concurrency", "1,4", "--duration", "1",
            "--max-requests", "40", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["url"] == f"{server}/predict"
    assert [level["concurrency"] for level in doc["levels"]] == [1, 4]
    for level in doc["levels"]:
        assert 0 < level["requests"] <= 40 and level["errors"] == 0
        assert level["ok"] == level["requests"] == level["statuses"]["200"]
        assert level["throughput"] == pytest.approx(level["ok"] / level["wall_s"])
        assert 0 < level["p50_ms"] <= level["p90_ms"] <= level["p99_ms"]
        # the more contended of the server's and the load generator's windows, and the mark
        share = level["cpu_wait_share"]
        assert isinstance(share, float) and 0 <= share <= 1
        assert level["contention"]["cpu_wait_share"] == share
        assert level["contention"]["process"] in ("server", "load generator")
        assert (level["reliability_note"] is None) is level["reliable"]
    text = httpx.get(f"{server}/metrics").text
    # Warm-up (one per client), the probe and the measured requests all reached the model.
    served = sum(level["ok"] for level in doc["levels"]) + 1 + 4 + 1
    assert metric(text, "dlperf_batch_size_sum") >= served


def test_bench_table(server: str, cli: Cli) -> None:
    r = cli("serve", "bench", server, "--concurrency", "2", "--duration", "0.5",
            "--max-requests", "5")  # fmt: skip
    assert r.code == 0, r.err
    assert f"POST {server}/predict" in r.out and "p99 ms" in r.out and "CPU wait" in r.out


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux's /proc/net")
def test_bench_finds_the_server_by_its_port(server: str) -> None:
    """The server's process is found from its listening port, so its own threads' CPU wait
    is measured, not only the load generator's."""
    (pid,) = loadgen.listeners("127.0.0.1", int(server.rsplit(":", 1)[1]))
    assert pid != os.getpid()
    assert "serve" in Path(f"/proc/{pid}/cmdline").read_text()
    assert loadgen.listeners("127.0.0.1", 9) == set()  # nothing listens on the discard port


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://10.1.2.3:8000", "10.1.2.3 is not a loopback address"),
        ("http://example.com/predict", "example.com is not a loopback address"),
        ("ftp://127.0.0.1", "is not an http:// URL"),
    ],
)
def test_bench_refuses_other_hosts(cli: Cli, url: str, message: str) -> None:
    r = cli("serve", "bench", url, "--duration", "1")
    assert r.code == 2
    assert message in r.err


def test_bench_without_a_server_is_one_error(cli: Cli) -> None:
    r = cli("serve", "bench", "http://127.0.0.1:9", "--duration", "1", "--max-requests", "1")
    assert r.code == 2 and "no server answers at http://127.0.0.1:9/predict" in r.err


def test_bad_model_file(cli: Cli, tmp_path: Path) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not onnx")
    r = cli("serve", str(junk))
    assert r.code == 2 and "is not an ONNX model" in r.err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_finishes_queued_requests(model: Path, sig: signal.Signals) -> None:
    # uvicorn drains on SIGINT and SIGTERM only; SIGHUP (a closed terminal) must drain too.
    # A batch would wait ten minutes for a third request that never comes, so the signal lands
    # while two requests sit in the queue however slow the machine; both must be answered
    # at once (a closing batcher drains without waiting out max-wait), well inside the joins.
    with serve(model, "--max-batch", "3", "--max-wait-ms", "600000") as (url, proc):
        replies: list[httpx.Response] = []

        def post() -> None:
            replies.append(httpx.post(f"{url}/predict", content=png(), timeout=30))

        clients = [threading.Thread(target=post) for _ in range(2)]
        for c in clients:
            c.start()
        deadline = time.monotonic() + 30
        while metric(httpx.get(f"{url}/metrics").text, "dlperf_queue_depth") < 2:
            assert time.monotonic() < deadline, "requests never queued"
            time.sleep(0.02)
        proc.send_signal(sig)
        for c in clients:
            c.join(timeout=60)
        assert [r.status_code for r in replies] == [200, 200]
        assert proc.wait(timeout=60) == 128 + sig  # 143 or 129, as a shell reports them


def test_serves_a_plain_onnx_file_and_ctrl_c_exits_130(tmp_path: Path) -> None:
    """An ONNX file without dlperf's metadata starts (it was refused) on the tensor endpoint;
    Ctrl-C then ends the server with 130, as a shell reports it (one server for both: each
    costs a process start)."""
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 0, 0, 0]}]}
    with serve(plain_model(tmp_path / "plain.onnx")) as (url, proc):
        r = httpx.post(f"{url}/v2/models/plain/infer", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["outputs"][0]["data"] == [0.0, 0.125]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130  # 128 + SIGINT


def test_accepted_connections_send_without_delay() -> None:
    """asyncio turns on TCP_NODELAY only for sockets whose proto says TCP; without it every
    keep-alive response waited ~40 ms for the client's delayed ACK."""

    async def accepted_nodelay() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        listener = _listen("127.0.0.1", 0)
        server = await asyncio.start_server(handle, sock=listener)
        _, writer = await asyncio.open_connection(*listener.getsockname())
        try:
            return await asyncio.wait_for(seen, timeout=30)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    assert asyncio.run(accepted_nodelay()) == 1
