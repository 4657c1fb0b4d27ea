"""The records a scaling study's processes hand each other, each with one codec that both
its writer and its reader use:

- `WorkerSpec`: what the study writes for a point's workers (`spec.json`), read by the torch,
  Horovod and TensorFlow workers and their launchers;
- `RankResult`: what each rank measured (`rank-R.json`, gathered into `result.json`), read
  by the study; DDP's own figures are there only when DDP trained the point;
- `AllreduceSummary`: what an all-reduce benchmark stores for one worker count, read by the
  communication models (dlperf.distributed.predictions) and the report;
- `PointSummary`: what the study makes of a finished point's ranks and stores as its run's
  summary, read back by the doctor (older stored summaries lack the fields added since;
  those have defaults);
- `PointRow`: a point as the study returns it, with its summary or its error: a row of the
  document `dlperf scale --json` prints, from which the report draws a study.

`from_dict` refuses a missing or an unknown field with a `ContractError` naming the record
and the fields, rather than a KeyError deep inside a worker. No torch here: the TensorFlow
worker imports this module, and TensorFlow and torchvision must not share a process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from dlperf.paths import atomic_write
from dlperf.records import ContractError, Record, checked


@dataclass(frozen=True)
class WorkerSpec(Record):
    """One point as its workers run it."""

    experiment: dict[str, Any]  # Experiment.to_dict(), resolved by the study
    per_worker_batch: int  # dp: the global batch, which DataParallel splits itself
    warmup_steps: int
    steps: int  # timed, after the warm-up
    synthetic: bool
    backend: str  # gloo, nccl, tensorflow or horovod
    comm: str  # DDP's hook, Horovod's compression or TensorFlow's all-reduce
    bucket_mb: float | None
    strategy: str
    gpus: int  # dp: the GPUs DataParallel spreads over; else 0
    threads: int
    compute_split: bool  # time a compute-only replica beside the point
    writer: bool  # this node writes result.json (node 0)
    replicas: int  # tensorflow: a mirrored point's replicas in one process
    shape: tuple[int, int, int]  # channels, height, width of the images
    classes: int
    data_file: str | None = None  # the training split for the Keras workers (not synthetic)
    memory_cap_bytes: int | None = None  # scale max-batch on CPU: peak memory allowed


@dataclass(frozen=True)
class DdpStats(Record):
    """What DistributedDataParallel measured and registered itself (DDP points only)."""

    times_ns: dict[str, float]  # its logging data's sampled per-iteration times
    reduced_bytes: int | None  # the parameters it registered for all-reduce


@dataclass(frozen=True)
class MainPhase(Record):
    """The point's own replica on one rank: its timed steps and what they did."""

    step_times_s: tuple[float, ...]
    wall_s: float  # the timed steps, between barriers
    samples: int  # trained in the timed steps, by this rank's replicas
    replica_max_diff: float  # largest weight difference from rank 0's replica
    grad_bytes: int  # of the trained parameters
    lr: float | None = None  # of the last step, where the worker runs dlperf's schedule
    ddp: DdpStats | None = None
    # TensorFlow and Horovod: the trained weights' sums, by which the launcher compares
    # replicas in other processes before it writes result.json.
    fingerprint: tuple[float, ...] | None = None
    # How long the rank's threads waited for a CPU over the timed steps
    # (dlperf.contention.Contention as a dict); None from workers older than the field.
    contention: dict[str, Any] | None = None


@dataclass(frozen=True)
class ComputePhase(Record):
    """The point's steps without their communication, timed in chunks alternating with the
    main phase's."""

    step_times_s: tuple[float, ...]
    # DDP's no-op-hook replica: per trained parameter, the median time its gradient was
    # ready after the forward returned, and its bytes (dlperf.distributed.overlap).
    grad_ready_s: tuple[float, ...] | None = None
    grad_sizes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class RankResult(Record):
    """What one rank of a point measured."""

    rank: int
    host: str
    pid: int
    world_size: int  # the ranks of the point's process group, as this rank saw it
    main: MainPhase
    compute: ComputePhase | None = None


def write_ranks(path: Path, ranks: Sequence[RankResult]) -> None:
    """Every rank's results, as one `result.json`."""
    atomic_write(path, json.dumps({"ranks": [r.to_dict() for r in ranks]}))


def read_ranks(path: Path) -> list[RankResult]:
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("ranks"), list):
        raise ContractError(f"{path}: expected an object with a list of ranks")
    return [RankResult.from_dict(r) for r in data["ranks"]]


@dataclass(frozen=True)
class RankSummary(Record):
    """One rank's figures in a point's summary."""

    rank: int
    host: str
    wall_s: float
    step_time_s: float  # median
    ddp_logging_ns: dict[str, float]  # empty where DDP did not train the point


@dataclass(frozen=True)
class AllreduceSummary(Record):
    """One worker count of an all-reduce benchmark study, as its run stores it."""

    backend: str
    workers: int
    rows: list[dict[str, float]]  # per message size: bytes, times and bandwidths
    ring_model: dict[str, Any] | None  # the α-β fit over the whole study (RingModel, as a dict)
    # Measured after the first benchmarks were stored: None in theirs.
    overlap: list[dict[str, float]] | None = None
    overlap_cost: float | None = None


@dataclass(frozen=True)
class PointSummary(Record):
    """A finished point as the study stores it (times in seconds per step; see
    dlperf.distributed.summary for the definitions)."""

    workers: int
    nodes: int
    ps: int  # parameter servers: none in a synchronous study
    per_worker_batch: int
    global_batch: int
    step_time_s: float
    step_time_min_s: float
    step_time_max_s: float
    compute_s: float | None
    comm_exposed_s: float | None
    sync_time_s: float | None  # comm_exposed_s, under the name converge's fit reads
    throughput: float
    throughput_per_worker: float
    speedup: float | None
    efficiency: float | None
    grad_bytes: int
    algbw_gbps: float | None
    busbw_gbps: float | None
    epoch_time_s: float
    cost_per_epoch: float | None
    threads_per_worker: int
    backend: str
    comm: str
    strategy: str
    bucket_mb: float | None
    timed_steps: int
    wall_time_s: float
    ddp_logging_s: dict[str, float]
    replica_max_diff: float
    emulation: str | None
    ranks: tuple[RankSummary, ...]
    # Added after the first studies were stored: None in their summaries.
    mode: str | None = None
    world_size: int | None = None
    comm_exposed_ci95_s: float | None = None
    ring_predicted_s: float | None = None
    ring_basis: str | None = None
    ring_error: float | None = None
    overlap_predicted_s: float | None = None
    overlap_basis: str | None = None
    overlap_error: float | None = None
    efficiency_time: float | None = None  # efficiency on step times (see summary.add_relative)
    # The most contended rank's share of runnable thread-time spent waiting for a CPU over
    # the timed steps, and the mark of the point's figures (dlperf.contention.judge and
    # dlperf.distributed.scaling.untrustworthy: contended, too spread, faster than ideal).
    cpu_wait_share: float | None = None
    cpu_contended: bool | None = None  # a rank's window contended (dlperf.contention)
    reliable: bool | None = None
    reliability_note: str | None = None
    # scale.repeat: each round's throughput (the point's figures are its median round's) and
    # speedup against the base's same round; the speedup is their median, with the
    # half-width of its 95% interval over the rounds (Student's t; None for one round).
    rounds: int | None = None
    throughput_rounds: tuple[float, ...] | None = None
    speedup_rounds: tuple[float, ...] | None = None
    speedup_ci95: float | None = None
    # --profile only (dlperf.traces): each step's wall time split as the ranks' traces show
    # it, mean over ranks; and each estimate of exposed communication against comm-only.
    trace_compute_only_s: float | None = None
    trace_comm_only_s: float | None = None
    trace_both_s: float | None = None
    trace_idle_s: float | None = None
    comm_error_vs_trace: float | None = None  # comm_exposed_s (step − compute-only replica)
    ring_error_vs_trace: float | None = None
    overlap_error_vs_trace: float | None = None
    # --synthetic only (see summary.with_chunks): absent from other points' summaries.
    throughput_mean: float | None = None
    throughput_ci95: float | None = None
    throughput_ci_method: str | None = None
    chunks: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stored shape: the --synthetic figures only where measured, as before."""
        data = super().to_dict()
        if self.throughput_mean is None:
            for name in ("throughput_mean", "throughput_ci95", "throughput_ci_method", "chunks"):
                del data[name]
        if self.trace_comm_only_s is None:  # --profile's figures: trace_*, *_vs_trace
            for name in [k for k in data if k.startswith("trace_") or k.endswith("_vs_trace")]:
                del data[name]
        return data


@dataclass(frozen=True)
class PointRow:
    """One point as the study ran it: where and how, and what came of it. Only node 0
    summarises and stores points: on the other nodes a finished point has no summary and no
    run."""

    run_id: int | None
    workers: int
    nodes: int
    mode: str | None
    per_worker_batch: int
    global_batch: int
    comm: str
    strategy: str
    bucket_mb: float | None
    worker_pids: tuple[int, ...]
    status: str  # finished or failed
    summary: PointSummary | None = None
    error: str | None = None  # this and out_of_memory: failed points only
    out_of_memory: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The row as `dlperf scale --json` prints it: a failed point's error, and a
        summarised point's figures in the row itself."""
        # The point and its launch (the fields without a default) first, as before.
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.default is MISSING}
        data["worker_pids"] = list(self.worker_pids)
        if self.status == "failed":
            data |= {"out_of_memory": self.out_of_memory, "error": self.error}
        return data | (self.summary.to_dict() if self.summary else {})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PointRow:
        """A row as `to_dict` gives it: a summarised point's figures are the keys beyond the
        row's fields."""
        own = {f.name for f in fields(cls)}
        row = checked(cls, {k: v for k, v in data.items() if k in own})
        summary = None
        if data.keys() - own:
            launch = own - {f.name for f in fields(PointSummary)}  # run_id, status, ...
            summary = PointSummary.from_dict({k: v for k, v in data.items() if k not in launch})
        return cls(**row | {"worker_pids": tuple(row["worker_pids"]), "summary": summary})
