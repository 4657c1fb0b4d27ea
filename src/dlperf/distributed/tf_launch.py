"""Launching a TensorFlow scaling point: one process for MirroredStrategy, one per worker
with its TF_CONFIG (a cluster of free ports on 127.0.0.1) for MultiWorkerMirroredStrategy.

Every process is guarded (it dies with dlperf, even a SIGKILLed one) and writes its log to
`worker-R.log`. A collective waits for every worker, so when one process fails the others
would wait forever: the first failure stops them all and fails the point. The ranks' results
are gathered into `result.json` as the torch launcher leaves them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dlperf.distributed.launch import (
    PARENT_ENV,
    REAP_S,
    TAIL_LINES,
    Launch,
    free_port,
    guarded,
)

MODULE = "dlperf.distributed.tf_worker"
POLL_S = 0.05


def _env(rank: int, ports: list[int], threads: int) -> dict[str, str]:
    env = {**os.environ, PARENT_ENV: str(os.getpid()), "OMP_NUM_THREADS": str(threads)}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if ports:
        cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
        env["TF_CONFIG"] = json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": rank}}
        )
    return env


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGKILL)  # a no-op once reaped
    deadline = time.monotonic() + REAP_S
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def _error(directory: Path, rank: int, code: int) -> str:
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    log = directory / f"worker-{rank}.log"
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return "\n".join([f"TensorFlow worker {rank} failed ({how})", *lines[-TAIL_LINES:]])


def run_tf(directory: Path, processes: int, threads: int) -> Launch:
    """Run the point whose spec.json is in `directory` in `processes` TensorFlow processes
    (MultiWorker when more than one); on any exception, Ctrl-C above all, stop them first."""
    for stale in [*directory.glob("rank-*"), *directory.glob("worker-*.log")]:
        stale.unlink()
    ports = [free_port() for _ in range(processes)] if processes > 1 else []
    spec = str(directory / "spec.json")
    procs = []
    try:
        for rank in range(processes):
            with (directory / f"worker-{rank}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        guarded([sys.executable, "-u", "-m", MODULE, spec, str(rank)]),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=_env(rank, ports, threads),
                        start_new_session=True,
                    )
                )
        codes = [p.poll() for p in procs]  # None while running, 0 done, else failed
        while None in codes and not any(codes):
            time.sleep(POLL_S)
            codes = [p.poll() for p in procs]
        failed = next((r for r, code in enumerate(codes) if code), None)
    except BaseException:
        _stop(procs)
        raise
    _stop(procs)
    pids = [p.pid for p in procs]
    log = directory / "worker-0.log"
    if failed is not None:
        code = procs[failed].returncode or 1
        return Launch(code, log, pids, _error(directory, failed, code))
    ranks = [json.loads((directory / f"rank-{r}.json").read_text()) for r in range(processes)]
    # Replicas in other processes: their weights' fingerprints must agree.
    prints = [r["main"].pop("fingerprint") for r in ranks]
    spread = max(abs(a - b) for p in prints for a, b in zip(p, prints[0], strict=True))
    for r in ranks:
        r["main"]["replica_max_diff"] = max(r["main"]["replica_max_diff"], spread)
    (directory / "result.json").write_text(json.dumps({"ranks": ranks}))
    return Launch(0, log, pids, None)
