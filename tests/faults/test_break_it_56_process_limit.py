"""Break-it round 56, fixer G8: sweep and scale under a limit on processes and threads.

T1 C4 (message): `sweep --jobs 2` under a cgroup's pids.max of 2, where the second worker could
not be forked (EAGAIN), said "error: Resource temporarily unavailable (the system named no
file: ...)", naming neither the worker nor the limit. Now procs.Supervisor.start says it in one
line, as serve, report and the DataLoader do (errors.threads_limit), exit 1: "could not start
the sweep worker of point 2/3 (the limit on processes and threads (a cgroup's pids.max, ulimit
-u) is reached, or use --jobs 1)"; torchrun that cannot be forked is "could not start torchrun".
T1 C5 (message): `scale --workers 2` under pids.max 4 ended with torchrun's "RuntimeError:
Resource temporarily unavailable" (its rendezvous store could not start its thread), then
c10d's C++ log line and the log's tail, 7 lines. Now a launch whose raised exception (torchrun's
agent's or a worker's) is EAGAIN from starting a process or thread fails in one line naming the
limit (exit 1). Under pids.max 12 a worker aborted (SIGABRT) in gloo's process group with
"terminate called without an active exception", which does not tell it apart from any abort:
now a launch that fails while a cgroup's pids.events counts a refused fork (procs.refused_forks)
is the limit's too. Left: such an abort under `ulimit -u` alone (no counter) is not told apart.

Fork's EAGAIN is faked in-process (a real pids.max needs root and a cgroup); torchrun's log is
the one T1's repro wrote, its frames cut.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf import procs
from dlperf.distributed import launch
from dlperf.errors import NoThreads, threads_limit
from tests.conftest import CliResult

BASE = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 64
[train]
epochs = 1
[run]
threads = 1
"""


def no_fork_of(marker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """subprocess.Popen refuses, as fork at a cgroup's pids.max does (EAGAIN), every command
    that holds `marker`; others start as ever."""
    real = subprocess.Popen

    def popen(args: Any, *more: Any, **kwargs: Any) -> Any:
        if any(marker in str(arg) for arg in args):
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return real(args, *more, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)


# --- C4: a sweep worker that cannot be forked ----------------------------------------------


def test_a_sweep_worker_that_cannot_be_forked_names_the_process_limit(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "error: Resource temporarily unavailable (the system named no file: ...)"."""
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "sw.toml").write_text(
        'name = "sw"\nbase = "base.toml"\n[grid]\n"train.lr" = [0.01, 0.05]\n'
    )
    no_fork_of("dlperf.sweep.worker", monkeypatch)
    result = cli("sweep", "sw.toml", "--jobs", "2")
    assert result.code == 1, result.err
    assert "Traceback" not in result.err and "system named no file" not in result.err
    assert result.err.strip().splitlines()[-1] == (
        f"error: could not start the sweep worker of point 1/2 "
        f"({threads_limit(', or use --jobs 1')})"
    )


def test_torchrun_that_cannot_be_forked_names_the_process_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_fork_of("torch.distributed.run", monkeypatch)
    with pytest.raises(NoThreads) as raised:
        launch.run_torchrun(tmp_path, 2, "dlperf.distributed.worker", [])
    assert raised.value.exit_code == 1
    assert str(raised.value) == f"could not start torchrun ({threads_limit()})"


# --- C5: a launch whose process could not start a thread -----------------------------------

# torchrun.log under pids.max 4: the agent's rendezvous store could not start its loop's thread
AGENT = """[E1130 14:59:43.277263935 TCPStoreLibUvBackend.cpp:1303] [c10d] loop cleanup didn't work
Traceback (most recent call last):
  File "/venv/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", line 1127, in _c
    return dist.TCPStore(
           ^^^^^^^^^^^^^^
RuntimeError: Resource temporarily unavailable
"""

# A worker's failure in torchrun's closing summary, and the traceback it wrote (rank-1.error)
SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_15:00:35
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 15252)
  error_file: <N/A>
  traceback : {said}
============================================================
"""
WORKER = """Traceback (most recent call last):
  File "/src/dlperf/distributed/worker.py", line 502, in run
    main = Phase(spec, exp, data, device, spec.comm, timer)
RuntimeError: can't start new thread
"""


def failed_launch(
    monkeypatch: pytest.MonkeyPatch,
    log_text: str,
    rank_1_error: str | None = None,
    refused: int = 0,
) -> None:
    """run_launcher as torchrun's failure left it: `log_text` its log, `rank_1_error` what
    worker rank 1 wrote, `refused` the forks a cgroup's pids.max refused while it ran."""
    counts = iter([0, refused])
    monkeypatch.setattr(launch, "refused_forks", lambda: next(counts))

    def launcher(directory: Path, command: list[str], log: Path, env: Any) -> tuple[int, list[int]]:
        log.write_text(log_text)
        if rank_1_error is not None:
            (directory / "rank-1.error").write_text(rank_1_error)
        return 1, []

    monkeypatch.setattr(launch, "run_launcher", launcher)


def test_torchrun_out_of_threads_is_one_line_naming_the_process_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: torchrun's exception, c10d's `[E...]` line and the log's tail, the limit never
    named. Now one line (exit 1)."""
    failed_launch(monkeypatch, AGENT)
    with pytest.raises(NoThreads) as raised:
        launch.run_torchrun(tmp_path, 2, "dlperf.distributed.worker", [])
    assert raised.value.exit_code == 1
    assert str(raised.value) == (
        f"torchrun failed: RuntimeError: Resource temporarily unavailable ({threads_limit()})"
    )


def test_a_worker_out_of_threads_is_one_line_naming_the_process_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed_launch(monkeypatch, SUMMARY.format(code=1, said="<N/A>"), WORKER)
    with pytest.raises(NoThreads) as raised:
        launch.run_torchrun(tmp_path, 2, "dlperf.distributed.worker", [])
    assert str(raised.value) == (
        f"worker rank 1 failed: RuntimeError: can't start new thread ({threads_limit()})"
    )


ABORTED = "terminate called without an active exception\nFatal Python error: Aborted\n"
SIGABRT = "Signal 6 (SIGABRT) received by PID 15252"


def test_a_worker_aborted_as_pids_max_refused_a_fork_names_the_process_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "worker rank 1 failed (exit code -6 ...): Signal 6 (SIGABRT) ...: Aborted"."""
    failed_launch(monkeypatch, ABORTED + SUMMARY.format(code="-6", said=SIGABRT), refused=1)
    with pytest.raises(NoThreads) as raised:
        launch.run_torchrun(tmp_path, 2, "dlperf.distributed.worker", [])
    assert str(raised.value) == (
        f"worker rank 1 failed (exit code -6 (pid: 15252)): {SIGABRT}: Aborted ({threads_limit()})"
    )


def test_a_worker_aborted_is_not_blamed_on_the_process_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No fork refused while it ran: gloo's abort stays the point's failure."""
    failed_launch(monkeypatch, ABORTED + SUMMARY.format(code="-6", said=SIGABRT))
    done = launch.run_torchrun(tmp_path, 2, "dlperf.distributed.worker", [])
    assert done.returncode == 1
    assert done.error == f"worker rank 1 failed (exit code -6 (pid: 15252)): {SIGABRT}: Aborted"


def test_a_worker_that_raised_is_not_blamed_on_a_refused_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork refused meanwhile (another process of the cgroup's) does not hide what a worker
    raised itself."""
    raised = WORKER.replace("RuntimeError: can't start new thread", "ValueError: bad shape")
    failed_launch(monkeypatch, SUMMARY.format(code=1, said="<N/A>"), raised, refused=1)
    done = launch.run_torchrun(tmp_path, 2, "dlperf.distributed.worker", [])
    assert done.error is not None
    assert done.error.startswith("worker rank 1 failed: ValueError: bad shape"), done.error


def test_refused_forks_are_counted_in_this_cgroup_and_those_above(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pids.events' "max" of each pids cgroup from this process's up: a limit set above it
    refuses its forks too."""
    leaf = tmp_path / "pids" / "job" / "step"
    leaf.mkdir(parents=True)
    (leaf / "pids.events").write_text("max 2\n")
    (leaf.parent / "pids.events").write_text("max 3\n")
    monkeypatch.setattr(procs, "CGROUPS", tmp_path)
    monkeypatch.setattr(procs, "_pids_cgroup", lambda: leaf)
    assert procs.refused_forks() == 5
    monkeypatch.setattr(procs, "_pids_cgroup", lambda: None)  # no pids controller seen
    assert procs.refused_forks() == 0


def test_a_socket_read_that_timed_out_is_not_blamed_on_the_process_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EAGAIN is a socket's timed-out read too: only EAGAIN as an exception's whole message is
    the limit's."""
    timed_out = WORKER.replace(
        "RuntimeError: can't start new thread",
        "RuntimeError: [gloo/transport/tcp/pair.cc:598] Read error [127.0.0.1]:5040: "
        "Resource temporarily unavailable",
    )
    failed_launch(monkeypatch, SUMMARY.format(code=1, said="<N/A>"), timed_out)
    done = launch.run_torchrun(tmp_path, 2, "dlperf.distributed.worker", [])
    assert done.error is not None
    assert done.error.startswith("worker rank 1 failed: RuntimeError: [gloo/"), done.error
