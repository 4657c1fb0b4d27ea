"""Break-it round 29, the signals and caps tester (P4): export and serve, causes C1, C2, C4, C6.

C1. A v2 request shape with -1 or 0 ([-1,1,8,8] for a model of [-1,1,8,8]) was refused as
"has shape [-1, 1, 8, 8]; expected [-1, 1, 8, 8]", blaming a matching shape. Now the bad
dimension is named; a batch of 0 rows is refused, as Triton refuses it.
C2. /metrics counted a request answered 408 by the read deadline as 499 client_closed, and a
connection answered 503 at --max-connections nowhere. Now both count as what clients got.
C4. A SIGKILL between `_publish`'s renames left one export's graph beside another's weights
(both MODEL.onnx.data), and `infer` and `serve` answered with them silently. Now the model
records its weights' SHA-256 and a load refuses weights that do not match, in one line.
C6. Two `export --out PATH` at once shared `.PATH.exporting`, each removing the other's files,
and one failed blaming both ONNX exporters. Now the second is refused, naming the first.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from dlperf.deploy import export as export_module
from dlperf.deploy.export import export, from_registry
from dlperf.deploy.served_model import ServedModel
from dlperf.deploy.server import create_app
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.deploy.test_server import infer_body, running, tiny_classifier
from tests.deploy.test_server_limits import (
    EVENT_S,
    SLOW_BODY,
    answer,
    connect,
    read_until_closed,
    serving,
    wait_for,
)

Cli = Callable[..., CliResult]

NET = """\
from torch import nn


def build(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 8 * 8, num_classes))
"""


@pytest.fixture
def net(tmp_path: Path) -> str:
    (tmp_path / "net.py").write_text(NET)
    return f"{tmp_path / 'net.py'}:build"


# --- C1: a request dimension below 1 is named --------------------------------------------------


@pytest.fixture(scope="module")
def tiny_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tiny = tiny_classifier(tmp_path_factory.mktemp("models") / "tiny.onnx")
    with running(create_app(tiny, threads=1)) as url:
        yield url


@pytest.mark.parametrize(
    ("shape", "said"),
    [
        (
            [-1, 3, 8, 8],
            "input 'input' has shape [-1, 3, 8, 8]: dimension 0 is -1; a request gives each "
            "dimension's size, 1 or more (-1 marks a dynamic dimension in the model's "
            "metadata, not in a request)",
        ),
        (
            [0, 3, 8, 8],
            "input 'input' has shape [0, 3, 8, 8]: a batch of 0 rows, which this server "
            "refuses as Triton does; send at least one row",
        ),
        (
            [1, 3, 0, 8],
            "input 'input' has shape [1, 3, 0, 8]: dimension 2 is 0; a request gives each "
            "dimension's size, 1 or more (-1 marks a dynamic dimension in the model's "
            "metadata, not in a request)",
        ),
    ],
    ids=["minus one", "empty batch", "zero inside"],
)
def test_a_request_dimension_below_one_is_named(tiny_url: str, shape: list[int], said: str) -> None:
    count = max(int(np.prod(shape)), 0)
    body = infer_body(np.zeros(count, np.float32), shape=shape)
    reply = httpx.post(f"{tiny_url}/v2/models/tiny/infer", json=body, timeout=EVENT_S)
    assert (reply.status_code, reply.json()) == (400, {"error": said})


# --- C2: /metrics count what the protocol layer answered ---------------------------------------


def _requests(url: str) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{url}/metrics", timeout=EVENT_S).text
    return {
        (s.labels["route"], s.labels["status"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "dlperf_requests_total"
    }


def test_metrics_count_the_408s_and_503s_clients_were_sent(tmp_path: Path) -> None:
    """Before: the 408 of a body cut short was counted status="499"; the 408 of a connection
    that sent nothing, the 503 of the connection cap and h11's 400 nowhere."""
    app = create_app(tiny_classifier(tmp_path / "tiny.onnx"), threads=1)
    with serving(app, read_timeout_s=1.0, max_connections=2) as (url, server):
        connections = server.server_state.connections
        wait_for(lambda: not connections, "the readiness probe's connection to close")
        with connect(url) as slow, connect(url) as silent:
            slow.sendall(SLOW_BODY)  # its headers in: the app waits for the body
            wait_for(lambda: len(connections) == 2, "the server to hold both connections")
            with connect(url) as third:
                third.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                sent = [answer(read_until_closed(third))[0]]
            sent += [answer(read_until_closed(s))[0] for s in (slow, silent)]
        with connect(url) as garbled:
            garbled.sendall(b"NOT HTTP\r\n\r\n")
            sent.append(int(read_until_closed(garbled).split()[1]))
        assert sent == [503, 408, 408, 400]
        wait_for(lambda: not connections, "the server to drop them")
        infer = "/v2/models/{name}/infer"
        wanted = {(infer, "408"): 1.0}
        wanted |= {("(connection)", status): 1.0 for status in ("408", "503", "400")}
        counted: dict[tuple[str, str], float] = {}

        def counted_all() -> bool:
            counted.update(_requests(url))
            return all(counted.get(key) == n for key, n in wanted.items())

        wait_for(counted_all, f"the metrics to count {wanted}")
    assert not any(status == "499" for _, status in counted), counted


# --- C4: a graph beside another export's weights is refused ------------------------------------


class Killed(BaseException):
    """SIGKILL as the publish stands: nothing after it runs, no handler sees it."""


@pytest.mark.faults  # two exports: over 10 s on a busy machine
def test_a_kill_between_the_publish_renames_is_refused_at_load(
    cli: Cli, net: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the new graph with the earlier export's weights, answered by `infer` with exit 0
    (logits of neither export)."""
    out = tmp_path / "m.onnx"
    export(from_registry(net, (1, 8, 8), 10), out)
    other = from_registry(net, (1, 8, 8), 10)
    with torch.no_grad():
        for p in other.model.parameters():
            p.add_(0.5)  # another export's weights: same names, same sizes
    real = Path.replace
    moved: list[str] = []

    def replace(self: Path, target: Any) -> Path:
        if Path(target).parent == tmp_path:
            if moved:
                raise Killed  # the worst moment: one file of the three moved
            moved.append(Path(target).name)
        return real(self, target)

    monkeypatch.setattr(Path, "replace", replace)
    with pytest.raises(Killed):
        export(other, out)
    monkeypatch.setattr(Path, "replace", real)
    data = tmp_path / "m.onnx.data"
    said = (
        f"{data} is not the weights of {out}: its SHA-256 differs from the one the model "
        "recorded at export (the files come from two exports: one stopped, or two at once, as "
        "it replaced the other) (export the model again)"
    )
    with pytest.raises(UserError) as refused:
        ServedModel(out, None)  # what `dlperf serve` loads
    assert str(refused.value) == said
    Image.new("L", (8, 8)).save(tmp_path / "x.png")
    result = cli("infer", str(out), str(tmp_path / "x.png"))
    assert (result.code, result.out, result.err) == (2, "", f"error: {said}\n")


# --- C6: a second export to the same --out is refused, naming the first --------------------------


def test_a_second_export_to_the_same_out_is_refused_and_a_dead_ones_leftovers_cleaned(
    net: str, tmp_path: Path
) -> None:
    """Before: the second removed the first's staging directory, and one of the two failed
    with 'the dynamo exporter failed (FileNotFoundError ...), and the TorchScript exporter
    too'."""
    out = tmp_path / "m.onnx"
    source = from_registry(net, (1, 8, 8), 10)
    with export_module._staged(out) as first:  # a first export, under way
        first.write_bytes(b"the first export's model")
        with pytest.raises(UserError) as refused:
            export(source, out)
        assert first.read_bytes() == b"the first export's model"
    assert str(refused.value) == (
        f"another dlperf export (pid {os.getpid()}) is writing {out} (wait for it to finish, "
        "or give another --out)"
    )
    # A SIGKILLed export's leftovers: nobody holds them, so they are cleared and used.
    leftover = tmp_path / ".m.onnx.exporting"
    leftover.mkdir()
    (leftover / "m.onnx.data").write_bytes(b"half of a killed export's weights")
    result = export(source, out)
    assert result["parity"]
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("m.", ".m.")))
    assert left == ["m.onnx", "m.onnx.data", "m.onnx.json"]
