"""Break-it round 47, fixer F4: serve and infer under memory limits, and serve's early answers
to a client that closes.

T3 C2: `serve` under an address-space limit (`ulimit -v 250000` to `270000`) that let the
imports through but not a thread's stack failed in the batcher's start with "the limit on
processes and threads (a cgroup's pids.max, ulimit -u) is reached": pthread_create's EAGAIN is
the same for a stack it could not map as for the process limit, and the memory limit went
unnamed. Now, where a set address-space limit leaves no room for a thread's stack, the line
names it: "a memory limit, ulimit -v N, leaves no room for another thread's stack (M MiB):
raise it".
T3 C3: a 413 (a body over --max-body-mb) or a 404 (an unknown model) sent before the body
was read was lost to a reset when the request said `Connection: close` (urllib's all do) or
was HTTP/1.0: uvicorn closed at once with the body unread, where a keep-alive request's
answer was followed by the body read and dropped (docs/deploy.md). The client's write failed
with EPIPE or ECONNRESET. Now the connection lingers in both cases: the client reads the
answer and the end.
T3 C4: `infer` and `serve` of a model with external weights under `ulimit -v 600000` to
`900000` died of SIGSEGV (exit 139, nothing said) in onnx's load_external_data_for_tensor,
and lower said "ONNX Runtime cannot load m.onnx: ... std::bad_alloc", exit 2 (bad input).
Now the address space the weights need is checked before they are read, and a shortfall (or
ONNX Runtime's own std::bad_alloc) is one line naming the memory limit, exit 1.

C3 on a real server on 127.0.0.1 (uvicorn in a thread, as `dlperf serve` runs it) with raw
sockets as clients; C2 and C4 in a child process, whose address-space limit is the point.
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from dlperf.deploy import meta, runtime
from dlperf.deploy.server import create_app
from tests.deploy.test_server import OPSET, SIZE, tiny_classifier
from tests.deploy.test_server_limits import answer, connect, read_until_closed, serving

# --- C3: an early answer to a client that said `Connection: close`, or spoke HTTP/1.0 ------

MAX_BODY = 1_000_000
# A body big enough to fill the sockets' buffers on the way: the client still sends it as
# the server answers, so a close with it unread resets the connection under the client.
CASES = {
    "413, Connection: close": ("HTTP/1.1", "Connection: close\r\n", "tiny", 6_000_000, 413),
    "413, HTTP/1.0": ("HTTP/1.0", "", "tiny", 6_000_000, 413),
    "404, Connection: close": ("HTTP/1.1", "Connection: close\r\n", "nope", 900_000, 404),
    "404, HTTP/1.0": ("HTTP/1.0", "", "nope", 900_000, 404),
    "413, keep-alive (as before)": ("HTTP/1.1", "", "tiny", 6_000_000, 413),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model = tiny_classifier(tmp_path_factory.mktemp("bk47_serve") / "tiny.onnx")
    with serving(create_app(model, threads=1, max_body_bytes=MAX_BODY), 60.0, 32) as (url, _):
        yield url


@pytest.mark.parametrize("case", CASES)
def test_an_early_answer_reaches_a_client_that_closes(server: str, case: str) -> None:
    """Before: the client's write of the body failed (BrokenPipeError, ConnectionResetError)
    with a `Connection: close` request or an HTTP/1.0 one, and the 413 or 404 was never read."""
    version, closing, model, size, status = CASES[case]
    with connect(server) as sock:
        sock.sendall(
            f"POST /v2/models/{model}/infer {version}\r\nHost: x\r\n{closing}"
            f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode()
        )
        sock.sendall(b"y" * size)  # the whole body: the server reads and drops it
        sock.shutdown(socket.SHUT_WR)
        got, headers, body = answer(read_until_closed(sock))
    assert got == status, (got, body)
    assert headers["connection"] == "close"
    assert (
        f"over the {MAX_BODY}-byte limit" in body["error"]
        if status == 413
        else "nope" in body["error"]
    ), body


# --- C2: a thread's stack that a memory limit has no room for --------------------------------

# A child that sets its address-space limit a little above what it has mapped, with room for
# less than one thread's stack (32 MiB, set so that `ulimit -s` does not matter), and starts
# serve's threads; then, the limit lifted, asks what a thread that could not start is told.
THREADS = """
import resource, sys, threading
from concurrent.futures import ThreadPoolExecutor
from dlperf.deploy.batcher import start_threads
from dlperf.errors import NoThreads, threads_limit

threading.stack_size(32 * 2**20)
pool = ThreadPoolExecutor(2)
mapped = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (mapped + 8 * 2**20, hard))
try:
    start_threads(pool, 2)
except NoThreads as e:
    print(resource.getrlimit(resource.RLIMIT_AS)[0] // 1024)
    print(e)
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
print(threads_limit())
"""


def test_threads_a_memory_limit_refuses_are_told_as_its(tmp_path: Path) -> None:
    """Before: "the server could not start its threads (the limit on processes and threads (a
    cgroup's pids.max, ulimit -u) is reached, or lower --threads)", the memory limit unnamed."""
    done = subprocess.run(
        [sys.executable, "-c", THREADS], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    limit, refused, unlimited = done.stdout.splitlines()
    assert refused == (
        f"the server could not start its threads (a memory limit, ulimit -v {limit}, leaves no "
        "room for another thread's 32 MiB stack: raise it, or lower --threads)"
    )
    assert "ulimit -u" in unlimited and "memory" not in unlimited, unlimited  # as before


# --- C4: a model's external weights that a memory limit has no room for -----------------------

WEIGHTS_MIB = 32
# A child that imports what `infer` does, sets its address-space limit with room for 1.25
# times the model's weights above what it has mapped (loading them in memory needs 2.5:
# runtime.WEIGHTS_ROOM), and runs `dlperf infer`.
INFER = f"""
import resource, sys
import onnx, onnxruntime
import dlperf.deploy.infer
from dlperf.cli import main

mapped = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
hard = resource.getrlimit(resource.RLIMIT_AS)[1]
resource.setrlimit(resource.RLIMIT_AS, (mapped + {WEIGHTS_MIB * 5 // 4} * 2**20, hard))
sys.argv = ["dlperf", *sys.argv[1:]]
main()
"""


def external_classifier(path: Path, mib: int) -> Path:
    """A flat classifier (dlperf's metadata with it) whose weights, `mib` MiB of zeros, are in
    an external-data file beside it, as `dlperf export` writes a model's."""
    classes = mib * 2**20 // (3 * SIZE * SIZE * 4)
    graph = helper.make_graph(
        [
            helper.make_node("Flatten", ["input"], ["flat"], axis=1),
            helper.make_node("MatMul", ["flat", "W"], ["logits"]),
        ],
        "wide",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        [numpy_helper.from_array(np.zeros((3 * SIZE * SIZE, classes), np.float32), "W")],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=OPSET, ir_version=10),
        str(path),
        save_as_external_data=True,
        location=path.name + ".data",
    )
    pre = meta.Preprocess((SIZE, SIZE), 3, (0.5,) * 3, (0.25,) * 3)
    meta.save(path, meta.ModelMeta("classification", "wide", "input", (3, SIZE, SIZE), pre, []))
    return path


def test_weights_a_memory_limit_has_no_room_for_are_refused_in_one_line(tmp_path: Path) -> None:
    """Before: SIGSEGV in onnx's load_external_data_for_tensor (exit 139, nothing said), or
    "ONNX Runtime cannot load wide.onnx: ... std::bad_alloc", exit 2."""
    model = external_classifier(tmp_path / "wide.onnx", WEIGHTS_MIB)
    Image.new("RGB", (8, 8)).save(tmp_path / "img.png")
    done = subprocess.run(
        [sys.executable, "-c", INFER, "infer", model.name, "img.png"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert done.stdout == ""
    weights = (tmp_path / "wide.onnx.data").stat().st_size
    need = math.ceil(weights * runtime.WEIGHTS_ROOM) / 2**20
    line = done.stderr.strip()
    assert line.startswith(
        f"error: cannot load wide.onnx: less than {need:,.0f} MiB of address space is left, "
        f"which its {weights / 2**20:,.0f} MiB of weights need (a memory limit, ulimit -v "
    ), done.stderr
    assert line.endswith(", is too low: raise it)") and "\n" not in line, done.stderr


def test_onnx_runtime_out_of_memory_names_the_memory_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNX Runtime's own std::bad_alloc (a model with its weights inside it, or one too big
    to read in memory, which it maps): before, "ONNX Runtime cannot load ...: [ONNXRuntimeError]
    : 6 : RUNTIME_EXCEPTION : Exception during initialization: std::bad_alloc", exit 2."""
    import onnxruntime

    model = tiny_classifier(tmp_path / "tiny.onnx")
    said = "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Exception during initialization: "
    for error in (RuntimeError(said + "std::bad_alloc"), MemoryError()):

        def failing(*args: object, error: BaseException = error, **kwargs: object) -> None:
            raise error

        monkeypatch.setattr(onnxruntime, "InferenceSession", failing)
        with pytest.raises(runtime.NoMemory) as caught:
            runtime.session(model, 1)
        assert str(caught.value) == (
            f"ONNX Runtime ran out of memory loading {model} ({runtime.more_memory()})"
        )
        assert caught.value.exit_code == 1
