"""The scale workers' timing window (dlperf.distributed.window) with fake steps on the host:
the same warm-up for the point and its compute-only copy, chunks alternating between them,
barriers around every stretch, the crash hook at the loop's step count, and the workers' pid
files written whole."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from dlperf.distributed.crash import CRASH_ENV
from dlperf.distributed.window import ScaleWindow, chunk_sizes, measure_host_steps, write_pid
from dlperf.engine.train_loop import Progress, train_loop
from tests.distributed.test_contracts import SPEC as CONTRACT_SPEC

# The contract tests' spec, with the steps these tests count and one replica.
SPEC = replace(CONTRACT_SPEC, warmup_steps=2, steps=7, replicas=1)


def runs(calls: list[str]) -> list[tuple[str, int]]:
    """`calls` as (name, how many in a row)."""
    grouped: list[tuple[str, int]] = []
    for call in calls:
        if grouped and grouped[-1][0] == call:
            grouped[-1] = (call, grouped[-1][1] + 1)
        else:
            grouped.append((call, 1))
    return grouped


def test_both_replicas_warm_up_alike_then_alternate_in_chunks() -> None:
    calls: list[str] = []
    times = measure_host_steps(
        SPEC, 0, lambda: calls.append("main"), lambda: calls.append("compute")
    )
    assert chunk_sizes(7) == [2, 2, 1, 1, 1]
    assert runs(calls) == [
        ("main", 2), ("compute", 2),  # the warm-up: spec.warmup_steps each
        ("main", 2), ("compute", 2), ("main", 2), ("compute", 2),
        ("main", 1), ("compute", 1), ("main", 1), ("compute", 1), ("main", 1), ("compute", 1),
    ]  # fmt: skip
    assert len(times.step_times_s) == 7 and times.compute is not None
    assert len(times.compute.step_times_s) == 7
    assert times.wall_s >= sum(times.step_times_s) * 0.999
    assert all(t >= 0 for t in times.step_times_s)


def test_without_the_split_only_the_point_steps() -> None:
    calls: list[str] = []
    spec = replace(SPEC, warmup_steps=0, steps=3)
    times = measure_host_steps(spec, 0, lambda: calls.append("main"), None)
    assert calls == ["main"] * 3
    assert times.compute is None and len(times.step_times_s) == 3


def test_profiled_steps_are_warm_up_for_the_point_only_and_barriers_bound_each_stretch() -> None:
    """A profiled window's steps follow the warm-up untimed; the compute-only copy still
    warms up spec.warmup_steps; after_warmup runs once, after both warm-ups."""
    calls: list[str] = []

    def compute(steps: int) -> list[float]:
        calls.append(f"compute {steps}")
        return [0.0] * steps

    spec = replace(SPEC, warmup_steps=1, steps=2)
    window = ScaleWindow(
        spec, 1 + 3, None, lambda: calls.append("barrier"), compute,
        lambda: calls.append("after"),
    )  # fmt: skip
    assert window.steps == 6
    state = Progress()
    batches = [(1, iter([(None, None)] * 100))]
    train_loop(
        lambda x, y: calls.append("main"), batches, [window], state, trainer="t", model=None,
        steps=window.steps,
    )  # fmt: skip
    assert state.step == 6
    assert calls == [
        "barrier", "main", "main", "main", "main", "barrier",  # warm-up and profile: untimed
        "compute 1", "after",
        "barrier", "main", "barrier", "compute 1",
        "barrier", "main", "barrier", "compute 1",
    ]  # fmt: skip
    timings = window.timings()
    assert len(timings.step_times_s) == 2
    assert timings.compute is not None and len(timings.compute.step_times_s) == 2


def test_the_crash_hook_counts_the_points_steps_warm_up_included(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CRASH_ENV, "0:4")
    calls: list[str] = []
    with pytest.raises(RuntimeError, match="injected crash at step 4"):
        measure_host_steps(SPEC, 0, lambda: calls.append("main"), lambda: calls.append("c"))
    assert calls.count("main") == 4 and calls.count("c") == 2  # compute-only steps not counted
    calls.clear()
    measure_host_steps(SPEC, 1, lambda: calls.append("main"), None)  # another rank's crash
    assert calls.count("main") == 9


def test_pid_files_are_written_whole(tmp_path: Path) -> None:
    write_pid(tmp_path, 3)
    assert (tmp_path / "rank-3.pid").read_text() == str(os.getpid())
    assert [p.name for p in tmp_path.iterdir()] == ["rank-3.pid"]  # no temporary file left
