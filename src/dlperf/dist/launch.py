"""Start `torchrun` as a subprocess, wait for it, and leave nothing running behind it.

torchrun runs in its own session so that a stop signal reaches it and nothing else; its
workers run in sessions of their own (torch.distributed.elastic starts them so), which is
why every worker writes its pid to the launch directory: if torchrun itself must be killed,
the workers are killed by pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

TAIL_LINES = 12
STOP_GRACE_S = 15.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Rendezvous:
    """Where the nodes of one launch meet: torchrun's c10d rendezvous."""

    nnodes: int = 1
    node_rank: int = 0
    endpoint: str | None = None  # HOST:PORT; None: a free port on 127.0.0.1

    def args(self) -> list[str]:
        endpoint = self.endpoint or f"127.0.0.1:{free_port()}"
        return [
            "--nnodes",
            str(self.nnodes),
            "--node-rank",
            str(self.node_rank),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            endpoint,
        ]


@dataclass
class Launch:
    returncode: int
    log: Path
    pids: list[int] = field(default_factory=list)
    error: str | None = None


def torchrun_command(
    nproc_per_node: int, rdzv: Rendezvous, module: str, args: Sequence[str]
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc_per_node),
        *rdzv.args(),
        "--max-restarts",
        "0",
        "-m",
        module,
        *args,
    ]


def worker_pids(directory: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(directory.glob("rank-*.pid")) if p.read_text()]


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


def _kill(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop(proc: subprocess.Popen[bytes], directory: Path) -> None:
    """SIGTERM torchrun (it stops its workers), then SIGKILL whatever is still running."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    stragglers = [pid for pid in worker_pids(directory) if alive(pid)]
    _kill(stragglers, signal.SIGKILL)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(alive(pid) for pid in stragglers) and time.monotonic() < deadline:
        time.sleep(0.05)


def _root_cause(log_text: str) -> dict[str, str]:
    """Fields of the first failure in torchrun's summary ("Root Cause" block)."""
    _, found, block = log_text.partition("Root Cause")
    fields: dict[str, str] = {}
    if found:
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("rank", "exitcode", "traceback"):
                fields.setdefault(key.strip(), value.strip())
    return fields


def error_lines(directory: Path, log: Path) -> str:
    """What went wrong, first line a summary: the first failed rank, then its own traceback
    tail when it wrote one, else torchrun's account (a killed worker writes nothing)."""
    text = log.read_text(errors="replace")
    cause = _root_cause(text)
    if cause.get("rank"):
        rank = cause["rank"].split()[0]
        head = f"worker rank {rank} failed (exit code {cause.get('exitcode', '?')})"
        error_file = directory / f"rank-{rank}.error"
        if error_file.is_file() and error_file.read_text().strip():
            tail = error_file.read_text().strip().splitlines()[-TAIL_LINES:]
            return "\n".join([head, *tail])
        return f"{head}: {cause.get('traceback', '')}".rstrip(": ")
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(["torchrun failed", *lines[-TAIL_LINES:]])


def run_torchrun(
    directory: Path,
    nproc_per_node: int,
    module: str,
    args: Sequence[str],
    rdzv: Rendezvous | None = None,
    env: dict[str, str] | None = None,
) -> Launch:
    """Run `module` under torchrun with its output in `directory`/torchrun.log; stop every
    process it started on Ctrl-C (the KeyboardInterrupt propagates)."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "torchrun.log"
    command = torchrun_command(nproc_per_node, rdzv or Rendezvous(), module, args)
    child_env = {**os.environ, **(env or {})}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env,
            start_new_session=True,
        )
        try:
            code = proc.wait()
        except BaseException:
            stop(proc, directory)
            raise
    pids = worker_pids(directory)
    # A worker that outlives a failed torchrun (it should not) must not keep the cores.
    _kill([pid for pid in pids if alive(pid)], signal.SIGKILL)
    error = error_lines(directory, log) if code != 0 else None
    return Launch(code, log, pids, error)
