"""dlperf.converge.plan: time and cost per allocation, and the greedy allocator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlperf.converge import plan, speed
from dlperf.converge.speed import SpeedFit, SpeedReport
from dlperf.errors import UserError


def sync_fit(theta: list[float]) -> SpeedFit:
    names = ["theta0", "theta1", "theta2", "theta3", "theta4"]
    return SpeedFit("optimus-sync", dict(zip(names, theta, strict=True)), 0, 0, 10, True, "")


def test_plan_arithmetic_by_hand() -> None:
    # step time = 0.2·M/w + 0.1·w/p with M = 2:
    #   (p=1, w=1) 0.5 s   (p=1, w=2) 0.4 s   (p=2, w=1) 0.45 s   (p=2, w=2) 0.3 s
    # 3600 steps take 1800, 1440, 1620, 1080 s; at 2 per device-hour on w + p devices
    # they cost 2.0, 2.4, 2.7, 2.4.
    fit = sync_fit([0.2, 0.0, 0.1, 0.0, 0.0])
    rows = plan.plan(3600, fit, [1, 2], [1, 2], batch=2, price_per_hour=2.0)
    got = {(r.ps, r.workers): (r.time_s, r.cost) for r in rows}
    assert got == {
        (1, 1): pytest.approx((1800, 2.0)),
        (1, 2): pytest.approx((1440, 2.4)),
        (2, 1): pytest.approx((1620, 2.7)),
        (2, 2): pytest.approx((1080, 2.4)),
    }
    assert [(r.ps, r.workers) for r in rows if r.fastest] == [(2, 2)]
    assert [(r.ps, r.workers) for r in rows if r.cheapest] == [(1, 1)]


def test_greedy_allocator_by_hand() -> None:
    # Job a: step time 0.25·4/w = 1/w (more workers help, servers do not); job b: 0.5/p.
    a = plan.Job("a", 100, sync_fit([0.25, 0, 0, 0, 0]), batch=4)
    b = plan.Job(
        "b",
        100,
        SpeedFit("optimus-async", {"t0": 0, "t1": 0.5, "t2": 0, "t3": 0}, 0, 0, 4, True, ""),
        batch=1,
    )
    # a: 100 s at w=1, 50 s at w=2 (gain 50).  b (async, f = w / (0.5·w/p)) = 2p steps/s:
    # 50 s at p=1, 25 s at p=2 (gain 25).  Two spare devices: a's worker (50), then
    # a's third worker (33.3 − 50 → gain 16.7) loses to b's server (gain 25).
    result = plan.allocate([a, b], 6)
    assert [(r.name, r.workers, r.ps) for r in result] == [("a", 2, 1), ("b", 1, 2)]
    assert [r.time_s for r in result] == pytest.approx([50.0, 25.0])


def test_allocator_needs_two_devices_per_job() -> None:
    job = plan.Job("a", 10, sync_fit([1.0, 0, 0, 0, 0]), batch=1)
    with pytest.raises(UserError, match="--gpus"):
        plan.allocate([job, job], 3)


def test_plan_refuses_pollux() -> None:
    fit = SpeedFit("pollux", {}, 0, 0, 0, True, "")
    with pytest.raises(UserError, match="Optimus"):
        plan.plan(100, fit, [1], [1], batch=1)


def test_plan_files_reads_what_the_fit_commands_write(tmp_path: Path) -> None:
    speed_json, curve_json = tmp_path / "speed.json", tmp_path / "curve.json"
    report = SpeedReport(sync_fit([0.2, 0, 0.1, 0, 0]), [])
    speed_json.write_text(json.dumps(report.to_dict()))
    # 1/(0.01·k + 1) + 0.1 reaches 0.2 at k = 900, and 100 steps are done.
    fit = {"metric": "loss", "beta0": 0.01, "beta1": 1.0, "beta2": 0.1, "last_step": 100}
    curve_json.write_text(json.dumps(fit))
    done = plan.plan_files(curve_json, plan.read_speed_fit(speed_json), 0.2, [1, 2], [1, 2], 2)
    assert done.steps == pytest.approx(800) and done.cost_unit == "device-hours"
    times = {(a.ps, a.workers): a.time_s for a in done.allocations}
    assert times[(2, 2)] == pytest.approx(800 * 0.3)  # 0.2·2/2 + 0.1·2/2 seconds a step

    (tmp_path / "jobs.toml").write_text(
        '[[job]]\ncurve = "curve.json"\nspeed = "speed.json"\ntarget = 0.2\nbatch = 1\n'
    )
    (job,) = plan.read_jobs(tmp_path / "jobs.toml")
    assert (job.name, job.steps, job.batch) == ("job1", pytest.approx(800), 1.0)
    with pytest.raises(UserError, match="is not a speed fit"):
        plan.read_speed_fit(curve_json)
    with pytest.raises(UserError, match="is unreachable: the curve"):
        plan.remaining_steps(curve_json, 0.05)


def test_curve_and_speed_files_that_cannot_plan(tmp_path: Path) -> None:
    (tmp_path / "regress.json").write_text(json.dumps({"coef": {}, "metric": "loss"}))
    with pytest.raises(UserError, match="is a regression without a prediction"):
        plan.remaining_steps(tmp_path / "regress.json", 0.2)
    (tmp_path / "curve.json").write_text(json.dumps({"beta0": 0.01, "beta1": 1, "beta2": 0.1}))
    with pytest.raises(UserError, match=r"curve\.json is not a curve"):  # no metric
        plan.remaining_steps(tmp_path / "curve.json", 0.2)
    curve = {"metric": "loss", "beta0": -0.01, "beta1": 1, "beta2": 0.1}
    (tmp_path / "curve.json").write_text(json.dumps(curve))
    with pytest.raises(UserError, match="must be numbers ≥ 0"):
        plan.remaining_steps(tmp_path / "curve.json", 0.2)
    (tmp_path / "curve.json").write_text(json.dumps({**curve, "beta0": 0.01}))
    thetas = dict.fromkeys(plan.speed.MEANINGS["optimus-sync"], 0.1)
    speed = {"model": "optimus-sync", "params": thetas}
    (tmp_path / "speed.json").write_text(json.dumps(speed))
    (tmp_path / "jobs.toml").write_text(
        '[[job]]\nname = "a"\ncurve = "curve.json"\nspeed = "speed.json"\ntarget = 0.2\n'
    )
    with pytest.raises(UserError, match="job a: the speed model gives no global batch"):
        plan.read_jobs(tmp_path / "jobs.toml")


def test_plan_honours_what_the_speed_fit_leaves_undetermined(tmp_path: Path) -> None:
    """Issue 29: a weak-scaling fit of 1 and 2 workers on one server cannot tell θ2 (×w/p)
    from θ3 (×w): its value for θ2 is one of many, so a plan with 2 servers is refused; one
    server and 4 workers is the same combination of the θ as measured, an extrapolation that
    says how far."""
    rows = [
        {"workers": w, "ps": 1, "global_batch": m * w, "step_time_s": 0.001 * m + 0.01 * w}
        for w, m in ((1, 16), (1, 64), (2, 16), (2, 64), (1, 16))
    ]
    fit = speed.fit(speed.from_rows(rows, "test"), "optimus-sync")
    path = tmp_path / "speed.json"
    path.write_text(json.dumps(SpeedReport(fit, []).to_dict()))
    read = plan.read_speed_fit(path)
    assert read.undetermined == fit.undetermined and "theta2" in read.undetermined
    assert read.measured == [[r["workers"], 1, r["global_batch"]] for r in rows]
    with pytest.raises(UserError, match=r"ps=2, workers=1 rests on .*theta2"):
        plan.plan(100, read, [1, 2], [1, 2], batch=64)
    done = plan.plan(100, read, [1], [1, 4], batch=64)
    assert [r.outside for r in done] == [{}, {"workers": 2.0}]
    assert done[1].time_s == pytest.approx(100 * (0.001 * 16 + 0.01 * 4))
    with pytest.raises(UserError, match="job a: ps=2, workers=1 rests on "):
        plan.allocate([plan.Job("a", 100, read, 64)], 3)
    path.write_text(json.dumps({**SpeedReport(fit, []).to_dict(), "measured": [[1, 1]]}))
    with pytest.raises(UserError, match="not as the fit writes them"):
        plan.read_speed_fit(path)
