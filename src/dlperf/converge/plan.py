"""Planning: time and cost to a target for each allocation, and Optimus's greedy allocator.

The time to reach the target is the steps the loss model predicts, less those already done,
divided by the speed model's steps per second f(p, w). Every worker and every parameter server
takes one device; the cost is device-hours times the price per device-hour.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from dlperf.converge import curve
from dlperf.converge.speed import SpeedFit, steps_per_second
from dlperf.errors import UserError


@dataclass
class Allocation:
    ps: int
    workers: int
    time_s: float
    cost: float  # device-hours × price (device-hours when no price is given)
    fastest: bool = False
    cheapest: bool = False


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


def check_optimus(fit: SpeedFit) -> None:
    if not fit.model.startswith("optimus"):
        raise UserError(
            f"planning needs an Optimus speed fit (parameter servers), got {fit.model}",
            "fit with --model optimus-sync or optimus-async",
        )


def _check_batch(batch: float, where: str = "") -> None:
    if not (math.isfinite(batch) and batch > 0):
        raise UserError(f"{where}the global batch must be a positive number, got {batch:g}")


def time_to_target(steps: float, fit: SpeedFit, workers: int, ps: int, batch: float) -> float:
    speed = float(steps_per_second(fit, workers, batch, ps)[0])
    return steps / speed if speed > 0 else math.inf


def plan(
    steps: float,
    fit: SpeedFit,
    ps_counts: list[int],
    worker_counts: list[int],
    batch: float,
    price_per_hour: float = 1.0,
) -> list[Allocation]:
    """One row per (ps, workers), the fastest and the cheapest marked."""
    check_optimus(fit)
    _check_batch(batch)
    if not price_per_hour >= 0:  # nan too
        raise UserError(f"--price-per-hour must be 0 or more, got {price_per_hour:g}")
    rows = []
    for p in ps_counts:
        for w in worker_counts:
            t = time_to_target(steps, fit, w, p, batch)
            rows.append(Allocation(p, w, t, t / 3600.0 * (w + p) * price_per_hour))
    min(rows, key=lambda r: (r.time_s, r.workers + r.ps)).fastest = True
    min(rows, key=lambda r: (r.cost, r.time_s)).cheapest = True
    return rows


def allocate(jobs: list[Job], devices: int) -> list[JobAllocation]:
    """Optimus §4.1: start every job with one worker and one server, then repeatedly give one
    device to the job and role (worker or server) that shortens that job's remaining time
    the most, until the devices run out or no addition helps."""
    for job in jobs:
        check_optimus(job.speed)
        _check_batch(job.batch, f"job {job.name}: ")
    if devices < 2 * len(jobs):
        raise UserError(
            f"{devices} devices cannot give {len(jobs)} jobs one worker and one server each",
            f"use --gpus ≥ {2 * len(jobs)}",
        )
    alloc = [[1, 1] for _ in jobs]  # [workers, ps]

    def remaining(i: int, w: int, p: int) -> float:
        return time_to_target(jobs[i].steps, jobs[i].speed, w, p, jobs[i].batch)

    free = devices - 2 * len(jobs)
    while free > 0:
        best, best_gain = None, 0.0
        for i, (w, p) in enumerate(alloc):
            now = remaining(i, w, p)
            for role, (w2, p2) in enumerate(((w + 1, p), (w, p + 1))):
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


# --- the files a plan reads: curve and speed fits (the commands' --json), jobs.toml --------


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not JSON: {e}", f"write it with --json > {path}") from None
    if not isinstance(document, dict):
        raise UserError(f"{path} holds no single {what}", "fit one curve or table at a time")
    return document


def remaining_steps(path: Path, target: float) -> tuple[float, str]:
    """Steps still to go from the end of the fit window to the target, by the Optimus fit in
    `path` (`converge fit --json`), and what they rest on."""
    document = read_json(path, "curve fit")
    try:
        metric = document["metric"]
        beta = [float(document[k]) for k in curve.PARAMS["optimus"]]
        done = float(document["last_step"])
    except (KeyError, TypeError, ValueError):
        raise UserError(
            f"{path} is not a curve fit", "write it with `converge fit --json`"
        ) from None
    curve.check_target(target, metric)
    steps = float(curve.steps_to("optimus", beta, curve.to_decreasing(target, metric))[0])
    if not math.isfinite(steps):
        raise UserError(
            f"target {target:g} is unreachable: the curve in {path} levels off at "
            f"{curve.to_decreasing(beta[2], metric):.4g} {metric}"
        )
    points = f" to {document['n_points']} points" if "n_points" in document else ""
    basis = f"the Optimus fit of {document.get('source', path.name)}{points} up to step {done:g}"
    return max(steps - done, 0.0), basis


def read_speed_fit(path: Path) -> SpeedFit:
    """The speed fit in `path` (`converge speed fit --json`)."""
    document = read_json(path, "speed fit")
    document.pop("meanings", None)
    document.pop("predictions", None)
    try:
        fit = SpeedFit(**document)
    except TypeError:
        raise UserError(
            f"{path} is not a speed fit", "write it with `converge speed fit --json`"
        ) from None
    fit.basis = fit.basis or f"the {fit.model} fit in {path.name}"  # written before bases
    return fit


@dataclass
class Plan:
    steps: float  # still to go from the end of the curve's fit window
    cost_unit: str  # "cost" with a price per device-hour, else "device-hours"
    allocations: list[Allocation]
    basis: str  # what the steps and the step times rest on


def plan_files(
    curve_path: Path,
    speed_path: Path,
    target: float,
    ps_counts: list[int],
    worker_counts: list[int],
    batch: float | None = None,
    price_per_hour: float | None = None,
    plot: Path | None = None,
) -> Plan:
    """`plan` for a curve fit and a speed fit read from their files; the global batch is the
    speed data's most common one unless given. A figure saved to `plot`."""
    speed = read_speed_fit(speed_path)
    steps, steps_basis = remaining_steps(curve_path, target)
    rows = plan(
        steps,
        speed,
        ps_counts,
        worker_counts,
        batch if batch is not None else speed.typical_batch,
        price_per_hour if price_per_hour is not None else 1.0,
    )
    if plot is not None:
        from dlperf.report.curves import plot_plan

        plot_plan(plot, rows)
    basis = f"steps: {steps_basis}; step times: {speed.basis}"
    return Plan(steps, "cost" if price_per_hour is not None else "device-hours", rows, basis)


def read_jobs(path: Path) -> list[Job]:
    """The [[job]] tables of a jobs.toml: name, curve, speed, target and optionally batch,
    the files named relative to it."""
    try:
        document = tomllib.loads(path.read_text())
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
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
        speed = read_speed_fit(path.parent / entry["speed"])
        steps, _ = remaining_steps(path.parent / entry["curve"], float(entry["target"]))
        batch = float(entry.get("batch", speed.typical_batch))
        jobs.append(Job(str(entry.get("name", f"job{i + 1}")), steps, speed, batch))
    return jobs
