"""Break-it round 54, fixer G8: `dlperf doctor`'s `oversubscribed` on a scale study's points.

T2 C1: a `dlperf scale` study with 2 or more rounds (the default is 3) measures its points
one at a time, round by round, but stores each point's run from its first round to its last,
so every pair of its points' stored times overlap; the doctor counted them as running at
once ("run(s) 3 ran at the same time on host vm: 3 threads at once on 2 usable cores"). Now
the other points of the same scale study are left out of the runs at once; a run of another
command, or a point of another study, that overlaps a point still counts.

The runs are stored through the RunStore API in the shapes `dlperf scale` writes (as
tests/doctor/test_rules.py does), not measured.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta

from dlperf import doctor
from dlperf.distributed.planning import Point
from dlperf.distributed.summary import summarize
from dlperf.store import RunStore
from tests.conftest import rank_result

START = datetime(2026, 1, 1, 12, 0, 0)
SYSTEM = {"usable_cores": 2, "threads": 1, "backend": "gloo", "host": "vm"}


def _point(store: RunStore, study: int | None, workers: int, minutes: tuple[int, int]) -> int:
    """A finished 1-thread-per-worker scale point of `study`, stored from `minutes[0]` to
    `minutes[1]` past START (its first round to its last)."""
    point = Point(workers, 32, 32 * workers, "allreduce", "ddp", None)
    config = {"experiment": {}, "point": asdict(point)}
    run = store.create_run(f"p{workers}", "scale", config, None, SYSTEM, study_id=study)
    ranks = [rank_result(r, [0.1] * 20, [0.08] * 20, 32, world=workers) for r in range(workers)]
    summary = summarize(point, ranks, 1, 1, "gloo", 1437, None).to_dict()
    store.finish_run(run, summary=summary)
    start, end = (START + timedelta(minutes=m) for m in minutes)
    store.update_run(run, started=start, ended=end)
    return run


def _oversubscribed(store: RunStore, run: int) -> list[doctor.Finding]:
    return [f for f in doctor.examine(store, [run]) if f.rule == "oversubscribed"]


def test_points_of_one_interleaved_study_are_not_at_once(store: RunStore) -> None:
    study = store.create_study("scale s", "scale")
    # Rounds interleaved: point 1 spans rounds 1..3 (0-10 min), point 2 (5-15 min).
    one, two = _point(store, study, 1, (0, 10)), _point(store, study, 2, (5, 15))
    assert _oversubscribed(store, one) == []
    assert _oversubscribed(store, two) == []


def test_other_work_over_a_study_point_still_counts(store: RunStore) -> None:
    study = store.create_study("scale s", "scale")
    one, two = _point(store, study, 1, (0, 10)), _point(store, study, 2, (5, 15))
    # A 2-worker point of another study, overlapping both: 2 + 2 threads on 2 cores.
    other = _point(store, store.create_study("scale t", "scale"), 2, (8, 12))
    (finding,) = _oversubscribed(store, two)
    assert finding.figures["concurrent_runs"] == [other]
    assert finding.figures["peak_threads"] == 4
    (finding,) = _oversubscribed(store, one)
    assert finding.figures["concurrent_runs"] == [other]
    assert finding.figures["peak_threads"] == 3
    # A run of another command (no study) overlapping point 1 counts too.
    run = store.create_run("r", "run", {}, None, {**SYSTEM, "threads": 2})
    store.finish_run(run)
    store.update_run(run, started=START, ended=START + timedelta(minutes=2))
    (finding,) = _oversubscribed(store, one)
    assert finding.figures["concurrent_runs"] == [other, run]
