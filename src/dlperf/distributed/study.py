"""Scaling studies: one torchrun launch per point (workers x comm x strategy x bucket size),
every point a run of one `scale` study in the store.

Batch arithmetic: strong scaling keeps the global batch B and gives each of N workers B/N;
weak scaling keeps the per-worker batch b, so the global batch is N*b. A study may hold both
modes and several batches of each: every (mode, batch) is a series of points over the worker
counts (see dlperf.distributed.scaling).

Per point (all times per step, seconds):
- step_time_s: median over the timed steps of the slowest rank's step time (min/max too);
- compute_s: the same point re-run in the same processes, on a second replica under DDP's
  no-op communication hook, in chunks of steps alternating with the point's own;
  comm_exposed_s = max(0, step_time_s - compute_s), also stored as sync_time_s;
- throughput = global samples / wall time after warm-up (slowest rank), never a mean of
  per-step rates; speedup = X_N / X_base, efficiency = speedup * N_base / N, where the base
  is the point with the fewest workers of the same series (mode and its batch, comm, strategy,
  bucket; 1 worker when measured); none for --find-max-batch, whose points differ in batch;
- algbw = grad_bytes / all-reduce time (DDP's own measured backward communication time,
  else the exposed communication), busbw = algbw * 2(n-1)/n (nccl-tests' convention);
- epoch_time_s = training images / throughput; cost_per_epoch = workers * epoch hours * price
  per worker-hour;
- --synthetic: throughput_mean and throughput_ci95 over chunks of the timed steps, the
  interval by Student's t (throughput_ci_method; see chunk_throughput).

A point measures speed, so its workers start from random weights of the experiment's shape:
model.weights only sets the images' resolution and statistics (resolved here, where the store
is, and written into the experiment the workers get and the runs store), and a feature-extract
experiment trains with its backbone frozen, as a run would.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from dlperf.analytic.devices import get_device
from dlperf.config import Experiment, ScaleConfig, ScaleMode
from dlperf.distributed import chunk_sizes
from dlperf.distributed.hvd_launch import run_horovod
from dlperf.distributed.launch import Rendezvous, run_torchrun
from dlperf.distributed.scaling import EFFICIENCY, series, series_name, untrustworthy
from dlperf.distributed.tf_launch import Cluster, run_tf
from dlperf.distributed.tf_worker import ignored_settings
from dlperf.engine.run import as_run
from dlperf.errors import UserError
from dlperf.progress import NullReporter, Reporter
from dlperf.store import Store
from dlperf.system import system_info, usable_cores

BACKENDS = ("auto", "gloo", "nccl")
WORKER_MODULE = "dlperf.distributed.worker"
BATCH_START, BATCH_GROWTH, BATCH_SIZES = 32, 4, 8  # --find-max-batch: 32 .. 32 * 4^7
# One process per worker: DDP, MultiWorker and Horovod's bindings; dp and mirrored: one in all.
DATA_PARALLEL = ("ddp", "multiworker", "torch", "tensorflow")
CI_METHOD = "student_t"  # how throughput_ci95 is made: see chunk_throughput


@dataclass
class Point:
    workers: int
    per_worker_batch: int
    global_batch: int
    comm: str
    strategy: str
    bucket_mb: float | None
    mode: ScaleMode | None = None  # None: a point of no series (--find-max-batch's)

    @property
    def group(self) -> tuple[object, ...]:
        """The series whose base the point's speedup and efficiency are measured against."""
        return series(asdict(self))

    def label(self) -> str:
        bucket = f" bucket {self.bucket_mb:g}MB" if self.bucket_mb else ""
        batch = series_name(asdict(self))
        return f"{self.workers} workers {self.strategy}/{self.comm}{bucket}" + (
            f", {batch}" if batch else ""
        )


def batch_split(mode: str, workers: int, batch: int | None) -> tuple[int, int]:
    """(per-worker batch, global batch) of one point; `batch` is the mode's (strong: global,
    weak: per worker)."""
    if mode == "strong":
        if batch is None:
            raise UserError("--mode strong needs --global-batch N", "or use --mode weak")
        if batch % workers:
            raise UserError(
                f"--global-batch {batch} does not split evenly over {workers} workers",
                "give a global batch divisible by every worker count",
            )
        return batch // workers, batch
    if batch is None:
        raise UserError("--mode weak needs --per-worker-batch N", "or use --mode strong")
    return batch, batch * workers


def resolve_backend(name: str) -> str:
    if name not in BACKENDS:
        raise UserError(f"unknown backend '{name}'", f"use {', '.join(BACKENDS)}")
    if name == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if name == "nccl" and not torch.cuda.is_available():
        raise UserError("backend nccl needs CUDA GPUs, and none are available here", "use gloo")
    return name


def threads_per_worker(workers_per_node: int, cores: int) -> int:
    return max(1, cores // workers_per_node)


def hourly_price(opts: ScaleConfig) -> float | None:
    """The price per worker-hour: price_per_hour, else the catalog price of the device."""
    if opts.device is None:
        return opts.price_per_hour
    entry = get_device(opts.device)  # a misspelt device fails even when a price is given
    if opts.price_per_hour is not None:
        return opts.price_per_hour
    if entry.price_per_hour_usd is None:
        raise UserError(f"device {entry.name} has no price", "give --price-per-hour")
    return entry.price_per_hour_usd


def check_options(opts: ScaleConfig) -> None:
    """What the config's own ranges cannot say and does not depend on this host or node (an
    emitted job file sets each node's rank and rendezvous from the job's environment)."""
    if (opts.steps is None) == (opts.epochs is None):
        raise UserError("give one of scale.steps and scale.epochs", "e.g. --steps 50")
    if opts.nnodes > 1 and "mirrored" in opts.strategy:  # before --emit writes a job
        raise UserError("--strategy mirrored runs in one process on one node", "use multiworker")
    if opts.nnodes > 1 and opts.framework == "horovod":
        raise UserError("--framework horovod runs on one node here (horovodrun starts remote "
                        "workers itself, over ssh)", "use --nnodes 1")  # fmt: skip
    hourly_price(opts)


TF_ALLREDUCE = {"mirrored": ("nccl", "hierarchical", "one-device"),
                "multiworker": ("auto", "ring", "nccl")}  # fmt: skip
TF_MODELS = ("resnet50", "smallcnn")


STRATEGIES = {"torch": ("ddp", "dp"), "tensorflow": ("mirrored", "multiworker"),
              "horovod": ("torch", "tensorflow")}  # fmt: skip
HOROVOD_COMM = ("allreduce", "fp16")


def strategies(opts: ScaleConfig) -> list[str]:
    """The strategies of the study (Horovod's: its bindings), each checked against its
    framework."""
    allowed = STRATEGIES[opts.framework]
    chosen: list[str] = [*opts.strategy] if opts.strategy else [allowed[0]]
    for name in chosen:
        if name not in allowed:
            raise UserError(
                f"--strategy {name} is not a {opts.framework} strategy",
                f"use {' | '.join(allowed)}",
            )
    return chosen


def tf_allreduce(opts: ScaleConfig, strategy: str) -> list[str]:
    """The TensorFlow all-reduces of one strategy's points (its default when none is given)."""
    gpus = torch.cuda.is_available()
    valid = TF_ALLREDUCE[strategy]
    default = "auto" if strategy == "multiworker" else "nccl" if gpus else "one-device"
    mine: list[str] = [a for a in opts.allreduce if a in valid] or [default]
    if "nccl" in mine and not gpus:
        rest = [a for a in valid if a != "nccl"]
        raise UserError("--allreduce nccl needs GPUs, and none are available here",
                        f"use {' or '.join(rest)}")  # fmt: skip
    return mine


def check_tensorflow(model: str) -> None:
    """What a TensorFlow point needs of the experiment: one of its models."""
    if model not in TF_MODELS:
        raise UserError(f"model {model!r} has no TensorFlow version here",
                        f"use model.name = {' or '.join(TF_MODELS)}")  # fmt: skip


def require_tensorflow(opts: ScaleConfig) -> None:
    """The extra itself, checked after every option so that a wrong option gets its own
    message whether or not TensorFlow is installed."""
    import importlib.util

    if importlib.util.find_spec("tensorflow") is None:
        raise UserError(f"--framework {opts.framework} with TensorFlow needs TensorFlow, which "
                        "is not installed", "pip install -e '.[tensorflow]'")  # fmt: skip


def check_horovod(opts: ScaleConfig, model: str, chosen: list[str]) -> None:
    """What the Horovod path needs: its communication options, horovodrun, and TensorFlow
    for the TensorFlow binding."""
    from dlperf.distributed.hvd_launch import horovodrun

    for name in opts.comm:
        if name not in HOROVOD_COMM:
            raise UserError(f"--comm {name} is DDP's", f"horovod takes {' | '.join(HOROVOD_COMM)}")
    if opts.allreduce:
        raise UserError("--allreduce is TensorFlow's", "horovod takes --comm and --bucket-mb")
    if horovodrun() is None:
        raise UserError("--framework horovod needs Horovod, which is not installed",
                        "build it with `make horovod` (docs/scale.md#horovod)")  # fmt: skip
    if "tensorflow" in chosen:
        check_tensorflow(model)


def plan(opts: ScaleConfig, backend: str, model: str = "") -> list[Point]:
    """Every point of the study after checking the options: series by series (the modes in
    the order given, each mode's batches smallest first), fewest workers first in each."""
    check_options(opts)
    chosen = strategies(opts)
    if opts.node_rank >= opts.nnodes:
        raise UserError(f"--node-rank {opts.node_rank} is not in 0..{opts.nnodes - 1}")
    if opts.nnodes > 1 and not opts.rdzv:
        raise UserError("--nnodes > 1 needs --rdzv HOST:PORT", "the address of node 0")
    if opts.framework == "horovod":
        check_horovod(opts, model, chosen)
    if opts.framework == "tensorflow":
        check_tensorflow(model)
        if opts.bucket_mb or opts.comm != ["allreduce"]:
            raise UserError("--bucket-mb and --comm are DDP's; TensorFlow takes --allreduce")
        for name in opts.allreduce:
            if not any(name in TF_ALLREDUCE[s] for s in chosen):
                takes = "; ".join(f"{s} takes {' | '.join(TF_ALLREDUCE[s])}" for s in chosen)
                raise UserError(f"--allreduce {name} is not an all-reduce of --strategy "
                                f"{','.join(chosen)}", takes)  # fmt: skip
    if "dp" in chosen:
        if not torch.cuda.is_available():
            raise UserError("--strategy dp (DataParallel) needs GPUs; none here", "use ddp")
        if opts.nnodes > 1:
            raise UserError("--strategy dp runs in one process on one node", "use ddp")
        if max(opts.workers) > torch.cuda.device_count():
            raise UserError(f"--strategy dp: only {torch.cuda.device_count()} GPUs here")
    # A process per worker, each taking cores (MirroredStrategy's replicas share one).
    processes = any(s in DATA_PARALLEL for s in chosen)
    on_cpu = backend == "gloo" or (processes and not torch.cuda.is_available())
    for workers in opts.workers:
        if workers % opts.nnodes:
            raise UserError(f"{workers} workers do not split evenly over {opts.nnodes} nodes")
        per_node = workers // opts.nnodes
        if on_cpu and per_node > usable_cores() and not opts.allow_oversubscribe:
            raise UserError(
                f"{per_node} workers per node but this host has {usable_cores()} usable cores",
                "use fewer workers, more nodes, or --allow-oversubscribe",
            )
        # NCCL, and TensorFlow's MultiWorker processes on GPUs, take one GPU per worker.
        one_gpu_each = backend == "nccl" or ("multiworker" in chosen and torch.cuda.is_available())
        if one_gpu_each and per_node > torch.cuda.device_count():
            raise UserError(f"{per_node} workers per node but {torch.cuda.device_count()} GPUs")
    points = []
    by_batch = [(mode, batch) for mode in opts.modes() for batch in opts.batches(mode) or (None,)]
    for (mode, batch), workers, strategy in itertools.product(
        by_batch, sorted(set(opts.workers)), chosen
    ):
        per_worker, global_batch = batch_split(mode, workers, batch)
        comms = tf_allreduce(opts, strategy) if opts.framework == "tensorflow" else opts.comm
        for comm, bucket in itertools.product(comms, opts.bucket_mb or (None,)):
            points.append(Point(workers, per_worker, global_batch, comm, strategy, bucket, mode))
    if opts.framework == "tensorflow" or "tensorflow" in chosen:
        require_tensorflow(opts)
    return points


def _slowest_per_step(ranks: list[dict[str, Any]], phase: str) -> list[float]:
    """Per step, the slowest rank's time: a synchronous step ends when the last rank does."""
    per_rank = [r[phase]["step_times_s"] for r in ranks]
    return [max(step) for step in zip(*per_rank, strict=True)]


def chunk_throughput(step_times: list[float], global_batch: int, chunks: int) -> dict[str, Any]:
    """Horovod's synthetic benchmark: throughput of consecutive chunks of steps, their mean,
    and the half-width of the mean's 95% confidence interval, t(0.975, n-1) * s / sqrt(n)
    over n chunks: Student's t, since s is estimated from a handful of chunks (1.96 s would
    be the spread of single chunks, with a known sigma). One chunk has no interval (None)."""
    chunks = max(1, min(chunks, len(step_times)))
    size = len(step_times) // chunks
    rates = [
        global_batch * size / sum(step_times[i * size : (i + 1) * size]) for i in range(chunks)
    ]
    return {
        "throughput_mean": statistics.fmean(rates),
        "throughput_ci95": t_half_width(rates),
        "throughput_ci_method": CI_METHOD,
        "chunks": chunks,
    }


def t_half_width(values: list[float]) -> float | None:
    """The half-width of the 95% confidence interval of the mean of `values`, Student's t:
    t(0.975, n-1) * s / sqrt(n). None for fewer than two values."""
    if len(values) < 2:
        return None
    from scipy import stats

    sem = statistics.stdev(values) / math.sqrt(len(values))
    return float(stats.t.ppf(0.975, len(values) - 1)) * sem


def exposed_ci95(ranks: list[dict[str, Any]]) -> float | None:
    """How finely comm_exposed_s is measured: the half-width of the 95% interval (Student's
    t) of the exposed time over the chunks in which the worker alternated the point's steps
    with its compute-only replica's, each chunk's exposed time the difference of the two
    medians of the slowest rank's step times. None without the compute split or with fewer
    than two chunks."""
    if "compute" not in ranks[0]:
        return None
    main, compute = _slowest_per_step(ranks, "main"), _slowest_per_step(ranks, "compute")
    diffs, start = [], 0
    for size in chunk_sizes(len(main)):  # the workers' chunks
        span = slice(start, start + size)
        diffs.append(statistics.median(main[span]) - statistics.median(compute[span]))
        start += size
    return t_half_width(diffs)


def summarize(
    point: Point,
    ranks: list[dict[str, Any]],
    nnodes: int,
    threads: int,
    backend: str,
    train_images: int,
    price_per_hour: float | None,
) -> dict[str, Any]:
    """A point's summary from every rank's measurements (speedup/efficiency added later)."""
    steps = _slowest_per_step(ranks, "main")
    step_time = statistics.median(steps)
    if "compute" in ranks[0]:
        compute = statistics.median(_slowest_per_step(ranks, "compute"))
    elif point.comm == "noop":
        compute = step_time
    else:
        compute = None
    exposed = max(0.0, step_time - compute) if compute is not None else None
    wall = max(r["main"]["wall_s"] for r in ranks)
    samples = sum(r["main"]["samples"] for r in ranks)
    throughput = samples / wall
    grad_bytes = ranks[0]["main"]["grad_bytes"]
    ddp = {
        key: statistics.fmean(r["main"]["ddp"][key] for r in ranks) / 1e9
        for key in ranks[0]["main"]["ddp"]
    }
    comm_time = ddp.get("avg_backward_comm_time") or exposed
    n = point.workers
    algbw = grad_bytes / comm_time / 1e9 if n > 1 and comm_time else None
    epoch_time = train_images / throughput
    return {
        "workers": n,
        "nodes": nnodes,
        "ps": 0,
        "mode": point.mode,
        "per_worker_batch": point.per_worker_batch,
        "global_batch": point.global_batch,
        "step_time_s": step_time,
        "step_time_min_s": min(steps),
        "step_time_max_s": max(steps),
        "compute_s": compute,
        "comm_exposed_s": exposed,
        "sync_time_s": exposed,
        "comm_exposed_ci95_s": exposed_ci95(ranks) if exposed is not None else None,
        "throughput": throughput,
        "throughput_per_worker": throughput / n,
        "speedup": None,
        "efficiency": None,
        "grad_bytes": grad_bytes,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * 2 * (n - 1) / n if algbw is not None else None,
        "epoch_time_s": epoch_time,
        "cost_per_epoch": n * epoch_time / 3600 * price_per_hour if price_per_hour else None,
        "threads_per_worker": threads,
        "backend": backend,
        "comm": point.comm,
        "strategy": point.strategy,
        "bucket_mb": point.bucket_mb,
        "timed_steps": len(steps),
        "wall_time_s": wall,
        "ddp_logging_s": {k.removeprefix("avg_"): v for k, v in ddp.items()},
        "replica_max_diff": max(r["main"]["replica_max_diff"] for r in ranks),
        "emulation": "single-host" if nnodes == 1 else None,
        "ranks": [
            {
                "rank": r["rank"],
                "host": r["host"],
                "wall_s": r["main"]["wall_s"],
                "step_time_s": statistics.median(r["main"]["step_times_s"]),
                "ddp_logging_ns": r["main"]["ddp"],
            }
            for r in ranks
        ],
    }


def add_relative(summary: dict[str, Any], base: dict[str, Any] | None) -> None:
    """Speedup and efficiency against the group's base point (its fewest workers)."""
    if base is None:
        summary["speedup"], summary["efficiency"] = 1.0, 1.0
        return
    speedup = summary["throughput"] / base["throughput"]
    summary["speedup"] = speedup
    summary["efficiency"] = speedup * base["workers"] / summary["workers"]


def comm_reference(store: Store, backend: str) -> dict[str, Any] | None:
    """What the communication models are calibrated on: the newest all-reduce benchmark study
    on `backend` with a finished run, its ring model, and per worker count the run's id, its
    measured times and its measured overlap cost (absent from benchmarks stored before it
    was measured)."""
    for run in store.list_runs(kind="allreduce"):
        summary = run["summary"]
        if run["status"] != "finished" or summary.get("backend") != backend:
            continue
        runs = store.list_runs(kind="allreduce", study_id=run["study_id"])
        return {
            "study_id": run["study_id"],
            "measured_at": run["ended"],
            "ring_model": summary.get("ring_model"),
            "workers": {
                int(r["summary"]["workers"]): {
                    "run_id": r["id"],
                    "rows": r["summary"]["rows"],
                    "overlap_cost": r["summary"].get("overlap_cost"),
                }
                for r in runs
                if r["status"] == "finished"
            },
        }
    return None


def ring_prediction(
    ring: dict[str, Any] | None, workers: int, grad_bytes: int, bucket_mb: float | None
) -> float | None:
    """Predicted all-reduce time of one step's gradients: DDP reduces them bucket by bucket,
    so each bucket pays the latency term once. The buckets as DDP caps them (its first 1 MiB
    under the default cap; see dlperf.distributed.overlap), cut at byte granularity: this
    model does not see the parameters' own sizes."""
    if ring is None or workers < 2:
        return None
    from dlperf.distributed.allreduce import ring_time
    from dlperf.distributed.overlap import bucket_caps

    first, cap = bucket_caps(bucket_mb)
    sizes: list[int] = []
    left = grad_bytes
    while left > 0 or not sizes:
        size = min(left, cap if sizes else first)
        sizes.append(size)
        left -= size
    alpha, bandwidth = ring["alpha_s"], ring["bandwidth_bytes_per_s"]
    return sum(ring_time(workers, size, alpha, bandwidth) for size in sizes)


def overlap_prediction(
    reference: dict[str, Any] | None,
    workers: int,
    ranks: list[dict[str, Any]],
    bucket_mb: float | None,
) -> tuple[float | None, str | None]:
    """Predicted exposed communication of a DDP step and its basis: its buckets' all-reduces
    overlapped with the backward pass (dlperf.distributed.overlap), each gradient ready when
    the slowest rank's compute-only replica had it, each bucket's all-reduce as long as the
    benchmark measured at that size and worker count (else the ring model's time), the
    backward paying the benchmark's measured overlap cost while a bucket is in flight."""
    compute = [r.get("compute", {}) for r in ranks]
    if reference is None or workers < 2 or not all("grad_ready_s" in c for c in compute):
        return None, None
    from dlperf.distributed.allreduce import interpolate_time, ring_time
    from dlperf.distributed.overlap import exposed_time

    where = f"all-reduce study {reference['study_id']} ({reference['measured_at']})"
    measured = reference["workers"].get(workers)
    ring = reference["ring_model"]
    if measured is not None:
        rows = measured["rows"]
        times = f"median times measured at {workers} workers by run {measured['run_id']} of {where}"
        allreduce_s = lambda nbytes: interpolate_time(rows, nbytes)  # noqa: E731
    elif ring is not None:
        alpha, bandwidth = ring["alpha_s"], ring["bandwidth_bytes_per_s"]
        times = f"ring α-β times of {where} (no run at {workers} workers)"
        allreduce_s = lambda nbytes: ring_time(workers, nbytes, alpha, bandwidth)  # noqa: E731
    else:
        return None, None
    cost = measured.get("overlap_cost") if measured else None
    paid = (
        f"overlap cost {cost:.2f} s of compute per s of all-reduce, measured there"
        if cost is not None
        else "overlap cost not measured (taken as 0: overlapped communication free)"
    )
    ready = [max(step) for step in zip(*(c["grad_ready_s"] for c in compute), strict=True)]
    predicted = exposed_time(ready, compute[0]["grad_sizes"], allreduce_s, bucket_mb, cost or 0.0)
    basis = (
        f"bucket/overlap model: gradient ready times of this point's compute-only replica; "
        f"all-reduce {times}, interpolated; {paid}"
    )
    return predicted, basis


def ring_basis(reference: dict[str, Any] | None) -> str | None:
    """What ring_predicted_s is calibrated on."""
    if not reference or not reference["ring_model"]:
        return None
    ring = reference["ring_model"]
    return (
        f"ring α-β fitted to all-reduce study {reference['study_id']} "
        f"({reference['measured_at']}), rms error {ring['rmse_pct']:.0f}% over "
        f"{ring['n_points']} sizes"
    )


def prediction_error(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured - 1; None without both, or when nothing exposed was measured."""
    if predicted is None or not measured:
        return None
    return predicted / measured - 1


@dataclass
class StudyResult:
    study_id: int | None
    rows: list[dict[str, Any]]
    warnings: list[str]
    label: str
    ring: dict[str, Any] | None = None
    max_per_worker_batch: int | None = None
    # mode -> the efficiency reported for its series, in words; empty: points not compared
    efficiency: dict[str, str] = field(default_factory=dict)


def _spec(exp: Experiment, point: Point, backend: str, threads: int, steps: int) -> dict[str, Any]:
    opts = exp.scale
    return {
        "experiment": exp.to_dict(),
        # dp splits the global batch itself; mirrored replicas take a worker's batch each
        "per_worker_batch": point.global_batch
        if point.strategy == "dp"
        else point.per_worker_batch,
        "warmup_steps": opts.warmup_steps,
        "steps": steps,
        "synthetic": opts.synthetic,
        "backend": backend,
        "comm": point.comm,
        "bucket_mb": point.bucket_mb,
        "strategy": point.strategy,
        "gpus": point.workers if point.strategy == "dp" else 0,
        "threads": threads,
        "compute_split": opts.comm_split and point.workers > 1,
        "writer": opts.node_rank == 0,
        "replicas": point.workers,  # tensorflow: a mirrored point's replicas in one process
    }


class _Study:
    """What every point of one study shares, and how one point is run and recorded."""

    def __init__(
        self,
        exp: Experiment,
        store: Store,
        out_dir: Path,
        reporter: Reporter,
        compare: bool = True,
    ) -> None:
        self.opts, self.store = exp.scale, store
        self.compare = compare  # speedup and efficiency within each series
        self.out_dir, self.reporter = out_dir, reporter
        self.tensorflow = self.opts.framework == "tensorflow"
        torch_ddp = self.opts.framework == "torch"
        self.backend = resolve_backend(self.opts.backend) if torch_ddp else self.opts.framework
        self.price = hourly_price(self.opts)
        self.cores = usable_cores()
        self.exp, self.data, self.warnings = as_run(exp, store)
        if self.tensorflow or "tensorflow" in self.opts.strategy:
            self.warnings += ignored_settings(self.exp)
        if self.opts.framework == "horovod" and self.exp.run.channels_last:
            self.warnings.append(
                "Horovod ignores run.channels_last = True: it all-reduces only contiguous "
                "tensors, so its points train in the default memory format"
            )
        self.train_images = len(self.data.train)
        self.writer = self.opts.node_rank == 0
        self.study_id: int | None = None
        self.ring: dict[str, Any] | None = None
        self.reference: dict[str, Any] | None = None  # see comm_reference
        self.cluster: Cluster | None = None  # the nodes of a multi-node TensorFlow study
        self.bases: dict[tuple[object, ...], dict[str, Any]] = {}
        self.rows: list[dict[str, Any]] = []

    def keras(self, point: Point) -> bool:
        """Whether the point trains a Keras model: tf.distribute, or Horovod's TF binding."""
        return self.tensorflow or point.strategy == "tensorflow"

    def shard_error(self, point: Point) -> UserError | None:
        if self.opts.synthetic or point.strategy == "dp":
            return None
        if self.keras(point) and not self.data.in_memory:
            return UserError(
                f"TensorFlow reads the training images from memory, and {self.data.name} "
                "streams them from files",
                "use --synthetic or an in-memory data set (e.g. digits, mnist5k, cifar10, npz)",
            )
        shard = self.train_images // point.workers
        if point.per_worker_batch <= shard:
            return None
        return UserError(
            f"per-worker batch {point.per_worker_batch} is larger than a worker's share "
            f"({shard} images) of {self.data.name} at {point.workers} workers",
            "use a smaller batch or --synthetic",
        )

    def keras_data(self, where: Path) -> Path:
        """The training split as the TensorFlow workers read it (they must not load torch's
        data sets: TensorFlow and torchvision crash one process), written once per study:
        uint8 images channels-last, labels, the normalisation's mean and std."""
        path = where / "train.npz"
        if not path.exists():
            import numpy as np

            images = self.data.train.images
            assert images is not None  # shard_error refuses streamed data sets first
            part = path.with_suffix(".part.npz")
            np.savez(part, images=images.permute(0, 2, 3, 1).numpy(),
                     labels=self.data.train.labels.numpy(), mean=np.array(self.data.mean),
                     std=np.array(self.data.std))  # fmt: skip
            part.replace(path)
        return path

    def open(self) -> None:
        if self.tensorflow and self.opts.nnodes > 1:
            self.reporter.task(f"waiting for {self.opts.nnodes} nodes at {self.opts.rdzv}")
            assert self.opts.rdzv is not None  # plan refuses nnodes > 1 without it
            self.cluster = Cluster.meet(self.opts.nnodes, self.opts.node_rank, self.opts.rdzv)
        if self.writer:
            name = f"scale {self.exp.run.name or self.exp.model.name}"
            self.study_id = self.store.create_study(name, "scale")
            self.reference = comm_reference(self.store, self.backend)
            self.ring = self.reference["ring_model"] if self.reference else None

    def run_point(
        self, index: int, total: int, point: Point, steps: int, extra: dict[str, Any]
    ) -> dict[str, Any]:
        """Launch one point, store it (node 0) and return its row."""
        opts = self.opts
        per_node = point.workers // opts.nnodes if point.strategy in DATA_PARALLEL else 1
        cpu = self.backend in ("gloo", "tensorflow", "horovod")
        threads = threads_per_worker(per_node, self.cores) if cpu else 1
        if self.backend == "gloo" and per_node * threads > self.cores:
            self.warnings.append(
                f"{point.label()}: {per_node} workers x {threads} threads > {self.cores} cores: "
                "oversubscribed, timings are pessimistic"
            )
        spec = {**_spec(self.exp, point, self.backend, threads, steps), **extra}
        spec |= {"shape": list(self.data.shape), "classes": self.data.num_classes}
        where = f"scale-{self.study_id}" if self.writer else "scale-node"
        directory = self.out_dir / where / f"p{index}"
        directory.mkdir(parents=True, exist_ok=True)
        if self.keras(point) and not opts.synthetic:
            spec["data_file"] = str(self.keras_data(directory.parent))
        (directory / "spec.json").write_text(json.dumps(spec))
        self.reporter.task(f"point {index + 1}/{total}: {point.label()}")
        if not self.writer:
            return self._launch(index, point, directory, per_node, threads, run_id=None)
        with self.store.new_run(
            name=f"{self.exp.run.name or self.exp.model.name} {point.label()}",
            kind="scale",
            config={"experiment": self.exp.to_dict(), "point": asdict(point)},
            config_hash=self.exp.config_hash(),
            system={**system_info(None, threads), "backend": self.backend},
            study_id=self.study_id,
        ) as run:
            row = self._launch(index, point, directory, per_node, threads, run.id)
            if row["status"] == "failed":
                run.fail(row["error"], summary=row)
                return row
            ranks = json.loads((directory / "result.json").read_text())["ranks"]
            summary = summarize(
                point,
                ranks,
                opts.nnodes,
                threads,
                self.backend,
                self.train_images,
                self.price,
            )
            if self.compare:
                add_relative(summary, self.bases.get(point.group))
                self.bases.setdefault(point.group, summary)
            exposed = summary["comm_exposed_s"]
            ring = ring_prediction(self.ring, point.workers, summary["grad_bytes"], point.bucket_mb)
            overlap, basis = overlap_prediction(
                self.reference, point.workers, ranks, point.bucket_mb
            )
            summary |= {
                "ring_predicted_s": ring,
                "ring_basis": ring_basis(self.reference) if ring is not None else None,
                "ring_error": prediction_error(ring, exposed),
                "overlap_predicted_s": overlap,
                "overlap_basis": basis,
                "overlap_error": prediction_error(overlap, exposed),
            }
            steps_s = _slowest_per_step(ranks, "main")
            if opts.synthetic:
                summary.update(chunk_throughput(steps_s, point.global_batch, opts.chunks))
            base = self.bases.get(point.group)
            base_workers = base["workers"] if base else None
            for concern in untrustworthy(summary, base_workers, steps_s):
                self.warnings.append(f"{point.label()}: {concern.evidence}; {concern.fix}")
            self.store.log_metrics(run.id, _rank_metrics(ranks))
            run.summary = summary
        self.reporter.log(
            f"{point.label()}: {summary['throughput']:.1f} samples/s, "
            f"step {summary['step_time_s'] * 1e3:.1f} ms"
        )
        row.update(summary)
        return row

    def _launch(
        self,
        index: int,
        point: Point,
        directory: Path,
        per_node: int,
        threads: int,
        run_id: int | None,
    ) -> dict[str, Any]:
        """Run the point (number `index`) on this node; its row, with the error if it failed."""
        opts = self.opts
        if self.tensorflow:
            launch = run_tf(directory, per_node, threads, self.cluster, index)
        elif self.backend == "horovod":
            launch = run_horovod(directory, per_node, threads, point.bucket_mb)
        else:
            launch = run_torchrun(
                directory,
                per_node,
                WORKER_MODULE,
                [str(directory / "spec.json")],
                Rendezvous(opts.nnodes, opts.node_rank, opts.rdzv),
                env={"OMP_NUM_THREADS": str(threads)},
            )
        row: dict[str, Any] = {
            "run_id": run_id,
            "workers": point.workers,
            "nodes": opts.nnodes,
            "mode": point.mode,
            "per_worker_batch": point.per_worker_batch,
            "global_batch": point.global_batch,
            "comm": point.comm,
            "strategy": point.strategy,
            "bucket_mb": point.bucket_mb,
            "worker_pids": launch.pids,
            "status": "finished" if launch.returncode == 0 else "failed",
        }
        self.rows.append(row)
        if launch.returncode != 0:
            oom = sorted(directory.glob("rank-*.oom"))
            row["out_of_memory"] = bool(oom)
            row["error"] = oom[0].read_text() if oom else launch.error
            self.reporter.log(f"{point.label()} failed: {row['error'].splitlines()[0]}")
        return row

    def result(self) -> StudyResult:
        label = "single-host emulation" if self.opts.nnodes == 1 else f"{self.opts.nnodes} nodes"
        if any(r["strategy"] == "mirrored" for r in self.rows) and not torch.cuda.is_available():
            label += "; MirroredStrategy's replicas are logical CPU devices sharing the cores"
        modes = dict.fromkeys(r["mode"] for r in self.rows) if self.compare else {}
        efficiency = {mode: EFFICIENCY[mode] for mode in modes if mode in EFFICIENCY}
        return StudyResult(
            self.study_id, self.rows, self.warnings, label, self.ring, efficiency=efficiency
        )  # fmt: skip


def run_study(
    exp: Experiment, store: Store, out_dir: Path, reporter: Reporter | None = None
) -> StudyResult:
    """Run every point of the study `exp.scale`; only node 0 (of a multi-node study) writes
    the store."""
    study = _Study(exp, store, out_dir, reporter or NullReporter())
    opts = study.opts
    points = plan(opts, study.backend, study.exp.model.name)
    for point in points:
        error = study.shard_error(point)
        if error is not None:
            raise error
    study.open()
    for index, point in enumerate(points):
        if opts.steps is not None:
            steps = opts.steps
        else:
            assert opts.epochs is not None  # plan refuses neither or both
            steps = opts.epochs * max(1, study.train_images // point.global_batch)
        row = study.run_point(index, len(points), point, steps, {})
        if row["status"] == "failed" and opts.on_failure == "stop":
            break
    return study.result()


def find_max_batch(
    exp: Experiment, store: Store, out_dir: Path, reporter: Reporter | None = None
) -> StudyResult:
    """Grow the per-worker batch x4 from 32 until it no longer fits (CUDA out of memory, or
    a worker's peak resident memory above `scale.memory_cap_gb` on CPU, or the data runs
    out); each size trains two epochs and times the second."""
    search = {
        "mode": "weak",
        "global_batch": None,
        "per_worker_batch": BATCH_START,
        "comm_split": False,
        "steps": 1,  # each size sets its own: two epochs
        "epochs": None,
    }
    exp = exp.model_copy(update={"scale": exp.scale.model_copy(update=search)})
    # Its points differ in batch, not in workers: no speedup or efficiency between them.
    study = _Study(exp, store, out_dir, reporter or NullReporter(), compare=False)
    opts = study.opts
    if len(set(opts.workers)) != 1:
        raise UserError("--find-max-batch takes one worker count", "e.g. --workers 2")
    if opts.framework != "torch":
        raise UserError("--find-max-batch measures the torch path", "leave out --framework")
    if study.backend == "gloo" and opts.memory_cap_gb is None:
        raise UserError("--find-max-batch on CPU needs --memory-cap-gb", "e.g. --memory-cap-gb 4")
    first = plan(opts, study.backend, study.exp.model.name)[0]
    study.open()
    cap = int(opts.memory_cap_gb * 2**30) if opts.memory_cap_gb else None
    batch, largest = BATCH_START, None
    for index in range(BATCH_SIZES):
        point = Point(
            first.workers, batch, batch * first.workers, first.comm, first.strategy, first.bucket_mb
        )
        if study.shard_error(point) is not None:
            study.warnings.append(f"per-worker batch {batch} exceeds the data set: stopped there")
            break
        steps = max(1, study.train_images // point.global_batch)
        # The first epoch warms up, the second is timed.
        extra = {"memory_cap_bytes": cap, "warmup_steps": steps}
        row = study.run_point(index, index + 1, point, steps, extra)
        if row["status"] != "finished":
            break
        largest, batch = batch, batch * BATCH_GROWTH
    result = study.result()
    result.max_per_worker_batch = largest
    return result


def _rank_metrics(ranks: list[dict[str, Any]]) -> list[tuple[str, int, float]]:
    metrics = []
    for r in ranks:
        for phase in ("main", "compute"):
            if phase in r:
                prefix = "step_time_s" if phase == "main" else "compute_step_time_s"
                metrics += [
                    (f"rank{r['rank']}/{prefix}", i, t)
                    for i, t in enumerate(r[phase]["step_times_s"], 1)
                ]
    return metrics
