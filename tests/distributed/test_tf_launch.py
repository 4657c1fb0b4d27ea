"""dlperf.distributed.tf_launch without TensorFlow: each worker's environment (TF_CONFIG),
a failed worker's first line, the replicas compared by their fingerprints in result.json,
the nodes' exchange through a fake key-value store, and run_tf's gathering of the ranks on
node 0 and posting on the others (the local workers a fake)."""

from __future__ import annotations

import json
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from dlperf.distributed import tf_launch
from dlperf.distributed.contracts import MainPhase, RankResult, read_ranks
from dlperf.distributed.tf_launch import (
    RESULTS_S,
    Cluster,
    _env,
    _error,
    _towards,
    run_tf,
    write_result,
)
from dlperf.procs import how


def test_one_process_gets_no_cluster_and_each_multiworker_process_its_index() -> None:
    assert _env(0, [], 2) == {"OMP_NUM_THREADS": "2", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env = _env(1, ["a:1", "b:2"], 3)
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}
    }  # fmt: skip


def test_a_failed_worker_is_told_with_its_logs_tail(tmp_path: Path) -> None:
    (tmp_path / "worker-1.log").write_text("start\n\nValueError: bad\n")
    assert (
        _error(tmp_path, 1, -9)
        == "TensorFlow worker 1 failed (killed by SIGKILL)\nstart\nValueError: bad"
    )
    assert _error(tmp_path, 1, 3).splitlines()[0] == "TensorFlow worker 1 failed (exit code 3)"


@pytest.mark.parametrize("code", [-signal.SIGTERM, -signal.SIGSEGV, -(signal.SIGRTMIN + 1), 1])
def test_a_failed_worker_ends_in_the_words_of_the_other_launchers(
    tmp_path: Path, code: int
) -> None:
    (tmp_path / "worker-0.log").write_text("")
    assert _error(tmp_path, 0, code) == f"TensorFlow worker 0 failed ({how(code)})"


def rank(r: int, prints: tuple[float, ...] | None, diff: float = 0.0) -> RankResult:
    main = MainPhase((0.1,), 0.1, 8, diff, 8, fingerprint=prints)
    return RankResult(r, "h", 100 + r, 2, main)


def test_replicas_in_other_processes_are_compared_by_their_fingerprints(tmp_path: Path) -> None:
    write_result(tmp_path, [rank(0, (1.0, 5.0)), rank(1, (1.25, 4.5), diff=0.1)])
    first, second = read_ranks(tmp_path / "result.json")
    # the largest difference of any sum from rank 0's: |4.5 - 5.0| = 0.5
    assert first.main.replica_max_diff == 0.5 and second.main.replica_max_diff == 0.5
    assert first.main.fingerprint is None and second.main.fingerprint is None


def test_a_replicas_own_spread_is_kept_when_larger(tmp_path: Path) -> None:
    write_result(tmp_path, [rank(0, (1.0,), diff=2.0)])  # mirrored: replicas in one process
    [only] = read_ranks(tmp_path / "result.json")
    assert only.main.replica_max_diff == 2.0


def test_this_hosts_address_towards_a_peer() -> None:
    assert _towards("127.0.0.1") == "127.0.0.1"


class FakeStore:
    """torch's TCPStore as the nodes use it: set, get, wait."""

    def __init__(self, values: dict[str, str] | None = None, times_out: bool = False) -> None:
        self.values = dict(values or {})
        self.times_out = times_out
        self.waited: list[tuple[list[str], timedelta]] = []

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def get(self, key: str) -> bytes:
        return self.values[key].encode()

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        self.waited.append((keys, timeout))
        if self.times_out:
            raise RuntimeError("Socket Timeout")


def test_every_worker_of_every_node_in_index_order() -> None:
    store = FakeStore({"p3/workers0": json.dumps(["10.0.0.1:5", "10.0.0.1:6"])})
    node1 = Cluster(2, 1, store, "10.0.0.2")
    assert node1.workers(3, [7, 8]) == ["10.0.0.1:5", "10.0.0.1:6", "10.0.0.2:7", "10.0.0.2:8"]
    assert json.loads(store.values["p3/workers1"]) == ["10.0.0.2:7", "10.0.0.2:8"]


def test_node_0_reads_the_other_nodes_outcomes_or_says_none_came() -> None:
    store = FakeStore()
    Cluster(3, 1, store, "b").post(0, {"ranks": []})
    Cluster(3, 2, store, "c").post(0, {"error": "boom"})
    head = Cluster(3, 0, store, "a")
    assert head.results(0) == [{"ranks": []}, {"error": "boom"}]
    assert store.waited == [(["p0/result1", "p0/result2"], timedelta(seconds=RESULTS_S))]
    late = Cluster(2, 0, FakeStore(times_out=True), "a")
    assert late.results(0) == [{"error": f"no results from the other nodes within {RESULTS_S} s"}]


@pytest.fixture
def local_ranks(monkeypatch: pytest.MonkeyPatch) -> list[range]:
    """_run_local as a fake: each rank of `ranks` writes its result; the ranges run."""
    ran: list[range] = []

    def run(directory: Path, ranks: range, addresses: list[str], threads: int) -> Any:
        ran.append(ranks)
        for r in ranks:
            rank(r, (1.0,)).write(directory / f"rank-{r}.json")
        return 0, [r + 100 for r in ranks], None

    monkeypatch.setattr(tf_launch, "_run_local", run)
    return ran


def test_a_peer_node_posts_its_ranks_and_writes_no_result(
    tmp_path: Path, local_ranks: list[range]
) -> None:
    store = FakeStore({"p0/workers0": json.dumps(["a:1", "a:2"])})
    (tmp_path / "rank-9.json").write_text("stale")
    launch = run_tf(tmp_path, 2, 1, Cluster(2, 1, store, "b"), point=0)
    assert (launch.returncode, launch.pids) == (0, [102, 103]) and local_ranks == [range(2, 4)]
    posted = json.loads(store.values["p0/result1"])
    assert [r["rank"] for r in posted["ranks"]] == [2, 3]
    assert not (tmp_path / "result.json").exists() and not (tmp_path / "rank-9.json").exists()


def test_node_0_gathers_every_nodes_ranks_or_fails_with_a_nodes_error(
    tmp_path: Path, local_ranks: list[range]
) -> None:
    peer = {"ranks": [rank(r, (1.0,)).to_dict() for r in (2, 3)]}
    store = FakeStore({"p0/workers1": json.dumps(["b:1", "b:2"]), "p0/result1": json.dumps(peer)})
    launch = run_tf(tmp_path, 2, 1, Cluster(2, 0, store, "a"), point=0)
    assert launch.error is None
    assert [r.rank for r in read_ranks(tmp_path / "result.json")] == [0, 1, 2, 3]
    (tmp_path / "result.json").unlink()
    store.values["p0/result1"] = json.dumps({"error": "worker 2 failed"})
    launch = run_tf(tmp_path, 2, 1, Cluster(2, 0, store, "a"), point=0)
    assert (launch.returncode, launch.error) == (1, "node 1: worker 2 failed")
    assert not (tmp_path / "result.json").exists()
