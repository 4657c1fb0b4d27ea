"""What a point's exposed communication should have been, by two models calibrated on the
newest all-reduce benchmark study of the backend (`dlperf scale allreduce`): the ring
alpha-beta model over DDP's buckets, and the bucket/overlap model of
dlperf.distributed.overlap; each with its basis (what it was calibrated on, and when) and
its error against the measurement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlperf.distributed.contracts import AllreduceSummary, RankResult
from dlperf.distributed.summary import computes, slowest_per_step
from dlperf.store import RunStore


@dataclass(frozen=True)
class Measured:
    """One worker count of the benchmark: its run, its median time per message size, and
    its overlap cost (None in benchmarks stored before it was measured)."""

    run_id: int
    rows: list[dict[str, float]]
    overlap_cost: float | None


@dataclass(frozen=True)
class CommReference:
    """What the communication models are calibrated on: the newest all-reduce benchmark
    study of a backend with a finished run, when it ended, its ring model (RingModel as
    stored), and its finished runs by worker count."""

    study_id: int | None
    measured_at: str | None
    ring_model: dict[str, Any] | None
    workers: dict[int, Measured]

    def study(self) -> str:
        """The study in words, as each basis names it."""
        return f"all-reduce study {self.study_id} ({self.measured_at})"


def comm_reference(store: RunStore, backend: str) -> CommReference | None:
    """The CommReference of `backend`: None before any benchmark on it finished."""
    for run in store.list_runs(kind="allreduce"):
        summary = AllreduceSummary.stored(run.summary)
        if run.status != "finished" or summary is None or summary.backend != backend:
            continue
        runs = store.list_runs(kind="allreduce", study_id=run.study_id)
        finished = [
            (r.id, s)
            for r in runs
            if r.status == "finished" and (s := AllreduceSummary.stored(r.summary))
        ]
        workers = {s.workers: Measured(rid, s.rows, s.overlap_cost) for rid, s in finished}
        return CommReference(run.study_id, run.ended, summary.ring_model, workers)
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
    reference: CommReference | None,
    workers: int,
    ranks: Sequence[RankResult],
    bucket_mb: float | None,
) -> tuple[float | None, str | None]:
    """Predicted exposed communication of a DDP step and its basis: its buckets' all-reduces
    overlapped with the backward pass (dlperf.distributed.overlap), each gradient ready when
    the slowest rank's compute-only replica had it, each bucket's all-reduce as long as the
    benchmark measured at that size and worker count (else the ring model's time), the
    backward paying the benchmark's measured overlap cost while a bucket is in flight."""
    phases = computes(ranks) or []
    ready_s = [c.grad_ready_s for c in phases if c.grad_ready_s is not None]
    sizes = phases[0].grad_sizes if phases else None
    if reference is None or workers < 2 or sizes is None or len(ready_s) < len(phases):
        return None, None
    from dlperf.distributed.allreduce import interpolate_time, ring_time
    from dlperf.distributed.overlap import exposed_time

    where = reference.study()
    measured = reference.workers.get(workers)
    ring = reference.ring_model
    if measured is not None:
        rows = measured.rows
        times = f"median times measured at {workers} workers by run {measured.run_id} of {where}"
        allreduce_s = lambda nbytes: interpolate_time(rows, nbytes)  # noqa: E731
    elif ring is not None:
        alpha, bandwidth = ring["alpha_s"], ring["bandwidth_bytes_per_s"]
        times = f"ring α-β times of {where} (no run at {workers} workers)"
        allreduce_s = lambda nbytes: ring_time(workers, nbytes, alpha, bandwidth)  # noqa: E731
    else:
        return None, None
    cost = measured.overlap_cost if measured else None
    paid = (
        f"overlap cost {cost:.2f} s of compute per s of all-reduce, measured there"
        if cost is not None
        else "overlap cost not measured (taken as 0: overlapped communication free)"
    )
    ready = slowest_per_step(ready_s)
    predicted = exposed_time(ready, sizes, allreduce_s, bucket_mb, cost or 0.0)
    basis = (
        f"bucket/overlap model: gradient ready times of this point's compute-only replica; "
        f"all-reduce {times}, interpolated; {paid}"
    )
    return predicted, basis


def ring_basis(reference: CommReference | None) -> str | None:
    """What ring_predicted_s is calibrated on."""
    if not reference or not reference.ring_model:
        return None
    ring = reference.ring_model
    return (
        f"ring α-β fitted to {reference.study()}, rms error {ring['rmse_pct']:.0f}% over "
        f"{ring['n_points']} sizes"
    )


def prediction_error(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured - 1; None without both, or when nothing exposed was measured."""
    if predicted is None or not measured:
        return None
    return predicted / measured - 1
