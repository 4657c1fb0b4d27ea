"""`dlperf scale` through real torchrun processes on this host: 1 and 2 workers, DDP's
gradients against one process, the no-op hook, Ctrl-C, and two nodes on loopback. Slow by
nature (each launch starts Python and torch several times). The helpers that start a study
and watch its processes serve tests/faults/test_scale_faults.py too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dlperf.config import load_experiment
from dlperf.data import load_data
from dlperf.distributed.launch import free_port, worker_pids
from dlperf.distributed.scaling import EFFICIENCY
from dlperf.engine.build import build_model
from dlperf.procs import alive
from dlperf.store import RunStore
from tests.distributed.test_allreduce import assert_benchmark_record
from tests.distributed.test_study_tables import SUMMARY_KEYS
from tests.hooks import install

DLPERF = [sys.executable, "-m", "dlperf"]
# Random images generated in memory: the workers start without reading a data set.
EXPERIMENT = """
[model]
name = "smallcnn"
[data]
name = "synthetic"
shape = [1, 8, 8]
size = 256
[train]
lr = 0.05
"""
# One round per point (scale.repeat) but where a test says otherwise: rounds triple a study.
WEAK = ["--mode", "weak", "--per-worker-batch", "16", "--warmup-steps", "1", "--repeat", "1",
        "--no-plots"]  # fmt: skip
ENDLESS = ["--workers", "2", *WEAK, "--steps", "1000000", "--synthetic"]  # stopped by a test
EVENT_S = 300  # how long a busy machine may take to get somewhere: a deadline, not a wait
STOP_S = 10  # the promise: a stopped study leaves no process behind for longer than this


def write_experiment(root: Path) -> Path:
    """The tiny experiment in `root`, its launch files under root by absolute path, so that
    the command line of every process of a study names root (see study_processes)."""
    path = root / "tiny.toml"
    path.write_text(EXPERIMENT + f'[run]\nout_dir = "{root / "dlperf_runs"}"\n')
    return path


@pytest.fixture
def exp_path(tmp_path: Path) -> Path:
    return write_experiment(tmp_path)


def _wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = EVENT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def start_dlperf(root: Path, *args: str, db: str | None = None) -> subprocess.Popen[bytes]:
    """`dlperf ARGS` as a child process in `root` (against store `db`, if given), output in
    root/stdout.txt and stderr.txt, taking SIGINT as a terminal's Ctrl-C delivers it. (A
    shell starts a background job - `pytest &` - with SIGINT ignored, Python keeps an
    ignored SIGINT, and children inherit that; a handler, unlike SIG_IGN, is reset to the
    default by exec.)"""
    env = {**os.environ, "DLPERF_DB": db} if db else None
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with open(root / "stdout.txt", "wb") as out, open(root / "stderr.txt", "wb") as err:
            return subprocess.Popen([*DLPERF, *args], cwd=root, env=env, stdout=out, stderr=err)
    finally:
        signal.signal(signal.SIGINT, previous)


def wait_training(proc: subprocess.Popen[bytes], root: Path, workers: int = 2) -> Path:
    """Wait until every worker of the study's first point is past its warm-up; the point's
    launch directory."""

    def training() -> bool:
        assert proc.poll() is None, (root / "stderr.txt").read_text()
        return len(list(root.glob("dlperf_runs/**/p0/rank-*.training"))) == workers

    _wait_for(training, "the workers to train")
    return next(root.glob("dlperf_runs/**/p0/spec.json")).parent


def study_processes(root: Path) -> dict[int, str]:
    """pid -> command line of every running process (zombies do not run) whose command line
    mentions `root`: dlperf, torchrun and the workers of a study there all name its files."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile
            continue
        if str(root) in cmdline and alive(int(entry.name)):
            found[int(entry.name)] = cmdline
    return found


def torchrun_pid(processes: dict[int, str]) -> int:
    (pid,) = [pid for pid, cmd in processes.items() if "-m torch.distributed.run" in cmd]
    return pid


def seconds_until_gone(root: Path, pids: list[int], but: int | None = None) -> float:
    """From now until no process of the study under `root` (but pid `but`) runs, neither
    among `pids` nor in the process table."""
    start = time.monotonic()
    deadline = start + 6 * STOP_S  # far past the promise: a slow stop fails on its time
    while any(alive(pid) for pid in pids) or set(study_processes(root)) - {but}:
        assert time.monotonic() < deadline, f"still running: {study_processes(root)}"
        time.sleep(0.05)
    return time.monotonic() - start


def stop_study(proc: subprocess.Popen[bytes], root: Path, sig: signal.Signals) -> float:
    """Send `sig` to `dlperf scale` once its workers train; the seconds until dlperf, torchrun
    and the workers are all gone."""
    directory = wait_training(proc, root)
    before = study_processes(root)
    assert set(worker_pids(directory)) | {proc.pid, torchrun_pid(before)} == set(before)
    proc.send_signal(sig)
    elapsed = seconds_until_gone(root, list(before))
    proc.wait(timeout=EVENT_S)  # gone from the table already; reaped here
    return elapsed


def test_allreduce_bench_then_one_and_two_workers(
    cli: Callable, exp_path: Path, store: RunStore, tmp_path: Path, monkeypatch
) -> None:
    """The all-reduce benchmark under a real torchrun of two gloo workers (its raw record
    checked by tests/distributed/test_allreduce.py's assert_benchmark_record), its ring model
    and overlap cost stored; then a weak study of 1 and 2 real workers that predicts from
    them, DDP's gradients checked against one process. One round per point: the rounds'
    layout and statistics are test_contention_marks.py's
    test_rounds_interleave_the_points_and_give_the_speedup_an_interval."""
    # Two sizes fit the ring, far enough apart that a busy host's delays do not hide the
    # bandwidth (4KB,4MB did, once, at load 12 on 2 cores); 16 MB is one of DDP's buckets.
    sizes = "4KB,16MB"
    bench = ["scale", "allreduce", "--workers", "2", "--sizes", sizes, "--iters", "3"]
    r = cli(*bench, "--json")
    assert r.code == 0, r.err
    ring = json.loads(r.out)["ring_model"]
    assert ring["bandwidth_bytes_per_s"] > 0 and ring["n_points"] == 2
    assert json.loads(r.out)["overlap_cost"]["2"] >= 0  # measured beside the all-reduces
    marked = json.loads(r.out)  # how long the benchmark waited for a CPU, and its mark
    assert isinstance(marked["cpu_wait_share"], float) and 0 <= marked["cpu_wait_share"] <= 1
    assert (marked["reliability_note"] is None) is marked["reliable"]
    (bench_run,) = store.list_runs(kind="allreduce")
    assert bench_run.status == "finished" and bench_run.summary["ring_model"] == ring
    where = store.artifact_dir("dlperf_runs") / f"allreduce-{bench_run.study_id}"
    assert_benchmark_record(json.loads((where / "w2" / "result.json").read_text()), sizes, 2)

    dump = tmp_path / "grads"
    install(monkeypatch, "dump_grads", str(dump))
    plots = WEAK[:-1]  # one round, and the figures drawn
    r = cli("scale", str(exp_path), "--workers", "1,2", *plots, "--steps", "3", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["ring_model"] == ring
    assert doc["label"] == "single-host emulation"
    one, two = doc["rows"]
    assert (one["workers"], one["global_batch"], two["global_batch"]) == (1, 16, 32)
    assert two["per_worker_batch"] == 16 and two["threads_per_worker"] == 1
    assert one["speedup"] == 1.0 and (one["mode"], two["mode"]) == ("weak", "weak")
    assert one["rounds"] is None and two["speedup"] == pytest.approx(
        two["throughput"] / one["throughput"]
    )
    assert doc["efficiency_definitions"] == {"weak": EFFICIENCY["weak"]}
    assert two["comm_exposed_s"] >= 0 and two["compute_s"] > 0
    assert two["replica_max_diff"] == 0.0  # all-reduce keeps replicas identical
    assert one["ring_predicted_s"] is None
    assert two["ring_predicted_s"] == pytest.approx(
        2 * ring["alpha_s"] + two["grad_bytes"] / ring["bandwidth_bytes_per_s"]
    )
    assert {rank["rank"] for rank in two["ranks"]} == {0, 1}
    # The bucket/overlap model, from when each gradient was ready on the compute replica:
    # the backward runs from the last layer to the first.
    assert one["overlap_predicted_s"] is None and two["overlap_predicted_s"] >= 0
    # each prediction says what it was calibrated on, and its error where one was measured
    study = bench_run.study_id
    assert two["ring_basis"].startswith(f"ring α-β fitted to all-reduce study {study} (")
    assert f"measured at 2 workers by run {bench_run.id} of" in two["overlap_basis"]
    assert "overlap cost" in two["overlap_basis"] and one["overlap_basis"] is None
    if two["comm_exposed_s"]:
        assert two["ring_error"] == pytest.approx(
            two["ring_predicted_s"] / two["comm_exposed_s"] - 1
        )
    (result,) = tmp_path.glob("dlperf_runs/**/p1/result.json")
    for rank in json.loads(result.read_text())["ranks"]:
        ready, sizes = rank["compute"]["grad_ready_s"], rank["compute"]["grad_sizes"]
        assert len(ready) == len(sizes) > 1
        assert 0 < ready[-1] < ready[0] and sum(sizes) == two["grad_bytes"]

    runs = store.list_runs(study_id=doc["study_id"])
    assert [run.status for run in runs] == ["finished", "finished"]
    assert all(set(run.summary) >= SUMMARY_KEYS for run in runs)
    assert len(store.metrics(two["run_id"], "rank1/step_time_s")) == 3
    assert len(store.metrics(two["run_id"], "rank0/compute_step_time_s")) == 3
    kinds = {a["kind"] for a in store.artifacts(one["run_id"])}
    assert {"plot/throughput", "plot/speedup", "plot/efficiency", "plot/step_split"} <= kinds

    # DDP's averaged gradients of the first step = one process on the concatenated batch.
    shards = [torch.load(f"{dump}.w2.rank{r}.pt") for r in (0, 1)]
    exp = load_experiment(exp_path)
    torch.set_num_threads(1)
    model = build_model(exp, load_data(exp.data), torch.device("cpu"))
    model.eval()
    x = torch.cat([s["x"] for s in shards])
    y = torch.cat([s["y"] for s in shards])
    nn.functional.cross_entropy(model(x), y).backward()
    for p, g0, g1 in zip(model.parameters(), shards[0]["grads"], shards[1]["grads"], strict=True):
        torch.testing.assert_close(g0, p.grad, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(g1, g0, rtol=0, atol=0)
    # The shards are the ranks' own halves of the data, not copies of one batch.
    assert not torch.equal(shards[0]["x"], shards[1]["x"])


def test_compression_hooks_keep_replicas_in_step() -> None:
    """fp16/bf16 compress the all-reduce and PowerSGD replaces it with a low-rank one; each
    still hands every rank the same gradient, so the replicas stay identical (unlike noop).
    Through real workers: fp16 in the feature-extract point's launch (test_contention_marks.py's
    test_a_real_study_on_a_busy_core_is_marked), PowerSGD in the
    profiled point's (tests/test_traces.py), noop in test_two_nodes_on_loopback_store_once.
    bf16 is torch's fp16 hook at another dtype: here, each name registers its hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    from dlperf.distributed.worker import comm_hook

    class Registers:
        def __init__(self) -> None:
            self.hooks: list[tuple[Any, Callable]] = []

        def register_comm_hook(self, state: Any, hook: Callable) -> None:
            self.hooks.append((state, hook))

    expected = {
        "fp16": default_hooks.fp16_compress_hook,
        "bf16": default_hooks.bf16_compress_hook,
        "noop": debugging_hooks.noop_hook,
        "allreduce": None,  # DDP's own
    }
    for name, hook in expected.items():
        model = Registers()
        comm_hook(name, model)  # type: ignore[arg-type]
        assert model.hooks == ([(None, hook)] if hook else []), name
    model = Registers()
    comm_hook("powersgd", model)  # type: ignore[arg-type]
    ((state, hook),) = model.hooks
    assert hook is powersgd.powerSGD_hook and isinstance(state, powersgd.PowerSGDState)


def two_nodes(cli: Callable, args: list[str], root: Path) -> tuple[Any, Path]:
    """`dlperf scale ARGS` as two nodes on loopback: node 1 a process of its own in its own
    directory with its own run store (the other "host"), node 0 in this one. Node 0's
    result, and node 1's directory."""
    node = [*args, "--nnodes", "2", "--rdzv", f"127.0.0.1:{free_port()}"]
    elsewhere = root / "node1"
    elsewhere.mkdir()
    env = {**os.environ, "DLPERF_DB": str(elsewhere / "node1.db")}
    node1 = subprocess.Popen([*DLPERF, *node, "--node-rank", "1"], env=env, cwd=elsewhere)
    try:
        result = cli(*node, "--node-rank", "0", "--json")
        code = node1.wait(timeout=EVENT_S)
        # Node 1's torchrun log says why, should it fail (once, under a heavy load: exit 1).
        logs = "".join(f"--- {f}\n{f.read_text()[-3000:]}" for f in elsewhere.rglob("*.log"))
        assert code == 0, logs
    finally:
        if node1.poll() is None:
            node1.kill()
    assert result.code == 0, result.err
    return result, elsewhere


def test_two_nodes_on_loopback_store_once(
    cli: Callable, exp_path: Path, store: RunStore, tmp_path: Path
) -> None:
    node = ["scale", str(exp_path), "--workers", "2", *WEAK, "--steps", "2", "--synthetic"]
    r, elsewhere = two_nodes(cli, [*node, "--comm", "noop"], tmp_path)
    (row,) = json.loads(r.out)["rows"]
    assert (row["workers"], row["nodes"], row["global_batch"]) == (2, 2, 32)
    assert {rank["rank"] for rank in row["ranks"]} == {0, 1}
    assert row["replica_max_diff"] > 0  # no-op hook: each replica stepped on its own gradient
    assert row["emulation"] is None
    (run,) = store.list_runs(kind="scale")
    assert run.summary["nodes"] == 2
    assert RunStore.open(str(elsewhere / "node1.db")).list_runs() == []


def test_find_max_batch_stops_where_the_data_runs_out(
    cli: Callable, exp_path: Path, store: RunStore
) -> None:
    small = exp_path.read_text().replace("size = 256", "size = 64")  # 64 training images
    exp_path.write_text(small)
    args = ["scale", "max-batch", str(exp_path), "--workers", "1", "--no-plots"]
    r = cli(*args, "--memory-cap-gb", "64", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["max_per_worker_batch"] == 32
    (row,) = doc["rows"]  # 128 > 64 images: never launched
    assert row["per_worker_batch"] == 32 and row["timed_steps"] == 2  # one epoch
    assert (row["speedup"], row["efficiency"]) == (None, None)  # no scaling point
    assert any("per-worker batch 128 exceeds the data set" in w for w in doc["warnings"])
    assert doc["stopped"]["reason"] == "data_set" and doc["stopped"]["per_worker_batch"] == 128


def test_find_max_batch_catches_a_worker_over_its_memory_cap(
    cli: Callable, exp_path: Path, store: RunStore
) -> None:
    args = ["scale", "max-batch", str(exp_path), "--workers", "1", "--no-plots"]
    r = cli(*args, "--memory-cap-gb", "0.01", "--json")
    assert r.code == 1
    doc = json.loads(r.out)
    assert doc["max_per_worker_batch"] is None
    (row,) = doc["rows"]
    assert row["out_of_memory"] is True
    assert row["error"].startswith("out of memory at per-worker batch 32: peak memory")
    assert doc["stopped"] == {
        "reason": "memory_cap",
        "per_worker_batch": 32,
        "detail": row["error"],
    }
    (run,) = store.list_runs(kind="scale")
    assert run.status == "failed" and run.error == row["error"]


def test_find_max_batch_fails_when_a_batch_fails_for_another_reason(
    cli: Callable, exp_path: Path, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only running out of memory ends the search with an answer: a point that crashes (an
    NCCL error, a bug) at batch 128 after 32 fitted leaves it unfinished, exit 1, saying so.
    The search's logic is what is tested: batch 32's workers are faked too (a real point at
    32 fits in test_find_max_batch_stops_where_the_data_runs_out)."""
    from dlperf.distributed import study as study_module
    from dlperf.distributed.contracts import PointRow, WorkerSpec, write_ranks
    from dlperf.distributed.launch import Launch
    from dlperf.distributed.study import Study
    from tests.conftest import rank_result

    def run_torchrun(directory: Path, nproc: int, *args: object, **kwargs: object) -> Launch:
        spec = WorkerSpec.read(directory / "spec.json")
        assert spec.per_worker_batch == 32 and nproc == 1
        ranks = [rank_result(0, [0.1] * spec.steps, None, spec.per_worker_batch, world=1)]
        write_ranks(directory / "result.json", ranks)
        return Launch(0, [])

    monkeypatch.setattr(study_module, "run_torchrun", run_torchrun)
    real = Study.run_point

    def run_point(study: Study, index: int, total: int, point: Any, steps: int, extra: Any):
        if point.per_worker_batch == 32:
            return real(study, index, total, point, steps, extra)
        row = PointRow(None, point.workers, 1, "weak", point.per_worker_batch, point.global_batch,
                       point.comm, "ddp", None, (), "failed", error="rank 0 failed")  # fmt: skip
        study.rows.append(row)
        return row

    monkeypatch.setattr(Study, "run_point", run_point)
    monkeypatch.setattr(Study, "shard_error", lambda study, point: None)  # 128 > 64 images
    args = ["scale", "max-batch", str(exp_path), "--workers", "1", "--no-plots"]
    r = cli(*args, "--memory-cap-gb", "64", "--json")
    assert r.code == 1, r.err
    doc = json.loads(r.out)
    assert doc["max_per_worker_batch"] == 32
    assert [row["status"] for row in doc["rows"]] == ["finished", "failed"]
    assert any("per-worker batch 128 failed, not for memory" in w for w in doc["warnings"])
    assert doc["stopped"] == {
        "reason": "failed",
        "per_worker_batch": 128,
        "detail": "rank 0 failed",
    }
