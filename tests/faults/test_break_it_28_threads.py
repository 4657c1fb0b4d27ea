"""Break-it round 28, the limits tester (P4), causes 1, 2, 3, 4 and 9.

C1. `run` with DataLoader workers under `ulimit -u 8`: a worker's queue feeder printed "can't
    start new thread" in a 20-line traceback, and the training process waited for the batch it
    never sent, forever.
C2. `serve start` under `ulimit -u 4` said "serving", then answered every request 500 with a
    40-line traceback: the batcher's inference thread was started at the first request.
C3. `infer` under `ulimit -u 2`: ONNX Runtime's "EP Error" block on stdout, and "cannot load
    m3.onnx" (exit 2) for a model that is fine.
C4. `run.compile=true` without a C++ compiler: a 133-line traceback out of torch._inductor.
C9. `infer` under `ulimit -v 100000`: OpenBLAS's own "Memory allocation still failed" as
    NumPy loaded, instead of dlperf's line naming the memory limit.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from multiprocessing import resource_sharer
from pathlib import Path

import pytest
import torch
from PIL import Image

import dlperf
from dlperf import blas
from dlperf.data.loaders import TorchvisionLoader, WorkerDied
from dlperf.data.sources import Split
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.deploy.test_server import tiny_classifier

Cli = Callable[..., CliResult]
SOURCE = str(Path(dlperf.__file__).parents[1])  # the dlperf under test, in the subprocess too
EXAMPLE = str(Path(SOURCE).parent / "examples" / "digits_smallcnn.toml")
DEADLINE_S = 300  # generous: the machine may be shared; nothing here waits on a timer
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# setpriv runs a command as a user `ulimit -u` binds, which only root may (a user's own
# command would meet EPERM and fail, not skip)
no_setpriv = pytest.mark.skipif(
    shutil.which("setpriv") is None or os.geteuid() != 0,
    reason="needs setpriv, run as root, to run a command as a user that ulimit -u binds",
)
NO_THREAD = RuntimeError("can't start new thread")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory user nobody may write (pytest's tmp_path is root's alone), removed after."""
    path = Path(tempfile.mkdtemp(prefix="fx28_threads_"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def as_nobody(
    args: list[str], cwd: Path, nproc: int | None, vmem_kib: int | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m dlperf ARGS` as user nobody in `cwd`, under `ulimit -u nproc` (and `-v`)."""

    def limits() -> None:
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if vmem_kib is not None:
            resource.setrlimit(resource.RLIMIT_AS, (vmem_kib * 1024, vmem_kib * 1024))

    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "PYTHONPATH": SOURCE,
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.run(
        [*NOBODY, sys.executable, "-m", "dlperf", *args],
        cwd=cwd,
        env=env,
        preexec_fn=limits,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


# --- C1: DataLoader workers under the process and thread limit ----------------------------


@no_setpriv
@pytest.mark.faults
def test_workers_over_the_thread_limit_are_refused_in_one_line(shared_dir: Path) -> None:
    """Before: a worker's traceback, then a wait for ever (timeout's 124 at 170 s)."""
    done = as_nobody(
        ["--db", "u.db", "run", EXAMPLE, "--set", "train.epochs=1", "--set", "run.threads=1",
         "--set", "data.loader=torchvision", "--set", "data.num_workers=2"],
        shared_dir,
        nproc=8,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: data.num_workers = 2 needs about "), last
    assert "processes and threads, over the limit of 8 (ulimit -u 8 is too low: raise it" in last


@pytest.mark.timeout(120)
def test_a_worker_that_cannot_start_a_thread_ends_the_epoch_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Before: the worker's feeder thread printed its traceback and dropped the batch; the
    training process waited for it for ever. The workers (forked) inherit the patch: handing a
    batch's tensor over starts the worker's resource-sharer thread, which fails here."""

    def no_thread(self: object) -> None:
        raise NO_THREAD

    monkeypatch.setattr(resource_sharer._ResourceSharer, "_start", no_thread)
    images = torch.zeros(8, 1, 8, 8, dtype=torch.uint8)
    split = Split(images=images, labels=torch.zeros(8, dtype=torch.int64), files=[])
    loader = TorchvisionLoader(split, 4, (0.5,), (0.25,), None, num_workers=2, pin_memory=False)
    with pytest.raises(WorkerDied) as caught:
        next(iter(loader))
    message = str(caught.value)
    assert "could not start a thread" in message, message
    assert "ulimit -u" in message, message
    assert "Traceback" not in capfd.readouterr().err


# --- C2: serve's threads, started before it says it serves ----------------------------------


@pytest.mark.timeout(120)
def test_serve_that_cannot_start_its_threads_refuses_before_serving(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "serving ..." and then, at each request, 500 and uvicorn's traceback from the
    batcher's inference thread, started lazily (here: served until the test's timeout)."""
    model = tiny_classifier(tmp_path / "tiny.onnx")

    def no_thread(self: threading.Thread) -> None:
        raise NO_THREAD

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    result = cli("serve", "start", str(model), "--host", "127.0.0.1", "--port", "0")
    assert result.code == 1, result.err
    assert result.err.startswith("error: the server could not start its threads ("), result.err
    assert "ulimit -u" in result.err and "or lower --threads)" in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert "serving" not in result.err


# --- C3: infer under the thread limit ------------------------------------------------------


@no_setpriv
def test_infer_over_the_thread_limit_names_it_not_the_model(shared_dir: Path) -> None:
    """Before: ONNX Runtime's "EP Error" block on stdout, then "ONNX Runtime cannot load
    tiny.onnx: ... pthread_create failed", exit 2. Two intra-op threads under `ulimit -u 1`:
    ONNX Runtime cannot start its pool's thread, whatever the host's cores."""
    model = tiny_classifier(shared_dir / "tiny.onnx")
    Image.new("RGB", (8, 8)).save(shared_dir / "img.png")
    for path in shared_dir.iterdir():
        path.chmod(0o644)
    done = as_nobody(["infer", model.name, "img.png", "--threads", "2"], shared_dir, nproc=1)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        "error: ONNX Runtime could not start its threads for tiny.onnx "
        "(ulimit -u 1 is too low: raise it, or use --threads 1)\n"
    )


# --- C4: torch.compile without a C++ compiler ----------------------------------------------


@pytest.mark.faults
def test_compile_without_a_cxx_compiler_fails_the_run_in_one_line(
    cli: Cli, store: RunStore, tiny_exp: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: 133 lines out of torch._inductor ending in InvalidCxxCompiler, the same text
    stored as the run's error. A compiler of a name no host has; nothing compiled earlier in
    this process (dynamo's and inductor's caches) is reused."""
    from torch._inductor import config as inductor

    torch._dynamo.reset()
    monkeypatch.setattr(inductor.cpp, "cxx", ("/nonexistent/c++",))
    monkeypatch.setattr(inductor, "fx_graph_cache", False)
    monkeypatch.delenv("CXX", raising=False)
    result = cli("run", str(tiny_exp()), "--set", "run.compile=true")
    assert result.code == 1, result.err
    line = (
        "error: torch.compile needs a C++ compiler, and none works here (install g++ or set "
        "CXX, or set run.compile=false)"
    )
    assert result.err.strip().splitlines()[-1].startswith(line), result.err
    assert "Traceback" not in result.err and "TORCHDYNAMO_VERBOSE" not in result.err
    assert store.get_run(1).status == "failed"


# --- C9: NumPy's OpenBLAS under an address-space limit -------------------------------------

TIGHT_NUMPY = """
import resource, dlperf
size = next(line for line in open("/proc/self/status") if line.startswith("VmSize"))
room = int(size.split()[1]) * 1024 + 60 * 2**20  # NumPy's OpenBLAS needs some 100 MiB more
resource.setrlimit(resource.RLIMIT_AS, (room, resource.getrlimit(resource.RLIMIT_AS)[1]))
try:
    import numpy
except ImportError as e:
    print(e)
"""


def test_numpy_short_of_address_space_is_refused_before_openblas_ends_the_process() -> None:
    """Before: "OpenBLAS error: Memory allocation still failed after 10 retries, giving up."
    and the process ended by OpenBLAS's exit(1), before dlperf could say a word."""
    blas_unset = {k: v for k, v in os.environ.items() if k not in blas._OPENBLAS}
    done = subprocess.run(
        [sys.executable, "-c", TIGHT_NUMPY],
        env={**blas_unset, "PYTHONPATH": SOURCE},  # a pool of one thread: dlperf's default
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.startswith("less than 112 MiB of address space is left, which NumPy's")
