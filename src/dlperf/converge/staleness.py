"""Gradient staleness under asynchronous SGD: an event-driven parameter server.

Each learner loops: compute a gradient on the weights it last read, push it, and wait for the
pull of the new weights before computing the next one. The server applies every gradient the
moment it arrives and answers the learner's pull at once with the weights it now holds, so a
learner always reads its own update.

A learner is given by its gradient completion times when push, update and pull take no time
(t1 < t2 < ...); its compute durations are their differences. With latencies the schedule
stretches: gradient i arrives at the server `push` after it is computed, the weights arrive
back `pull` after that, and then gradient i + 1 starts. Every learner reads version 0 at time 0.

A gradient that read version r and is applied when the server holds version a has staleness
a − r: the number of updates made in between. Its `time` is when the server applies it.

Ties: gradients arriving at the same instant are applied in the order the learners were given
(then, for one learner, in index order). Instants are compared to 1e-9, so 3 × (1/3) and 1.0
count as simultaneous. A schedule whose clock would pass what a float holds (about 1.8e308:
a time plus its latencies) is refused, not simulated at inf.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from dlperf.errors import UserError

TIME_DIGITS = 9
# Far past any real study (16 learners of 10,000 steps each are 160,000), and a bound on what
# one costs: a million gradients simulate and print in about 10 s and 550 MB, their --json
# document in about 30 s and 2.1 GB (measured on this project's 2-core machine). The cap was
# ten million, which took minutes and ran out of a 3 GB `ulimit -v` at two million.
MAX_GRADIENTS = 1_000_000


@dataclass(slots=True)  # one per simulated gradient: a million of them, without a dict each
class Gradient:
    learner: str
    index: int  # 1-based, per learner
    time: float
    read_version: int
    applied_version: int
    staleness: int


def durations(times: list[float], learner: str) -> list[float]:
    """Compute durations from completion times, which must be positive and increasing."""
    if not times:
        raise UserError(f"learner {learner} has no completion times")
    if any(not math.isfinite(t) for t in times):
        raise UserError(f"learner {learner} has a non-finite completion time")
    steps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    if any(d <= 0 for d in steps):
        raise UserError(
            f"learner {learner}: completion times must be positive and increasing, got {times}",
            "e.g. L1=1,2,3",
        )
    return steps


def from_speeds(speeds: dict[str, float], horizon: float) -> dict[str, list[float]]:
    """Completion times of learners that finish `speed` gradients per unit time, up to
    the horizon (computed as k / speed, so that equal rates tie exactly)."""
    if not math.isfinite(horizon) or horizon <= 0:
        raise UserError(f"--horizon must be a positive time, got {horizon}")
    counts = {}
    for name, speed in speeds.items():
        if not math.isfinite(speed) or speed <= 0:
            raise UserError(f"learner {name}: speed must be positive, got {speed}")
        product = horizon * speed  # two finite floats can still overflow to inf
        if not math.isfinite(product):
            raise UserError(
                f"learner {name}: speed × horizon ({speed} × {horizon}) is not a finite number",
                "lower --speeds or --horizon",
            )
        counts[name] = math.floor(product + 1e-9)
        if counts[name] == 0:
            raise UserError(f"learner {name} finishes no gradient within the horizon {horizon}")
    # Counted before any list is built: 1e9 × 1e9 asked for 1e18 times and never ended.
    total = sum(counts.values())
    if total > MAX_GRADIENTS:
        raise UserError(
            f"--speeds and --horizon ask for {_count(total)} gradients; at most "
            f"{MAX_GRADIENTS:,} are simulated",
            "lower --speeds or --horizon: only their product counts",
        )
    return {name: [k / speeds[name] for k in range(1, n + 1)] for name, n in counts.items()}


def equal_speeds(learners: int) -> dict[str, float]:
    """`learners` equally fast learners, L1 to LN, each one gradient per unit time. Refused
    past MAX_GRADIENTS before any is listed: each finishes a gradient at least, so more would
    be refused later anyway, once their list was built (30,000,000 took 60 s and 2 GB)."""
    if learners < 1:
        raise UserError(f"--learners must be ≥ 1, got {learners}")
    if learners > MAX_GRADIENTS:
        raise UserError(
            f"{_count(learners)} learners ask for at least {_count(learners)} gradients (one "
            f"each); at most {MAX_GRADIENTS:,} are simulated",
            "lower --learners",
        )
    return {f"L{i + 1}": 1.0 for i in range(learners)}


def _count(n: int) -> str:
    """A count as an error says it: exact, in thousands, up to 15 digits; past that, short
    (`--horizon 1e308` asked for a count of 309 digits, "about 1e+308")."""
    if n < 10**15:
        return f"{n:,}"
    # Decimal: a sum of counts can pass what a float holds (two learners at 1e308)
    mantissa, _, exponent = f"{Decimal(n):.3g}".partition("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"about {mantissa}e{exponent}"


def simulate(
    learners: dict[str, list[float]], push_latency: float = 0.0, pull_latency: float = 0.0
) -> list[Gradient]:
    """Every gradient in the order the server applies it. `learners` maps a name to its
    completion times (see the module docstring); dict order is the tie order."""
    if not learners:
        raise UserError("give at least one learner", "e.g. --learner L1=1,2,3")
    for name, latency in (("push", push_latency), ("pull", pull_latency)):
        if not math.isfinite(latency) or latency < 0:
            raise UserError(f"--{name}-latency must be ≥ 0, got {latency}")
    work = {name: durations(times, name) for name, times in learners.items()}
    order = {name: i for i, name in enumerate(work)}
    # (arrival instant rounded for ties, learner order, index, exact arrival, version read)
    queue: list[tuple[float, int, int, float, int]] = []

    def send(name: str, index: int, start: float, read: int) -> None:
        arrival = start + work[name][index - 1] + push_latency
        if not math.isfinite(arrival):
            # Each figure was finite, their sum is not: arrivals at inf tied and were applied
            # in the learners' order, not the order they arrive (break-it round 56).
            raise UserError(
                f"learner {name}: completion times plus latencies pass what a float holds "
                "(about 1.8e308)",
                "lower the times, --push-latency or --pull-latency",
            )
        heapq.heappush(queue, (round(arrival, TIME_DIGITS), order[name], index, arrival, read))

    for name in work:
        send(name, 1, 0.0, 0)
    names = list(work)
    version = 0
    applied = []
    while queue:
        _, who, index, arrival, read = heapq.heappop(queue)
        name = names[who]
        applied.append(Gradient(name, index, arrival, read, version, version - read))
        version += 1
        if index < len(work[name]):
            send(name, index + 1, arrival + pull_latency, version)
    return applied


def summary(gradients: list[Gradient]) -> dict[str, Any]:
    stale = [g.staleness for g in gradients]
    per_learner: dict[str, list[int]] = {}
    for g in gradients:
        per_learner.setdefault(g.learner, []).append(g.staleness)
    return {
        "gradients": len(gradients),
        "final_version": len(gradients),
        "mean_staleness": sum(stale) / len(stale),
        "max_staleness": max(stale),
        "histogram": {str(s): n for s, n in sorted(Counter(stale).items())},
        "learners": {
            name: {"gradients": len(s), "mean_staleness": sum(s) / len(s)}
            for name, s in per_learner.items()
        },
    }


def to_json(gradients: list[Gradient]) -> dict[str, Any]:
    return {"gradients": [asdict(g) for g in gradients], "summary": summary(gradients)}
