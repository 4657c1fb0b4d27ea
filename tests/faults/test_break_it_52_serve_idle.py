"""Break-it round 52, fixer F3: an idle `serve` under a memory limit that died.

T3 C3. `dlperf serve m.onnx` under `ulimit -v 300000` said it served, then, idle with no
    request, often died 15-25 s later: glibc's "cannot allocate memory for thread-local data:
    ABORT" (exit 127), "Unexpected error." and SIGABRT (134), or a silent SIGSEGV (139). Its
    address space grew from 608 MB to 895 MB with no request at all. The grower: ONNX
    Runtime's telemetry (1.32's 1DS uploader), started as the library loads. It opened a store
    in ~/.cache/Microsoft, and some 9 s later, and every few seconds after, its dispatcher
    thread started threads that resolved and reached Microsoft's collector, each reserving an
    8 MiB stack and a 64 MiB malloc arena; under the limit one of them failed. Now dlperf
    turns that telemetry off (ORT_DISABLE_TELEMETRY=1, read only as the library loads) before
    any of its modules imports ONNX Runtime, unless the user set the variable: the idle server
    starts nothing after it says it serves, and its address space stays as it was.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import dlperf
import dlperf.deploy
from tests.deploy.test_server import tiny_classifier
from tests.deploy.test_server_limits import EVENT_S

SOURCE = str(Path(dlperf.__file__).parents[1])  # the dlperf under test, in the subprocess too
# Where ONNX Runtime's telemetry keeps its store and device id, under the user's home.
TELEMETRY_STORE = Path(".cache", "Microsoft", "DeveloperTools", ".onnxruntime")


def _serving(model: Path, home: Path) -> subprocess.Popen[str]:
    """`dlperf serve MODEL` in a process of its own, with `home` as its home and ONNX
    Runtime's telemetry variable unset, once it has said it serves."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "XDG_CACHE_HOME")
    }
    env.update(HOME=str(home), PYTHONPATH=SOURCE, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "dlperf", "serve", str(model), "--port", "0",
               "--threads", "1"]  # fmt: skip
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()  # its "serving ..." line, or its error
    assert line.startswith("serving tiny "), line
    return proc


@pytest.mark.timeout(120)
def test_an_idle_server_starts_no_telemetry_uploader(tmp_path: Path) -> None:
    """Before: ONNX Runtime's telemetry store appeared in the home as the server loaded the
    model, and its uploader later grew the idle server's address space until a memory limit
    killed it."""
    model = tiny_classifier(tmp_path / "tiny.onnx")
    home = tmp_path / "home"
    home.mkdir()
    proc = _serving(model, home)
    try:
        assert not (home / TELEMETRY_STORE).exists(), sorted(home.rglob("*"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(EVENT_S) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.mark.parametrize(("given", "kept"), [(None, "1"), ("0", "0")])
def test_telemetry_is_off_unless_the_user_said(
    monkeypatch: pytest.MonkeyPatch, given: str | None, kept: str
) -> None:
    """Off by default, as dlperf's deploy modules are imported; a user who set the variable
    (ORT_DISABLE_TELEMETRY=0 to keep it on) is left their choice."""
    if given is None:
        monkeypatch.delenv("ORT_DISABLE_TELEMETRY", raising=False)
    else:
        monkeypatch.setenv("ORT_DISABLE_TELEMETRY", given)
    importlib.reload(dlperf.deploy)
    assert os.environ["ORT_DISABLE_TELEMETRY"] == kept
