"""Launching a Horovod scaling point: `horovodrun -np N -H localhost:N --gloo` running
dlperf.distributed.hvd_worker in each of N processes, on this node.

horovodrun starts through the supervisor's guard, so it dies with dlperf, even a SIGKILLed
one; Horovod then ends its own workers (each runs under a middleman that kills it when
horovodrun is gone). Ctrl-C and SIGTERM stop horovodrun and every worker by the pids they
write, as for torchrun (dlperf.distributed.launch), and a stopped worker fails the point as
there. Horovod's tensor-fusion threshold is the point's bucket size (--bucket-mb), its 64 MiB
default otherwise.
"""

from __future__ import annotations

import re
import shutil
import signal
import sys
from pathlib import Path

from dlperf.distributed.contracts import RankResult
from dlperf.distributed.launch import TAIL_LINES, Launch, Stopped, run_launcher, worker_pids
from dlperf.distributed.tf_launch import write_result
from dlperf.procs import how

MODULE = "dlperf.distributed.hvd_worker"
START_TIMEOUT_S = 600  # horovodrun's 30 s is less than TensorFlow's start on a busy host
# horovodrun's account of a failed job names the first process to exit badly, after a line
# for each process that did.
_FIRST = re.compile(r"The first process to do so was:\s*Process name: (\d+)\s*Exit code: (-?\d+)")
_EXITED = re.compile(r"^Process (\d+) exit with status code (-?\d+)\.", re.MULTILINE)


def _signal(status: int) -> int | None:
    """The signal a worker died of, from horovodrun's exit code (negative, or the shell's
    128 + the signal); None where it exited."""
    return -status if status < 0 else status - 128 if status > 128 else None


def horovodrun() -> str | None:
    """The horovodrun beside this interpreter (the venv's), else on PATH; None without one."""
    return shutil.which("horovodrun", path=str(Path(sys.executable).parent)) or shutil.which(
        "horovodrun"
    )


def _error(directory: Path, log: Path, code: int) -> str:
    """What went wrong, first line a summary: a worker killed by a signal (not horovodrun's
    SIGTERM to the rest), before the peers it took down; else the process horovodrun saw fail
    first; with its traceback's tail when it wrote one. Else the rank that wrote its traceback
    first; else horovodrun's own log's tail."""
    text = log.read_text(errors="replace")
    first = _FIRST.search(text)
    errors = sorted(directory.glob("rank-*.error"), key=lambda p: p.stat().st_mtime_ns)
    if first:
        # horovodrun orders exits by when it saw them, and on a busy host a peer's "connection
        # closed" exit can be seen before the SIGKILL that caused it.
        exits = [(int(first.group(1)), int(first.group(2)))]
        exits += [(int(r), int(s)) for r, s in _EXITED.findall(text)]
        killed = [e for e in exits if _signal(e[1]) not in (None, signal.SIGTERM)]
        rank, status = (killed or exits)[0]
        died_of = _signal(status)
        ended = how(-died_of) if died_of else f"exit status {status}"
        head = f"Horovod worker rank {rank} failed ({ended})"
        mine = directory / f"rank-{rank}.error"
        errors = [mine] if mine.is_file() else []
    elif errors:
        head = f"Horovod worker rank {errors[0].stem.removeprefix('rank-')} failed"
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        return "\n".join([f"horovodrun failed (exit code {code})", *lines[-TAIL_LINES:]])
    tail = errors[0].read_text().strip().splitlines()[-TAIL_LINES:] if errors else []
    return "\n".join([head, *tail])


def run_horovod(
    directory: Path, processes: int, threads: int, bucket_mb: float | None = None
) -> Launch:
    """Run the point whose spec.json is in `directory` under horovodrun; every rank's results
    go to result.json."""
    log = directory / "horovodrun.log"
    env = {"OMP_NUM_THREADS": str(threads), "TF_CPP_MIN_LOG_LEVEL": "2"}
    if bucket_mb:
        env["HOROVOD_FUSION_THRESHOLD"] = str(int(bucket_mb * 2**20))
    command = [sys.executable, horovodrun() or "horovodrun", "-np", str(processes)]
    command += ["-H", f"localhost:{processes}", "--gloo", "--start-timeout", str(START_TIMEOUT_S)]
    command += [sys.executable, "-u", "-m", MODULE, str(directory / "spec.json")]
    try:
        code, pids = run_launcher(directory, command, log, env)
    except Stopped as stopped:
        return Launch(1, worker_pids(directory), str(stopped))
    if code == 0:
        write_result(
            directory, [RankResult.read(directory / f"rank-{r}.json") for r in range(processes)]
        )
    return Launch(code, pids, _error(directory, log, code) if code else None)
