"""dlperf.distributed.scaling: a point's series and name in words, the interquartile share
of its step times, and each reason `untrustworthy` gives (contended, faster than ideal, a
contended base, spread rounds, a wide interval, spread steps), with the figures it quotes
checked by hand."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from dlperf.distributed.contracts import PointSummary
from dlperf.distributed.scaling import (
    IQR_STEPS,
    QUIET,
    iqr_share,
    point_name,
    series,
    series_name,
    untrustworthy,
    workers_said,
)


def summary(**figures: Any) -> PointSummary:
    """A summary of the figures given, the others None."""
    return PointSummary(**{f.name: None for f in fields(PointSummary)} | {"ranks": ()} | figures)


WEAK = {"mode": "weak", "per_worker_batch": 32, "global_batch": 64, "workers": 2,
        "comm": "allreduce", "strategy": "ddp", "bucket_mb": None}  # fmt: skip


def test_a_series_is_its_mode_the_modes_batch_comm_strategy_and_bucket() -> None:
    assert series(WEAK) == ("weak", 32, "allreduce", "ddp", None)
    strong = WEAK | {"mode": "strong", "bucket_mb": 4.0}
    assert series(strong) == ("strong", 64, "allreduce", "ddp", 4.0)
    old = {k: v for k, v in WEAK.items() if k != "mode"}  # stored before the mode was
    assert series(old) == (None, None, "allreduce", "ddp", None)


def test_points_and_series_in_words() -> None:
    assert series_name(WEAK) == "weak, 32 per worker"
    assert series_name(WEAK | {"mode": "strong"}) == "strong, global batch 64"
    assert series_name(WEAK | {"mode": None}) is None
    assert point_name(WEAK) == "2 workers ddp/allreduce, weak, 32 per worker"
    bucketed = WEAK | {"bucket_mb": 2.5, "comm": "fp16"}
    assert point_name(bucketed, series=False) == "2 workers ddp/fp16 bucket 2.5MB"
    assert point_name(bucketed, series=False, bucket=False) == "2 workers ddp/fp16"
    assert (workers_said(1), workers_said(4)) == ("1 worker", "4 workers")


def test_iqr_share_by_hand() -> None:
    assert iqr_share([1.0] * (IQR_STEPS - 1)) is None  # too few steps
    # quantiles (exclusive) of 1..8: q1 = 2.25, median 4.5, q3 = 6.75
    assert iqr_share([float(v) for v in range(1, 9)]) == pytest.approx(4.5 / 4.5)
    assert iqr_share([0.0] * IQR_STEPS) is None  # no median to divide by


def test_nothing_to_say_of_a_quiet_point() -> None:
    quiet = summary(workers=2, efficiency=0.9, cpu_wait_share=0.01, throughput_rounds=(10.0, 11.0))
    assert untrustworthy(quiet, 1, [0.1] * IQR_STEPS) == []
    assert untrustworthy(None, None, []) == []


def test_a_contended_point_says_how_long_its_threads_waited() -> None:
    [concern] = untrustworthy(summary(workers=1, cpu_wait_share=0.25), None, [])
    assert concern.evidence.startswith("contended: its threads waited for a CPU 25% of")
    assert "--threads-per-worker" in concern.fix and QUIET in concern.fix
    assert concern.figures == {"cpu_wait_share": 0.25}
    # the rank's own mark outranks the threshold, both ways
    assert untrustworthy(summary(cpu_wait_share=0.5, cpu_contended=False), None, []) == []
    assert untrustworthy(summary(cpu_wait_share=0.01, cpu_contended=True), None, [])


def test_faster_than_ideal_against_a_base_with_fewer_workers() -> None:
    point = summary(workers=2, efficiency=1.2)
    [concern] = untrustworthy(point, 1, [], base_run=7)
    assert (
        concern.evidence == "efficiency 1.20 > 1 at 2 workers against 1 (run 7): faster than ideal"
    )
    assert concern.figures == {"efficiency": 1.2}
    [explained] = untrustworthy(point, 1, [], base_wait=0.3)
    assert explained.evidence.endswith(
        ": the base point (1 worker) was slowed, its threads waited for a CPU 30% of their "
        "runnable time"
    )
    assert explained.figures == {"efficiency": 1.2, "base_cpu_wait_share": 0.3}
    assert untrustworthy(summary(workers=2, efficiency=1.04), 1, []) == []  # noise
    assert untrustworthy(summary(workers=1, efficiency=1.2), 1, []) == []  # the base itself


def test_a_speedup_against_a_contended_base() -> None:
    [concern] = untrustworthy(summary(workers=2, efficiency=0.8), 1, [], base_wait=0.2)
    assert concern.evidence == (
        "speedup against a contended base (1 worker: its threads waited for a CPU 20% of "
        "their runnable time)"
    )
    assert untrustworthy(summary(workers=2), 1, [], base_wait=0.2, base_contended=False) == []


def test_spread_rounds_a_wide_interval_and_spread_steps() -> None:
    point = summary(throughput_rounds=(80.0, 100.0, 120.0), throughput_mean=100.0,
                    throughput_ci95=15.0)  # fmt: skip
    steps = [0.1, 0.1, 0.1, 0.1, 0.3, 0.3, 0.3, 0.3]  # q1 0.1, median 0.2, q3 0.3: 100%
    rounds, interval, spread = untrustworthy(point, None, steps)
    assert rounds.evidence.startswith("too spread to rank: its throughput varied by 40% of the")
    assert interval.evidence == (
        "throughput 100.0 +/- 15.0 samples/s (95% interval, 15% of the mean > 10%)"
    )
    assert spread.evidence == (
        "step times of the slowest rank vary by 100% of their median 200.0 ms (interquartile "
        "range over 8 steps, > 50%)"
    )
    assert spread.figures == {"step_iqr_share": pytest.approx(1.0), "steps": 8}
