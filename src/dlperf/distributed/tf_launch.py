"""Launching a TensorFlow scaling point: one process for MirroredStrategy, one per worker
with its TF_CONFIG (a cluster of free ports on 127.0.0.1) for MultiWorkerMirroredStrategy.

On several nodes (--nnodes N --node-rank R --rdzv HOST:PORT, as a job file sets them from
the job's environment), each node's dlperf starts its own workers and the nodes meet at a
key-value store node 0's dlperf serves on the --rdzv address (torch's TCPStore): before a
point every node posts its workers' addresses and builds each worker's TF_CONFIG from all of
them (worker index = node rank x workers per node + local rank); after it, every other node
posts its ranks' results (or its error), which node 0 stores with its own.

Every process is started by the supervisor (dlperf.procs: it dies with dlperf, even a
SIGKILLed one) and writes its log to `worker-R.log`. A collective waits for every worker, so
when one process fails the others would wait forever: the first failure stops them all and
fails the point, as does a process left stopped (dlperf.distributed.launch.wait_watching).
The ranks' results are gathered into `result.json` as the torch launcher leaves them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from dlperf.distributed.contracts import RankResult, write_ranks
from dlperf.distributed.cpu_limit import stop_at_limit
from dlperf.distributed.launch import TAIL_LINES, Launch, Stopped, free_port, wait_watching
from dlperf.errors import UserError
from dlperf.procs import Supervisor, how

MODULE = "dlperf.distributed.tf_worker"
JOIN_S = 900  # for every node to reach the store: torchrun's rendezvous waits as long
RESULTS_S = 300  # for a peer node's results once ours are in: its steps ended with ours


def _towards(host: str) -> str:
    """This host's address on the route to `host`, which peers can reach it by: connecting a
    UDP socket sends nothing but makes the kernel pick the route's source address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return str(s.getsockname()[0])


@dataclass
class Cluster:
    """The nodes of one multi-node TensorFlow study, met at node 0's key-value store."""

    nnodes: int
    node_rank: int
    store: Any  # torch.distributed.TCPStore
    address: str  # this node's, as its peers reach it

    @classmethod
    def meet(cls, nnodes: int, node_rank: int, rdzv: str) -> Cluster:
        # Not in torch.distributed's __all__: an error only under mypy --strict.
        from torch.distributed import TCPStore  # type: ignore[attr-defined, unused-ignore]

        host, _, port = rdzv.rpartition(":")
        try:
            store = TCPStore(host, int(port), nnodes, node_rank == 0, timedelta(seconds=JOIN_S))
        except (RuntimeError, ValueError) as e:  # a peer never came, or a bad address
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"the {nnodes} nodes did not meet at {rdzv}: {first}") from e
        return cls(nnodes, node_rank, store, _towards(host))

    def workers(self, point: int, ports: list[int]) -> list[str]:
        """Every worker's HOST:PORT in index order, once every node has posted its own."""
        self.store.set(f"p{point}/workers{self.node_rank}", json.dumps(
            [f"{self.address}:{port}" for port in ports]))  # fmt: skip
        nodes = [json.loads(self.store.get(f"p{point}/workers{r}")) for r in range(self.nnodes)]
        return [address for node in nodes for address in node]

    def post(self, point: int, outcome: dict[str, Any]) -> None:
        self.store.set(f"p{point}/result{self.node_rank}", json.dumps(outcome))

    def results(self, point: int) -> list[dict[str, Any]]:
        """The other nodes' outcomes of `point`: {"ranks": [...]} or {"error": "..."}."""
        keys = [f"p{point}/result{r}" for r in range(1, self.nnodes)]
        try:
            self.store.wait(keys, timedelta(seconds=RESULTS_S))
        except RuntimeError:  # the store's timeout, or a peer gone with its connection
            return [{"error": f"no results from the other nodes within {RESULTS_S} s"}]
        return [json.loads(self.store.get(key)) for key in keys]


def _env(index: int, cluster: list[str], threads: int) -> dict[str, str]:
    env = {"OMP_NUM_THREADS": str(threads), "TF_CPP_MIN_LOG_LEVEL": "2"}
    if cluster:
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}}
        )
    return env


def _error(directory: Path, rank: int, code: int) -> str:
    log = directory / f"worker-{rank}.log"
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return "\n".join([f"TensorFlow worker {rank} failed ({how(code)})", *lines[-TAIL_LINES:]])


def _gpu(local_rank: int, multi: bool) -> dict[str, str]:
    """One GPU per MultiWorker process: each would otherwise take every GPU it sees as a
    replica of its own. No GPU, nothing to hide; MirroredStrategy picks its own devices."""
    import torch

    if not multi or not torch.cuda.is_available():
        return {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
    return {"CUDA_VISIBLE_DEVICES": devices[local_rank]}


def _run_local(
    directory: Path, ranks: range, addresses: list[str], threads: int
) -> tuple[int, list[int], str | None]:
    """Run this node's workers (global `ranks`) to their end, or stop them all at the first
    failure: (return code, pids, error)."""
    spec = str(directory / "spec.json")
    try:
        with Supervisor() as supervisor:
            for rank in ranks:
                supervisor.start(
                    [sys.executable, "-u", "-m", MODULE, spec, str(rank)],
                    directory / f"worker-{rank}.log",
                    _env(rank, addresses, threads) | _gpu(rank - ranks.start, bool(addresses)),
                    name=f"TensorFlow worker {rank}",
                )
            named = {
                c.pid: f"TensorFlow worker {r}"
                for r, c in zip(ranks, supervisor.children, strict=True)
            }
            codes = wait_watching(supervisor, lambda: named, directory)
            supervisor.stop()  # after a failure, the others wait for it in a collective forever
    except Stopped as stopped:
        return 1, [p.pid for p in supervisor.children], str(stopped)
    # A worker that its CPU-time limit stopped stops dlperf too, as its own would
    stop_at_limit(directory, [code for code in codes if code is not None])
    pids = [p.pid for p in supervisor.children]
    failed = next((i for i, code in enumerate(codes) if code), None)
    if failed is None:
        return 0, pids, None
    code = codes[failed] or 1
    return code, pids, _error(directory, ranks[failed], code)


def run_tf(
    directory: Path, processes: int, threads: int, cluster: Cluster | None = None, point: int = 0
) -> Launch:
    """Run the point whose spec.json is in `directory` in `processes` TensorFlow processes
    (MultiWorker when more than one, or on several nodes: `cluster`, where this is point
    number `point` of the study); node 0 gathers every rank's results into result.json."""
    for stale in [*directory.glob("rank-*"), *directory.glob("worker-*.log")]:
        stale.unlink()
    ports = [free_port() for _ in range(processes)] if processes > 1 or cluster else []
    if cluster is not None:
        try:
            addresses = cluster.workers(point, ports)
        except RuntimeError as e:  # a peer node gone, or the store's timeout
            return Launch(1, [], f"the nodes did not meet: {e}")
    else:
        addresses = [f"127.0.0.1:{port}" for port in ports]
    first = cluster.node_rank * processes if cluster else 0
    mine = range(first, first + processes)
    code, pids, error = _run_local(directory, mine, addresses, threads)
    ranks = [] if error else [RankResult.read(directory / f"rank-{r}.json") for r in mine]
    if cluster is not None and cluster.node_rank > 0:
        posted = {"ranks": [r.to_dict() for r in ranks]}
        cluster.post(point, {"error": error} if error else posted)
        return Launch(code, pids, error)
    if cluster is not None and error is None:
        for node, outcome in enumerate(cluster.results(point), 1):
            if "error" in outcome:
                code, error = 1, f"node {node}: {outcome['error']}"
                break
            ranks += [RankResult.from_dict(r) for r in outcome["ranks"]]
    if error is None:
        write_result(directory, ranks)
    return Launch(code, pids, error)


def write_result(directory: Path, ranks: Sequence[RankResult]) -> None:
    """Every rank's results as `result.json`, as the torch workers leave them; replicas in
    other processes are compared by their weights' fingerprints, which must agree, and the
    fingerprints are dropped."""
    prints = [r.main.fingerprint or () for r in ranks]
    spread = max(abs(a - b) for p in prints for a, b in zip(p, prints[0], strict=True))

    def compared(r: RankResult) -> RankResult:
        diff = max(r.main.replica_max_diff, spread)
        main = dataclasses.replace(r.main, replica_max_diff=diff, fingerprint=None)
        return dataclasses.replace(r, main=main)

    write_ranks(directory / "result.json", [compared(r) for r in ranks])
