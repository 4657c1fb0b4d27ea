"""What `converge speed fit` and `converge plan` print: a speed fit, a plan and a cluster's
allocation as tables and lines, in the order the commands show them (`Table`s for the
console, `str`s as lines), so that a notebook gets the same view with `str()`."""

from __future__ import annotations

from dlperf.converge import speed
from dlperf.converge.plan import JobAllocation, Plan
from dlperf.converge.speed import SpeedFit, SpeedReport
from dlperf.converge.views import Block
from dlperf.formatting import fmt
from dlperf.table import Table


def _interval(fit: SpeedFit, name: str) -> list[object]:
    """A coefficient's 5% and 95% cells: its interval, or why it has none."""
    if name in fit.fixed:
        return ["fixed", "fixed"]
    if name in fit.undetermined:
        return ["undetermined", "undetermined"]
    bounds = fit.intervals.get(name)
    return [*bounds] if bounds else ["—", "—"]  # no residual left to estimate one


def speed_fit_blocks(done: SpeedReport) -> list[Block]:
    """The coefficients with their intervals and meanings, why any is undetermined, and the
    predictions asked for."""
    fit, model = done.fit, done.fit.model
    blocks: list[Block] = [
        Table(
            f"{model}: {fit.n_points} measurements, step-time error {fit.error_pct:.2f}% "
            f"mean, {fit.max_error_pct:.1f}% max",
            ["coefficient", "value", "5%", "95%", "meaning"],
            [[k, v, *_interval(fit, k), speed.MEANINGS[model][k]] for k, v in fit.params.items()],
        ),
        *(f"{name}: {why}" for name, why in fit.undetermined.items()),
    ]
    if not done.predictions:
        return blocks
    keys = speed.config_keys(model)
    table = Table(
        "predictions (measured: the data's step time at that configuration, if any)",
        [*keys[:2], "global batch", "step time (s)", "samples/s", "measured (s)", "error %"],
        [
            [*(p[k] for k in keys), p["step_time_s"], p["samples_per_s"],
             p["measured_step_time_s"], p["error_pct"]]
            for p in done.predictions
        ],
    )  # fmt: skip
    return [*blocks, table, f"basis: {fit.basis}"]


def allocation_table(gpus: int, jobs: list[JobAllocation]) -> Table:
    """Optimus's greedy allocation of `gpus` devices among the jobs of a cluster."""
    return Table(
        f"{gpus} devices, Optimus greedy allocation",
        ["job", "workers", "ps", "hours to target"],
        [[a.name, a.workers, a.ps, a.time_s / 3600] for a in jobs],
    )


def reached_line(done: Plan, target: float) -> str:
    """A plan with nothing to plan: the curve is at the target already."""
    side = "above" if done.metric == "accuracy" else "below"
    window = f" (its fit window ends at step {done.done:g})" if done.done else ""
    return (
        f"the curve is already at or {side} the target {target:g} {done.metric} at step "
        f"{done.reached_at_step:g}{window}: no steps to go"
    )


def plan_blocks(done: Plan, target: float, speed_model: SpeedFit) -> list[Block]:
    """Time and cost of each allocation, the fastest and cheapest marked, and what an
    allocation beyond the measured workers, servers or batch assumes."""
    table = Table(
        f"{fmt(done.steps)} steps to {target:g}",
        ["ps", "workers", "hours", done.cost_unit, "best", "beyond the measured"],
        [
            [r.ps, r.workers, r.time_s / 3600, r.cost,
             ", ".join(n for n, on in (("fastest", r.fastest), ("cheapest", r.cheapest)) if on),
             ", ".join(f"{k} {f:.3g}×" for k, f in r.outside.items())]
            for r in done.allocations
        ],
    )  # fmt: skip
    beyond = {k for r in done.allocations for k in r.outside}
    assumptions = [
        f"{key} beyond the measured {speed_model.span[key][0]:g}–{speed_model.span[key][1]:g} "
        f"assume {speed.ASSUMES['optimus'][key]}"
        for key in ("workers", "ps", "batch")
        if key in beyond
    ]
    return [table, *assumptions, f"basis: {done.basis}"]
