"""Convergence and speed models on real traces (Pollux, OSDI'21 artifact, Apache-2.0).

1. ResNet-18 on CIFAR-10 at batch 128, 512 and 2048: fit each validation-accuracy curve on
   its first 30% (and 50%) of epochs, predict the first epoch reaching 94% accuracy with the
   Optimus model, the power law and the ensemble (a distribution over curve families), and
   compare with the epoch measured. The same on our own curves (tests/fixtures/own_curves/,
   written by make_own_curves.py), whose target is the best accuracy of their first 70%.
   Per form and cut: the median |error| of the predicted epoch (a prediction of
   "unreachable" counts as an infinite error), the same over the predictions that commit to
   an epoch (abstentions counted beside it), and the coverage of the 90% interval.
2. Pollux's iteration-time model and the ring (`--model ring`: Pollux's with a ring
   all-reduce's sync time) on the measured step times: the fit error on each trace, the
   error predicting the 6-16-node scalability runs from a fit to the <= 4-node placement
   runs alone, and, held out per GPU count and per placement, the error predicting the
   placements of 5-16 GPUs from a fit to those of at most 4 (issue 40).
3. `converge regress` on an unseen configuration: log β fitted as linear in log2(batch) on
   the whole 128 and 2048 curves, the 512 curve predicted and compared with the measured
   one (RMSE, first epoch reaching 90%).
4. How long a fit takes (both forms, 200 bootstrap refits; what `converge fit` does), one
   warm-up, then repetitions interleaved over the three curves: min/median/max.
Optimus's speed models need parameter-server counts, which these all-reduce traces lack.
`--speed` runs part 2 alone (seconds) and saves it as converge_pollux_speed.json.
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchlib import save, spread, table
from dlperf.converge import curve, ensemble, regress, speed
from dlperf.converge.tables import read_table
from dlperf.timing import Timer, round_robin

POLLUX = Path(__file__).resolve().parents[2] / "shared" / "data" / "pollux"
OWN = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "own_curves"
# The ensemble with its default log prior on the plateau, and with the uniform prior it had.
FORMS = (*curve.PARAMS, "ensemble", "ensemble-uniform")
TARGET = 0.94
FRACTIONS = (0.3, 0.5)
BATCHES = (128, 512, 2048)
REPEATS = 3
SPEED_MODELS = ("pollux", "ring")
FITTED_UPTO = 4  # GPUs: the placements a held-out fit sees; the larger ones it predicts


def load(batch: int) -> curve.Curve:
    return curve.from_csv(POLLUX / f"cifar10_validation-{batch}.csv", None, "metric")


def extrapolation_curves() -> list[tuple[str, curve.Curve, float]]:
    """(trace, curve, target): the Pollux traces at 94%, our own at the best accuracy of their
    first 70% of epochs."""
    found = [(f"pollux b{b}", load(b), TARGET) for b in BATCHES]
    for path in sorted(OWN.glob("*.csv")):
        c = curve.from_csv(path, None, "val_acc1")
        found.append((path.stem, c, float(np.floor(c.values[: int(0.7 * len(c.values))].max()
                                                      * 1000) / 1000)))  # fmt: skip
    return found


def _predict(form: str, report: curve.FitReport, target: float) -> dict:
    c = report.curve
    if form.startswith("ensemble"):
        y = curve.to_decreasing(c.values, "accuracy")
        prior = "uniform" if form == "ensemble-uniform" else "log"
        post = ensemble.fit(c.steps[: report.n_fit], y[: report.n_fit], plateau_prior=prior)
        e = ensemble.predict(post, target, "accuracy", c.steps, c.values)
        return {"predicted": e.predicted_step, "interval": e.interval, "actual": e.actual_step,
                "error_pct": e.error_pct, "p_reachable": e.p_reachable,
                "plateau": [e.plateau_interval[0], e.plateau, e.plateau_interval[1]]}  # fmt: skip
    p = curve.predict(form, report.params[form], report.samples[form], target, "accuracy",
                      c.steps, c.values)  # fmt: skip
    asymptote = report.fits[form].params[curve.PARAMS[form][2]]
    return {"predicted": p.predicted_step, "interval": p.interval, "actual": p.actual_step,
            "error_pct": p.error_pct, "p_reachable": None,
            "plateau": [1.0 - asymptote]}  # fmt: skip


def curve_rows() -> list[dict]:
    rows = []
    for trace, c, target in extrapolation_curves():
        for fraction in FRACTIONS:
            report = curve.analyse(c, "accuracy", curve.window(c.steps, fraction, None))
            for form in FORMS:
                r = _predict(form, report, target)
                if r["actual"] is None or r["actual"] <= report.fits["optimus"].last_step:
                    continue  # never reached, or reached inside the window: nothing to predict
                lo, hi = r["interval"] or (math.nan, math.nan)
                rows.append(
                    {
                        "trace": trace,
                        "target": target,
                        "fit_epochs": report.n_fit,
                        "fraction": fraction,
                        "form": form,
                        "predicted_epoch": r["predicted"],
                        # JSON has no infinity: a bound that some samples never reach is null.
                        "interval": [v if math.isfinite(v) else None for v in (lo, hi)],
                        "covered": bool(lo <= r["actual"] <= hi),
                        "actual_epoch": r["actual"],
                        "error_pct": r["error_pct"],
                        "p_reachable": r["p_reachable"],
                        "plateau_accuracy": r["plateau"],
                    }
                )
    return rows


def summary(rows: list[dict], pollux: bool) -> list[dict]:
    """Median |error| (unreachable: infinite) and coverage per form and cut."""
    out = []
    for fraction in FRACTIONS:
        for form in FORMS:
            chosen = [r for r in rows if r["form"] == form and r["fraction"] == fraction
                      and r["trace"].startswith("pollux") == pollux]  # fmt: skip
            if not chosen:
                continue
            errors = [abs(r["error_pct"]) if r["error_pct"] is not None else math.inf
                      for r in chosen]  # fmt: skip
            committed = [e for e in errors if math.isfinite(e)]
            out.append(
                {
                    "curves": "pollux" if pollux else "own",
                    "fraction": fraction,
                    "form": form,
                    "n": len(chosen),
                    "median_abs_error_pct": float(np.median(errors)),
                    # JSON has no infinity: null when nothing was committed to.
                    "median_abs_error_committed_pct": (
                        float(np.median(committed)) if committed else None
                    ),
                    "coverage": sum(r["covered"] for r in chosen) / len(chosen),
                    # An interval open above covers cheaply: count them beside the coverage.
                    "open_intervals": sum(r["interval"][1] is None for r in chosen),
                    "unreachable": sum(r["predicted_epoch"] is None for r in chosen),
                }
            )
    return out


def speed_rows() -> list[dict[str, Any]]:
    rows = []
    for model in ("cifar10", "imagenet"):
        traces = {kind: speed.load_csv(POLLUX / f"{model}_{kind}.csv") for kind in
                  ("placements", "scalability")}  # fmt: skip
        for form in SPEED_MODELS:
            for kind, data in traces.items():
                fit = speed.fit(data, form)
                rows.append(
                    {
                        "trace": f"{model}_{kind}",
                        "model": form,
                        "fitted_on": kind,
                        "n": fit.n_points,
                        "mean_error_pct": fit.error_pct,
                        "max_error_pct": fit.max_error_pct,
                        "gamma": fit.params["gamma"],
                        "converged": fit.converged,
                    }
                )
            placements = traces["placements"]
            # All placements (1-16 GPUs on 1-4 nodes), and those of at most 4 GPUs alone.
            for fitted_on, keep in (
                ("placements", placements.workers > 0),
                (f"placements <= {FITTED_UPTO} GPUs", placements.workers <= FITTED_UPTO),
            ):
                fit = speed.fit(_subset(placements, keep), form)
                data = traces["scalability"]
                assert data.nodes is not None  # a Pollux trace places every run
                predicted = speed.step_time(fit, data.workers, data.global_batch, nodes=data.nodes)
                error = np.abs(predicted - data.step_time) / data.step_time * 100
                rows.append(
                    {
                        "trace": f"{model}_scalability",
                        "model": form,
                        "fitted_on": fitted_on,
                        "n": len(data),
                        "mean_error_pct": float(error.mean()),
                        "max_error_pct": float(error.max()),
                        "gamma": fit.params["gamma"],
                        "converged": fit.converged,
                    }
                )
    return rows


def _subset(data: speed.SpeedData, keep: np.ndarray) -> speed.SpeedData:
    assert data.nodes is not None and data.sync_time is not None
    return speed.SpeedData(data.workers[keep], data.global_batch[keep], data.step_time[keep],
                           nodes=data.nodes[keep], sync_time=data.sync_time[keep])  # fmt: skip


def heldout_placements() -> list[dict[str, Any]]:
    """Each model fitted to the placements of at most FITTED_UPTO GPUs, predicting every
    larger placement (its digits are the GPUs on each node): the signed error of the step
    time, in %, per measured row (one per batch per worker), grouped by placement."""
    rows = []
    for trace in ("cifar10", "imagenet"):
        path = POLLUX / f"{trace}_placements.csv"
        data = speed.load_csv(path)
        # As text: a float would read a placement such as "0124" as 124 (load_csv checks each).
        placement = np.array([p.strip() for p in read_table(path, ["placement"])[1]["placement"]])
        fitted = data.workers <= FITTED_UPTO
        fits = {form: speed.fit(_subset(data, fitted), form) for form in SPEED_MODELS}
        held = _subset(data, ~fitted)
        assert held.nodes is not None  # a Pollux trace places every run
        errors = {form: (speed.step_time(fit, held.workers, held.global_batch, nodes=held.nodes)
                         / held.step_time - 1) * 100 for form, fit in fits.items()}  # fmt: skip
        for where in dict.fromkeys(placement[~fitted]):
            at = placement[~fitted] == where
            rows.append(
                {
                    "trace": trace,
                    "placement": where,
                    "gpus": sum(map(int, where)),
                    "nodes": len(where),
                    "n": int(at.sum()),
                    "fitted_rows": int(fitted.sum()),
                    **{f"{form}_error_pct": errors[form][at].tolist() for form in SPEED_MODELS},
                }
            )
    return rows


def heldout_by_gpus(placements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The held-out errors of `heldout_placements` per trace and GPU count: mean |error| of
    each model, and the ring's median, max and signed mean."""
    out = []
    for trace in dict.fromkeys(r["trace"] for r in placements):
        for gpus in sorted({r["gpus"] for r in placements if r["trace"] == trace}):
            chosen = [r for r in placements if r["trace"] == trace and r["gpus"] == gpus]
            errors = {form: np.concatenate([r[f"{form}_error_pct"] for r in chosen])
                      for form in SPEED_MODELS}  # fmt: skip
            ring = errors["ring"]
            means = {f"{form}_mean_abs_error_pct": float(np.abs(e).mean()) for form, e in
                     errors.items()}  # fmt: skip
            out.append(
                {
                    "trace": trace,
                    "gpus": gpus,
                    "placements": len(chosen),
                    "n": len(ring),
                    **means,
                    "ring_median_abs_error_pct": float(np.median(np.abs(ring))),
                    "ring_max_abs_error_pct": float(np.abs(ring).max()),
                    "ring_signed_mean_error_pct": float(ring.mean()),
                }
            )
    return out


def print_speed(speeds: list[dict[str, Any]], by_gpus: list[dict[str, Any]]) -> None:
    print(
        table(
            "Pollux iteration-time model and the ring: step-time error",
            ["trace", "model", "fitted on", "points", "mean %", "max %", "gamma"],
            [[r["trace"], r["model"], r["fitted_on"], r["n"], r["mean_error_pct"],
              r["max_error_pct"], r["gamma"]] for r in speeds],
        )
    )  # fmt: skip
    print()
    print(
        table(
            f"held out: placements of more than {FITTED_UPTO} GPUs predicted from a fit to those "
            f"of at most {FITTED_UPTO} (mean |error| of the step time, %; per placement in the "
            "JSON record)",
            ["trace", "GPUs", "placements", "rows", "pollux", "ring", "ring median", "ring max",
             "ring signed"],
            [[r["trace"], r["gpus"], r["placements"], r["n"], r["pollux_mean_abs_error_pct"],
              r["ring_mean_abs_error_pct"], r["ring_median_abs_error_pct"],
              r["ring_max_abs_error_pct"], r["ring_signed_mean_error_pct"]] for r in by_gpus],
        )
    )  # fmt: skip


def unseen_batch() -> dict[str, float | None]:
    """The 512 curve predicted from the 128 and 2048 curves."""
    seen = [{"log2_batch": math.log2(b)} for b in (128, 2048)]
    betas = []
    for b in (128, 2048):
        c = load(b)
        betas.append(curve.fit(c.steps, curve.to_decreasing(c.values, "accuracy"))[1])
    reg = regress.fit(seen, np.array(betas), ["log2_batch"])
    p = regress.predict(reg, {"log2_batch": math.log2(512)})
    measured = load(512)
    predicted = curve.to_decreasing(curve.model("optimus")(measured.steps, p), "accuracy")
    reach = curve.predict("optimus", p, p[None, :], 0.90, "accuracy", measured.steps,
                          measured.values)  # fmt: skip
    return {
        "rmse": float(np.sqrt(np.mean((predicted - measured.values) ** 2))),
        "predicted_epoch_90": reach.predicted_step,
        "actual_epoch_90": reach.actual_step,
        "error_pct_90": reach.error_pct,
    }


def fit_times() -> dict[str, dict[str, float]]:
    """Seconds per `analyse` of each curve's first 30%."""
    curves = {str(b): load(b) for b in BATCHES}

    def fit_once(c: curve.Curve) -> float:
        return Timer().time(lambda: curve.analyse(c, "accuracy", curve.window(c.steps, 0.3, None)))

    for c in curves.values():
        fit_once(c)  # warm-up: imports, first calls
    runs = round_robin({b: functools.partial(fit_once, c) for b, c in curves.items()}, REPEATS)
    return {b: spread(t) for b, t in runs.items()}


def main() -> int:
    if not POLLUX.is_dir():
        print(f"skipped: no Pollux traces at {POLLUX}", file=sys.stderr)
        return 0
    speeds, placements = speed_rows(), heldout_placements()
    by_gpus = heldout_by_gpus(placements)
    if "--speed" in sys.argv[1:]:
        print_speed(speeds, by_gpus)
        record = {"speed": speeds, "heldout_by_gpus": by_gpus, "heldout_placements": placements}
        print(f"\nsaved {save('converge_pollux_speed', record)}")
        return 0
    curves = curve_rows()
    print(
        table(
            "first epoch reaching the target (Pollux: 94% validation accuracy)",
            ["trace", "target", "fit epochs", "form", "predicted", "5%", "95%", "actual",
             "error %", "P(reach)", "plateau acc"],
            [
                [r["trace"], r["target"], r["fit_epochs"], r["form"],
                 r["predicted_epoch"] if r["predicted_epoch"] is not None else "unreachable",
                 *(("∞" if v is None else v) for v in r["interval"]), r["actual_epoch"],
                 r["error_pct"] if r["error_pct"] is not None else "-",
                 r["p_reachable"] if r["p_reachable"] is not None else "-",
                 " ".join(f"{v:.3f}" for v in r["plateau_accuracy"])]
                for r in curves
            ],
        )
    )  # fmt: skip
    summaries = summary(curves, True) + summary(curves, False)
    print()
    print(
        table(
            "per form and cut: median |error| (unreachable = ∞; and over committed predictions"
            " only) and 90%-interval coverage",
            ["curves", "cut", "form", "n", "median |error| %", "committed %", "coverage",
             "open above", "unreachable"],
            [[s["curves"], s["fraction"], s["form"], s["n"], s["median_abs_error_pct"],
              "-" if s["median_abs_error_committed_pct"] is None
              else s["median_abs_error_committed_pct"], s["coverage"], s["open_intervals"],
              s["unreachable"]]
             for s in summaries],
        )
    )  # fmt: skip
    print()
    print_speed(speeds, by_gpus)
    unseen = unseen_batch()
    print()
    print(
        table(
            "batch 512 predicted from the 128 and 2048 curves (log β linear in log2 batch)",
            ["rmse (accuracy)", "epoch reaching 90%", "actual", "error %"],
            [[unseen["rmse"], unseen["predicted_epoch_90"], unseen["actual_epoch_90"],
              unseen["error_pct_90"]]],
        )
    )  # fmt: skip
    times = fit_times()
    print()
    print(
        table(
            f"seconds per fit (both forms, {curve.N_BOOT} bootstrap refits, 30 points)",
            ["batch", "min", "median", "max"],
            [[b, t["min"], t["median"], t["max"]] for b, t in times.items()],
        )
    )
    path = save(
        "converge_pollux",
        {
            "target": TARGET,
            "curves": curves,
            "summary": summaries,
            "speed": speeds,
            "heldout_by_gpus": by_gpus,
            "heldout_placements": placements,
            "unseen_batch_512": unseen,
            "fit_seconds": times,
        },
    )
    print(f"\nsaved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
