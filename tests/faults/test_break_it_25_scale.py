"""Break-it round 25 (signals and resource caps), `dlperf scale` and `dlperf serve`: a
--rdzv port on this host that another process listens on is refused before launch (torchrun
connected to the stranger and waited, silent, for its rendezvous timeout); threads per worker
times workers per node past the usable cores is refused as run.threads is (1,000 threads on
2 cores ran, 3 steps not done in 90 s); and serve imports before it accepts what a first
request imported lazily (anyio's asyncio backend, scipy.special), which out of files answered
a client 500 with a traceback."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from dlperf.store import RunStore
from dlperf.system import usable_cores
from tests.distributed.test_study import WEAK, write_experiment

EVENT_S = 120.0  # how long a busy machine may take to get somewhere: a deadline, not a wait
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port on 127.0.0.1 another listener holds, and never answers on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen(5)
        yield int(stranger.getsockname()[1])


@pytest.mark.timeout(300)  # the old hang: torchrun waited out its rendezvous timeout
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_rdzv_port_held_by_another_listener_is_refused(
    cli: Callable, tmp_path: Path, held_port: int, host: str, store: RunStore
) -> None:
    endpoint = f"{host}:{held_port}"
    r = cli("scale", str(write_experiment(tmp_path)), "--workers", "1", *WEAK, "--steps", "2",
            "--synthetic", "--rdzv", endpoint)  # fmt: skip
    assert r.code == 2, r.err
    (line,) = [x for x in r.err.splitlines() if x.strip()][:1]
    assert endpoint in line and "in use" in line, r.err
    assert "another port" in r.err and "leave --rdzv out" in r.err, r.err
    assert "Traceback" not in r.err
    assert store.list_runs() == [] and not list(tmp_path.glob("dlperf_runs/scale-*")), "launched"


def test_a_free_port_passes_and_neither_a_remote_host_nor_a_peer_node_is_bound(
    held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlperf.config import ScaleConfig
    from dlperf.distributed import launch, planning

    with socket.socket() as probe:  # a port free now
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    launch.check_endpoint(f"127.0.0.1:{port}")  # free: no refusal
    # Of two nodes emulated on this host, node 1's torchrun may hold the port first.
    two = {"steps": 2, "mode": "weak", "per_worker_batch": 16, "workers": [2], "nnodes": 2}
    monkeypatch.setattr(planning, "usable_cores", lambda: 2)
    planning.plan(ScaleConfig.model_validate(two | {"rdzv": f"127.0.0.1:{held_port}"}), "gloo")
    bound: list[object] = []
    monkeypatch.setattr(launch.socket.socket, "bind", lambda self, a: bound.append(a))
    launch.check_endpoint(f"192.0.2.1:{port}")  # TEST-NET-1: never this host
    assert bound == []


@pytest.mark.parametrize(("workers", "extra"), [(1, 1), (2, 0)], ids=["one-worker", "product"])
def test_threads_per_worker_past_the_cores_are_refused(
    cli: Callable, tmp_path: Path, store: RunStore, workers: int, extra: int
) -> None:
    """One worker's threads past the cores: refused as run.threads is (no way around it);
    threads x workers per node past them: refused unless --allow-oversubscribe."""
    cores = usable_cores()
    if workers > cores:
        pytest.skip("needs as many cores as workers")
    threads = cores + extra
    args = ["scale", str(write_experiment(tmp_path)), "--workers", str(workers), *WEAK,
            "--steps", "2", "--synthetic", "--threads-per-worker", str(threads)]  # fmt: skip
    r = cli(*args)
    assert r.code == 2, r.err
    asked = threads * workers
    assert f"{asked} threads asked for, but this host has {cores} usable cores" in r.err, r.err
    assert "--threads-per-worker" in r.err and "Traceback" not in r.err
    assert ("--allow-oversubscribe" in r.err) == (workers > 1), r.err
    assert store.list_runs() == [] and not list(tmp_path.glob("dlperf_runs/scale-*")), "launched"


# The server of `dlperf serve` in a process of its own: the modules it holds once it listens,
# and after the first requests (whatever they imported needed a file, which a server out of
# files did not have). The client is this process: its own imports are not the server's.
SERVER = """
import json, sys
from pathlib import Path
from dlperf.cli.serve import _listen
from dlperf.deploy import server

app = server.create_app(Path(sys.argv[1]))
sock = _listen("127.0.0.1", 0)
port = sock.getsockname()[1]  # uvicorn serves a copy of the socket, and closes this one
started = server._DrainingServer.startup
ready: set[str] = set()


async def startup(self, sockets=None):
    await started(self, sockets)
    ready.update(sys.modules)  # accepting from here on
    print(port, flush=True)

server._DrainingServer.startup = startup
server.serve_forever(app, sock)
print(json.dumps(sorted(set(sys.modules) - ready)), flush=True)
"""


def test_serve_imports_what_a_first_request_needs_before_it_accepts(tmp_path: Path) -> None:
    from tests.deploy.test_server import SIZE, infer_body, tiny_classifier

    model = tiny_classifier(tmp_path / "tiny.onnx")
    script = tmp_path / "server.py"
    script.write_text(textwrap.dedent(SERVER))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(model)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = f"http://127.0.0.1:{int(proc.stdout.readline())}"
        x = np.zeros((1, 3, SIZE, SIZE), np.float32)
        r = httpx.post(f"{url}/v2/models/tiny/infer", json=infer_body(x), timeout=EVENT_S)
        assert r.status_code == 200, r.text
        png = tmp_path / "x.png"
        Image.new("RGB", (SIZE, SIZE)).save(png)
        r = httpx.post(f"{url}/predict", content=png.read_bytes(), timeout=EVENT_S,
                       headers={"content-type": "image/png"})  # fmt: skip
        assert r.status_code == 200, r.text
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=EVENT_S)
    finally:
        proc.kill()
        proc.wait(EVENT_S)
    imported = json.loads(out.strip().splitlines()[-1])
    assert imported == [], f"imported at the first requests: {imported}"
