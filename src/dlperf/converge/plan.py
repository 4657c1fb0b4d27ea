"""Planning: time and cost to a target for each allocation, and Optimus's greedy allocator.

The time to reach the target is the steps the loss model predicts, less those already done,
divided by the speed model's steps per second f(p, w). Every worker and every parameter server
takes one device; the cost is device-hours times the price per device-hour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def parse_range(text: str, name: str) -> list[int]:
    """'1-16' or '2,4,8' (or both, '1-4,8') as sorted positive integers."""
    values: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            values.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise UserError(f"--{name} must look like 1-16 or 2,4,8, got {text!r}") from None
    if not values or min(values) < 1:
        raise UserError(f"--{name} needs counts ≥ 1, got {text!r}")
    return sorted(values)
