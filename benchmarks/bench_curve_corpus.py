"""Predicting when a learning curve reaches a target from its first 30% or 50%, on curves the
predictor was not tuned on.

The curves, in groups that never mix:
- the public corpus (benchmarks/data/public_curves.json: per-epoch curves logged by other
  people, with their source repository), split BY SOURCE: a source tunes the predictor when
  the first hex digit of sha256(source id) is below 5 (5 of 16, about a third), otherwise
  it is held out. The rule was fixed before any result was seen; a source is never both;
- the project's own corpus (benchmarks/data/curve_corpus.json, make_curve_corpus.py) and
  Pollux's ResNet-18/CIFAR-10 traces (examples/pollux): held out, never tuned on.

For every curve, with the first 30% and 50% of its epochs seen (the horizon h), the targets
are the best value up to 1.2h, 1.5h and 2h (each kept when first reached after h) and one
never reached (half way from the curve's best accuracy to 1, or half its best loss). Per group
and cut: median |error| % of the predicted epoch over the answers; 90% coverage over the
answers; sharpness, the median upper ÷ lower end (∞ for an open upper end); cannot tell, the
share of reached targets without an answer (all are reached within 2h); never: given an
epoch, the share of never-reached targets answered with an epoch inside the curve; zero
width and open above, shares of the intervals; seconds per curve (fit and all its targets).

The ensemble's split-conformal constants (ensemble.CALIBRATION) come from the tuning
sources: the uncalibrated ensemble's intervals are scored there and the benchmark prints the
constants they give; with `--calibrate` it prints only those (no table, nothing saved).

    nice -n 5 python benchmarks/bench_curve_corpus.py
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchlib import save, table
from dlperf.converge import curve, ensemble

ROOT = Path(__file__).resolve().parent
PUBLIC = ROOT / "data" / "public_curves.json"
OWN = ROOT / "data" / "curve_corpus.json"
POLLUX = ROOT.parent / "examples" / "pollux"  # the copies the repository ships
FRACTIONS = (0.3, 0.5)
MULTIPLES = (1.2, 1.5, 2.0)
MIN_EPOCHS = 14  # 30% of them: the 4 points a 3-parameter fit needs
LEVEL = 0.9  # the intervals' nominal coverage


@dataclass
class Curve:
    group: str  # "held out", "tuning" (public sources), "own", "pollux"
    source: str
    metric: str  # "accuracy" or "loss"
    epochs: np.ndarray
    values: np.ndarray
    val_size: int | None
    kind: dict[str, str]  # schedule, optimizer, validation-set size


@dataclass
class Case:
    curve: str
    fraction: float
    multiple: float | None  # None: a target never reached
    horizon: float
    target: float
    actual: float | None


def tuning(source: str) -> bool:
    """The fixed split: about a third of the public sources tune, by a hash of the id."""
    return int(hashlib.sha256(source.encode()).hexdigest()[0], 16) < 5


def size_kind(n: int | None) -> str:
    if n is None:
        return "val size unknown"
    return "val < 1,000" if n < 1000 else "val 1,000-9,999" if n < 10_000 else "val ≥ 10,000"


def load() -> dict[str, Curve]:
    found: dict[str, Curve] = {}
    if PUBLIC.exists():
        for name, c in json.loads(PUBLIC.read_text())["curves"].items():
            metric = "accuracy" if c["metric"] == "val_acc1" else "loss"
            n = c.get("val_size") if metric == "accuracy" else None
            found[name] = Curve(
                "tuning" if tuning(c["source"]) else "held out", c["source"], metric,
                np.array(c["epochs"], float), np.array(c["values"], float), n,
                {"schedule": c["schedule"], "optimizer": c["optimizer"], "size": size_kind(n)},
            )  # fmt: skip
    for name, c in json.loads(OWN.read_text())["curves"].items():
        acc = np.array(c["val_acc1"], float)
        n = ensemble.val_size(acc)
        schedule = c["config"]["train"]["schedule"]["kind"]
        found[f"own/{name}"] = Curve("own", "own corpus", "accuracy", np.array(c["epochs"], float),
                                     acc, n, {"schedule": schedule, "optimizer": "sgd",
                                              "size": size_kind(n)})  # fmt: skip
    for batch in (128, 512, 2048):
        c = curve.from_csv(POLLUX / f"cifar10_validation-{batch}.csv", None, "metric")
        found[f"pollux/b{batch}"] = Curve("pollux", "pollux", "accuracy", c.steps, c.values,
                                          10_000, {"schedule": "exponential",
                                                   "optimizer": "sgd",
                                                   "size": size_kind(10_000)})  # fmt: skip
    return found


def cases(curves: dict[str, Curve]) -> list[Case]:
    out = []
    for name, c in curves.items():
        if len(c.epochs) < MIN_EPOCHS:
            continue  # too short to fit 30% of (a run that diverged stops early)
        y = curve.to_decreasing(c.values, c.metric)
        for fraction in FRACTIONS:
            n_fit = curve.window(c.epochs, fraction, None)
            h = float(c.epochs[n_fit - 1])
            for m in MULTIPLES:
                goal = float(y[c.epochs <= m * h].min())
                actual = float(c.epochs[np.argmax(y <= goal)])
                if actual > h:  # else reached inside the window: nothing to predict
                    target = float(curve.to_decreasing(goal, c.metric))
                    out.append(Case(name, fraction, m, h, target, actual))
            if y.min() > 0:  # a curve that has a perfect score has no target it never reaches
                never = 0.5 * float(y.min())  # half way to a perfect score, or half the loss
                out.append(Case(name, fraction, None, h,
                                float(curve.to_decreasing(never, c.metric)), None))  # fmt: skip
    return out


Answer = tuple[float | None, tuple[float, float] | None]
Method = Callable[[Curve, int, float], Answer]


def dlperf_ensemble(calibration: tuple[float, float]) -> Method:
    posteriors: dict[tuple[int, int], ensemble.Posterior] = {}  # one fit serves every target

    def method(c: Curve, n_fit: int, target: float) -> Answer:
        key = (id(c), n_fit)
        if key not in posteriors:
            y = curve.to_decreasing(c.values[:n_fit], c.metric)
            posteriors[key] = ensemble.fit(c.epochs[:n_fit], y)
        p = ensemble.predict(posteriors[key], target, c.metric, val_size=c.val_size,
                             calibration=calibration)  # fmt: skip
        return (p.predicted_step, p.interval) if p.predicted_step is not None else (None, None)

    return method


def linear(c: Curve, n_fit: int, target: float) -> Answer:
    """The straight line through the window's last third (at least 3 points): a floor."""
    k, y = c.epochs[:n_fit], curve.to_decreasing(c.values[:n_fit], c.metric)
    tail = max(3, n_fit // 3)
    slope, intercept = np.polyfit(k[-tail:], y[-tail:], 1)
    if slope >= 0:
        return None, None
    goal = float(curve.to_decreasing(target, c.metric))
    return max((goal - intercept) / slope, float(k[-1])), None


METHODS: dict[str, Method] = {
    "dlperf ensemble": dlperf_ensemble(ensemble.CALIBRATION),
    "ensemble, uncalibrated": dlperf_ensemble((0.0, 0.0)),
    "linear extrapolation": linear,
}


def evaluate(curves: dict[str, Curve], all_cases: list[Case]) -> list[dict[str, Any]]:
    rows = []
    for case in all_cases:
        c = curves[case.curve]
        n_fit = int(np.sum(c.epochs <= case.horizon))
        for name, method in METHODS.items():
            start = time.perf_counter()
            predicted, interval = method(c, n_fit, case.target)
            seconds = time.perf_counter() - start
            lo, hi = interval or (math.nan, math.nan)
            actual = case.actual
            rows.append({
                "curve": case.curve, "group": c.group, "source": c.source, **c.kind,
                "fraction": case.fraction, "multiple": case.multiple, "horizon": case.horizon,
                "target": case.target, "actual": actual, "method": name,
                "predicted": predicted,
                "interval": None if interval is None else [lo, None if math.isinf(hi) else hi],
                "error_pct": None if predicted is None or actual is None
                else (predicted - actual) / actual * 100.0,
                "covered": None if interval is None or actual is None
                else bool(lo <= actual <= hi),
                "zero_width": None if interval is None else bool(hi <= lo),
                "open_above": None if interval is None else bool(math.isinf(hi)),
                "sharpness": None if interval is None or lo <= 0 else hi / lo,
                # never reached: an epoch inside the curve's span is a false alarm
                "never_given_epoch": None if actual is not None
                else bool(predicted is not None and predicted <= c.epochs[-1]),
                "seconds": seconds,
            })  # fmt: skip
    return rows


def conformal(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """The split-conformal constants the uncalibrated ensemble's answers on the tuning sources
    give (`ensemble.conformal`)."""
    mine = [r for r in rows if r["method"] == "ensemble, uncalibrated" and r["group"] == "tuning"
            and r["actual"] is not None and r["interval"] is not None]  # fmt: skip
    if not mine:
        return 0.0, 0.0
    return ensemble.conformal(
        np.array([r["interval"][0] for r in mine]),
        np.array([math.inf if r["interval"][1] is None else r["interval"][1] for r in mine]),
        np.array([r["actual"] for r in mine]),
        LEVEL,
    )


def summarise(rows: list[dict[str, Any]], label: str, chosen: Callable[[dict[str, Any]], bool],
              methods: tuple[str, ...]) -> list[dict[str, Any]]:  # fmt: skip
    out = []
    for fraction in FRACTIONS:
        for method in methods:
            mine = [r for r in rows if r["method"] == method and r["fraction"] == fraction
                    and chosen(r)]  # fmt: skip
            if not mine:
                continue
            reached = [r for r in mine if r["actual"] is not None]
            never = [r for r in mine if r["actual"] is None]
            answered = [r for r in mine if r["interval"] is not None]

            def share(values: list[Any]) -> float | None:
                return float(np.mean(values)) if values else None

            out.append({
                "curves": label, "n_curves": len({r["curve"] for r in mine}),
                "fraction": fraction, "method": method, "n": len(reached),
                "median_abs_error_pct": share([]) if not reached else _median(
                    [abs(r["error_pct"]) for r in reached if r["error_pct"] is not None]),
                "coverage_90": share([r["covered"] for r in reached if r["covered"] is not None]),
                "median_sharpness": _median([r["sharpness"] for r in reached
                                             if r["sharpness"] is not None]),
                "cannot_tell": share([r["predicted"] is None for r in reached]),
                "never_given_epoch": share([r["never_given_epoch"] for r in never]),
                "zero_width": share([r["zero_width"] for r in answered]),
                "open_above": share([r["open_above"] for r in answered]),
                "seconds_per_curve": _seconds_per_curve(mine),
            })  # fmt: skip
    return out


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _seconds_per_curve(rows: list[dict[str, Any]]) -> float:
    """The median over curves of the seconds a method took for all targets of a curve at one
    cut (one fit serves them all)."""
    total: dict[str, float] = {}
    for r in rows:
        total[r["curve"]] = total.get(r["curve"], 0.0) + r["seconds"]
    return float(np.median(list(total.values())))


def _cell(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.0%}" if pct else f"{v:.3g}"


def main() -> int:
    curves = load()
    all_cases = cases(curves)
    rows = evaluate(curves, all_cases)
    fresh = conformal(rows)
    tuned = sorted({c.source for c in curves.values() if c.group == "tuning"})
    held = sorted({c.source for c in curves.values() if c.group == "held out"})
    print(f"tuning sources ({len(tuned)}): {', '.join(tuned)}")
    print(f"held-out sources ({len(held)}): {', '.join(held)}")
    print(f"conformal constants from the tuning sources: {fresh[0]:.3f}, {fresh[1]:.3f}; "
          f"in the code (ensemble.CALIBRATION): {ensemble.CALIBRATION}")  # fmt: skip
    if "--calibrate" in sys.argv[1:]:
        return 0
    both = ("dlperf ensemble", "ensemble, uncalibrated", "linear extrapolation")
    summaries = []
    for label, chosen, methods in (
        ("held out (public)", lambda r: r["group"] == "held out", both),
        ("tuning (public)", lambda r: r["group"] == "tuning", both),
        ("own corpus", lambda r: r["group"] == "own", both),
        ("pollux", lambda r: r["group"] == "pollux", both),
    ):
        summaries += summarise(rows, label, chosen, methods)
    public_held = [r for r in rows if r["group"] == "held out"]
    for key in ("schedule", "optimizer", "size"):
        for value in sorted({r[key] for r in public_held}):
            summaries += summarise(public_held, f"held out, {value}",
                                   lambda r, k=key, v=value: r[k] == v,  # type: ignore[misc]
                                   ("dlperf ensemble",))  # fmt: skip
    print(table(
        f"{len({c.curve for c in all_cases})} curves, {len(all_cases)} cases: epoch of a "
        "target first reached at 1.2-2x the horizon (median |error|, coverage, sharpness over "
        "the answers), cannot tell on those, never-reached targets given an epoch",
        ["curves", "n curves", "cut", "method", "n", "median |err| %", "coverage", "sharpness",
         "cannot tell", "never: epoch", "zero width", "open above", "s/curve"],
        [[s["curves"], s["n_curves"], s["fraction"], s["method"], s["n"],
          _cell(s["median_abs_error_pct"]), _cell(s["coverage_90"], True),
          _cell(s["median_sharpness"]), _cell(s["cannot_tell"], True),
          _cell(s["never_given_epoch"], True), _cell(s["zero_width"], True),
          _cell(s["open_above"], True), _cell(s["seconds_per_curve"])] for s in summaries],
    ))  # fmt: skip
    path = save("curve_corpus", {"curves": len(curves), "cases": len(all_cases),
                                 "tuning_sources": tuned, "held_out_sources": held,
                                 "conformal_fresh": fresh,
                                 "conformal_in_code": list(ensemble.CALIBRATION),
                                 "summary": summaries, "rows": rows})  # fmt: skip
    print(f"\nsaved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
