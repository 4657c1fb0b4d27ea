"""dlperf.converge.speed_views: what `converge speed fit` and `converge plan` print, built
from hand-made fits and plans (no fitting)."""

from __future__ import annotations

from typing import Any

from dlperf.converge import speed
from dlperf.converge.plan import Allocation, JobAllocation, Plan
from dlperf.converge.speed import SpeedFit, SpeedReport
from dlperf.converge.speed_views import (
    allocation_table,
    plan_blocks,
    reached_line,
    speed_fit_blocks,
)
from dlperf.table import Table


def sync_fit(**over: Any) -> SpeedFit:
    values: dict[str, Any] = {
        "model": "optimus-sync",
        "params": {"theta0": 0.01, "theta1": 0.2, "theta2": 0.3, "theta3": 0.0, "theta4": 0.05},
        "error_pct": 1.234,
        "max_error_pct": 4.56,
        "n_points": 7,
        "converged": True,
        "message": "ok",
        "basis": "7 rows of speed.csv",
        "intervals": {"theta0": [0.009, 0.011], "theta1": None},
        "undetermined": {"theta3": "every point has 2 workers"},
        "fixed": {"theta4": 0.05},
        "span": {"workers": [1, 4], "ps": [1, 2], "batch": [32, 128]},
    }
    return SpeedFit(**(values | over))


def table(block: object) -> Table:
    assert isinstance(block, Table)
    return block


def test_speed_fit_blocks_the_coefficients_their_intervals_and_why_undetermined() -> None:
    blocks = speed_fit_blocks(SpeedReport(sync_fit(), predictions=[]))
    coefficients = table(blocks[0])
    assert coefficients.title == (
        "optimus-sync: 7 measurements, step-time error 1.23% mean, 4.6% max"
    )
    assert coefficients.columns == ["coefficient", "value", "5%", "95%", "meaning"]
    rows = {row[0]: row[1:4] for row in coefficients.rows}
    assert rows["theta0"] == [0.01, 0.009, 0.011]
    assert rows["theta1"] == [0.2, "—", "—"]  # no residual left for an interval
    assert rows["theta2"] == [0.3, "—", "—"]  # none recorded
    assert rows["theta3"] == [0.0, "undetermined", "undetermined"]
    assert rows["theta4"] == [0.05, "fixed", "fixed"]
    assert coefficients.rows[0][4] == speed.MEANINGS["optimus-sync"]["theta0"]
    assert blocks[1:] == ["theta3: every point has 2 workers"]  # and no predictions table


def test_speed_fit_blocks_with_predictions_in_the_models_own_keys() -> None:
    prediction: dict[str, Any] = {
        "workers": 4, "ps": 2, "batch": 128, "step_time_s": 0.5, "samples_per_s": 256.0,
        "measured_step_time_s": None, "error_pct": None, "outside": [],
    }  # fmt: skip
    blocks = speed_fit_blocks(SpeedReport(sync_fit(undetermined={}), [prediction]))
    assert len(blocks) == 3
    predictions = table(blocks[1])
    assert predictions.columns[:3] == ["workers", "ps", "global batch"]
    assert predictions.rows == [[4, 2, 128, 0.5, 256.0, None, None]]
    assert blocks[2] == "basis: 7 rows of speed.csv"
    text = predictions.text()
    assert text.splitlines()[-1].split() == ["4", "2", "128", "0.5", "256", "-", "-"]


def test_pollux_predictions_place_by_nodes() -> None:
    params = dict.fromkeys(speed.MEANINGS["pollux"], 0.1)
    fit = sync_fit(model="pollux", params=params, undetermined={}, fixed={}, intervals={})
    prediction: dict[str, Any] = {
        "workers": 8, "nodes": 2, "batch": 256, "step_time_s": 1.0, "samples_per_s": 256.0,
        "measured_step_time_s": 1.1, "error_pct": -9.1, "outside": [],
    }  # fmt: skip
    blocks = speed_fit_blocks(SpeedReport(fit, [prediction]))
    assert table(blocks[1]).columns[:2] == ["workers", "nodes"]
    assert table(blocks[1]).rows == [[8, 2, 256, 1.0, 256.0, 1.1, -9.1]]


def test_allocation_table_in_hours() -> None:
    t = allocation_table(8, [JobAllocation("a", 6, 2, 7200.0), JobAllocation("b", 0, 0, 0.0)])
    assert t.title == "8 devices, Optimus greedy allocation"
    assert t.columns == ["job", "workers", "ps", "hours to target"]
    assert t.rows == [["a", 6, 2, 2.0], ["b", 0, 0, 0.0]]


def plan(**over: Any) -> Plan:
    values: dict[str, Any] = {
        "steps": 12345.0,
        "cost_unit": "device-hours",
        "allocations": [],
        "basis": "curve.json and speed.json",
        "metric": "loss",
        "done": 500.0,
        "reached_at_step": 420.0,
    }
    return Plan(**(values | over))


def test_reached_line_says_the_side_and_the_fit_window() -> None:
    assert reached_line(plan(), 0.3) == (
        "the curve is already at or below the target 0.3 loss at step 420 "
        "(its fit window ends at step 500): no steps to go"
    )
    assert reached_line(plan(metric="accuracy", done=0.0), 0.9) == (
        "the curve is already at or above the target 0.9 accuracy at step 420: no steps to go"
    )


def test_plan_blocks_mark_fastest_and_cheapest_and_say_what_beyond_assumes() -> None:
    rows = [
        Allocation(ps=1, workers=2, time_s=3600.0, cost=2.0, cheapest=True),
        Allocation(ps=2, workers=8, time_s=1800.0, cost=4.0, fastest=True,
                   outside={"workers": 2.0}),
        Allocation(ps=1, workers=4, time_s=1800.0, cost=2.0, fastest=True, cheapest=True),
    ]  # fmt: skip
    blocks = plan_blocks(plan(allocations=rows), 0.3, sync_fit())
    t = table(blocks[0])
    assert t.title == "12,345 steps to 0.3"
    assert t.columns == ["ps", "workers", "hours", "device-hours", "best", "beyond the measured"]
    assert [r[2:] for r in t.rows] == [
        [1.0, 2.0, "cheapest", ""],
        [0.5, 4.0, "fastest", "workers 2×"],
        [0.5, 2.0, "fastest, cheapest", ""],
    ]
    assert blocks[1:] == [
        "workers beyond the measured 1–4 assume " + speed.ASSUMES["optimus"]["workers"],
        "basis: curve.json and speed.json",
    ]


def test_plan_blocks_without_anything_beyond_have_no_assumption_lines() -> None:
    rows = [Allocation(ps=1, workers=1, time_s=60.0, cost=0.5, fastest=True, cheapest=True)]
    blocks = plan_blocks(plan(allocations=rows, cost_unit="cost"), 0.3, sync_fit())
    assert table(blocks[0]).columns[3] == "cost"
    assert blocks[1:] == ["basis: curve.json and speed.json"]
