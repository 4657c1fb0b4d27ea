"""Predicting when a learning curve reaches a target from its first 30% or 50%, on real curves.

The curves: the corpus of make_curve_corpus.py (benchmarks/data/curve_corpus.json: small
networks on digits and mnist5k, trained by dlperf's engine over learning rates, schedules,
batch sizes, momentum and augmentation) and Pollux's ResNet-18/CIFAR-10 traces at batch 128,
512 and 2048 (examples/pollux, the copies of ../shared/data/pollux the repository ships). For
every curve, with the first 30% and 50% of its epochs seen (the horizon h is the last epoch
seen), the targets are the best accuracy up to epoch 1.2h, 1.5h and 2h (each kept when it is
first reached after h) and one never reached (half way from the curve's best to 1). Per
method, cut and target group:

- median |error| % of the predicted epoch against the first epoch measured at the target,
  over the predictions that commit to an epoch;
- coverage: the share of 90% intervals holding the measured epoch;
- sharpness: the median of upper ÷ lower end of the interval;
- cannot tell: the share of answers that decline (dlperf's ensemble: "cannot tell", with its
  reason; the floors and curve fits: "unreachable");
- seconds per curve: the fit and the predictions of all its targets at one cut (median).

Never-reached targets count as right when a method declines or predicts an epoch past the
curve's end. The methods, side by side in one run: dlperf's ensemble (now, and with the
settings it had before issue 29), dlperf's Optimus least squares with bootstrap intervals,
a plain scipy `curve_fit` of the Optimus form, linear extrapolation of the window's last
third, and the last value (the curve stays where it is: never reaches a higher target).
The ensemble's settings were chosen on the even-numbered curves (sorted by name); the table
shows the odd-numbered ones apart, to see whether that choice overfits.
"""

from __future__ import annotations

import json
import math
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import curve_fit

from benchlib import save, table
from dlperf.converge import curve, ensemble

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "data" / "curve_corpus.json"
POLLUX = ROOT.parent / "examples" / "pollux"  # the copies the repository ships
FRACTIONS = (0.3, 0.5)
MULTIPLES = (1.2, 1.5, 2.0)
MIN_EPOCHS = 10


@dataclass
class Answer:
    predicted: float | None  # epoch; None: declined (cannot tell, or unreachable)
    interval: tuple[float, float] | None = None


@dataclass
class Case:
    curve: str
    held_out: bool  # an odd-numbered curve: not used to choose the ensemble's settings
    fraction: float
    multiple: float | None  # None: a target never reached
    horizon: float
    target: float
    actual: float | None
    last_epoch: float


def load() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """name → (epochs, validation accuracy)."""
    found = {
        name: (np.array(c["epochs"], float), np.array(c["val_acc1"], float))
        for name, c in json.loads(CORPUS.read_text())["curves"].items()
    }
    for batch in (128, 512, 2048):
        c = curve.from_csv(POLLUX / f"cifar10_validation-{batch}.csv", None, "metric")
        found[f"pollux_resnet18_cifar10_b{batch}"] = (c.steps, c.values)
    return dict(sorted(found.items()))


def cases(curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[Case]:
    out = []
    for i, (name, (k, acc)) in enumerate(curves.items()):
        if len(k) < MIN_EPOCHS:
            continue  # a run that diverged (lr far too large) stops early: nothing to predict
        for fraction in FRACTIONS:
            n_fit = curve.window(k, fraction, None)
            h = float(k[n_fit - 1])
            for m in MULTIPLES:
                target = float(acc[k <= m * h].max())
                actual = float(k[np.argmax(acc >= target)])
                if actual > h:  # else reached inside the window: nothing to predict
                    out.append(Case(name, i % 2 == 1, fraction, m, h, target, actual, float(k[-1])))
            never = float(acc.max() + 0.5 * (1.0 - acc.max()))
            out.append(Case(name, i % 2 == 1, fraction, None, h, never, None, float(k[-1])))
    return out


def dlperf_ensemble(**settings: Any) -> Callable[[np.ndarray, np.ndarray, float], Answer]:
    fit_keys = {"temper"}

    posteriors: dict[bytes, ensemble.Posterior] = {}  # one fit serves every target

    def method(k: np.ndarray, acc: np.ndarray, target: float) -> Answer:
        key = k.tobytes() + acc.tobytes()
        if key not in posteriors:
            fit_settings = {s: v for s, v in settings.items() if s in fit_keys}
            posteriors[key] = ensemble.fit(k, 1.0 - acc, **fit_settings)
        post = posteriors[key]
        p = ensemble.predict(
            post, target, "accuracy", **{s: v for s, v in settings.items() if s not in fit_keys}
        )
        if p.predicted_step is None:
            return Answer(None)
        return Answer(p.predicted_step, p.interval)

    return method


def dlperf_optimus(k: np.ndarray, acc: np.ndarray, target: float) -> Answer:
    """`converge predict --form optimus`: weighted least squares, 200 bootstrap refits."""
    report = curve.analyse(curve.Curve("c", k, acc), "accuracy", len(k))
    p = curve.predict("optimus", report.params["optimus"], report.samples["optimus"], target,
                      "accuracy")  # fmt: skip
    return Answer(p.predicted_step, p.interval) if p.reachable else Answer(None)


def optimus(k: np.ndarray, b0: float, b1: float, b2: float) -> np.ndarray:
    return 1.0 / (b0 * k + b1) + b2


def scipy_optimus(k: np.ndarray, acc: np.ndarray, target: float) -> Answer:
    """Plain `curve_fit` of error = 1/(β0·k + β1) + β2 from a neutral start: a point, no
    interval."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            (b0, b1, b2), _ = curve_fit(optimus, k, 1.0 - acc, p0=(0.1, 1.0, 0.0),
                                        bounds=([1e-9, 1e-9, 0.0], [np.inf, np.inf, 1.0]),
                                        maxfev=5000)  # fmt: skip
        except RuntimeError:
            return Answer(None)
    goal = 1.0 - target
    if goal <= b2:
        return Answer(None)
    return Answer(max((1.0 / (goal - b2) - b1) / b0, float(k[-1])))


def linear(k: np.ndarray, acc: np.ndarray, target: float) -> Answer:
    """The straight line through the window's last third (at least 3 points)."""
    tail = max(3, len(k) // 3)
    slope, intercept = np.polyfit(k[-tail:], acc[-tail:], 1)
    if slope <= 0:
        return Answer(None)
    return Answer(max((target - intercept) / slope, float(k[-1])))


def last_value(k: np.ndarray, acc: np.ndarray, target: float) -> Answer:
    return Answer(None)  # the curve stays at its last value, below every target here


# The settings the ensemble had before issue 29: tempering 10, the smooth curve's crossing,
# no refusal.
METHODS: dict[str, Callable[[np.ndarray, np.ndarray, float], Answer]] = {
    "dlperf ensemble": dlperf_ensemble(),
    "dlperf ensemble (before)": dlperf_ensemble(temper=10.0, max_reach=math.inf, noise=0.0),
    "dlperf optimus+bootstrap": dlperf_optimus,
    "scipy curve_fit optimus": scipy_optimus,
    "linear extrapolation": linear,
    "last value": last_value,
}


def evaluate(curves: dict[str, tuple[np.ndarray, np.ndarray]], all_cases: list[Case]) -> list[dict]:
    rows = []
    for c in all_cases:
        k, acc = curves[c.curve]
        n_fit = int(np.sum(k <= c.horizon))
        for name, method in METHODS.items():
            start = time.perf_counter()
            a = method(k[:n_fit], acc[:n_fit], c.target)
            seconds = time.perf_counter() - start
            lo, hi = a.interval or (math.nan, math.nan)
            rows.append({
                "curve": c.curve, "held_out": c.held_out, "fraction": c.fraction,
                "multiple": c.multiple, "horizon": c.horizon, "target": c.target,
                "actual": c.actual, "method": name, "predicted": a.predicted,
                "interval": None if a.interval is None else [lo, hi],
                "error_pct": None if a.predicted is None or c.actual is None
                else (a.predicted - c.actual) / c.actual * 100.0,
                "covered": None if a.interval is None or c.actual is None
                else bool(lo <= c.actual <= hi),
                # never reached: declining, or an epoch past the curve's end, is right
                "right_never": None if c.actual is not None
                else bool(a.predicted is None or a.predicted > c.last_epoch),
                "seconds": seconds,
            })  # fmt: skip
    return rows


def summarise(rows: list[dict], group: str, chosen: Callable[[dict], bool]) -> list[dict]:
    out = []
    for fraction in FRACTIONS:
        for method in METHODS:
            mine = [r for r in rows if r["method"] == method and r["fraction"] == fraction
                    and chosen(r)]  # fmt: skip
            reached = [r for r in mine if r["actual"] is not None]
            never = [r for r in mine if r["actual"] is None]
            errors = [abs(r["error_pct"]) for r in reached if r["error_pct"] is not None]
            covered = [r["covered"] for r in reached if r["covered"] is not None]
            sharp = [r["interval"][1] / r["interval"][0] for r in reached
                     if r["interval"] is not None and r["interval"][0] > 0]  # fmt: skip
            out.append({
                "curves": group, "fraction": fraction, "method": method, "n": len(reached),
                "median_abs_error_pct": float(np.median(errors)) if errors else None,
                "coverage_90": float(np.mean(covered)) if covered else None,
                "median_sharpness": float(np.median(sharp)) if sharp else None,
                "cannot_tell": sum(r["predicted"] is None for r in reached) / max(len(reached), 1),
                "never_reached_right": sum(r["right_never"] for r in never) / max(len(never), 1),
                "seconds_per_curve": _seconds_per_curve(mine),
            })  # fmt: skip
    return out


def _seconds_per_curve(rows: list[dict]) -> float:
    """The median over curves of the seconds a method took for all targets of a curve (one
    fit serves them all)."""
    total: dict[str, float] = {}
    for r in rows:
        total[r["curve"]] = total.get(r["curve"], 0.0) + r["seconds"]
    return float(np.median(list(total.values())))


def _cell(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:.0%}" if pct else f"{v:.3g}"


def main() -> int:
    if not CORPUS.exists():
        print(f"no corpus at {CORPUS}: run make_curve_corpus.py first", file=sys.stderr)
        return 2
    curves = load()
    all_cases = cases(curves)
    rows = evaluate(curves, all_cases)
    summaries = []
    for group, chosen in (
        ("all", lambda r: True),
        ("tuning (even)", lambda r: not r["held_out"]),
        ("held out (odd)", lambda r: r["held_out"]),
        ("pollux", lambda r: r["curve"].startswith("pollux")),
    ):
        summaries += summarise(rows, group, chosen)
    print(table(
        f"{len({c.curve for c in all_cases})} curves of {len(curves)} (the others diverged), "
        f"{len(all_cases)} cases: epoch of a target first reached at "
        "1.2-2x the horizon (median |error|, 90% coverage, sharpness over the answers), "
        "share of cannot tell, never-reached targets answered right",
        ["curves", "cut", "method", "n", "median |err| %", "coverage", "sharpness",
         "cannot tell", "never: right", "s/curve"],
        [[s["curves"], s["fraction"], s["method"], s["n"], _cell(s["median_abs_error_pct"]),
          _cell(s["coverage_90"], True), _cell(s["median_sharpness"]),
          _cell(s["cannot_tell"], True), _cell(s["never_reached_right"], True),
          _cell(s["seconds_per_curve"])] for s in summaries],
    ))  # fmt: skip
    path = save("curve_corpus", {"curves": len(curves), "cases": len(all_cases),
                                 "summary": summaries, "rows": rows})  # fmt: skip
    print(f"\nsaved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
