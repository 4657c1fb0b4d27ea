"""Break-it round 27, the signals and caps tester (P4), causes A, D and E.

- A: `scale` under a low `ulimit -n` (16, 12) ended in torch's "Failed to init uv loop" or
  RendezvousConnectionError tracebacks, after minutes of the rendezvous store's silent
  retries at 12, and never named the limit.
- D: where triton's import fails (a memory limit, `ulimit -v` about 3.3 GB), torch's flop
  counter logged "triton not found; flop counting will not work for triton kernels" before
  dlperf's own line or answer.
- E: a stopped `dlperf demo` exited 130 with nothing said, where `run` says how to continue
  its run.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import dlperf
from dlperf import stopping
from dlperf.distributed import launch
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
SOURCE = str(Path(dlperf.__file__).parents[1])  # the dlperf under test, in the subprocess too
DEADLINE_S = 300  # generous: the machine may be shared; nothing here waits on a retry

# --- A: scale under a low open-file limit ------------------------------------------------

BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[run]
threads = 1
"""


def _nofile(limit: int) -> Callable[[], None]:
    """The child's open-file limit, soft and hard (as `ulimit -n` sets both)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return apply


def test_a_scale_under_a_low_open_file_limit_is_one_line_naming_it(tmp_path: Path) -> None:
    """Before: at `ulimit -n 16`, "torchrun failed: DistStoreError: Failed to init uv loop"
    and twenty lines of torch's rendezvous traceback; at 12, minutes of silent retries
    first. Now the limit is checked before torchrun starts, and nothing is recorded."""
    (tmp_path / "base.toml").write_text(BASE)
    study = ["--workers", "2", "--mode", "weak", "--per-worker-batch", "8", "--steps", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "dlperf", "--db", str(tmp_path / "s.db"), "scale", "base.toml",
         *study, "--warmup-steps", "1", "--repeat", "1", "--no-plots"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": SOURCE}, capture_output=True, text=True,
        timeout=DEADLINE_S, preexec_fn=_nofile(16),
    )  # fmt: skip
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    needed = launch.open_files_needed(2, 2)
    assert lines[0].startswith("error: 2 workers on this node need about "), lines[0]
    assert f"(ulimit -n 16 is too low: raise it to {needed} or more)" in lines[0], lines[0]
    assert "scale study" not in done.stdout + done.stderr  # refused before it was stored


def test_a_soft_open_file_limit_is_raised_toward_the_hard_one() -> None:
    """As `serve` does: a soft limit below what the workers need, under a hard limit that
    allows it, is raised (torchrun and its workers inherit it), not refused."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = launch.open_files_needed(2, 2)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard open-file limit {hard} is below {needed}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (16, hard))
    try:
        launch.ensure_open_files(2, 2)
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= needed
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# What torchrun.log held: the store's server could not start its event loop (at 16), and the
# store's client retried its connection to it (at 12) until the rendezvous gave up.
UV_LOOP = """Traceback (most recent call last):
  File "/venv/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 1127, in _c
    return dist.TCPStore(
torch.distributed.DistStoreError: Failed to init uv loop
"""
RETRIES = """[W1128 03:20:11 socket.cpp:755] [c10d] The client socket has failed to connect to \
[localhost]:41213 (errno: 24 - Too many open files).
Traceback (most recent call last):
  File "/venv/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 159, in _c
    raise RendezvousConnectionError(
torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the \
C10d store has failed. See inner exception for details.
"""


@pytest.mark.parametrize("log_text", [UV_LOOP, RETRIES], ids=["uv-loop", "errno-24"])
def test_a_torchrun_out_of_files_is_one_line_naming_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_text: str
) -> None:
    """Before: torchrun's exception and its log's last lines, the limit never named. Now the
    launch fails as the limit (exit 1, one line), whatever torch called the EMFILE."""

    def launcher(directory: Path, command: list[str], log: Path, env: Any) -> tuple[int, list[int]]:
        log.write_text(log_text)
        return 1, []

    monkeypatch.setattr(launch, "run_launcher", launcher)
    with pytest.raises(launch.OpenFilesLimit) as raised:
        launch.run_torchrun(tmp_path, 2, "dlperf.distributed.worker", [])
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    said = str(raised.value)
    assert raised.value.exit_code == 1 and "\n" not in said, said
    assert said.startswith("torchrun failed: "), said
    assert said.endswith(f"(ulimit -n {soft} is too low: raise it)"), said


# --- D: triton's failed import says nothing ----------------------------------------------

NO_TRITON = """
import sys
sys.modules["triton"] = None  # its import fails, as under `ulimit -v` 3.3 GB
from dlperf.cli import main
sys.argv = ["dlperf", "analyze", "smallcnn", "--input", "1,8,8"]
main()
"""


@pytest.mark.skipif(
    all(getattr(torch.version, v, None) is None for v in ("cuda", "hip", "xpu")),
    reason="a CPU-only torch does not look for triton",
)
def test_d_triton_failing_to_import_logs_nothing(tmp_path: Path) -> None:
    """Before: "W1128 ... flop_counter.py:113] triton not found; flop counting will not work
    for triton kernels" above the answer."""
    done = subprocess.run(
        [sys.executable, "-c", NO_TRITON], cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": SOURCE, "DLPERF_DB": str(tmp_path / "s.db")},
        timeout=DEADLINE_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "smallcnn: input 1x8x8" in done.stdout, done.stdout
    assert done.stderr == "", done.stderr


# --- E: a stopped demo says how to go on -------------------------------------------------


def test_e_a_stopped_demo_says_how_to_continue_its_run(
    cli: Cli, store: RunStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: exit 130 and nothing said. The stop lands as the first run's first checkpoint
    is written (the project's own handler, the path a real Ctrl-C takes)."""
    from dlperf import demo
    from dlperf.config import load_experiment
    from dlperf.engine import checkpoint

    load = load_experiment

    def small(path: Path) -> Any:
        exp = load(path)
        exp.data.limit, exp.train.epochs, exp.run.threads = 64, 2, 1
        exp.run.out_dir = str(tmp_path / "runs")
        return exp

    save = checkpoint.save

    def saved_then_stopped(*args: Any, **kwargs: Any) -> None:
        save(*args, **kwargs)
        stopping._handler(signal.SIGINT, None)

    monkeypatch.setattr(demo, "load_experiment", small)
    monkeypatch.setattr(checkpoint, "save", saved_then_stopped)
    result = cli("demo")
    assert result.code == 130, (result.out, result.err)
    (run,) = store.list_runs()
    assert run.status == "killed"
    assert result.err.splitlines()[-1] == (
        f"demo stopped in run {run.id} ({run.name}); continue that run from its last "
        f"checkpoint: dlperf run --resume {run.id}, or run dlperf demo again to redo the demo"
    ), result.err
