"""What `dlperf converge fit | predict | regress` do, callable from a notebook: read curves
from stored runs or CSV files, fit both curve forms, predict when a curve reaches a target,
and regress the Optimus coefficients on run features.

Results are the fit reports and the records of `dlperf.converge.results`, whose `to_dict()`
the commands print with --json; `fit_result`'s is also the curve `converge plan --curve`
reads back.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlperf import stopping
from dlperf.converge import curve, ensemble
from dlperf.converge import regress as reg
from dlperf.converge.curve import Curve, CurveFit, FitReport
from dlperf.converge.options import CurveOptions
from dlperf.converge.results import (
    MEASURED_BASIS,
    Comparison,
    CurveFitResult,
    EnsembleStepPrediction,
    PowerFit,
    Regression,
    RegressPrediction,
    StepPrediction,
)
from dlperf.errors import UserError
from dlperf.formatting import spreadsheet_safe
from dlperf.parsing import parse_pairs
from dlperf.paths import not_regular, replaced, writing
from dlperf.progress import NullReporter, Reporter

if TYPE_CHECKING:
    from dlperf.store import RunStore

FORMS = (*curve.PARAMS, "ensemble")


def load_curves(
    run_ids: list[int], csv: Path | None, opts: CurveOptions, open_store: Callable[[], RunStore]
) -> list[Curve]:
    """The curves of stored runs, or the one curve of a CSV file (the store opened only for
    runs)."""
    curve.check_metric(opts.metric)
    if bool(run_ids) == (csv is not None):
        raise UserError("give RUN_ID ... or --csv FILE (not both)")
    if csv is not None:
        _refuse_unread(opts, False, "--csv was given")
        if opts.y is None:
            raise UserError("--csv needs converge.y, the column of the metric", "e.g. --y metric")
        return [curve.from_csv(csv, opts.x, opts.y)]
    _refuse_unread(opts, True, "stored runs were given")
    store = open_store()
    return [curve.from_run(store, i, opts.metric, opts.key) for i in run_ids]


def _refuse_unread(opts: CurveOptions, runs: bool, given: str) -> None:
    """Refuse the curve options that sources of one kind, stored runs (`runs`) or CSV files,
    do not read, `given` saying how they came: converge.key is a stored run's metric, x and y
    a CSV file's columns. Each was ignored without a word, and another curve fitted than the
    one named (val/loss by step, or the CSV's column)."""
    if not runs:
        if opts.key is not None:
            raise UserError(
                f"converge.key (--key) names a stored run's metric, and {given}",
                f"a CSV file's metric is its column, converge.y, e.g. --y {opts.y or 'metric'}",
            )
        return
    for column in ("y", "x"):
        if getattr(opts, column) is not None:
            raise UserError(
                f"converge.{column} (--{column}) names a CSV column, and {given}",
                "a stored run's metric is converge.key, e.g. --key train/loss",
            )


def _untrusted(label: str, form: str, fit: CurveFit) -> list[str]:
    if fit.converged:
        return []
    return [f"{label}: the {form} fit {fit.message}; showing the best attempt"]


@dataclass
class CurveFits:
    reports: list[FitReport]
    warnings: list[str]  # one per fit not to be trusted (the best attempt is shown)
    # `predict`: one per curve
    predictions: list[StepPrediction | EnsembleStepPrediction] = field(default_factory=list)
    # `predict --form ensemble`: each curve's posterior and predicted step, for `band_rows`
    posteriors: list[tuple[ensemble.Posterior, float | None]] = field(default_factory=list)


def fit(
    run_ids: list[int],
    csv: Path | None,
    opts: CurveOptions,
    open_store: Callable[[], RunStore],
    reporter: Reporter | None = None,
) -> CurveFits:
    """Both forms fitted to each curve's window (see `load_curves`) with bootstrap intervals
    and compared on later points."""
    curves = load_curves(run_ids, csv, opts, open_store)
    fits = _fitted(curves, opts, reporter)
    fits.warnings[:0] = [n for c in curves for n in c.notes]
    return fits


def _fitted(
    curves: list[Curve], opts: CurveOptions, reporter: Reporter | None, intervals: bool = True
) -> CurveFits:
    """`fit` of curves already read; without the fits' bootstrap `intervals` where nothing
    reads them (`predict`'s ensemble)."""
    reporter = reporter or NullReporter()
    reporter.task("fitting", total=len(curves))
    reports = []
    for c in curves:
        reports.append(fit_one(c, opts, intervals=intervals))
        if reports[-1].note:  # a window of more than curve.MAX_POINTS points, binned
            reporter.log(f"note: {reports[-1].note}")
        reporter.advance()
    warnings = [
        w for r in reports for form, f in r.fits.items() for w in _untrusted(r.curve.label, form, f)
    ]
    return CurveFits(reports, warnings)


def fit_one(c: Curve, opts: CurveOptions, api: bool = False, intervals: bool = True) -> FitReport:
    """One curve as `converge fit` fits it (and `dlperf.fit_curve`, `api`: its lines name its
    arguments, not the command's flags): both forms on the window `opts.upto` /
    `opts.upto_step` picks (`curve.fit_window`), the metric's values checked; without their
    bootstrap `intervals` (no samples, no ci) where the caller reads neither."""
    n_fit = curve.fit_window(c, opts.upto, opts.upto_step, api)
    if not intervals:
        return curve.analyse(c, opts.metric, n_fit, n_boot=0)
    return curve.analyse(c, opts.metric, n_fit)


def fit_result(r: FitReport) -> CurveFitResult:
    """A report as `converge fit --json` prints it: the Optimus fit at the top level (what
    `converge plan --curve` reads), the power law under `power`."""
    optimus, power = r.fits["optimus"], r.fits["power"]
    return CurveFitResult(
        source=r.curve.label,
        configuration=r.curve.about,
        metric=r.metric,
        key=r.curve.key,
        form="optimus",
        **optimus.params,
        ci=r.ci["optimus"],
        rmse=optimus.rmse,
        n_points=optimus.n_points,
        last_step=optimus.last_step,
        steps_per_epoch=r.curve.steps_per_epoch,
        converged=optimus.converged,
        power=PowerFit(
            **power.params, ci=r.ci["power"], rmse=power.rmse, converged=power.converged
        ),
        heldout=r.heldout,
    )


def beta_table(reports: list[FitReport]) -> list[dict[str, Any]]:
    """One row per curve, as `converge fit` tabulates several: the run, its configuration, the
    Optimus β with their 90% intervals, and the fit's error (rmse on the window, and on the
    later points when there are any)."""
    rows = []
    for r in reports:
        about = r.curve.about
        row: dict[str, Any] = {
            "source": r.curve.label,
            **{k: about.get(k) for k in ("model", "depth", "device")},
        }
        for name, value in r.fits["optimus"].params.items():
            low, high = r.ci["optimus"][name]
            row |= {name: value, f"{name}_5%": low, f"{name}_95%": high}
        row |= {
            "rmse": r.fits["optimus"].rmse,
            "heldout_rmse": r.heldout.get("optimus_rmse"),
            "n_points": r.n_fit,
        }
        rows.append(row)
    return rows


@contextmanager
def _table_file(path: Path) -> Iterator[Path]:
    """Where `write_table` writes: a temporary file that becomes `path` once whole
    (`paths.replaced`); `path` itself when it is a device, a FIFO or a socket (/dev/stdout, a
    pipe), which holds no earlier table to keep and which a rename would put a regular file in
    place of. Through a link to the file: the rename replaces the file, and the link stays."""
    if not_regular(path) not in (None, "a directory"):
        with writing(path):  # a device's refused write (/dev/full) names no file of its own
            yield path
        return
    with writing(path), replaced(Path(os.path.realpath(path))) as tmp:
        yield tmp


def write_table(path: Path, rows: list[dict[str, Any]]) -> None:
    """`beta_table`'s rows as a CSV file (empty cells where a value is unknown), written
    beside `path` and renamed over it once whole: a write that fails partway (a file size
    limit, a full disk) or a stop leaves the earlier file whole, not cut off. Into a pipe
    (/dev/stdout) the whole text is one spared write, as `console.print_json`'s: written row
    by row, a stop signal while its reader lagged left a row cut in two."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows([{k: spreadsheet_safe(v) for k, v in row.items()} for row in rows])
    # spared once open: a FIFO's open waits for its reader, and is no write to keep whole. An
    # OSError names `path` (`_table_file`), told as every refused write is: a file size limit
    # or a full disk exit 1 with its hint, not 2 as a mistake of the user's ("cannot write
    # t.csv: File too large", exit 2, before round 47). UTF-8 whatever the locale, as every
    # reader of it (`tables.read_text`) takes it: a C locale's ASCII made a run's non-ASCII
    # model name a traceback, and a Latin-1 locale a table dlperf's reader refused.
    with (
        _table_file(path) as target,
        open(target, "w", newline="", encoding="utf-8") as f,
        stopping.spared(),
    ):
        f.write(text.getvalue())
        f.flush()


def predict(
    run_ids: list[int],
    csv: Path | None,
    opts: CurveOptions,
    open_store: Callable[[], RunStore],
    target: float | None,
    form: str = "ensemble",
    reporter: Reporter | None = None,
) -> CurveFits:
    """The step at which each curve's `form` fit reaches `target` (in the metric's units),
    with a 90% interval, and its error against the measured curve when that goes on beyond
    the fit window. `form` "ensemble" gives the distribution of that step (see
    `dlperf.converge.ensemble`)."""
    if target is None:
        raise UserError("give converge.target, the value to reach", "e.g. --target 0.94")
    if form not in FORMS:
        raise UserError(f"converge.form: unknown form '{form}'", f"choose {', '.join(FORMS)}")
    curve.check_metric(opts.metric)
    curve.check_target(target, opts.metric)
    curves = load_curves(run_ids, csv, opts, open_store)
    # A curve with nothing to fit (at zero error from its first points) is answered from its
    # measured points; the others are fitted (only they have reports, figures, posteriors).
    answers = [measured_answer(c, opts, target, form) for c in curves]
    # The ensemble's answer is its own posterior's: the two forms' 2 x 200 bootstrap refits
    # (over 90% of the command's time) would be read by nothing
    fits = _fitted(
        [c for c, a in zip(curves, answers, strict=True) if a is None],
        opts,
        reporter,
        intervals=form != "ensemble",
    )
    fits.warnings[:0] = [n for c in curves for n in c.notes]
    reports = iter(fits.reports)
    for answer in answers:
        if answer is not None:
            fits.predictions.append(answer)
            continue
        r = next(reports)
        if form == "ensemble":
            prediction, post = ensemble_prediction(r, target)
            fits.predictions.append(prediction)
            fits.posteriors.append((post, prediction.predicted_step))
            continue
        c = r.curve
        fitted = r.fits[form]
        p = curve.predict(
            form,
            r.params[form],
            r.samples[form],
            target,
            opts.metric,
            c.steps,
            c.values,
            first=fitted.first_step,
        )
        asymptote = fitted.params[curve.PARAMS[form][2]]
        fits.predictions.append(
            StepPrediction(
                source=c.label,
                form=form,
                target=p.target,
                reachable=p.reachable,
                **_steps(p, c.steps_per_epoch),
                asymptote=asymptote,
                plateau=float(curve.to_decreasing(asymptote, r.metric)),
                n_points=r.n_fit,
                basis=f"{form} least squares (points weighted 1, 4, 16 by thirds) on "
                f"{r.n_fit} points up to step {fitted.last_step:g}; 90% interval from "
                f"{len(r.samples[form])} residual-bootstrap refits",
                at_first_step=p.at_first_step,
            )
        )
    return fits


def measured_answer(
    c: Curve, opts: CurveOptions, target: float, form: str
) -> StepPrediction | EnsembleStepPrediction | None:
    """`predict`'s answer for a curve whose fit window has nothing to fit (fewer than 2
    points above zero error, `curve.nothing_to_fit`): the first measured step at or past
    `target`, at the first step for a curve there from its start (converge.md's
    `at_first_step`), never a refusal. A window of at least 4 points with at most one above
    zero error passes every target by its second point. None: a curve to fit."""
    n_fit = curve.fit_window(c, opts.upto, opts.upto_step)
    unfit = curve.nothing_to_fit(c, opts.metric, n_fit)
    if unfit is None:
        return None
    goal = float(curve.to_decreasing(np.array(target), opts.metric))
    y = curve.to_decreasing(c.values[:n_fit], opts.metric)
    i = int(np.flatnonzero(y <= goal)[0])
    whole = curve.whole_steps(c.steps)
    step = curve.reported_step(float(c.steps[i]), whole)
    # Seen to pass the target between the point before and this one; at the first, there.
    low = curve.whole_step(float(c.steps[i - 1]), whole) if i else step
    actual = curve.first_reaching(c.steps, c.values, opts.metric, goal)
    p = curve.Prediction(
        target, True, step, (low, step), actual, curve.error_pct(step, actual), i == 0
    )
    level = float(curve.to_decreasing(0.0, opts.metric))  # the value the curve stays at
    zeros = int(np.sum(y <= 0))
    basis = (
        f"{MEASURED_BASIS}: {zeros} of its {n_fit} points up to step "
        f"{float(c.steps[n_fit - 1]):g} are at {opts.metric} {level:g}, nothing to fit; the "
        "step is the first measured at or past the target"
    )
    if form == "ensemble":
        return EnsembleStepPrediction(
            source=c.label,
            form=form,
            target=target,
            verdict="answer",
            reason=None,
            reachable=True,
            p_reachable=1.0,
            **_steps(p, c.steps_per_epoch),
            asymptote=0.0,
            plateau=level,
            plateau_interval=(level, level),
            val_size=ensemble.val_size(c.values[:n_fit]) if opts.metric != "loss" else None,
            family_weights={},
            n_points=n_fit,
            basis=basis,
            at_first_step=p.at_first_step,
        )
    return StepPrediction(
        source=c.label,
        form=form,
        target=target,
        reachable=True,
        **_steps(p, c.steps_per_epoch),
        asymptote=0.0,
        plateau=level,
        n_points=n_fit,
        basis=basis,
        at_first_step=p.at_first_step,
    )


def _steps(p: curve.Prediction | ensemble.EnsemblePrediction, spe: float | None) -> dict[str, Any]:
    """A prediction's step, its interval and epoch, and the measured step it is checked on."""
    return {
        "predicted_step": p.predicted_step,
        # An upper end not bounded is null: JSON has no infinity.
        "interval": tuple(v if math.isfinite(v) else None for v in p.interval)
        if p.interval
        else None,
        "predicted_epoch": p.predicted_step / spe if spe and p.predicted_step is not None else None,
        "actual_step": p.actual_step,
        "error_pct": p.error_pct,
    }


def band_rows(
    fits: CurveFits, metric: str
) -> list[tuple[str, np.ndarray, np.ndarray, int, tuple[np.ndarray, ...]]]:
    """What the figure of `predict --form ensemble` draws of each curve: label, steps, values,
    points in the window, and (grid, 5th, 50th, 95th percentile) in the metric's units, the
    band out to its last measured point or a little past the predicted step, whichever is
    later."""
    rows: list[tuple[str, np.ndarray, np.ndarray, int, tuple[np.ndarray, ...]]] = []
    for r, (post, predicted) in zip(fits.reports, fits.posteriors, strict=True):
        c = r.curve
        end = max(float(c.steps.max()), 1.2 * (predicted or 0))
        grid = np.linspace(c.steps.min(), end, 200)
        lo, mid, hi = (curve.to_decreasing(b, metric) for b in ensemble.band(post, grid))
        rows.append((c.label, c.steps, c.values, r.n_fit, (grid, lo, mid, hi)))
    return rows


def ensemble_prediction(
    r: FitReport, target: float
) -> tuple[EnsembleStepPrediction, ensemble.Posterior]:
    """`predict --form ensemble --json` for one curve: the step's distribution (median, 90%
    interval, P(reachable)) or why there is none (verdict "cannot tell" and its reason), the
    plateau's, and what they rest on; and the posterior."""
    c = r.curve
    y = curve.to_decreasing(c.values, r.metric)
    post = ensemble.fit(c.steps[: r.n_fit], y[: r.n_fit])
    # Accuracy and error are counts over a validation set, read from the values' steps.
    val_size = ensemble.val_size(c.values[: r.n_fit]) if r.metric != "loss" else None
    p = ensemble.predict(post, target, r.metric, c.steps, c.values, val_size=val_size)
    return EnsembleStepPrediction(
        source=c.label,
        form="ensemble",
        target=p.target,
        verdict=p.verdict,
        reason=p.reason,
        reachable=p.reachable,
        p_reachable=p.p_reachable,
        **_steps(p, c.steps_per_epoch),
        asymptote=float(curve.to_decreasing(p.plateau, r.metric)),
        plateau=p.plateau,
        plateau_interval=p.plateau_interval,
        val_size=val_size,
        family_weights=p.family_weight,
        n_points=r.n_fit,
        basis=ensemble.basis(post),
        at_first_step=p.at_first_step,
    ), post


def regress_sources(
    sources: list[str], features: list[str], opts: CurveOptions, open_store: Callable[[], RunStore]
) -> list[tuple[Curve, dict[str, Any]]]:
    """Each source's curve and features: a run ID (features read from the run), or
    PATH.csv:feature=value,... (`split_source`). A source given twice (the same run, or the
    same file, however spelled and whatever features it is given: its y column is every
    source's) is refused: it would count one curve twice in the regression. Each curve's
    values are checked as `converge fit` checks them (`curve.check_values`)."""
    store = None
    found = []
    seen: dict[tuple[Any, ...], str] = {}
    for source in sources:
        if source.isdigit():
            store = store or open_store()
            run = store.get_run(int(source))
            _once(seen, source)
            c = curve.from_run(store, int(source), opts.metric, opts.key)
            curve.check_values(c, opts.metric)
            found.append((c, reg.run_features(run, features)))
            continue
        path, given = split_source(source)
        if opts.y is None:
            raise UserError(
                "CSV sources need converge.y, the column of the metric", "e.g. --y metric"
            )
        example = f"{path}:{features[0]}=20"
        values = parse_pairs(given, "a CSV source", example) if given else {}
        # Read before its features are checked: a missing file is named as missing.
        c = curve.from_csv(Path(path), opts.x, opts.y)
        # As `converge fit` checks it (`curve.analyse`): accuracy in percent is told to divide
        # by 100, not blamed on the metric by the fit ("loss/error values must be ≥ 0").
        curve.check_values(c, opts.metric)
        missing = [f for f in features if f not in values]
        if missing:
            raise UserError(f"{path} has no {', '.join(missing)}", f"e.g. {example}")
        _once(seen, source)
        found.append((c, values))
    return found


def split_source(source: str) -> tuple[str, str]:
    """A CSV source PATH:feature=value,... as (PATH, its features' text). Split at the last ':'
    whose left side is an existing file, so a path holding ':' (a timestamped log, 12:30.csv)
    is read whole and a feature's value may hold one; when no such file exists, at the last
    ':' followed by NAME=VALUE text (the path is then refused as missing, by its name). A
    leading ~ is the home folder, as in every other path: quoted, the shell left it."""
    colons = [i for i, ch in enumerate(source) if ch == ":"]
    for i in reversed(colons):
        if Path(path := os.path.expanduser(source[:i])).is_file():
            return path, source[i + 1 :]
    whole = os.path.expanduser(source)
    if colons and not Path(whole).is_file() and "=" in source[colons[-1] :]:
        return os.path.expanduser(source[: colons[-1]]), source[colons[-1] + 1 :]
    return whole, ""


def _curve_of(source: str) -> tuple[str, Any]:
    """What curve `source` reads, whatever features it is given: a run, or a file."""
    if source.isdigit():
        return ("run", int(source))
    return ("csv", Path(split_source(source)[0]).resolve())


def _held_out(compare: str, sources: list[str]) -> None:
    """Refuse a --compare curve that is also a source: the prediction was fitted to it, and
    its error on it, reported as a held-out check, was an in-sample one (7e-09 %)."""
    curve_read = _curve_of(compare)
    for source in sources:
        if _curve_of(source) == curve_read:
            said = compare if source == compare else f"{compare} (as {source})"
            raise UserError(
                f"{said} is both a source and --compare",
                "leave it out of the sources to measure the prediction on it",
            )


def _once(seen: dict[tuple[Any, ...], str], source: str) -> None:
    """Note the curve `source` reads; a UserError naming both when an earlier source read it."""
    key = _curve_of(source)
    if key in seen:
        raise UserError(
            f"{source} is {seen[key]} again",
            "give each curve once: one given twice counts twice in the regression, whatever "
            "features it is given",
        )
    seen[key] = source


@dataclass
class RegressedRun:
    """One source of a regression as its figure shows it: the points its β were fitted to,
    and the curve its features predict over the same steps."""

    label: str
    features: dict[str, Any]
    steps: np.ndarray  # the fit window's
    values: np.ndarray  # measured, in the metric's units
    grid: np.ndarray  # from the window's first step to its last
    predicted: np.ndarray  # on `grid`, in the metric's units


@dataclass
class Regressed:
    result: Regression
    warnings: list[str]  # one per source whose fit is not to be trusted, one per dropped feature
    runs: list[RegressedRun]
    # --predict's curve over the runs' windows (and the compared run's steps)
    unseen: tuple[np.ndarray, np.ndarray] | None
    compared: Curve | None = None  # the measured run of the predicted configuration


def _compare(c: Curve, betas: np.ndarray, metric: str, prediction: RegressPrediction) -> Comparison:
    """The predicted curve against the measured curve `c` of the same configuration: its
    error over all of `c`'s points, and, with a target, the error of the step (and epoch)
    reaching it."""
    predicted = curve.to_decreasing(curve.model("optimus")(c.steps, betas), metric)
    gap = predicted - c.values
    nonzero = c.values != 0  # a relative error at a measured 0 (accuracy, epoch 1) is none
    relative = np.abs(gap[nonzero]) / np.abs(c.values[nonzero])
    compared = Comparison(
        source=c.label,
        legend=c.legend,
        n_points=len(c.steps),
        curve_rmse=float(np.sqrt(np.mean(gap**2))),
        curve_error_pct=float(np.mean(relative) * 100) if len(relative) else None,
    )
    if prediction.target is None:
        return compared
    goal = curve.to_decreasing(prediction.target, metric)
    actual = curve.first_reaching(c.steps, c.values, metric, goal)
    step, spe = prediction.predicted_step, c.steps_per_epoch
    return replace(
        compared,
        target=prediction.target,
        actual_step=actual,
        actual_epoch=actual / spe if actual is not None and spe else None,
        predicted_epoch=step / spe if step is not None and spe else None,
        # The same for epochs: both counts are over this run's steps per epoch.
        error_pct=curve.error_pct(step, actual),
    )


def _prediction(
    found: list[tuple[Curve, dict[str, Any]]],
    predicted: np.ndarray,
    at: dict[str, str],
    metric: str,
    target: float | None,
    basis: str,
) -> RegressPrediction:
    """The unseen configuration's coefficients, its curve over the runs' steps, and the step
    (and epoch) reaching `target`; with the measured step of a source that has exactly these
    features, when there is one (then the configuration was not unseen: an in-sample check)."""
    last = max(float(c.steps.max()) for c, _ in found)
    steps = np.linspace(last / 50, last, 50)
    values = curve.to_decreasing(curve.model("optimus")(steps, predicted), metric)
    beta0, beta1, beta2 = map(float, predicted)
    prediction = RegressPrediction(
        features=at,
        beta0=beta0,
        beta1=beta1,
        beta2=beta2,
        curve=tuple((float(k), float(v)) for k, v in zip(steps, values, strict=True)),
        basis=basis,
    )
    if target is None:
        return prediction
    goal = curve.to_decreasing(target, metric)
    # Not before the runs' first step: a curve there already reaches the target at it.
    first = min(float(c.steps.min()) for c, _ in found)
    reach = float(curve.steps_to("optimus", predicted, goal, first)[0])
    whole = all(curve.whole_steps(c.steps) for c, _ in found)  # else fractional, as fit's
    step = curve.reported_step(reach, whole) if math.isfinite(reach) else None
    # The epoch only when every source counts the same steps per epoch.
    per_epoch = {c.steps_per_epoch for c, _ in found}
    spe = per_epoch.pop() if len(per_epoch) == 1 else None
    same = [c for c, features in found if {k: str(v) for k, v in features.items()} == at]
    reached = (curve.first_reaching(c.steps, c.values, metric, goal) for c in same)
    actual = next((step for step in reached if step is not None), None)
    return replace(
        prediction,
        target=target,
        predicted_step=step,
        predicted_epoch=step / spe if step is not None and spe else None,
        actual_step=actual,
        error_pct=curve.error_pct(step, actual),
        at_first_step=reach <= first,
    )


def regress(
    sources: list[str],
    features: list[str],
    opts: CurveOptions,
    open_store: Callable[[], RunStore],
    at: dict[str, str] | None = None,
    target: float | None = None,
    compare: str | None = None,
) -> Regressed:
    """Fit β0, β1, β2 of each source (see `regress_sources`), regress log β on `features`,
    and predict the curve of the configuration `at` (and the step reaching `target`); with
    `compare`, a source of that configuration left out of the regression, the error of the
    predicted curve against it. The curves of the figure stay on the steps the fits (and the
    compared run) saw: the model is not to be read outside them (before the first point
    1/(β0·k + β1) climbs towards 1/β1)."""
    if not features:
        raise UserError("--features needs at least one name", "e.g. --features depth")
    curve.check_metric(opts.metric)
    if target is not None:
        if at is None:
            raise UserError("converge.target needs --predict (the configuration to predict)")
        curve.check_target(target, opts.metric)
    if compare is not None and at is None:
        raise UserError("--compare needs --predict (the configuration of the compared run)")
    if compare is not None:
        _held_out(compare, sources)
    kinds = {source.isdigit() for source in [*sources, *([compare] if compare else [])]}
    if len(kinds) == 1:  # runs and CSV files together read both kinds of options
        of_runs = kinds.pop()
        only = "stored runs" if of_runs else "CSV sources"
        _refuse_unread(opts, of_runs, f"only {only} were given")
    found = regress_sources(sources, features, opts, open_store)
    warnings = [n for c, _ in found for n in c.notes]  # as fit and predict say them
    betas, windows = [], []
    for c, _ in found:
        n_fit = curve.fit_window(c, opts.upto, opts.upto_step)
        unfit = curve.nothing_to_fit(c, opts.metric, n_fit)
        if unfit is not None:
            raise unfit
        fitted, params = curve.fit(
            c.steps[:n_fit], curve.to_decreasing(c.values, opts.metric)[:n_fit]
        )
        warnings += _untrusted(c.label, "optimus", fitted)
        betas.append(params)
        windows.append(n_fit)
    result = reg.fit([f for _, f in found], np.array(betas), features)
    warnings += [
        f"{f} has one value in every run ({value}): left out of the regression"
        for f, value in result.dropped.items()
    ]
    regression = Regression(
        features=tuple(features),
        metric=opts.metric,
        dropped_features=result.dropped,
        columns=tuple(result.columns),
        coef=result.coef,
        rmse_log=result.rmse_log,
        runs=tuple(
            {"source": c.label, **f, **dict(zip(reg.BETAS, map(float, p), strict=True))}
            for (c, f), p in zip(found, betas, strict=True)
        ),
    )
    predicted_betas, prediction = None, None
    if at is not None:
        predicted_betas = reg.predict(result, at)
        basis = (
            f"log β0, log β1, log β2 linear in {', '.join(result.features) or 'no feature'} "
            f"over {len(found)} runs' "
            "Optimus fits (in-sample rmse of log β "
            + ", ".join(f"{result.rmse_log[b]:.2g}" for b in reg.BETAS)
            + ")"
        )
        prediction = _prediction(found, predicted_betas, at, opts.metric, target, basis)
    compared = None
    if compare is not None and prediction is not None and predicted_betas is not None:
        ((compared, its),) = regress_sources([compare], features, opts, open_store)
        warnings += [
            f"--compare {compare} has {k}={v}, not the predicted {k}={prediction.features[k]}"
            for k, v in its.items()
            if k in prediction.features and reg.differs(v, prediction.features[k])
        ]
        compared_with = _compare(compared, predicted_betas, opts.metric, prediction)
        prediction = replace(prediction, compare=compared_with)
    optimus = curve.model("optimus")
    runs = []
    for (c, f), n_fit in zip(found, windows, strict=True):
        grid = np.linspace(c.steps[0], c.steps[n_fit - 1], 200)
        predicted = curve.to_decreasing(optimus(grid, reg.predict(result, f)), opts.metric)
        # Named by its configuration when a run gives it, else by its features and file.
        given = ", ".join(f"{k}={v}" for k, v in f.items())
        legend = c.legend if c.about.get("model") else f"{given} ({c.label})"
        runs.append(RegressedRun(legend, f, c.steps[:n_fit], c.values[:n_fit], grid, predicted))
    unseen = None
    if predicted_betas is not None:
        first = min(r.grid[0] for r in runs)
        last = max(r.grid[-1] for r in runs)
        if compared is not None:
            first, last = min(first, compared.steps[0]), max(last, compared.steps[-1])
        grid = np.linspace(first, last, 200)
        unseen = grid, curve.to_decreasing(optimus(grid, predicted_betas), opts.metric)
    return Regressed(replace(regression, prediction=prediction), warnings, runs, unseen, compared)
