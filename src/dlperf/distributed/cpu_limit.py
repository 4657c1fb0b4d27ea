"""A launch under a soft CPU-time limit (`ulimit -S -t`, `prlimit --cpu=SOFT:HARD`): every
process of it (torchrun's agent, each worker) inherits dlperf's limit, and each counts its own
CPU time against it. A worker that runs out stops the command as dlperf's own SIGXCPU does
(dlperf.stopping): its point's run `killed` with the limit's line, exit 152.

Before round 66 a rank died of the raw signal (its default action, a core dump): the point
said "worker rank 0 failed (exit code -24 ... (SIGXCPU))", its run was stored `failed`, the
command exited 1, and nothing named `ulimit -t` or the fix.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import NoReturn

from dlperf import stopping
from dlperf.paths import atomic_write

# getattr: a platform without it (Windows) has no CPU-time limit's signal
_SIGXCPU: int | None = getattr(signal, "SIGXCPU", None)


def _record(directory: Path, rank: int | str) -> Path:
    return directory / f"rank-{rank}.cpu"


def leave_at_limit(directory: Path, rank: int | str) -> None:
    """In a worker: once its soft CPU-time limit runs out, record the CPU seconds it used in
    `rank-R.cpu` and exit 128 + SIGXCPU at once, as a failed rank leaves (its peers may wait in
    a collective: tearing down could hang). dlperf reads the record (`spent`) and stops. An
    ignored SIGXCPU stays ignored: its user asked to run on, to the hard limit."""
    if _SIGXCPU is None or signal.getsignal(_SIGXCPU) == signal.SIG_IGN:
        return

    def reached(signum: int, frame: FrameType | None) -> None:
        atomic_write(_record(directory, rank), f"{time.process_time():.3f}")
        os._exit(128 + signum)

    signal.signal(_SIGXCPU, reached)


def spent(directory: Path, codes: Sequence[int]) -> float | None:
    """The CPU seconds after which the soft CPU-time limit stopped a process of the launch in
    `directory`, `codes` the exit codes of its launcher and of its failed workers: a worker's
    own record (`leave_at_limit`), else the soft limit where the signal itself ended one (a
    worker in its imports, before it took the signal, or the launcher: the kernel sends it as
    the soft limit runs out); None where the limit stopped none."""
    # each written whole (atomic_write), by a worker as it left
    recorded = [float(path.read_text()) for path in directory.glob("rank-*.cpu")]
    if recorded:
        return max(recorded)
    if _SIGXCPU is None or -_SIGXCPU not in codes:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
    # No soft limit: sent by hand (kill -XCPU), which stopping.cause() says without seconds
    return 0.0 if soft == resource.RLIM_INFINITY else float(soft)


def stop_at_limit(directory: Path, codes: Sequence[int]) -> None:
    """Stop dlperf as its own SIGXCPU would (a KeyboardInterrupt: the open runs marked
    `killed` with the limit's line, exit 152, the line said) where the CPU-time limit stopped
    a process of the launch in `directory` (`spent`); nothing otherwise."""
    seconds = spent(directory, codes)
    if seconds is not None:
        _stop(seconds)


def _stop(seconds: float) -> NoReturn:
    assert _SIGXCPU is not None  # `spent` finds nothing without it
    stopping.noted(_SIGXCPU, cpu_s=seconds)  # the worker's CPU time: dlperf waited idle
    raise KeyboardInterrupt
