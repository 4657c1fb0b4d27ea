"""Planning: time and cost to a target for each allocation, and Optimus's greedy allocator.

The time to reach the target is the steps the loss model predicts, less those already done,
divided by the speed model's steps per second f(p, w). Every worker and every parameter server
takes one device; the cost is device-hours times the price per device-hour.
"""

from __future__ import annotations

import json
import math
import sys
import tomllib
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.converge import curve, speed
from dlperf.converge.speed import SpeedFit
from dlperf.converge.tables import read_text
from dlperf.errors import UserError
from dlperf.parsing import MAX_COUNTS, parse_pairs, plain_number


@dataclass
class Allocation:
    ps: int
    workers: int
    time_s: float
    cost: float  # device-hours × price (device-hours when no price is given)
    fastest: bool = False
    cheapest: bool = False
    # how far outside the speed data's measured workers, ps or batch it lies (`outside`)
    outside: dict[str, float] = field(default_factory=dict)


@dataclass
class Job:
    name: str
    steps: float  # steps still to go
    speed: SpeedFit
    batch: float


@dataclass
class JobAllocation:
    name: str
    workers: int
    ps: int
    time_s: float


def check_optimus(model: str) -> None:
    if not model.startswith("optimus"):
        raise UserError(
            f"planning needs an Optimus speed model (parameter servers), got {model}",
            "fit with --model optimus-sync or optimus-async",
        )


def _check_batch(batch: float, where: str = "") -> None:
    if not (math.isfinite(batch) and batch > 0):
        raise UserError(f"{where}the global batch must be a positive number, got {batch:g}")


def check_determined(fit: SpeedFit, workers: int, ps: int, batch: float, where: str = "") -> None:
    """Refuse an allocation whose step time rests on a coefficient the speed data leave
    undetermined: the fit's value for it is one of many that fit the data equally well."""
    missing = speed.rests_on(fit, {"workers": workers, "ps": ps, "batch": batch})
    if missing:
        raise UserError(
            f"{where}ps={ps}, workers={workers} rests on {', '.join(missing)}, which the speed "
            f"fit leaves undetermined ({missing[0]}: {fit.undetermined[missing[0]]})",
            f"plan only --ps/--workers the fit determines, fix it with `converge speed fit ... "
            f"--fix {missing[0]}=VALUE,...`, or give the paper's coefficients with --speed-params",
        )


def outside(fit: SpeedFit, workers: int, ps: int, batch: float) -> dict[str, float]:
    """How far an allocation lies outside the speed data's measured range: for each key
    beyond it, the value ÷ the largest measured (> 1) or ÷ the smallest (< 1)."""
    factors = {}
    for key, value in (("workers", workers), ("ps", ps), ("batch", batch)):
        least, most = fit.span.get(key, (value, value))
        if not least <= value <= most:
            factors[key] = value / (most if value > most else least)
    return factors


def time_to_target(
    steps: float, fit: SpeedFit, workers: int, ps: int, batch: float, where: str = ""
) -> float:
    """Seconds to train `steps` more at this allocation; refused where the speed model's step
    time is not a finite time > 0 (every θ 0: infinitely fast) or the total overflows."""
    check_determined(fit, workers, ps, batch, where)
    at = f"ps={ps}, workers={workers}, batch={batch:g}"
    with np.errstate(over="ignore", invalid="ignore"):
        step = float(speed.step_time(fit, workers, batch, ps)[0])
    if not (math.isfinite(step) and step > 0):
        said = ": infinitely fast" if step == 0 else ""
        raise UserError(
            f"{where}the {fit.model} step time at {at} is {step:g} s{said}",
            "give coefficients whose step time is a finite number of seconds > 0",
        )
    with np.errstate(over="ignore", divide="ignore"):
        total = steps / float(speed.rate(fit, workers, step))
    if not (math.isfinite(total) and (total > 0 or steps == 0)):
        raise UserError(
            f"{where}{steps:g} steps at {at} take {step:g} s each: {total:g} s in all, not a "
            "time to plan with",
            "check the curve's steps and the speed model's coefficients",
        )
    return total


def plan(
    steps: float,
    fit: SpeedFit,
    ps_counts: list[int],
    worker_counts: list[int],
    batch: float,
    price_per_hour: float = 1.0,
) -> list[Allocation]:
    """One row per (ps, workers), the fastest and the cheapest marked, and how far each lies
    outside the measured range; refused when one rests on an undetermined coefficient."""
    check_optimus(fit.model)
    _check_batch(batch)
    if not math.isfinite(price_per_hour):  # in the words of `scale --price-per-hour`
        raise UserError(f"--price-per-hour: must be a finite number (got {price_per_hour:g})")
    if not price_per_hour >= 0:
        raise UserError(f"--price-per-hour must be 0 or more, got {price_per_hour:g}")
    # Counted before any is planned: --ps 1-2000 --workers 1-2000 planned four million
    # allocations (7.6 GB and minutes) for a table no one reads.
    allocations = len(ps_counts) * len(worker_counts)
    if allocations > MAX_COUNTS:
        raise UserError(
            f"--ps and --workers make {allocations:,} allocations ({len(ps_counts):,} × "
            f"{len(worker_counts):,}), more than the {MAX_COUNTS:,} a plan makes",
            "give fewer counts, e.g. --ps 1,2,4 --workers 1-16",
        )
    most = max(worker_counts)
    if most > batch:  # a row there would time a step that gives some workers no sample
        raise UserError(
            f"--workers {most} is more than the global batch {batch:g}: {speed.LEAST_BATCH}",
            f"give --workers up to {math.floor(batch)}, or --batch {most} or more",
        )
    rows = []
    for p in ps_counts:
        for w in worker_counts:
            t = time_to_target(steps, fit, w, p, batch)
            cost = t / 3600.0 * (w + p) * price_per_hour
            if not math.isfinite(cost):  # every cost inf, each one "cheapest"
                raise UserError(
                    f"--price-per-hour {price_per_hour:g}: the cost at ps={p}, workers={w} "
                    f"overflows a float ({t / 3600:.3g} hours on {w + p} devices)",
                    "give the price per device-hour in a unit that keeps it a number",
                )
            rows.append(Allocation(p, w, t, cost, outside=outside(fit, w, p, batch)))
    min(rows, key=lambda r: (r.time_s, r.workers + r.ps)).fastest = True
    min(rows, key=lambda r: (r.cost, r.time_s)).cheapest = True
    return rows


def allocate(jobs: list[Job], devices: int) -> list[JobAllocation]:
    """Optimus §4.1: start every job with one worker and one server, then repeatedly give one
    device to the job and role (worker or server) that shortens that job's remaining time
    the most, until the devices run out or no addition helps."""
    for job in jobs:
        check_optimus(job.speed.model)
        _check_batch(job.batch, f"job {job.name}: ")
    if devices < 2 * len(jobs):
        raise UserError(
            f"{devices} devices cannot give {len(jobs)} jobs one worker and one server each",
            f"use --gpus ≥ {2 * len(jobs)}",
        )
    alloc = [[1, 1] for _ in jobs]  # [workers, ps]

    def remaining(i: int, w: int, p: int) -> float:
        job = jobs[i]
        return time_to_target(job.steps, job.speed, w, p, job.batch, f"job {job.name}: ")

    free = devices - 2 * len(jobs)
    while free > 0:
        best, best_gain = None, 0.0
        for i, (w, p) in enumerate(alloc):
            now = remaining(i, w, p)
            for role, (w2, p2) in enumerate(((w + 1, p), (w, p + 1))):
                if w2 > jobs[i].batch:  # a step gives each worker at least one sample
                    continue
                gain = now - remaining(i, w2, p2)
                if gain > best_gain:
                    best, best_gain = (i, role), gain
        if best is None:
            break
        alloc[best[0]][best[1]] += 1
        free -= 1
    return [
        JobAllocation(job.name, w, p, remaining(i, w, p))
        for i, (job, (w, p)) in enumerate(zip(jobs, alloc, strict=True))
    ]


# --- what a plan reads: curves and speed models (the commands' --json, minimal JSON, or
# coefficients on the command line), jobs.toml -----------------------------------------------


def read_json(path: Path, what: str) -> dict[str, Any]:
    text = read_text(path, f"{what} ")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not JSON: {e}", f"write it with --json > {path}") from None
    if not isinstance(document, dict):
        raise UserError(f"{path} holds no single {what}", "fit one curve or table at a time")
    return document


@dataclass
class Remaining:
    """Where a curve stands against a target."""

    steps: float  # whole steps still to go from `done`; 0 when the curve is there already
    done: float  # steps already trained: the end of the fit window, 0 for a predicted curve
    reached_at: float | None  # the whole step at which it reaches the target, when ≤ done
    metric: str
    basis: str  # what the steps rest on


def _not_a_curve(path: Path) -> UserError:
    return UserError(
        f"{path} is not a curve",
        "write it with `converge fit --json` or `converge regress --predict --json`, or as "
        '{"metric": "loss", "beta0": ..., "beta1": ..., "beta2": ...}',
    )


def _number(value: Any, path: Path) -> float:
    """A coefficient or step count of a curve file: a number ≥ 0."""
    try:
        number = plain_number(value)  # "1_0" is no 10
    except (TypeError, ValueError):
        raise _not_a_curve(path) from None
    if isinstance(value, bool) or not (math.isfinite(number) and number >= 0):
        raise UserError(f"{path}: beta0, beta1, beta2 and last_step must be numbers ≥ 0")
    return number


def _curve_of(document: dict[str, Any], path: Path) -> tuple[dict[str, Any], Any, float, str]:
    """The Optimus coefficients, metric, steps done and basis of a curve file: the fit of
    `converge fit --json`, the prediction of `converge regress --predict --json`, or the
    minimal {"metric", "beta0", "beta1", "beta2", optionally "last_step"}."""
    metric = document.get("metric")
    if "coef" in document:  # a regression
        if "prediction" not in document:
            raise UserError(
                f"{path} is a regression without a prediction",
                "run `converge regress` with --predict and --json",
            )
        prediction = document["prediction"]
        at = ", ".join(f"{k}={v}" for k, v in prediction.get("features", {}).items())
        basis = f"the Optimus curve regress predicted for {at} ({prediction.get('basis')})"
        # Nothing of an unseen configuration has run yet.
        return prediction, metric, 0.0, basis
    source = document.get("source", path.name)
    # "last_step" is optional, 0 by default: a minimal curve with "last_step": 0 was "the
    # Optimus fit of FILE up to step 0", fitted to nothing. Only a fit counts its points.
    done = _number(document.get("last_step", 0), path)
    if "n_points" in document:  # `converge fit --json`
        fit = f"the Optimus fit of {source} to {document['n_points']} points up to step {done:g}"
        return document, metric, done, fit
    steps_done = f" ({done:g} steps done)" if done else ""
    return document, metric, done, f"the Optimus curve in {source}{steps_done}"


def remaining_steps(path: Path, target: float) -> Remaining:
    """Steps still to go to the target by the Optimus curve in `path` (see `_curve_of`), from
    the end of its fit window (from 0 for a predicted curve): to the whole step at which it
    reaches it, as `converge predict` rounds it, so that times and costs are of whole steps."""
    coefficients, metric, done, basis = _curve_of(read_json(path, "curve fit"), path)
    if metric not in curve.METRICS or any(k not in coefficients for k in curve.PARAMS["optimus"]):
        raise _not_a_curve(path)
    beta = [_number(coefficients[k], path) for k in curve.PARAMS["optimus"]]
    if beta[0] == beta[1] == 0:
        raise UserError(f"{path}: beta0 and beta1 are both 0: not a curve (1/0 at every step)")
    curve.check_target(target, metric)
    goal = curve.to_decreasing(target, metric)
    crossing = float(curve.steps_to("optimus", beta, goal)[0])
    if not math.isfinite(crossing):
        if beta[0] > 0 and goal > beta[2]:  # it gets there, at more steps than a float holds
            raise _past_a_float(beta, target, goal, metric, path)
        raise UserError(
            f"target {target:g} is unreachable: the curve in {path} {_why_never(beta, metric)}"
        )
    step = curve.whole_step(crossing)
    if step <= done:
        return Remaining(0.0, done, step, metric, basis)
    return Remaining(step - done, done, None, metric, basis)


def _past_a_float(
    beta: list[float], target: float, goal: float, metric: str, path: Path
) -> UserError:
    """A curve that falls past the target, but at (1/(goal − β2) − β1)/β0 steps, more than a
    float holds: "levels off at β2" said of a target above β2 contradicted itself (break-it
    round 53, T3 C1). The count is said in powers of ten, worked out exactly (fractions);
    the culprit is β0 unless 1/(goal − β2) itself overflows (a target a hair above β2)."""
    gap = Fraction(goal) - Fraction(beta[2])
    steps = (1 / gap - Fraction(beta[1])) / Fraction(beta[0])
    with localcontext(prec=2):  # 1e+310, 1.9e+310: as a float of its size would print
        about = f"{(Decimal(steps.numerator) / Decimal(steps.denominator)).normalize():g}"
    floor = curve.to_decreasing(beta[2], metric)
    if 1 / gap <= Fraction(sys.float_info.max):
        culprit = f"beta0 = {beta[0]:g}"
    else:
        culprit = f"within {float(gap):g} {metric} of where it levels off"
    return UserError(
        f"target {target:g} takes about {about} steps by the curve in {path} ({culprit}), "
        "more than a float counts: not a number of steps to plan with",
        f"check the curve's beta0, or give a target further from the {floor:.4g} {metric} it "
        "levels off at",
    )


def _why_never(beta: list[float], metric: str) -> str:
    """Why an Optimus curve never reaches a target: with β0 = 0 it never falls, staying at
    1/β1 + β2 (β2 is no level it falls to); else it levels off at β2."""
    if beta[0] == 0:
        stays = curve.to_decreasing(1.0 / beta[1] + beta[2], metric)
        return f"does not fall: beta0 is 0 (it stays at {stays:.4g} {metric})"
    return f"levels off at {curve.to_decreasing(beta[2], metric):.4g} {metric}"


# What a fitted speed model records beyond its coefficients.
_FIT_RECORD = ("error_pct", "max_error_pct", "n_points", "converged", "message", "notes",
               "typical_local_batch", "basis", "intervals", "undetermined", "fixed", "span",
               "measured")  # fmt: skip


def read_speed_fit(path: Path) -> SpeedFit:
    """The speed model in `path`: a fit (`converge speed fit --json`) or the minimal
    {"model", "params", optionally "typical_batch"} of coefficients given."""
    document = read_json(path, "speed fit")
    params = document.get("params")
    if not isinstance(document.get("model"), str) or not isinstance(params, dict):
        raise UserError(
            f"{path} is not a speed fit",
            "write it with `converge speed fit --json`, or as "
            '{"model": "optimus-sync", "params": {"theta0": ..., ...}}',
        )
    batch = document.get("typical_batch", 0.0)
    if isinstance(batch, bool) or not isinstance(batch, int | float):
        raise UserError(f"{path}: typical_batch must be a number, got {batch!r}")
    fit = speed.given(document["model"], params, path.name, float(batch))
    if "n_points" in document:  # fitted: keep what the fit says of itself
        for name in _FIT_RECORD:
            if name in document:
                setattr(fit, name, document[name])
        fit.basis = fit.basis or f"the {fit.model} fit in {path.name}"  # written before bases
        _check_record(fit, path)
    return fit


def _numbers(values: Any, count: int) -> bool:
    return (
        isinstance(values, list)
        and len(values) == count
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    )


def _check_record(fit: SpeedFit, path: Path) -> None:
    """What the plan reads of a fit beyond its coefficients is as the fit writes it."""
    undetermined, span, measured = fit.undetermined, fit.span, fit.measured
    if not (
        isinstance(undetermined, dict)
        and all(isinstance(why, str) for why in undetermined.values())
        and isinstance(fit.fixed, dict)
        and isinstance(span, dict)
        and all(_numbers(bounds, 2) for bounds in span.values())
        and isinstance(measured, list)
        and all(_numbers(row, 3) for row in measured)
    ):
        raise UserError(
            f"{path}: its undetermined, fixed, span or measured are not as the fit writes them",
            "write it again with `converge speed fit --json`",
        )


def speed_from_params(text: str) -> SpeedFit:
    """An Optimus speed model from coefficients given on the command line, e.g. a paper's:
    'theta0=0.4,theta1=0,...' (optionally 'model=optimus-async,...'; optimus-sync unless)."""
    pairs = parse_pairs(text, "--speed-params", "--speed-params theta0=0.4,theta1=0.01,...")
    model = pairs.pop("model", "optimus-sync")
    speed.check_model(model)
    check_optimus(model)
    return speed.given(model, pairs, "--speed-params")


@dataclass
class Plan:
    steps: float  # still to go from the end of the curve's fit window
    cost_unit: str  # "cost" with a price per device-hour, else "device-hours"
    allocations: list[Allocation]  # none when the curve has reached the target already
    basis: str  # what the steps and the step times rest on
    metric: str  # the curve's, which the target is in
    done: float  # steps already trained: the end of the curve's fit window, 0 for a predicted one
    reached_at_step: float | None  # where the curve reached the target, when it has already


def plan_files(
    curve_path: Path,
    speed_model: SpeedFit,
    target: float,
    ps_counts: list[int],
    worker_counts: list[int],
    batch: float | None = None,
    price_per_hour: float | None = None,
) -> Plan:
    """`plan` for the curve in a file (see `remaining_steps`) and a speed model (see
    `read_speed_fit`, `speed_from_params`); the global batch is the speed model's typical
    one unless given. No allocations when the curve has reached the target already."""
    check_optimus(speed_model.model)
    remaining = remaining_steps(curve_path, target)
    unit = "cost" if price_per_hour is not None else "device-hours"
    basis = f"steps: {remaining.basis}; step times: {speed_model.basis}"
    if remaining.reached_at is not None:
        return Plan(0.0, unit, [], basis, remaining.metric, remaining.done, remaining.reached_at)
    if batch is None:
        batch = speed_model.typical_batch
        if not batch:
            raise UserError("the speed model gives no global batch", "give --batch M")
    price = 1.0 if price_per_hour is None else price_per_hour  # device-hours
    rows = plan(remaining.steps, speed_model, ps_counts, worker_counts, batch, price)
    return Plan(remaining.steps, unit, rows, basis, remaining.metric, remaining.done, None)


def read_jobs(path: Path) -> list[Job]:
    """The [[job]] tables of a jobs.toml: name, curve, speed, target and optionally batch,
    the files named relative to it."""
    text = read_text(path)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path} is not valid TOML: {e}") from None
    entries = document.get("job")
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{path} has no [[job]] tables", "each with name, curve, speed, target")
    jobs = []
    for i, entry in enumerate(entries):
        missing = [k for k in ("curve", "speed", "target") if k not in entry]
        if missing:
            raise UserError(f"{path}: job {i + 1} has no {', '.join(missing)}")
        name = str(entry.get("name", f"job{i + 1}"))
        speed_model = read_speed_fit(path.parent / entry["speed"])
        remaining = remaining_steps(path.parent / entry["curve"], float(entry["target"]))
        batch = float(entry.get("batch", speed_model.typical_batch))
        if not batch:
            raise UserError(
                f"{path}: job {name}: the speed model gives no global batch",
                "give batch = M in its [[job]]",
            )
        jobs.append(Job(name, remaining.steps, speed_model, batch))
    return jobs
