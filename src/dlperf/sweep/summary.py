"""A sweep's verdict: its points ranked, the spread over repeats, the winner per axis value.

A point here is one combination of axis values; its repeats (seeds) are pooled: the mean of
each figure over the finished repeats and its sample standard deviation (n - 1; None with
fewer than two values), and for test accuracy also the min and max. Points rank by mean test
accuracy, then by mean time to target (sooner first), then epochs to target; `--sort` shows
them in another order, their ranks kept. A point's validation curve is the mean over its
repeats at each epoch, with their min and max (`mean_curves`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from dlperf.errors import UserError
from dlperf.records import Record

T = TypeVar("T")
SPREAD = "std"  # sample standard deviation over repeats (n - 1), with min and max
# elapsed_s: wall time (training and evaluation) to the last epoch, the clock of time to target
FIGURES = ("best_val_accuracy", "epochs_to_target", "time_to_target_s", "elapsed_s", "epochs",
           "throughput")  # fmt: skip
# The result columns --sort takes, and whether more is better (shown first).
SORTS = {"rank": False, "test_accuracy": True, "best_val_accuracy": True,
         "epochs_to_target": False, "time_to_target_s": False, "throughput": True}  # fmt: skip


@dataclass(frozen=True)
class SweepPointResult(Record):
    """How one point of a sweep ended: its run, and the figures of its summary when it
    finished or the error when not. A parallel sweep's worker writes it to a file."""

    run_id: int
    status: str  # finished or failed
    error: str | None = None
    test_accuracy: float | None = None
    best_val_accuracy: float | None = None
    epochs_to_target: int | None = None
    time_to_target_s: float | None = None
    elapsed_s: float | None = None
    throughput: float | None = None
    train_time_s: float | None = None
    epochs: int | None = None
    # Where the model's own code raised `error` (a point's model failing mid-training): its
    # frames' lines, from the model file's first on, which the sweep's log shows as `dlperf
    # run` does; not stored with the run (its error is the line alone, as `run` stores it).
    frames: tuple[str, ...] = ()

    @classmethod
    def of_run(
        cls, run_id: int, status: str, summary: Mapping[str, Any], error: str | None = None
    ) -> SweepPointResult:
        """A run's result from its stored summary (or `run_experiment`'s)."""
        return cls(
            run_id,
            status,
            error,
            test_accuracy=summary.get("test_accuracy"),
            best_val_accuracy=summary.get("best_val_accuracy"),
            epochs_to_target=summary.get("epochs_to_target"),
            time_to_target_s=summary.get("time_to_target_s"),
            elapsed_s=summary.get("elapsed_s"),
            throughput=summary.get("throughput"),
            train_time_s=summary.get("train_time_s"),
            epochs=summary.get("epochs"),
        )


@dataclass(frozen=True, kw_only=True)
class SweepRow(SweepPointResult):
    """One point of a sweep's summary: its result, its axis values and seed, and whether it
    finished before this sweep (skipped)."""

    params: dict[str, Any]
    seed: int | None = None
    skipped: bool = False

    @classmethod
    def of(
        cls, result: SweepPointResult, params: dict[str, Any], seed: int | None = None,
        skipped: bool = False,
    ) -> SweepRow:  # fmt: skip
        return cls(**asdict(result), params=params, seed=seed, skipped=skipped)


def _mean(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _std(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.stdev(present) if len(present) > 1 else None


def _group(params: dict[str, Any], runs: list[SweepRow]) -> dict[str, Any]:
    done = [r for r in runs if r.status == "finished"]
    acc = [r.test_accuracy for r in done if r.test_accuracy is not None]
    return {
        "params": params,
        "run_ids": [r.run_id for r in runs],
        "repeats": len(runs),
        "finished": len(done),
        "reached_target": sum(r.epochs_to_target is not None for r in done),
        "test_accuracy": _mean(acc),
        "test_accuracy_std": _std(acc),
        "test_accuracy_min": min(acc, default=None),
        "test_accuracy_max": max(acc, default=None),
        **{k: _mean([getattr(r, k) for r in done]) for k in FIGURES},
        **{f"{k}_std": _std([getattr(r, k) for r in done]) for k in FIGURES},
    }


def _rank_key(entry: dict[str, Any] | SweepRow) -> tuple[float, float, float]:
    """Best first: accuracy, then time to target, then epochs to target. Accuracy is compared
    at 12 significant digits: means of repeats carry float rounding (0.8 and 0.9 average
    0.8500000000000001), which must not outrank a single 0.85."""
    figures = entry if isinstance(entry, dict) else asdict(entry)
    acc = figures.get("test_accuracy")
    time_s, epochs = figures.get("time_to_target_s"), figures.get("epochs_to_target")
    return (
        -float(f"{acc:.12g}") if acc is not None else math.inf,
        time_s if time_s is not None else math.inf,
        epochs if epochs is not None else math.inf,
    )


def _by_params(pairs: Iterable[tuple[dict[str, Any], T]]) -> list[tuple[dict[str, Any], list[T]]]:
    """The items of each combination of axis values, in the order the combinations first come."""
    points: dict[str, tuple[dict[str, Any], list[T]]] = {}
    for params, item in pairs:
        key = json.dumps(params, sort_keys=True, default=str)
        points.setdefault(key, (params, []))[1].append(item)
    return list(points.values())


def group_rows(rows: list[SweepRow]) -> list[dict[str, Any]]:
    """One entry per combination of axis values, best first, with its rank."""
    points = _by_params((row.params, row) for row in rows)
    groups = sorted((_group(params, runs) for params, runs in points), key=_rank_key)
    for rank, group in enumerate(groups, 1):
        group["rank"] = rank
    return groups


def mean_curves(
    curves: list[tuple[dict[str, Any], list[tuple[int, float]]]],
) -> list[dict[str, Any]]:
    """One validation curve per combination of axis values, in the order they first come:
    from each run's (axis values, [(epoch, accuracy)]), at each epoch the mean, min and max
    over the runs that reached it, and how many runs there are."""
    merged = []
    for params, runs in _by_params(curves):
        at: dict[int, list[float]] = {}
        for points in runs:
            for epoch, accuracy in points:
                at.setdefault(epoch, []).append(accuracy)
        epochs = sorted(at)
        merged.append({
            "params": params,
            "runs": len(runs),
            "epochs": epochs,
            "mean": [statistics.fmean(at[e]) for e in epochs],
            "min": [min(at[e]) for e in epochs],
            "max": [max(at[e]) for e in epochs],
        })  # fmt: skip
    return merged


def axis_winners(groups: list[dict[str, Any]], axes: dict[str, list[Any]]) -> dict[str, Any]:
    """For each axis: each value's best point (its mean test accuracy and run ids) and the
    value whose best point ranks first."""
    verdict: dict[str, Any] = {}
    for axis, values in axes.items():
        best = {}
        for value in values:
            mine = [g for g in groups if g["params"][axis] == value and g["finished"]]
            if mine:  # groups are ranked: the first is the best
                best[json.dumps(value, default=str)] = mine[0]
        ranked = sorted(best.values(), key=_rank_key)
        verdict[axis] = {
            "winner": ranked[0]["params"][axis] if ranked else None,
            "values": [
                {"value": g["params"][axis], "test_accuracy": g["test_accuracy"],
                 "params": g["params"], "run_ids": g["run_ids"]}
                for g in ranked
            ],
        }  # fmt: skip
    return verdict


def winner(rows: list[SweepRow], groups: list[dict[str, Any]]) -> int | None:
    """The best run of the best point: the repeat with the highest test accuracy."""
    if not groups or not groups[0]["finished"]:
        return None
    ids = set(groups[0]["run_ids"])
    mine = [r for r in rows if r.run_id in ids and r.status == "finished"]
    return min(mine, key=_rank_key).run_id


def sort_key(name: str, axes: dict[str, list[Any]]) -> Callable[[dict[str, Any]], tuple[bool, Any]]:
    """How `--sort NAME` orders the points: a swept key by its values, ascending (numbers as
    numbers); a result column best first (accuracy and throughput high, time and epochs
    low); points without a value last."""
    if name in axes:

        def by_value(group: dict[str, Any]) -> tuple[bool, Any]:
            value = group["params"][name]
            number = isinstance(value, int | float) and not isinstance(value, bool)
            return (not number, value if number else str(value))

        return by_value
    if name not in SORTS:
        raise UserError(
            f"--sort {name!r}: not a swept key or result column",
            f"choose one of {', '.join([*axes, *SORTS])}",
        )
    sign = -1 if SORTS[name] else 1

    def by_result(group: dict[str, Any]) -> tuple[bool, Any]:
        value = group[name]
        return (value is None, sign * value if value is not None else 0)

    return by_result
