"""How the points of a scaling study compare, and when the comparison cannot be trusted:
shared by `dlperf scale` (its table, figures and warnings) and `dlperf doctor` (the base
point it measures against, and its untrustworthy-scaling rule), so that both say the same.
No torch or numpy here: the doctor imports this module.

Speedup and efficiency compare a point only with points of its series: the same mode, the
same batch of that mode (strong: global, weak: per worker), comm, strategy and bucket size.
The base of a series is its point with the fewest workers. Thresholds are documented in
docs/doctor.md and docs/scale.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlperf.contention import CONTENDED
from dlperf.distributed.contracts import PointSummary

SUPERLINEAR = 1.05  # efficiency above 1 beyond this is not measurement noise
CI_SHARE = 0.10  # throughput_ci95 / throughput_mean
ROUNDS_SHARE = 0.25  # (max - min) / median of a point's throughput over its rounds
STEP_IQR_SHARE = 0.50  # interquartile range of step times / their median
IQR_STEPS = 8  # fewer steps give no interquartile range worth reading
QUIET = "rerun the study on a quiet machine (no other jobs running)"

BATCH_KEY = {"strong": "global_batch", "weak": "per_worker_batch"}

# The two efficiencies `dlperf scale` reports, per mode, as the output states them. Course
# notes define scaling efficiency both ways; they differ where the median step time is not
# the wall time per step (a few slow steps: the wall time counts them, the median does not).
_ON_THROUGHPUT = (
    "efficiency on throughput: X_N × N_base / (N × X_base), X = samples/s "
    "(all ranks' samples / the slowest rank's wall time)"
)
EFFICIENCY = {
    "strong": {
        "efficiency": _ON_THROUGHPUT,
        "efficiency_time": "efficiency on time (T = step ms): strong: T_base × N_base / (N × T_N)",
    },
    "weak": {
        "efficiency": _ON_THROUGHPUT,
        "efficiency_time": "efficiency on time (T = step ms): weak: T_base / T_N",
    },
}


def series(point: Mapping[str, Any]) -> tuple[Any, ...]:
    """The series of a point (a stored `point` or a row): mode, that mode's batch, comm,
    strategy, bucket size. A point stored before the mode was recorded has neither (its study
    had one mode and one batch)."""
    mode = point.get("mode")
    batch = point.get(BATCH_KEY[mode]) if mode in BATCH_KEY else None
    return (mode, batch, point.get("comm"), point.get("strategy"), point.get("bucket_mb"))


def series_name(point: Mapping[str, Any]) -> str | None:
    """A series' mode and batch in words ("weak, 32 per worker"); None without a mode."""
    mode = point.get("mode")
    if mode == "weak":
        return f"weak, {point['per_worker_batch']} per worker"
    if mode == "strong":
        return f"strong, global batch {point['global_batch']}"
    return None


def point_name(point: Mapping[str, Any], series: bool = True, bucket: bool = True) -> str:
    """A point in words ("2 workers ddp/fp16 bucket 4MB"), with its series when asked and
    the point has one ("2 workers ddp/allreduce, weak, 32 per worker")."""
    size = f" bucket {point['bucket_mb']:g}MB" if bucket and point.get("bucket_mb") else ""
    where = f"{point['workers']} workers {point['strategy']}/{point['comm']}{size}"
    name = series_name(point) if series else None
    return f"{where}, {name}" if name else where


@dataclass(frozen=True)
class Concern:
    """Why a point's numbers cannot be trusted: the figures that say so, quoted, and the fix."""

    evidence: str
    fix: str
    figures: dict[str, Any] = field(default_factory=dict)


def iqr_share(values: Sequence[float]) -> float | None:
    """The interquartile range of `values` over their median; None for fewer than IQR_STEPS."""
    if len(values) < IQR_STEPS:
        return None
    q1, median, q3 = statistics.quantiles(values, n=4)
    return (q3 - q1) / median if median > 0 else None


def workers_said(n: int | None) -> str:
    """ "1 worker", "4 workers"."""
    return f"{n} worker{'s' * (n != 1)}"


def untrustworthy(
    summary: PointSummary | None,
    base_workers: int | None,
    steps: Sequence[float],
    base_run: int | None = None,
    base_wait: float | None = None,
    base_contended: bool | None = None,
) -> list[Concern]:
    """What makes a point's speedup and throughput untrustworthy: its threads waited for a
    CPU (contended), efficiency above ideal against a base with fewer workers
    (`base_workers`; its stored run `base_run`, if known; `base_wait`, the base's measured
    CPU wait, which explains it when the base was contended), a contended base, a wide 95%
    interval of the chunks' throughput, or widely spread step times (`steps`: the slowest
    rank's, per step)."""
    concerns = []
    wait = summary.cpu_wait_share if summary else None
    mine = summary.cpu_contended if summary else None
    if wait is not None and (mine if mine is not None else wait >= CONTENDED):
        concerns.append(
            Concern(
                f"contended: its threads waited for a CPU {wait:.0%} of their runnable time "
                "(the most contended rank)",
                f"{QUIET}, or give each worker fewer threads (--threads-per-worker)",
                {"cpu_wait_share": wait},
            )
        )
    efficiency, workers = (summary.efficiency, summary.workers) if summary else (None, None)
    faster = base_workers is not None and workers is not None and workers > base_workers
    slowed = base_contended if base_contended is not None else (base_wait or 0.0) >= CONTENDED
    base_slowed = base_wait is not None and slowed and faster
    run = f" (run {base_run})" if base_run is not None else ""
    if efficiency and efficiency > SUPERLINEAR and faster:
        why = (
            f": the base point ({workers_said(base_workers)}) was slowed, its threads waited for a "
            f"CPU {base_wait:.0%} of their runnable time"
            if base_slowed and base_wait is not None
            else ""
        )
        concerns.append(
            Concern(
                f"efficiency {efficiency:.2f} > 1 at {workers} workers against {base_workers}"
                f"{run}: faster than ideal{why}",
                "the base point was slowed (a busy host, a cold cache) or the points did "
                f"different work: {QUIET}, with --synthetic",
                {"efficiency": efficiency} | ({"base_cpu_wait_share": base_wait} if why else {}),
            )
        )
    elif base_slowed and base_wait is not None:
        concerns.append(
            Concern(
                f"speedup against a contended base ({workers_said(base_workers)}{run}: its threads "
                f"waited for a CPU {base_wait:.0%} of their runnable time)",
                QUIET,
                {"base_cpu_wait_share": base_wait},
            )
        )
    rounds = summary.throughput_rounds if summary else None
    if rounds and len(rounds) > 1:
        middle = statistics.median(rounds)
        varied = (max(rounds) - min(rounds)) / middle if middle > 0 else 0.0
        if varied > ROUNDS_SHARE:
            concerns.append(
                Concern(
                    f"too spread to rank: its throughput varied by {varied:.0%} of the median "
                    f"across {len(rounds)} interleaved rounds (> {ROUNDS_SHARE:.0%})",
                    f"more rounds (scale.repeat) and {QUIET}",
                    {"throughput_rounds": list(rounds)},
                )
            )
    mean, ci = (summary.throughput_mean, summary.throughput_ci95) if summary else (None, None)
    if mean and ci is not None and ci / mean > CI_SHARE:
        concerns.append(
            Concern(
                f"throughput {mean:.1f} +/- {ci:.1f} samples/s (95% interval, "
                f"{ci / mean:.0%} of the mean > {CI_SHARE:.0%})",
                f"time more steps (scale.steps) and {QUIET}",
                {"throughput_mean": mean, "throughput_ci95": ci},
            )
        )
    share = iqr_share(steps)
    if share is not None and share > STEP_IQR_SHARE:
        concerns.append(
            Concern(
                f"step times of the slowest rank vary by {share:.0%} of their median "
                f"{statistics.median(steps) * 1e3:.1f} ms (interquartile range over "
                f"{len(steps)} steps, > {STEP_IQR_SHARE:.0%})",
                f"time more steps (scale.steps) and {QUIET}",
                {"step_iqr_share": share, "steps": len(steps)},
            )
        )
    return concerns
