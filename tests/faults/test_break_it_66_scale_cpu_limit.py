"""Break-it round 66, fixer FE: `dlperf scale`'s workers under a soft CPU-time limit.

Z3 C1 (a silent death, worded as a failure): under `ulimit -S -t 12` each torchrun rank
inherits dlperf's soft limit and counts its own CPU time against it. A rank that ran out died
of the raw SIGXCPU (its default action, a core dump): the point said "worker rank 0 failed
(exit code -24 (pid: 5108)  (SIGXCPU)): Signal 24 (SIGXCPU) received by PID 5108", the run was
stored `failed`, the command exited 1, and nothing named `ulimit -t` or the fix, where
docs/faults.md promises that a soft CPU-time limit stops a command as SIGTERM does.

Now a launch's process that its CPU-time limit stopped stops dlperf as dlperf's own SIGXCPU
would (dlperf.distributed.cpu_limit): the study's stop line, the point's run `killed` with the
limit's line ("the CPU-time limit (ulimit -t) stopped the command after N s of CPU (SIGXCPU,
exit 152): raise it, or give the command less to do", N the worker's CPU seconds), exit 152,
the same line said; `scale allreduce` alike. A worker takes the signal itself, records the CPU
seconds it used in `rank-R.cpu` and exits 152; one the signal ended before it took it (in its
imports), or torchrun's agent, is told by its exit code -24, N then the soft limit.

Cheap seams, no torchrun under a real limit except in the one `faults` test: the launch's
command is a small real process that does what such a worker does, and the soft limit is
faked to dlperf's eyes (resource.getrlimit) where one is read.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlperf import stopping
from dlperf.distributed import launch
from dlperf.store import RunStore
from tests.conftest import CliResult

SOFT_S = 3600
LINE = (
    "the CPU-time limit (ulimit -t) stopped the command after {} s of CPU (SIGXCPU, exit 152): "
    "raise it, or give the command less to do"
)
STOP = (
    "scale study 1 stopped; a scale study is not continued: run the command again to measure "
    "it anew"
)

# A worker as dlperf's are: it takes SIGXCPU (leave_at_limit), then the signal comes.
TOOK = """
import os, signal, sys, time
from pathlib import Path
from dlperf.distributed.cpu_limit import leave_at_limit

leave_at_limit(Path(sys.argv[1]), 0)
os.kill(os.getpid(), signal.SIGXCPU)
while True:
    time.sleep(1)
"""

# torchrun's account of a rank the raw signal ended (in its imports, before it took it), as
# the round's reproduction wrote it in torchrun.log.
SUMMARY = """
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
from dlperf.procs import guard; guard() FAILED
-------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_02:15:55
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -24 (pid: 5108)  (SIGXCPU)
  error_file: <N/A>
  traceback : Signal 24 (SIGXCPU) received by PID 5108
=======================================================
"""
IMPORTS = f"import sys\nprint({SUMMARY!r}, file=sys.stderr)\nsys.exit(1)\n"

# torchrun's agent itself ended by the raw signal (it takes no SIGXCPU), leaving no core.
LAUNCHER = """
import os, resource, signal
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.kill(os.getpid(), signal.SIGXCPU)
"""


@pytest.fixture
def limited(monkeypatch: pytest.MonkeyPatch) -> None:
    """A soft CPU-time limit of SOFT_S, to dlperf's eyes only (no hard one), and dlperf's stop
    state back as it was after the test (the command notes the stop in this process)."""
    real = resource.getrlimit

    def getrlimit(which: int) -> tuple[int, int]:
        if which == resource.RLIMIT_CPU:
            return SOFT_S, resource.RLIM_INFINITY
        return real(which)

    monkeypatch.setattr(resource, "getrlimit", getrlimit)
    monkeypatch.setattr(stopping, "_state", stopping._state)


def _launched_as(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """Every launch runs `script` (argv[1]: the launch's directory) in place of torchrun,
    through the real launcher's supervision."""
    real = launch.run_launcher

    def run_launcher(
        directory: Path, command: list[str], log: Path, env: dict[str, str] | None = None
    ) -> tuple[int, list[int]]:
        return real(directory, [sys.executable, "-c", script, str(directory)], log, env)

    monkeypatch.setattr(launch, "run_launcher", run_launcher)


def _recorded_s(tmp_path: Path) -> str:
    """The CPU seconds the worker recorded, as the limit's line rounds them."""
    [record] = tmp_path.rglob("rank-0.cpu")
    return f"{float(record.read_text()):.0f}"


def _killed_with(store: RunStore, line: str) -> None:
    [run] = store.list_runs()
    assert (run.status, run.error) == ("killed", line)  # before: failed, "worker rank 0 ..."


def test_a_worker_out_of_cpu_time_records_its_seconds_and_exits_152(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", TOOK, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    # before: no dlperf.distributed.cpu_limit; a rank died by the signal, exit -24
    assert done.returncode == 128 + signal.SIGXCPU, done.stderr
    assert float((tmp_path / "rank-0.cpu").read_text()) >= 0.0
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("script", "seconds"),
    [(TOOK, None), (IMPORTS, str(SOFT_S)), (LAUNCHER, str(SOFT_S))],
    ids=["worker-took-it", "worker-killed-in-its-imports", "torchrun-killed"],
)
def test_scale_stops_as_its_own_cpu_limit_would(
    cli: Callable[..., CliResult],
    tiny_exp: Callable[..., Path],
    store: RunStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    limited: None,
    script: str,
    seconds: str | None,
) -> None:
    _launched_as(monkeypatch, script)
    r = cli("scale", str(tiny_exp()), "--workers", "1", "--mode", "weak", "--per-worker-batch",
            "16", "--steps", "5", "--repeat", "1", "--no-plots")  # fmt: skip
    # before: exit 1, "1 workers ... failed: worker rank 0 failed (exit code -24 ...)"
    assert r.code == 152, r.err
    assert "failed" not in r.err
    assert r.err.rstrip().splitlines()[-1] == STOP
    line = LINE.format(seconds or _recorded_s(tmp_path))
    _killed_with(store, line)
    # what `dlperf` says last, as it exits (stopping.run: the process's own exit only)
    assert stopping.cause() == f"error: {line}"


def test_scale_allreduce_stops_as_its_own_cpu_limit_would(
    cli: Callable[..., CliResult],
    store: RunStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    limited: None,
) -> None:
    _launched_as(monkeypatch, TOOK)
    r = cli("scale", "allreduce", "--workers", "1", "--sizes", "1KB..2KB", "--iters", "1")
    assert r.code == 152, r.err  # before: 1, "1 worker failed: worker rank 0 failed ..."
    assert r.err.rstrip().splitlines()[-1] == (
        "allreduce study 1 stopped; an allreduce study is not continued: run the command "
        "again to measure it anew"
    )
    _killed_with(store, LINE.format(_recorded_s(tmp_path)))


@pytest.mark.faults
def test_a_real_scale_under_a_soft_cpu_limit_stops_in_one_line(
    tiny_exp: Callable[..., Path], tmp_path: Path
) -> None:
    """The reproduction, smaller: a real `dlperf scale` and torchrun under `prlimit
    --cpu=6:` (soft only). Whichever of its processes runs out first (a rank, as a rule),
    the command stops so."""

    def soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (6, resource.RLIM_INFINITY))

    db = tmp_path / "s.db"
    command = [sys.executable, "-m", "dlperf", "--db", str(db), "scale", str(tiny_exp()),
               "--workers", "1", "--mode", "weak", "--per-worker-batch", "16", "--synthetic",
               "--steps", "1000000", "--repeat", "1", "--no-plots"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env,
                          preexec_fn=soft_limit, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 152, done.stderr
    last = done.stderr.rstrip().splitlines()[-1]
    said = re.fullmatch(r"error: (" + re.escape(LINE).replace(r"\{\}", r"\d+") + ")", last)
    assert said is not None, done.stderr
    _killed_with(RunStore.open(str(db)), said.group(1))
    # nothing left running: the ranks whose pids the launch wrote are gone
    for pid_file in tmp_path.rglob("rank-*.pid"):
        assert not Path(f"/proc/{pid_file.read_text()}").exists()
