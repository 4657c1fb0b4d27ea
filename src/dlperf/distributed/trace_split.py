"""A profiled point's compute/communication split as its ranks' traces show it, beside the
estimates of exposed communication that the study makes without a trace: the compute-only
replica (step time less the replica's), the ring model and the bucket/overlap model. The
trace's "communication only" time is the exposed communication they all estimate."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from dlperf import traces
from dlperf.distributed.contracts import PointRow, PointSummary
from dlperf.distributed.predictions import prediction_error
from dlperf.engine.profiler import trace_name
from dlperf.table import Table

SPLIT = ("compute_only", "comm_only", "both", "idle")
COLUMNS = ["workers", "comm", "batch/w", "compute only", "comm only", "both", "idle", "replica",
           "ring", "overlap"]  # fmt: skip


def rank_traces(directory: Path) -> list[Path]:
    """The traces the point's ranks wrote into its launch directory, in rank order."""
    return sorted(directory.glob(trace_name("rank*")), key=traces.rank_order)


def with_trace_split(
    summary: PointSummary, paths: list[Path]
) -> tuple[PointSummary, list[tuple[str, int, float]]]:
    """`summary` with the traces' split (mean over ranks, s per step) and each estimate's
    error against it; and each rank's split as metrics rankR/trace_<part>_s."""
    per_rank = [traces.summarise(p).mean_overlap() for p in paths]
    mean = {part: statistics.fmean(r[f"{part}_ms"] for r in per_rank) / 1000 for part in SPLIT}
    metrics = [
        (f"rank{rank}/trace_{part}_s", 1, split[f"{part}_ms"] / 1000)
        for rank, split in enumerate(per_rank)
        for part in SPLIT
    ]
    measured = mean["comm_only"]
    return replace(
        summary,
        trace_compute_only_s=mean["compute_only"],
        trace_comm_only_s=measured,
        trace_both_s=mean["both"],
        trace_idle_s=mean["idle"],
        comm_error_vs_trace=prediction_error(summary.comm_exposed_s, measured),
        ring_error_vs_trace=prediction_error(summary.ring_predicted_s, measured),
        overlap_error_vs_trace=prediction_error(summary.overlap_predicted_s, measured),
    ), metrics


def _vs(estimate: float | None, error: float | None) -> str | None:
    """An estimate in ms with its error against the trace, e.g. "12.3 (+8%)"."""
    if estimate is None:
        return None
    return f"{estimate * 1e3:.4g}" + (f" ({error:+.0%})" if error is not None else "")


def table(rows: list[PointRow]) -> Table | None:
    """The profiled points' split from their traces beside the three estimates of exposed
    communication, each with its error against the trace's communication-only time; None
    when no point was profiled."""
    traced = [s for r in rows if (s := r.summary) and s.trace_comm_only_s is not None]
    if not traced:
        return None
    return Table(
        "compute and communication per step (ms): measured in the traces (mean over ranks) "
        "beside the estimates of exposed communication (error against comm only)",
        COLUMNS,
        [
            [
                s.workers,
                s.comm,
                s.per_worker_batch,
                *(getattr(s, f"trace_{part}_s") * 1e3 for part in SPLIT),
                _vs(s.comm_exposed_s, s.comm_error_vs_trace),
                _vs(s.ring_predicted_s, s.ring_error_vs_trace),
                _vs(s.overlap_predicted_s, s.overlap_error_vs_trace),
            ]
            for s in traced
        ],
    )
