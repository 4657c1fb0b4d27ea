"""`dlperf scale` without launching workers: batch arithmetic, the summary of a point, the
ring-model column, job files, bad input, which rank a failure is blamed on, and the guard
that binds a launched program to its parent. Whole studies run through the real command
with `fake_workers` standing in for torchrun: the series, the table, --json, the warnings,
the store and the figures, on per-step times a test chooses."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from dlperf.config import ScaleConfig, ScaleJob, load_experiment, load_job
from dlperf.distributed.contracts import (
    ComputePhase,
    DdpStats,
    MainPhase,
    PointRow,
    PointSummary,
    RankResult,
    WorkerSpec,
    write_ranks,
)
from dlperf.distributed.jobfiles import job_argv
from dlperf.distributed.launch import Launch, _failures, error_lines
from dlperf.distributed.planning import Point, batch_split, plan
from dlperf.distributed.predictions import (
    CommReference,
    Measured,
    overlap_prediction,
    prediction_error,
    ring_basis,
    ring_prediction,
)
from dlperf.distributed.scaling import EFFICIENCY
from dlperf.distributed.study_tables import COURSE, MARKS
from dlperf.distributed.summary import (
    add_relative,
    exposed_ci95,
    summarize,
    with_chunks,
)
from dlperf.errors import UserError
from dlperf.procs import PARENT_ENV, alive, guarded
from dlperf.store import RunStore
from tests.conftest import rank_result

# What a test's partial row lacks: a point's launch, and (summarised points) every figure.
LAUNCH = {"run_id": None, "nodes": 1, "per_worker_batch": 8, "bucket_mb": None,
          "worker_pids": [], "status": "finished"}  # fmt: skip
FIGURES = {f.name: None for f in fields(PointSummary)} | {"ranks": []}


def point_row(row: dict[str, object]) -> PointRow:
    """A row from the fields a test gives, the others None; summarised unless it failed."""
    return PointRow.from_dict(LAUNCH | (FIGURES if row["status"] == "finished" else {}) | row)


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scale_digits_weak.toml"
SUMMARY_KEYS = {
    "workers",
    "nodes",
    "ps",
    "per_worker_batch",
    "global_batch",
    "step_time_s",
    "step_time_min_s",
    "step_time_max_s",
    "compute_s",
    "comm_exposed_s",
    "sync_time_s",
    "throughput",
    "throughput_per_worker",
    "speedup",
    "efficiency",
    "grad_bytes",
    "algbw_gbps",
    "busbw_gbps",
    "epoch_time_s",
    "cost_per_epoch",
    "threads_per_worker",
    "backend",
    "comm",
    "strategy",
}


def test_strong_scaling_splits_the_global_batch() -> None:
    assert batch_split("strong", 1, 256) == (256, 256)
    assert batch_split("strong", 4, 256) == (64, 256)
    with pytest.raises(UserError, match="does not split evenly over 3 workers"):
        batch_split("strong", 3, 256)
    with pytest.raises(UserError, match="--mode strong needs --global-batch"):
        batch_split("strong", 2, None)


def test_weak_scaling_keeps_the_per_worker_batch() -> None:
    assert batch_split("weak", 1, 32) == (32, 32)
    assert batch_split("weak", 8, 32) == (32, 256)
    with pytest.raises(UserError, match="--mode weak needs --per-worker-batch"):
        batch_split("weak", 2, None)


def test_plan_orders_points_and_crosses_options() -> None:
    opts = ScaleConfig(
        workers=[2, 1], mode="weak", per_worker_batch=8, steps=2, comm=["allreduce", "fp16"]
    )
    points = plan(opts, "gloo")
    assert [(p.workers, p.comm, p.global_batch) for p in points] == [
        (1, "allreduce", 8),
        (1, "fp16", 8),
        (2, "allreduce", 16),
        (2, "fp16", 16),
    ]


def test_plan_runs_series_by_series() -> None:
    """Modes in the order given, each mode's batches smallest first, workers within each."""
    opts = ScaleConfig(
        workers=[2, 1], mode=["strong", "weak"], global_batch=[8, 4], per_worker_batch=2, steps=2
    )
    points = [(p.mode, p.workers, p.per_worker_batch, p.global_batch) for p in plan(opts, "gloo")]
    assert points == [
        ("strong", 1, 4, 4),
        ("strong", 2, 2, 4),
        ("strong", 1, 8, 8),
        ("strong", 2, 4, 8),
        ("weak", 1, 2, 2),
        ("weak", 2, 2, 4),
    ]
    both = ScaleConfig(workers=[1], mode=["weak", "strong"], per_worker_batch=2, steps=2)
    with pytest.raises(UserError, match="--mode strong needs --global-batch"):
        plan(both, "gloo")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"workers": [64]}, "64 workers per node but this host has"),
        ({"strategy": ["dp"]}, "--strategy dp (DataParallel) needs GPUs"),
        ({"steps": None}, "give one of scale.steps and scale.epochs (e.g. --steps 50)"),
        ({"epochs": 1}, "give one of scale.steps and scale.epochs"),
        ({"nnodes": 2}, "--nnodes > 1 needs --rdzv HOST:PORT"),
        ({"node_rank": 1}, "--node-rank 1 is not in 0..0"),
        ({"device": "V1000"}, "unknown device 'V1000'"),
    ],
)
def test_plan_rejects_bad_options(changes: dict[str, object], message: str) -> None:
    """What the config's ranges cannot say: combinations of keys, this host, the catalog."""
    good = {"workers": [1, 2], "mode": "weak", "per_worker_batch": 8, "steps": 2}
    opts = ScaleConfig.model_validate({**good, **changes})
    with pytest.raises(UserError) as e:
        plan(opts, "gloo")
    assert message in str(e.value)


def test_dataparallel_on_a_gpu_host_needs_nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    """DataParallel trains on the GPUs; under --backend gloo its worker would put the model on
    the CPU and fail at its first forward, so the plan refuses it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    opts = ScaleConfig(workers=[1, 2], mode="weak", per_worker_batch=8, steps=2, strategy=["dp"])
    with pytest.raises(
        UserError, match="--strategy dp trains on the GPUs, not with --backend gloo"
    ):
        plan(opts, "gloo")
    assert [p.workers for p in plan(opts, "nccl")] == [1, 2]


def test_the_example_study_plans_weak_scaling_over_1_and_2_workers() -> None:
    job = load_job(ScaleJob, EXAMPLE, [])
    opts = job.scale.model_copy(update={"allow_oversubscribe": True})  # a 1-core host too
    points = plan(opts, "gloo")
    assert [(p.workers, p.per_worker_batch, p.global_batch) for p in points] == [
        (1, 32, 32),
        (2, 32, 64),
    ]
    assert (job.scale.steps, job.experiment.run.name) == (50, "scale_digits_weak")


def _rank(rank: int, steps: list[float], compute: list[float], wall: float) -> RankResult:
    ddp = {"avg_backward_comm_time": 2_000_000, "avg_forward_compute_time": 1_000_000}
    main = MainPhase(tuple(steps), wall, 10 * len(steps), 0.0, 4_000_000, ddp=DdpStats(ddp, None))
    return RankResult(rank, "h", 100 + rank, 2, main, ComputePhase(tuple(compute)))


def _timed(main: list[float], compute: list[float] | None = None, rank: int = 0) -> RankResult:
    """A rank of which only the step times matter."""
    phase = None if compute is None else ComputePhase(tuple(compute))
    return RankResult(rank, "h", 1, 2, MainPhase(tuple(main), 1.0, 10, 0.0, 1), phase)


def test_summary_of_a_point_follows_the_definitions() -> None:
    point = Point(2, 10, 20, "allreduce", "ddp", None)
    ranks = [
        _rank(0, [0.10, 0.30, 0.20], [0.05, 0.06, 0.07], 0.60),
        _rank(1, [0.20, 0.10, 0.10], [0.08, 0.05, 0.05], 0.50),
    ]
    summary = summarize(point, ranks, 1, 1, "gloo", 1000, price_per_hour=3.6)
    s = summary.to_dict()
    assert set(s) >= SUMMARY_KEYS
    # Slowest rank per step: 0.20, 0.30, 0.20; compute: 0.08, 0.06, 0.07.
    assert s["step_time_s"] == pytest.approx(0.20)
    assert (s["step_time_min_s"], s["step_time_max_s"]) == pytest.approx((0.20, 0.30))
    assert s["compute_s"] == pytest.approx(0.07)
    assert s["comm_exposed_s"] == pytest.approx(0.13) == s["sync_time_s"]
    assert s["throughput"] == pytest.approx(60 / 0.60)  # all samples over the slowest wall
    assert s["throughput_per_worker"] == pytest.approx(50.0)
    assert s["algbw_gbps"] == pytest.approx(4e6 / 2e-3 / 1e9)  # DDP's own comm time
    assert s["busbw_gbps"] == pytest.approx(s["algbw_gbps"] * 2 * 1 / 2)
    assert s["epoch_time_s"] == pytest.approx(1000 / 100)
    assert s["cost_per_epoch"] == pytest.approx(2 * 10 / 3600 * 3.6)
    assert s["ps"] == 0 and s["emulation"] == "single-host"
    assert s["ddp_logging_s"]["backward_comm_time"] == pytest.approx(2e-3)
    assert s["world_size"] == 2  # as the ranks report it

    base = replace(summary, workers=1, throughput=60.0)
    assert (add_relative(base, None).speedup, add_relative(base, None).efficiency) == (1.0, 1.0)
    relative = add_relative(summary, base)
    assert relative.speedup == pytest.approx(100 / 60)
    assert relative.efficiency == pytest.approx(100 / 60 / 2)


def test_synthetic_chunks_give_mean_and_student_t_interval() -> None:
    # Chunks of 2 steps of a batch of 10: 100, 100, 50, 50, 100 samples/s.
    steps = [0.1, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.2, 0.1, 0.1]
    stats = with_chunks(PointSummary(**FIGURES | {"global_batch": 10}), steps, chunks=5)
    assert stats.throughput_mean == pytest.approx(80.0)
    # s^2 = (3 * 20^2 + 2 * 30^2) / 4 = 750; t(0.975, 4) = 2.776445; sem = sqrt(750 / 5).
    assert stats.throughput_ci95 == pytest.approx(2.776445 * math.sqrt(150), rel=1e-6)
    assert (stats.throughput_ci_method, stats.chunks) == ("student_t", 5)
    one = with_chunks(PointSummary(**FIGURES | {"global_batch": 10}), [0.1, 0.2], chunks=1)
    assert (one.throughput_mean, one.throughput_ci95) == (pytest.approx(200 / 3), None)


def test_ring_prediction_pays_latency_per_bucket() -> None:
    ring = {"alpha_s": 1e-4, "bandwidth_bytes_per_s": 1e9}
    one_bucket = 2 * 1e-4 + 1 * 10e6 / 1e9
    assert ring_prediction(ring, 2, 10_000_000, 25) == pytest.approx(one_bucket)
    two_buckets = 2 * (2 * 1e-4 + 5e6 / 1e9)
    assert ring_prediction(ring, 2, 10_000_000, 5_000_000 / 2**20) == pytest.approx(two_buckets)
    # DDP's default cap: a first bucket of 1 MiB, then the rest in one 25 MiB bucket.
    default = 2 * (2 * 1e-4) + 10e6 / 1e9
    assert ring_prediction(ring, 2, 10_000_000, None) == pytest.approx(default)
    assert ring_prediction(ring, 1, 10_000_000, None) is None
    assert ring_prediction(None, 2, 10_000_000, None) is None


REFERENCE = CommReference(  # what comm_reference reads from a stored all-reduce benchmark
    study_id=4,
    measured_at="2026-11-23T12:00:00",
    ring_model={"alpha_s": 1e-4, "bandwidth_bytes_per_s": 1e9, "rmse_pct": 12.3, "n_points": 9},
    workers={
        2: Measured(
            run_id=9,
            rows=[{"bytes": 2**20, "time_s": 0.002}, {"bytes": 2**22, "time_s": 0.008}],
            overlap_cost=1.0,
        )
    },
)


def test_overlap_prediction_reads_the_measured_times_and_cost_and_says_so() -> None:
    """One 3 MiB bucket (cap 25 MB) ready at the backward's end, which is what the slowest
    rank says: its all-reduce measured between 1 MiB (2 ms) and 4 MiB (8 ms) is 6 ms."""
    mib = 2**20
    ranks = [
        replace(_timed([0.05]), compute=ComputePhase((0.04,), (0.030, 0.010), (2 * mib, mib))),
        replace(_timed([0.05]), compute=ComputePhase((0.04,), (0.040, 0.012), (2 * mib, mib))),
    ]
    predicted, basis = overlap_prediction(REFERENCE, 2, ranks, 25)
    assert predicted == pytest.approx(0.006)
    assert basis == (
        "bucket/overlap model: gradient ready times of this point's compute-only replica; "
        "all-reduce median times measured at 2 workers by run 9 of all-reduce study 4 "
        "(2026-11-23T12:00:00), interpolated; overlap cost 1.00 s of compute per s of "
        "all-reduce, measured there"
    )
    # the default buckets: 1 MiB first (ready at 12 ms, 2 ms long, the backward stopped
    # meanwhile at cost 1), then 2 MiB at 42 ms: (2 + 4) ms after the 40 ms backward
    assert overlap_prediction(REFERENCE, 2, ranks, None)[0] == pytest.approx(0.006)
    # no run at 4 workers: the ring model's times, said so
    _, basis = overlap_prediction(REFERENCE, 4, ranks, 25)
    assert "ring α-β times of all-reduce study 4" in basis and "overlap cost not measured" in basis
    assert overlap_prediction(None, 2, ranks, 25) == (None, None)
    assert overlap_prediction(REFERENCE, 2, [_timed([0.05])], 25) == (None, None)  # no split
    no_readiness = [_timed([0.05], [0.04])]  # a compute split without DDP's gradient hooks
    assert overlap_prediction(REFERENCE, 2, no_readiness, 25) == (None, None)


def test_how_finely_the_exposed_time_is_measured() -> None:
    """10 steps in the worker's 5 chunks of 2; the slowest rank (0) exposes 1, 2, 3, 2, 2 ms
    per chunk: sd 0.707 ms, so 2.776 x 0.707 / sqrt(5) = 0.878 ms."""
    exposed_ms = [1, 1, 2, 2, 3, 3, 2, 2, 2, 2]
    main = [0.010 + e / 1e3 for e in exposed_ms]
    ranks = [_timed(main, [0.010] * 10), _timed([0.009] * 10, [0.009] * 10, rank=1)]
    assert exposed_ci95(ranks) == pytest.approx(2.776 * 0.7071e-3 / 5**0.5, rel=1e-3)
    assert exposed_ci95([_timed(main)]) is None  # no compute split


def test_every_prediction_carries_its_basis_and_error() -> None:
    assert ring_basis(REFERENCE) == (
        "ring α-β fitted to all-reduce study 4 (2026-11-23T12:00:00), rms error 12% over 9 sizes"
    )
    assert ring_basis(None) is None
    assert prediction_error(0.012, 0.010) == pytest.approx(0.2)
    assert prediction_error(0.012, 0.0) is None  # nothing exposed was measured
    assert prediction_error(None, 0.01) is None


def _summary(root: tuple[int, int, str], *others: tuple[int, int, str]) -> str:
    """torchrun's closing summary of failed ranks: (rank, exit code, traceback) each."""

    def failure(i: int, rank: int, code: int, traceback: str) -> str:
        return (
            f"[{i}]:\n  time      : 2026-11-23_01:00:47\n  host      : vm\n"
            f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: 7)\n"
            f"  error_file: <N/A>\n  traceback : {traceback}\n    File x.py, line 1, in f\n"
        )

    listed = "".join(failure(i, *f) for i, f in enumerate(others, 1)) or "  <NO_OTHER_FAILURES>\n"
    return (
        f"[rank0]: Traceback\nworker FAILED\n-----\nFailures:\n{listed}-----\n"
        f"Root Cause (first observed failure):\n{failure(0, *root)}=====\n"
    )


def test_torchrun_failures_are_read_root_cause_first() -> None:
    log = _summary((1, -9, "Signal 9 (SIGKILL) received by PID 7"), (0, 1, "Traceback (most"))
    assert _failures(log) == [
        {
            "rank": "1 (local_rank: 1)",
            "exitcode": "-9 (pid: 7)",
            "traceback": "Signal 9 (SIGKILL) received by PID 7",
        },
        {"rank": "0 (local_rank: 0)", "exitcode": "1 (pid: 7)", "traceback": "Traceback (most"},
    ]
    assert _failures(_summary((0, 1, "boom"))) == [
        {"rank": "0 (local_rank: 0)", "exitcode": "1 (pid: 7)", "traceback": "boom"}
    ]
    assert _failures("torchrun: error: unrecognized arguments") == []
    assert alive(1 << 22) is False


def test_the_rank_that_set_off_the_failure_is_blamed(tmp_path: Path) -> None:
    """torchrun's root cause is the earliest failure to the second: a peer whose collective
    failed because rank 1 was killed can tie with it and be named instead."""
    log = tmp_path / "torchrun.log"
    reset = "RuntimeError: Connection reset by peer"
    (tmp_path / "rank-0.error").write_text(f"Traceback (most recent call last):\n{reset}\n")
    log.write_text(_summary((0, 1, reset), (1, -9, "Signal 9 (SIGKILL) received by PID 7")))
    assert error_lines(tmp_path, log, 1) == (
        "worker rank 1 failed (exit code -9 (pid: 7)): Signal 9 (SIGKILL) received by PID 7"
    )
    # Both raised: the first traceback written is the cause; torchrun's SIGTERM is no cause.
    (tmp_path / "rank-1.error").write_text("Traceback (most recent call last):\nValueError: x\n")
    os.utime(tmp_path / "rank-1.error", ns=(1, 1))
    log.write_text(_summary((0, 1, reset), (1, -15, "Signal 15 (SIGTERM) received by PID 7")))
    assert error_lines(tmp_path, log, 1).splitlines() == [
        "worker rank 1 failed (exit code -15 (pid: 7))",
        "Traceback (most recent call last):",
        "ValueError: x",
    ]
    log.write_text("ERROR: address already in use\n")
    assert error_lines(tmp_path, log, -9) == (
        "torchrun failed (killed by SIGKILL)\nERROR: address already in use"
    )
    assert error_lines(tmp_path, log, 1).startswith("torchrun failed (exit code 1)")


def test_guard_execs_only_for_the_parent_it_names() -> None:
    check = "import os; print(os.environ['DLPERF_PARENT_PID'] == str(os.getpid()))"
    command = guarded([sys.executable, "-c", check])
    mine = {**os.environ, PARENT_ENV: str(os.getpid())}
    r = subprocess.run(command, env=mine, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout) == (0, "True\n"), r.stderr  # named the next parent: itself
    # Its parent died and it was handed to init before it could ask for the death signal.
    orphan = {**os.environ, PARENT_ENV: "1"}
    r = subprocess.run(command, env=orphan, capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout) == (1, "")


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_a_guarded_program_dies_with_its_parent(tmp_path: Path) -> None:
    pid = tmp_path / "pid"
    script = f"echo $$ > {pid}.tmp && mv {pid}.tmp {pid} && exec sleep 600"
    parent = (
        "import os, subprocess\n"
        f"os.environ[{PARENT_ENV!r}] = str(os.getpid())\n"
        f"subprocess.run({guarded(['/bin/sh', '-c', script])!r})\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", parent])
    try:
        deadline = time.monotonic() + 120
        while not pid.exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        sleeper = int(pid.read_text())
        assert alive(sleeper)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    try:
        while alive(sleeper):
            assert time.monotonic() < deadline, "the guarded program outlived its parent"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(sleeper, signal.SIGKILL)


def test_job_argv_drops_the_per_node_options() -> None:
    argv = ["scale", "e.toml", "--workers", "4", "--nnodes", "2", "--emit=slurm", "--out", "f"]
    assert job_argv(argv) == ["dlperf", "scale", "e.toml", "--workers", "4"]


def test_emit_slurm_and_kubernetes(cli: Callable, tiny_exp: Callable, tmp_path: Path) -> None:
    exp = tiny_exp()
    args = ["scale", str(exp), "--workers", "4", "--mode", "weak", "--per-worker-batch", "8"]
    r = cli(*args, "--steps", "5", "--nnodes", "2", "--emit", "slurm", "--out", "job.sh")
    assert r.code == 0, r.err
    script = (tmp_path / "job.sh").read_text()
    assert "#SBATCH --nodes=2" in script
    srun = next(line for line in script.splitlines() if line.startswith("srun"))
    per_node = shlex.split(shlex.split(srun)[-1])
    assert per_node[:9] == ["dlperf", "scale", str(exp), "--workers", "4", *args[4:8]]
    assert per_node[-6:-2] == ["--nnodes", "2", "--node-rank", "$SLURM_NODEID"]
    assert "--emit" not in per_node

    r = cli(*args, "--steps", "5", "--nnodes", "2", "--emit", "kubernetes", "--image", "me/dl:1")
    assert r.code == 0, r.err
    job = yaml.safe_load(r.out)
    assert job["kind"] == "PyTorchJob"
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    container = worker["template"]["spec"]["containers"][0]
    assert container["image"] == "me/dl:1"
    assert container["command"] == ["dlperf"]
    assert container["args"][:3] == ["scale", str(exp), "--workers"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--workers", "64"], "error: 64 workers per node but this host has"),
        (["--backend", "mpi"], "scale.backend: Input should be 'auto', 'gloo' or 'nccl' (got"),
        (["--backend", "nccl"], "error: backend nccl needs CUDA GPUs, and none are available"),
        (["--strategy", "dp"], "error: --strategy dp (DataParallel) needs GPUs; none here"),
        (["--strategy", "ddp,pp"], "scale.strategy.1: Input should be 'ddp', 'dp', 'mirrored',"),
        (["--workers", "1,x"], "scale.workers.1: Input should be a valid integer"),
        (["--workers", ","], "scale.workers: ',' holds an empty item between its commas"),
        (["--bucket-mb", "25,-1"], "scale.bucket_mb.1: must be greater than 0 (got -1)"),
        (["--set", "scale.chunks=0"], "scale.chunks: must be at least 1 (got 0)"),
        (["--device", "V1OO"], "error: unknown device 'V1OO'"),
        (["--per-worker-batch", "4000"], "error: per-worker batch 4000 is larger than"),
        (["--per-worker-batch", "8,0"], "scale.per_worker_batch: must be at least 1 (got [8, 0])"),
        (["--mode", "weak,fast"], "scale.mode: Input should be 'strong' or 'weak' (got ['weak',"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    cli: Callable, tiny_exp: Callable, extra: list[str], message: str
) -> None:
    base = ["scale", str(tiny_exp()), "--mode", "weak", "--per-worker-batch", "8", "--steps", "2"]
    r = cli(*base, *extra)
    assert r.code == 2
    assert r.err.startswith("error: ") and message in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1


def test_emit_reads_the_study_from_the_file(
    cli: Callable, tiny_exp: Callable, tmp_path: Path
) -> None:
    """The job's nodes run the file's study; the flags a job file appends win over it and
    over --set, since they place each node."""
    study = '[scale]\nworkers = [4]\nmode = "weak"\nper_worker_batch = 8\nsteps = 5\nnnodes = 3\n'
    exp = tiny_exp(extra=study, name="study.toml")
    r = cli("scale", str(exp), "--set", "scale.nnodes=4", "--nnodes", "2", "--emit", "slurm")
    assert r.code == 0, r.err
    assert "#SBATCH --nodes=2" in r.out and "#SBATCH --cpus-per-task=2" in r.out
    srun = next(line for line in r.out.splitlines() if line.startswith("srun"))
    per_node = shlex.split(shlex.split(srun)[-1])
    assert per_node[:5] == ["dlperf", "scale", str(exp), "--set", "scale.nnodes=4"]
    assert per_node[5:9] == ["--nnodes", "2", "--node-rank", "$SLURM_NODEID"]
    r = cli("scale", str(exp), "--emit", "slurm")  # 4 workers over the file's 3 nodes
    assert r.code == 2 and "4 workers do not split evenly over 3 nodes" in r.err


def test_table_shows_each_point_and_the_failure(capsys: pytest.CaptureFixture[str]) -> None:
    from dlperf.cli.scale import _print_table
    from dlperf.distributed.study import StudyResult

    point = {"workers": 2, "comm": "allreduce", "strategy": "ddp", "per_worker_batch": 16}
    point["mode"] = "weak"
    ok = {
        **point,
        "global_batch": 32,
        "throughput": 1850.0,
        "speedup": 1.8,
        "efficiency": 0.9,
        "step_time_s": 0.0187,
        "step_time_min_s": 0.0127,
        "step_time_max_s": 0.025,
        "comm_exposed_s": 0.005,
        "comm_exposed_ci95_s": 0.0012,
        "ring_predicted_s": 0.004,
        "ring_error": -0.2,
        "ring_basis": "ring α-β fitted to all-reduce study 4 (T), rms error 12% over 9 sizes",
        "overlap_predicted_s": 0.0055,
        "overlap_error": 0.1,
        "overlap_basis": "bucket/overlap model: ...",
        "throughput_mean": 1843.0,
        "throughput_ci95": 21.4,
        "chunks": 5,
        "status": "finished",
    }
    failed = {**point, "workers": 4, "global_batch": 64, "status": "failed", "error": "boom"}
    definitions = {"weak": EFFICIENCY["weak"]}
    rows = [point_row(ok), point_row(failed)]
    _print_table(StudyResult(7, rows, [], "single-host emulation", efficiency=definitions))
    out, err = capsys.readouterr()
    assert "scale study 7 (single-host emulation): weak, 16 per worker" in out
    assert "samples/s" in out and "12.7-25" in out and "18.7" in out
    assert (  # each prediction beside the measurement, with its error
        "\n2 workers ddp/allreduce: exposed comm 5 ± 1.2 ms measured; predicted ring 4 ms "
        "(-20%), "
        "overlap 5.5 ms (+10%)\n" in out
    )
    assert "\nring: ring α-β fitted to all-reduce study 4 (T), rms error 12% over 9 sizes\n" in out
    assert "\noverlap: bucket/overlap model: ...\n" in out
    assert out.endswith(  # --synthetic: the chunks' mean and its interval, named
        "\n2 workers ddp/allreduce: 1843 ± 21 samples/s "
        "(mean of 5 chunks ± 95% confidence interval, Student's t)\n"
    )
    assert "4 workers failed: boom\n" in err  # a one-line reason on the same line
    assert "run `dlperf scale allreduce --workers 2`" in err  # no ring model stored


def test_the_saved_figures_are_named_in_the_human_output(
    cli: Callable, tiny_exp: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only in --json: each figure the study saved gets a `saved PATH` line on stderr."""
    from dlperf.distributed import study
    from dlperf.report import scaling

    figures = ["/out/scale-1/plots/throughput.png", "/out/scale-1/plots/speedup.png"]
    done = study.StudyResult(1, [], [], "single-host emulation")
    monkeypatch.setattr(study, "run_study", lambda *args: done)
    saved = [(1, f"figure/{Path(p).stem}", Path(p)) for p in figures]
    monkeypatch.setattr(scaling, "save_study_figures", lambda *args: saved)
    recorded: list[tuple[int, str, Path]] = []

    def record(store: RunStore, given: list[tuple[int, str, Path]]) -> list[str]:
        recorded.extend(given)
        return [str(path) for _, _, path in given]

    monkeypatch.setattr(study, "record_figures", record)
    base = ["scale", str(tiny_exp()), "--mode", "weak", "--per-worker-batch", "8", "--steps", "2"]
    r = cli(*base, "--workers", "1")
    assert r.code == 0, r.err
    assert [line for line in r.err.splitlines() if line.startswith("saved ")] == [
        f"saved {path}" for path in figures
    ]
    assert recorded == saved  # the command records what the report only drew
    r = cli(*base, "--workers", "1", "--json")
    assert json.loads(r.out)["artifacts"] == figures


def test_a_studys_figures_are_recorded_by_the_study_not_the_report(store: RunStore) -> None:
    """The report draws and names (run, kind, path); dlperf.distributed.study records them as
    artifacts of their runs, so report/ uses the store's read methods only."""
    from dlperf.distributed.study import record_figures

    first = store.create_run("point", "scale", {})
    paths = [Path("/out/scale-1/plots/throughput.png"), Path("/out/scale-1/plots/speedup.png")]
    saved = [(first, "figure/throughput", paths[0]), (first, "figure/speedup", paths[1])]
    assert record_figures(store, saved) == [str(p) for p in paths]
    assert store.artifacts(first) == [
        {"kind": "figure/throughput", "path": str(paths[0])},
        {"kind": "figure/speedup", "path": str(paths[1])},
    ]


# --- whole studies through the command, torchrun replaced by fake_workers -----------------

Timing = Callable[[int, int], list[float]]  # (workers, per-worker batch) -> per-step seconds


@pytest.fixture
def fake_workers(monkeypatch: pytest.MonkeyPatch) -> Callable[[Timing], None]:
    """Stand in for torchrun: each point's ranks report what dlperf.distributed.worker would,
    with the per-step times `timing(workers, per_worker_batch)` gives (compute: 80% of each
    step), so that a whole study runs through the command in a second; `missing` ranks of
    each point never join its process group."""
    from dlperf.distributed import study

    def install(timing: Timing, missing: int = 0) -> None:
        def run_torchrun(directory: Path, nproc: int, *args: object, **kwargs: object) -> Launch:
            spec = WorkerSpec.read(directory / "spec.json")
            batch = spec.per_worker_batch
            steps = timing(nproc, batch)
            compute = [t * 0.8 for t in steps] if spec.compute_split else None
            world = nproc - missing
            ranks = [rank_result(r, steps, compute, batch, world=world) for r in range(world)]
            write_ranks(directory / "result.json", ranks)
            return Launch(0, [])

        monkeypatch.setattr(study, "run_torchrun", run_torchrun)

    return install


STUDY = ["--steps", "10", "--warmup-steps", "1", "--allow-oversubscribe"]


def _no_host_warnings(warnings: list[str]) -> list[str]:
    """The study's warnings but the oversubscription one a 1-core host adds."""
    return [w for w in warnings if "oversubscribed" not in w]


def test_a_study_faster_than_ideal_warns_in_its_own_output(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Issue 22: speedup 8.64 and efficiency 4.32 at 2 workers came with `"warnings": []`.
    Efficiency above 1 and widely spread step times are said on stderr and in --json, with
    the same words `dlperf doctor` finds in the stored study."""
    # 2 workers step 10x faster than 1 (efficiency 5); the 2-worker steps alternate 20/60 ms.
    fake_workers(lambda n, b: [0.1] * 10 if n == 1 else [0.02, 0.06] * 5)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", "--mode", "weak", *STUDY]
    r = cli(*args, "--per-worker-batch", "8", "--no-plots", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    two = doc["rows"][1]
    # 80 samples in 1 s against 160 in 0.4 s: speedup 5, efficiency 2.5
    assert (two["speedup"], two["efficiency"]) == pytest.approx((5.0, 2.5))
    label = "2 workers ddp/allreduce, weak, 8 per worker"
    warnings = _no_host_warnings(doc["warnings"])
    assert warnings == [
        f"{label}: efficiency 2.50 > 1 at 2 workers against 1: faster than ideal; the base "
        "point was slowed (a busy host, a cold cache) or the points did different work: rerun "
        "the study on a quiet machine (no other jobs running), with --synthetic",
        f"{label}: step times of the slowest rank vary by 100% of their median 40.0 ms "
        "(interquartile range over 10 steps, > 50%); time more steps (scale.steps) and rerun "
        "the study on a quiet machine (no other jobs running)",
    ]
    r = cli(*args, "--per-worker-batch", "8", "--no-plots")  # the table: warnings on stderr
    assert r.code == 0, r.err
    err = " ".join(r.err.split())  # rich wraps stderr at 160 columns
    for warning in warnings:
        assert f"warning: {warning}" in err
    # The doctor reads the stored study and says the same, naming the base point's run.
    r = cli("doctor", "--study", str(doc["study_id"]), "--json")
    found = {
        (f["evidence"], f["fix"])
        for f in json.loads(r.out)["findings"]
        if f["rule"] == "untrustworthy-scaling"
    }
    base = f" against 1 (run {doc['rows'][0]['run_id']})"
    said = {tuple(w.removeprefix(f"{label}: ").split("; ", 1)) for w in warnings}
    assert {(e.replace(base, " against 1"), f) for e, f in found} == said


def test_the_stored_summary_has_the_world_size_the_doctor_checks(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Issue 24: the doctor's missing-workers rule read a world size nothing wrote. The study
    stores the process group's size as the ranks report it: 1 of 2 workers joined."""
    fake_workers(lambda n, b: [0.1] * 10, missing=1)
    args = ["scale", str(tiny_exp()), "--workers", "2", "--mode", "weak", *STUDY]
    r = cli(*args, "--per-worker-batch", "8", "--no-plots", "--json")
    assert r.code == 0, r.err
    (row,) = json.loads(r.out)["rows"]
    assert row["world_size"] == 1
    r = cli("doctor", str(row["run_id"]), "--json")
    (finding,) = [f for f in json.loads(r.out)["findings"] if f["rule"] == "missing-workers"]
    assert finding["evidence"] == (
        "2 workers asked (2 processes), 1 joined (the process group's world size)"
    )


def test_a_list_of_per_worker_batches_is_one_series_each(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """--per-worker-batch 8,32: every (batch, workers) point, in a table per batch, speedup
    and efficiency within each batch only: a step takes 10 ms + 1 ms per image, so a worker
    does 444 samples/s at batch 8 and 762 at 32 (against batch 8's point, batch 32's would
    have a speedup of 1.71 on 1 worker)."""
    fake_workers(lambda n, b: [(0.01 + 0.001 * b) * (1 if n == 1 else 1.25)] * 10)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", "--mode", "weak", *STUDY]
    r = cli(*args, "--per-worker-batch", "32,8", "--no-plots", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [(r["per_worker_batch"], r["workers"]) for r in doc["rows"]] == [
        (8, 1),
        (8, 2),
        (32, 1),
        (32, 2),
    ]
    # 2 workers take 1.25x as long a step as 1, whatever the batch: speedup 1.6 in each.
    assert [r["speedup"] for r in doc["rows"]] == pytest.approx([1.0, 1.6, 1.0, 1.6])
    assert [r["efficiency"] for r in doc["rows"]] == pytest.approx([1.0, 0.8, 1.0, 0.8])
    assert _no_host_warnings(doc["warnings"]) == []
    assert doc["efficiency_definitions"] == {"weak": EFFICIENCY["weak"]}

    r = cli(*args, "--per-worker-batch", "32,8", "--no-plots")
    assert r.code == 0, r.err
    titles = [line for line in r.out.splitlines() if line.startswith("scale study")]
    assert [t.split(": ", 1)[1].strip() for t in titles] == [
        *(f"{name}; weak, ddp/allreduce: workers × per-worker batch b" for name in COURSE),
        "weak, 8 per worker",
        "weak, 32 per worker",
    ]
    series = r.out[r.out.index("weak, 8 per worker\n") :]  # after the course's tables
    two_workers = [line.split("│") for line in series.splitlines() if line.startswith("      2 │")]
    assert [[cell.strip() for cell in row[2:7]] for row in two_workers] == [
        ["8", "16", "711.1", "1.6", "0.8"],
        ["32", "64", "1219", "1.6", "0.8"],
    ]


def test_in_rounds_the_speedup_line_says_it_is_a_median_of_rounds(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Break-it round 16: with --repeat the speedup column is the median of each round's
    ratio, not the ratio of the shown throughputs, and the definitions line said the latter."""
    fake_workers(lambda n, b: [0.01 * (1 if n == 1 else 1.25)] * 10)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", *STUDY, "--no-plots", "--mode", "weak"]
    r = cli(*args, "--per-worker-batch", "8", "--repeat", "2")  # (3, the default, says the same)
    assert r.code == 0, r.err
    assert (
        "\nspeedup = X_N / X_base (base: the series' point with the fewest workers); measured "
        "in rounds, X_N / X_base here and in effic. X is the median of each round's ratio to "
        "the base's same round\n"
    ) in r.out
    r = cli(*args, "--per-worker-batch", "8", "--repeat", "1")
    assert "fewest workers)\n" in r.out and "measured in rounds" not in r.out


def test_weak_and_strong_scaling_in_one_study_and_one_figure(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """--mode weak,strong: both modes' points; each compared within itself, the output
    saying which efficiency each uses; the efficiency figure has a curve for each."""
    from dlperf.report.scaling import study_figures

    # A step's time: 10 ms per 8 images a worker takes, 25% more on 2 workers.
    fake_workers(lambda n, b: [0.01 * b / 8 * (1 if n == 1 else 1.25)] * 10)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", *STUDY, "--no-plots"]
    r = cli(*args, "--mode", "weak,strong", "--per-worker-batch", "8", "--global-batch", "16")
    assert r.code == 0, r.err
    assert (
        "\nspeedup = X_N / X_base (base: the series' point with the fewest workers); measured "
        "in rounds, X_N / X_base here and in effic. X is the median of each round's ratio to "
        "the base's same round\n"
        "effic. X = efficiency on throughput: X_N × N_base / (N × X_base), X = samples/s "
        "(all ranks' samples / the slowest rank's wall time)\n"
        "effic. T = efficiency on time (T = step ms): weak: T_base / T_N\n"
        "effic. T = efficiency on time (T = step ms): strong: T_base × N_base / (N × T_N)\n"
    ) in r.out
    r = cli(*args, "--mode", "weak,strong", "--per-worker-batch", "8", "--global-batch", "16",
            "--json")  # fmt: skip
    doc = json.loads(r.out)
    points = [
        (r["mode"], r["workers"], r["per_worker_batch"], r["global_batch"]) for r in doc["rows"]
    ]
    assert points == [
        ("weak", 1, 8, 8),
        ("weak", 2, 8, 16),
        ("strong", 1, 16, 16),
        ("strong", 2, 8, 16),
    ]
    # weak: 80 samples/s -> 128; strong: 16 / 0.02 = 800 samples/s -> 16 / 0.0125 = 1280
    assert [r["efficiency"] for r in doc["rows"]] == pytest.approx([1.0, 0.8, 1.0, 0.8])
    assert doc["efficiency_definitions"] == EFFICIENCY

    figures = dict(study_figures(doc["rows"], "both"))
    (ax,) = figures["plot/efficiency"].axes
    curves = [line.get_label() for line in ax.get_lines()]
    assert curves[0] == "weak, 8 per worker: ddp/allreduce"
    assert "strong, global batch 16: ddp/allreduce" in curves
    assert ax.get_ylabel() == "efficiency (solid: on throughput, dashed: on time)"
    # issue 39: the course's weak-scaling efficiency on iteration time, beside throughput's
    assert "weak, 8 per worker: ddp/allreduce, on step time" in curves


def test_weak_and_strong_points_of_one_launch_are_measured_once(
    cli: Callable,
    tiny_exp: Callable,
    fake_workers: Callable,
    store: RunStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Strong's global batch 64 at 1 and 2 workers is weak's 64 and 32 per worker at 1 and 2:
    those two launches run once a round and serve both series, whose rows, tables, store
    and figures are what a launch per point gives (the figures are drawn from the rows)."""
    from dlperf.distributed import study

    # A step's time: 10 ms per 8 images a worker takes, 25% more on 2 workers.
    fake_workers(lambda n, b: [0.01 * b / 8 * (1 if n == 1 else 1.25)] * 10)
    fake, launched = study.run_torchrun, []

    def counted(directory: Path, nproc: int, *args: object, **kwargs: object) -> Launch:
        spec = WorkerSpec.read(directory / "spec.json")
        launched.append((nproc, spec.per_worker_batch, directory.name))
        return fake(directory, nproc, *args, **kwargs)

    monkeypatch.setattr(study, "run_torchrun", counted)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", *STUDY, "--mode", "weak,strong",
            "--per-worker-batch", "32,64", "--global-batch", "64", "--repeat", "2"]  # fmt: skip

    def outputs() -> tuple[Any, str, str, list[Any]]:
        """The study's --json rows (but run ids), table, CSV and stored runs, and its launches:
        (workers, per-worker batch, directory) each."""
        del launched[:]
        r = cli(*args, "--no-plots", "--json")
        assert r.code == 0, r.err
        doc = json.loads(r.out)
        rows = [{k: v for k, v in row.items() if k != "run_id"} for row in doc["rows"]]
        runs = [(run.name, run.status, run.config["point"], run.summary)
                for run in store.list_runs(study_id=doc["study_id"])]  # fmt: skip
        for _, _, _, summary in runs:
            summary.pop("run_id", None)
        table, course = cli(*args, "--no-plots"), cli(*args, "--no-plots", "--csv")
        assert table.code == course.code == 0, table.err + course.err
        said = re.sub(r"study \d+", "study N", table.out)  # the table's title names its study
        found = (rows, doc["efficiency_definitions"], doc["warnings"], runs)
        return found, said, course.out, launched[:]

    once, table, course, launches = outputs()
    rounds = [(1, 32), (2, 32), (1, 64), (2, 64)]  # weak's; strong's are (1, 64) and (2, 32)
    assert [launch[:2] for launch in launches] == rounds * 2 * 3  # 2 rounds, 3 commands
    # the last round in its points' own directories: strong's p4 and p5 have none
    assert [launch[2] for launch in launches[:8]] == ["round1"] * 4 + ["p0", "p1", "p2", "p3"]

    monkeypatch.setattr(study, "twins", lambda points, steps: {})  # a launch per point
    each, table_each, course_each, launches = outputs()
    assert [launch[:2] for launch in launches] == [*rounds, (1, 64), (2, 32)] * 2 * 3
    assert len(once[0]) == 6 and [row["mode"] for row in once[0]] == ["weak"] * 4 + ["strong"] * 2
    assert once == each
    assert table == table_each and course == course_each


def test_the_figures_show_the_time_to_train_an_epoch(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Beside throughput and cost: the time one epoch of the training images takes at each
    worker count, with the ideal (the fewest workers' time shared out) dotted."""
    from dlperf.report.scaling import study_figures

    fake_workers(lambda n, b: [0.01 * (1 if n == 1 else 1.25)] * 10)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", "--mode", "weak", *STUDY]
    r = cli(*args, "--per-worker-batch", "8", "--price-per-hour", "3.6", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    kinds = [Path(p).stem for p in doc["artifacts"]]
    assert kinds == ["throughput", "train_time", "speedup", "efficiency", "step_split", "cost"]
    one = doc["rows"][0]
    images = round(one["epoch_time_s"] * one["throughput"])
    (ax,) = dict(study_figures(doc["rows"]))["plot/train_time"].axes
    assert ax.get_ylabel() == f"s to train one epoch of {images:,} images"
    lines = {line.get_label(): line for line in ax.get_lines()}
    measured = lines["weak, 8 per worker: ddp/allreduce"]
    ideal = lines["weak, 8 per worker: ddp/allreduce ideal"]
    assert list(measured.get_ydata()) == pytest.approx([images / 800, images / 1280])
    assert list(ideal.get_ydata()) == pytest.approx([images / 800, images / 1600])


def test_find_max_batch_compares_no_batch_sizes(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Its points differ in batch, not in workers: no speedup or efficiency between them."""
    fake_workers(lambda n, b: [0.01 * b / 32] * 10)  # the same samples/s at every batch
    args = ["scale", "max-batch", str(tiny_exp()), "--workers", "1", "--no-plots"]
    r = cli(*args, "--memory-cap-gb", "64", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [r["per_worker_batch"] for r in doc["rows"]] == [32, 128, 512]
    assert {(r["speedup"], r["efficiency"]) for r in doc["rows"]} == {(None, None)}
    assert doc["efficiency_definitions"] == {}
    r = cli(*args, "--memory-cap-gb", "64")
    assert r.code == 0, r.err
    header = next(line for line in r.out.splitlines() if line.lstrip().startswith("workers"))
    assert "speedup" not in header and "effic" not in header and "samples/s" in header
    assert "largest-batch search (single-host emulation, " in r.out
    assert " threads per worker), study" in r.out or " thread per worker), study" in r.out
    assert "efficiency" not in r.out


def test_max_batch_says_the_data_set_not_memory_stopped_it(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Issue 39: digits has 1,294 training images, so 2,048 per worker is never run; the
    answer 512 said only "fits", as if memory had ended the search. Its last line and
    --json say what did."""
    fake_workers(lambda n, b: [0.01 * b / 32] * 10)
    args = ["scale", "max-batch", str(tiny_exp()), "--workers", "1", "--no-plots"]
    r = cli(*args, "--memory-cap-gb", "64", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["max_per_worker_batch"] == 512
    assert doc["stopped"] == {
        "reason": "data_set",
        "per_worker_batch": 2048,
        "detail": "per-worker batch 2048 is larger than a worker's share (1294 images) of "
        "digits at 1 workers",
    }
    r = cli(*args, "--memory-cap-gb", "64")
    assert r.code == 0, r.err
    assert r.out.rstrip().splitlines()[-1] == (
        "largest per-worker batch that fits: 512; stopped by the data set, not memory: "
        "per-worker batch 2048 is larger than a worker's share (1294 images) of digits at "
        "1 workers"
    )


def test_max_batch_says_memory_stopped_it(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A size over --memory-cap-gb ends the search with the cap named as the reason; one
    that runs out of device memory with memory."""
    from dlperf.distributed.study import Study

    fake_workers(lambda n, b: [0.01 * b / 32] * 10)
    real = Study.run_point
    error = {"text": ""}

    def run_point(study: Study, index: int, total: int, point: Point, steps: int, extra: object):
        if point.per_worker_batch < 512:
            return real(study, index, total, point, steps, extra)  # type: ignore[arg-type]
        row = PointRow(None, point.workers, 1, None, point.per_worker_batch, point.global_batch,
                       point.comm, "ddp", None, (), "failed", error=error["text"],
                       out_of_memory=True)  # fmt: skip
        study.rows.append(row)
        return row

    monkeypatch.setattr(Study, "run_point", run_point)
    args = ["scale", "max-batch", str(tiny_exp()), "--workers", "1", "--no-plots"]
    cases = {
        "memory_cap": "out of memory at per-worker batch 512: peak memory 70.00 GiB is above "
        "the cap of 64.00 GiB",
        "out_of_memory": "out of memory at per-worker batch 512: CUDA out of memory.",
    }
    for reason, text in cases.items():
        error["text"] = text
        r = cli(*args, "--memory-cap-gb", "64", "--json")
        assert r.code == 0, r.err
        doc = json.loads(r.out)
        assert doc["max_per_worker_batch"] == 128
        assert doc["stopped"] == {"reason": reason, "per_worker_batch": 512, "detail": text}
    r = cli(*args, "--memory-cap-gb", "64")
    assert r.code == 0, r.err
    assert r.out.rstrip().splitlines()[-1] == (
        "largest per-worker batch that fits: 128; stopped by memory: out of memory at "
        "per-worker batch 512: CUDA out of memory."
    )


def test_max_batch_draws_its_sizes_against_the_batch(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Issue 39: the search's figures had every size at x = 1 worker. They draw time per
    step and throughput against the per-worker batch."""
    from dlperf.report.max_batch import max_batch_figures

    fake_workers(lambda n, b: [0.01 * b / 32] * 10)
    args = ["scale", "max-batch", str(tiny_exp()), "--workers", "1"]
    r = cli(*args, "--memory-cap-gb", "64", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [Path(p).stem for p in doc["artifacts"]] == ["step_time", "throughput"]
    assert all(Path(p).is_file() for p in doc["artifacts"])
    figures = dict(max_batch_figures(doc["rows"], "search", "stopped by the data set"))
    assert list(figures) == ["plot/step_time", "plot/throughput"]
    for kind, want in (("plot/step_time", [10.0, 40.0, 160.0]),
                       ("plot/throughput", [3200.0, 3200.0, 3200.0])):  # fmt: skip
        (ax,) = figures[kind].axes
        assert ax.get_xlabel() == "per-worker batch (images)"
        (line,) = [line for line in ax.get_lines() if line.get_label() == "measured"]
        assert list(line.get_xdata()) == [32, 128, 512]
        assert list(line.get_ydata()) == pytest.approx(want)


def test_both_efficiencies_are_computed_from_their_stated_definitions(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Issue 30: the footer said weak efficiency = T_base / T_N, but the table printed the
    throughput ratio (0.575 where the step times gave 12.94 / 23.98 = 0.540). Both are kept,
    named, each computed from its own definition: on throughput (samples / wall time) and on
    time (the table's step time, the slowest rank's median step)."""
    # 1 worker: 10 ms steps; 2 workers: 4 of 10 ms, 6 of 20 ms (median 20 ms, 160 ms in all).
    fake_workers(lambda n, b: [0.01] * 10 if n == 1 else [0.01] * 4 + [0.02] * 6)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", "--mode", "weak", *STUDY]
    r = cli(*args, "--per-worker-batch", "8", "--no-plots", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    two = doc["rows"][1]
    # throughput: 80 / 0.1 = 800 against 160 / 0.16 = 1000, over 2 workers: 0.625
    assert two["efficiency"] == pytest.approx(0.625)
    assert two["efficiency_time"] == pytest.approx(0.010 / 0.020)  # T_base / T_N
    assert doc["efficiency_definitions"] == {"weak": EFFICIENCY["weak"]}
    r = cli(*args, "--per-worker-batch", "8", "--no-plots")
    assert r.code == 0, r.err
    header = next(line for line in r.out.splitlines() if line.lstrip().startswith("workers"))
    cells = [c.strip() for c in header.split("┃")]
    row = next(line for line in r.out.splitlines() if line.startswith("      2 │"))
    values = dict(zip(cells, [c.strip() for c in row.split("│")], strict=True))
    assert (values["step ms"], values["effic. X"], values["effic. T"]) == ("20", "0.625", "0.5")
    footer = " ".join(r.out.split())
    assert (
        "effic. X = efficiency on throughput: X_N × N_base / (N × X_base), X = samples/s" in footer
    )
    assert "effic. T = efficiency on time (T = step ms): weak: T_base / T_N" in footer


def test_a_study_is_named_after_the_model_it_trains(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable, store: object
) -> None:
    """Issue 30: `--set model.name=resnet18_cifar` on a smallcnn file was labelled with the
    file's name alone, which says smallcnn; the default name now says what the --set changed."""
    fake_workers(lambda n, b: [0.01] * 10)
    exp = tiny_exp(name="digits_smallcnn.toml")
    args = ["scale", str(exp), "--workers", "1", "--mode", "weak", "--per-worker-batch", "8"]
    r = cli(*args, *STUDY, "--no-plots", "--set", "model.name=resnet20", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert store.get_study(doc["study_id"])["name"] == (  # type: ignore[attr-defined]
        "scale digits_smallcnn model.name=resnet20"
    )
    assert load_experiment(exp).run.name == "digits_smallcnn"  # the file's own model
    assert load_experiment(exp, ["model.name=smallcnn"]).run.name == "digits_smallcnn"
    named = load_experiment(exp, ["model.name=resnet20", 'run.name="mine"'])
    assert named.run.name == "mine"  # a name given is kept


@pytest.mark.parametrize(
    ("sets", "name"),
    [
        ([], "digits-smallcnn"),
        (["--set", "model.name=resnet18_cifar"], "digits-smallcnn-model-name-resnet18-cifar"),
        (["--set", 'run.name="A  Study_of__ResNets!"'], "a-study-of-resnets"),
        (["--set", f'run.name="{"x" * 70}_y"'], "x" * 63),
        (["--set", 'run.name="__"'], "dlperf"),
    ],
)
def test_emit_kubernetes_derives_a_valid_name(
    cli: Callable, tiny_exp: Callable, sets: list[str], name: str
) -> None:
    """Issue 30: `--emit kubernetes` refused its own default name `digits_smallcnn`. It makes
    an RFC 1123 label of the run's name: lower-case alphanumerics and '-', at most 63."""
    exp = tiny_exp(name="digits_smallcnn.toml")
    args = ["scale", str(exp), "--workers", "2", "--mode", "weak", "--per-worker-batch", "8"]
    r = cli(*args, "--steps", "5", *sets, "--emit", "kubernetes")
    assert r.code == 0, r.err
    assert yaml.safe_load(r.out)["metadata"]["name"] == name


def test_emit_slurm_names_the_job_after_the_overridden_model(
    cli: Callable, tiny_exp: Callable
) -> None:
    """The default name now holds a space and '=': the Slurm job (and its --output file) gets
    it with each run of other characters one '-'."""
    exp = tiny_exp(name="digits_smallcnn.toml")
    args = ["scale", str(exp), "--workers", "2", "--mode", "weak", "--per-worker-batch", "8"]
    r = cli(*args, "--steps", "5", "--set", "model.name=resnet20", "--emit", "slurm")
    assert r.code == 0, r.err
    assert "#SBATCH --job-name=digits_smallcnn-model.name-resnet20" in r.out.splitlines()


def _table(out: str, title: str) -> tuple[list[str], list[list[str]]]:
    """The columns and rows of the table printed under `title` (a part of it)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line)
    header = [c.strip() for c in lines[start + 1].split("┃")]
    rows = []
    for line in lines[start + 3 :]:
        if "│" not in line:
            break
        rows.append([c.strip() for c in line.split("│")])
    return header, rows


def test_a_study_over_batch_sizes_prints_the_course_tables(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Issue 30: the course's tables (workers as rows, a group of columns per per-worker
    batch): time and speedup; compute and communication; bandwidth utilisation; in the
    human output and in --csv. A step takes 10 ms + 1 ms per image, 25% more on 2 workers;
    compute is 80% of it."""
    import csv
    import io

    fake_workers(lambda n, b: [(0.01 + 0.001 * b) * (1 if n == 1 else 1.25)] * 10)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", "--mode", "weak", *STUDY]
    r = cli(*args, "--per-worker-batch", "32,8", "--no-plots", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    epoch = {(row["per_worker_batch"], row["workers"]): row["epoch_time_s"] for row in doc["rows"]}
    r = cli(*args, "--per-worker-batch", "32,8", "--no-plots")
    assert r.code == 0, r.err
    grid = "weak, ddp/allreduce: workers × per-worker batch b"
    head, rows = _table(r.out, f"time and speedup; {grid}")
    assert head == ["workers", "b=8 epoch s", "b=8 speedup", "b=32 epoch s", "b=32 speedup"]
    assert [row[0] for row in rows] == ["1", "2"]
    assert rows[1][2] == rows[1][4] == "1.6"
    assert float(rows[1][3]) == pytest.approx(epoch[(32, 2)], rel=1e-3)
    head, rows = _table(r.out, f"compute and communication; {grid}")
    assert head[1:3] == ["b=8 compute s/epoch", "b=8 comm s/epoch"]
    # 80% and 20% of 22.5 and 52.5 ms a step, over images / 16 and images / 64 steps an epoch
    images = round(doc["rows"][0]["epoch_time_s"] * doc["rows"][0]["throughput"])
    per_epoch = [
        0.018 * images / 16,
        0.0045 * images / 16,
        0.042 * images / 64,
        0.0105 * images / 64,
    ]
    assert [float(v) for v in rows[1][1:]] == pytest.approx(per_epoch, rel=1e-3)
    head, rows = _table(r.out, f"bandwidth utilisation; {grid}")
    assert head[1:4] == ["b=8 algbw GB/s", "b=8 busbw GB/s", "b=8 of B"]
    # 400 kB of gradients in DDP's 1 ms; no all-reduce benchmark stored, so no B to share
    assert rows[0][1:4] == ["-", "-", "-"] and rows[1][1:4] == ["0.4", "0.4", "-"]
    assert r.out.index("time and speedup") < r.out.index("weak, 8 per worker\n")

    r = cli(*args, "--per-worker-batch", "32,8", "--no-plots", "--csv")
    assert r.code == 0, r.err
    table = list(csv.reader(io.StringIO(r.out)))
    assert table[0][:7] == ["mode", "comm", "strategy", "bucket_mb", "workers",
                            "b=8 epoch_time_s", "b=8 speedup"]  # fmt: skip
    # each batch: the 7 columns of the course's tables, then CPU wait and the reliability mark
    assert len(table[0]) == 5 + 2 * (7 + 3) and len(table) == 3
    assert table[0][12:15] == ["b=8 cpu_wait_share", "b=8 reliable", "b=8 reliability_note"]
    cells = dict(zip(table[0], table[2], strict=True))
    assert cells["workers"] == "2" and cells["mode"] == "weak"
    assert float(cells["b=32 epoch_time_s"]) == pytest.approx(epoch[(32, 2)])
    assert float(cells["b=32 comm_epoch_s"]) == pytest.approx(0.0105 * images / 64)
    assert cells["b=32 busbw_utilisation"] == ""


def test_table_2_gives_compute_and_communication_in_seconds_per_epoch(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Issue 39: HW7's Table 2 asks for compute and communication time per epoch, in seconds;
    the table gave ms per step. Each is its per-step median times the steps of an epoch,
    training images / global batch (the images epoch_time_s counts). On 2 workers a step of
    b=8 takes 20 ms six times and 40 ms four times (median 20, mean 28), 80% of it compute:
    16 ms compute and 4 ms exposed communication a step; b=16 twice as long, over twice the
    images. The two add up to an epoch of median steps, not to Table 1's `epoch s` (images /
    throughput, every step's time counted)."""
    import csv
    import io

    def timing(n: int, b: int) -> list[float]:
        return [0.01 * b / 8] * 10 if n == 1 else [0.02 * b / 8] * 6 + [0.04 * b / 8] * 4

    fake_workers(timing)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", "--mode", "weak", *STUDY]
    args += ["--per-worker-batch", "8,16", "--no-plots"]
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    rows = {(row["per_worker_batch"], row["workers"]): row for row in json.loads(r.out)["rows"]}
    two = rows[(16, 2)]
    images = round(two["epoch_time_s"] * two["throughput"])  # the study's training images
    assert (two["compute_s"], two["comm_exposed_s"]) == pytest.approx((0.032, 0.008))
    assert two["epoch_time_s"] == pytest.approx(images * 0.056 / 32)  # the mean step's
    # per epoch: 16 ms x images / 16 = 1 ms per image; 4 ms x images / 16 = 0.25 ms
    compute, comm = 0.001 * images, 0.00025 * images

    r = cli(*args)
    assert r.code == 0, r.err
    grid = "weak, ddp/allreduce: workers × per-worker batch b"
    head, table = _table(r.out, f"compute and communication; {grid}")
    assert head == ["workers", "b=8 compute s/epoch", "b=8 comm s/epoch",
                    "b=16 compute s/epoch", "b=16 comm s/epoch"]  # fmt: skip
    assert table[0][1:] == ["-"] * 4  # one worker: no split into compute and communication
    assert [float(v) for v in table[1][1:]] == pytest.approx([compute, comm] * 2, rel=1e-3)

    r = cli(*args, "--csv")
    assert r.code == 0, r.err
    header, *lines = list(csv.reader(io.StringIO(r.out)))
    cells = dict(zip(header, lines[1], strict=True))
    assert cells["workers"] == "2"
    for b in (8, 16):
        point = rows[(b, 2)]
        steps = images / point["global_batch"]  # steps per epoch
        assert float(cells[f"b={b} compute_epoch_s"]) == pytest.approx(point["compute_s"] * steps)
        assert float(cells[f"b={b} comm_epoch_s"]) == pytest.approx(point["comm_exposed_s"] * steps)
        assert float(cells[f"b={b} comm_epoch_s"]) == pytest.approx(comm)
    assert "b=8 compute_s" not in header  # per step: in --json


def test_csv_keeps_the_cost_of_an_epoch_when_a_price_is_given(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    """Issue 39: with --price-per-hour the points have a cost per epoch (workers x epoch hours
    x price), which --csv dropped. It follows each batch's speedup, in the CSV and in the
    time and speedup table; without a price neither has the column."""
    import csv
    import io

    fake_workers(lambda n, b: [(0.01 + 0.001 * b) * (1 if n == 1 else 1.25)] * 10)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", "--mode", "weak", *STUDY]
    args += ["--per-worker-batch", "32,8", "--no-plots"]
    priced = [*args, "--price-per-hour", "2.5"]
    r = cli(*priced, "--json")
    assert r.code == 0, r.err
    rows = {(row["per_worker_batch"], row["workers"]): row for row in json.loads(r.out)["rows"]}
    cost = rows[(32, 2)]["cost_per_epoch"]
    assert cost == pytest.approx(2 * rows[(32, 2)]["epoch_time_s"] / 3600 * 2.5)

    r = cli(*priced, "--csv")
    assert r.code == 0, r.err
    header, *lines = list(csv.reader(io.StringIO(r.out)))
    assert header[5:9] == ["b=8 epoch_time_s", "b=8 speedup", "b=8 cost_per_epoch",
                           "b=8 compute_epoch_s"]  # fmt: skip
    assert len(header) == 5 + 2 * (8 + 3) and header[-3:] == [f"b=32 {m}" for m in MARKS]
    cells = dict(zip(header, lines[1], strict=True))
    assert float(cells["b=32 cost_per_epoch"]) == pytest.approx(cost)
    r = cli(*priced)
    assert r.code == 0, r.err
    grid = "weak, ddp/allreduce: workers × per-worker batch b"
    head, table = _table(r.out, f"time and speedup; {grid}")
    assert head == ["workers", "b=8 epoch s", "b=8 speedup", "b=8 $/epoch",
                    "b=32 epoch s", "b=32 speedup", "b=32 $/epoch"]  # fmt: skip
    assert float(table[1][6]) == pytest.approx(cost, rel=1e-3)

    r = cli(*args, "--csv")  # no price: no cost column
    assert r.code == 0, r.err
    header = next(csv.reader(io.StringIO(r.out)))
    assert len(header) == 5 + 2 * (7 + 3) and not [h for h in header if "cost" in h]
    head, _ = _table(cli(*args).out, f"time and speedup; {grid}")
    assert "b=8 $/epoch" not in head


def test_a_study_of_one_batch_size_prints_no_course_tables(
    cli: Callable, tiny_exp: Callable, fake_workers: Callable
) -> None:
    fake_workers(lambda n, b: [0.01] * 10)
    args = ["scale", str(tiny_exp()), "--workers", "1,2", "--mode", "weak", *STUDY]
    r = cli(*args, "--per-worker-batch", "8", "--no-plots")
    assert r.code == 0, r.err
    assert "time and speedup" not in r.out and "weak, 8 per worker" in r.out
    r = cli(*args, "--per-worker-batch", "8", "--no-plots", "--csv", "--json")
    assert r.code == 2 and r.err.startswith("error: --csv prints a scaling study's tables")


def test_bandwidth_utilisation_is_busbw_over_the_ring_models_bandwidth() -> None:
    from dlperf.distributed.study import StudyResult
    from dlperf.distributed.study_tables import course_csv, course_tables

    def row(workers: int, batch: int, busbw: float | None) -> PointRow:
        point: dict[str, object] = {
            "workers": workers,
            "mode": "strong",
            "global_batch": batch,
            "comm": "fp16",
        }
        point |= {"strategy": "ddp", "bucket_mb": 1.0, "busbw_gbps": busbw, "status": "finished"}
        return point_row(point)

    rows = [row(1, 64, None), row(2, 64, 0.5), row(4, 128, 1.5)]
    ring = {"bandwidth_bytes_per_s": 2e9, "alpha_s": 1e-4}
    result = StudyResult(3, rows, [], "2 nodes", ring, efficiency={"strong": EFFICIENCY["strong"]})
    columns, table = course_csv(result)
    cells = [dict(zip(columns, r, strict=True)) for r in table]
    assert [c["workers"] for c in cells] == [1, 2, 4]
    assert [c["B=64 busbw_utilisation"] for c in cells] == [None, 0.25, None]
    assert [c["B=128 busbw_utilisation"] for c in cells] == [None, None, 0.75]
    titles = [t.title for t in course_tables(result)]
    assert titles[2] == (
        "scale study 3 (2 nodes): bandwidth utilisation; strong, ddp/fp16 bucket 1MB: "
        "workers × global batch B"
    )


def _point_row(workers: int, batch: int) -> dict[str, object]:
    """A finished weak-scaling point as the study returns it, for the figures."""
    step = (0.01 + 0.001 * batch) * (1 if workers == 1 else 1.25)
    return {"workers": workers, "mode": "weak", "per_worker_batch": batch,
            "global_batch": batch * workers, "comm": "allreduce", "strategy": "ddp",
            "bucket_mb": None, "status": "finished", "step_time_s": step,
            "step_time_min_s": step * 0.9, "step_time_max_s": step * 1.2, "compute_s": step * 0.8,
            "comm_exposed_s": step * 0.2, "throughput": batch * workers / step,
            "epoch_time_s": 1437 * step / (batch * workers), "speedup": 1.0, "efficiency": 1.0,
            "cost_per_epoch": None}  # fmt: skip


def test_step_split_labels_do_not_overlap_at_three_batches_by_two_worker_counts() -> None:
    """Issue 30: at 3 batch sizes x 2 worker counts the step split's bar labels ran into each
    other. Every label drawn under the bars (worker counts, series names, the axis label) is
    measured where the renderer puts it: no two overlap, and none leaves the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from dlperf.report.scaling import study_figures

    rows = [_point_row(n, b) for b in (32, 128, 512) for n in (1, 2)]
    fig = dict(study_figures(rows, "scale study 9: scale digits_smallcnn"))["plot/step_split"]
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    (ax,) = fig.axes
    texts = [t for t in ax.get_xticklabels() if t.get_text()] + [ax.xaxis.label]
    texts += [t for t in ax.texts if t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert len(boxes) >= 7  # 6 bars' labels and the axis label, at least
    for i, a in enumerate(boxes):
        assert fig.bbox.contains(a.x0, a.y0) and fig.bbox.contains(a.x1, a.y1), texts[i]
        for j in range(i):
            assert not a.overlaps(boxes[j]), (texts[i].get_text(), texts[j].get_text())
    every = " ".join(t.get_text() for t in texts)
    for batch in (32, 128, 512):
        assert f"weak, {batch} per worker" in every


def test_a_failure_reads_as_one_line_when_its_reason_is_one() -> None:
    from dlperf.distributed.study_tables import failed

    assert failed("1 worker", "model Drop returned shape [7, 10]\n") == (
        "1 worker failed: model Drop returned shape [7, 10]"
    )
    trace = "Traceback (most recent call last):\n  ...\nRuntimeError: x"
    assert failed("2 workers", trace) == f"2 workers failed:\n{trace}"
    assert failed("2 workers", None) == "2 workers failed:"
