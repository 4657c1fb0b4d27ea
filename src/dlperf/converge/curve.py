"""Loss-curve models and the step at which a curve reaches a target.

Optimus (Peng et al., EuroSys 2018, §3.1) models the training loss after k steps as
    l(k) = 1 / (β0·k + β1) + β2,    β0, β1, β2 ≥ 0,
so β2 is the loss the job converges to. The fit is made robust in two stages: a grid over β2
below min(l), where 1/(l − β2) = β0·k + β1 is linear and NNLS gives (β0, β1); then weighted
nonlinear least squares from the best grid point, weighting the last third of the points 16×
and the middle third 4× (as the Optimus code does), because the near future depends most on
the recent past. A power law l(k) = a·k^−b + c is fitted the same way as the alternative.
A window of more than MAX_POINTS points is fitted as that many bins (`thinned`), so that a fit
and its bootstrap take the same time whatever the number of rows.

Accuracy curves are fitted as error = 1 − accuracy, so every curve here decreases.
"""

from __future__ import annotations

import datetime
import itertools
import math
import numbers
import reprlib
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import OptimizeResult, least_squares, nnls

from dlperf.converge.regress import configuration
from dlperf.converge.tables import numbers as column_numbers
from dlperf.converge.tables import read_table
from dlperf.errors import UserError
from dlperf.parsing import file_name_text, one_line, stored_as

if TYPE_CHECKING:
    from dlperf.store import RunStore

METRICS = ("loss", "accuracy", "error")
# The stored metric each kind reads by default (per epoch, step = epoch). The engine logs no
# error: it is derived as 1 − val/acc1.
RUN_KEYS = {"loss": "val/loss", "accuracy": "val/acc1", "error": "val/acc1"}
PARAMS = {"optimus": ("beta0", "beta1", "beta2"), "power": ("a", "b", "c")}
GRID = 200
# The largest value a curve may hold: its squares, weighted (≤ 16) and summed over a few
# thousand points, stay within float64's range (about 1.8e308).
LARGEST = 1e150
# The smallest a curve's largest value may be: the fits divide the values by about it
# (`value_scale`) and carry its reciprocal into β0 = β0'/(steps·scale), which overflowed
# near 1e-307 (1e-309's reciprocal is past a float: "Initial guess is outside of provided
# bounds", a traceback); and squares of values below it fall below what a float holds.
SMALLEST = 1.0 / LARGEST
# Values below TINY of a curve's largest are fitted as 0 (`in_units`). The fits' sums of squares
# cannot tell them from 0 (their squares lie below 1e-200 of the largest's, where float64
# rounds at 1e-16), but the Optimus grid inverts them, 1/(l − β2), and the power form's start
# takes the slope of their logarithms: at 1e-155 of the largest and below, the fits' numbers
# passed float64's range, a ValueError from scipy (break-it round 30, C6).
TINY = 1e-100
N_BOOT = 200
# The most points a least-squares fit sees: a window of more is fitted as this many bins
# (`thinned`). A fit is one least-squares problem per form and N_BOOT more for its bootstrap,
# each over every point it is given: a curve of 20,000 rows took 100 s, one of 10^6 rows
# did not finish in two minutes (break-it round 12, C5).
MAX_POINTS = 1000
# The fewest points a fit takes: three parameters, and one point more to tell them apart.
FEWEST = 4
# Where `_refine` moves a start's coefficients below it (in the fits' units, where they are
# about 1) for its second try at a refit scipy's trust region could not take.
INSIDE = 1e-6


@dataclass
class CurveFit:
    form: str  # "optimus" or "power"
    params: dict[str, float]
    rmse: float  # on the fitted points, in the metric's units
    n_points: int
    first_step: float  # the first step of the fit window
    last_step: float  # the last step of the fit window
    converged: bool  # False: do not trust the coefficients; `message` says why
    message: str  # when not converged, ends "the fit ...": "did not converge (...)"
    # the bins least squares saw (`thinned`) when the n_points were more than MAX_POINTS
    binned: int | None = None


@dataclass
class Prediction:
    target: float  # in the metric's units (accuracy stays accuracy)
    reachable: bool
    predicted_step: float | None  # an int on an axis of whole steps (`whole_steps`)
    interval: tuple[float, float] | None  # 90% bootstrap interval; inf when some never reach
    actual_step: float | None  # first measured step at or past the target, when known
    error_pct: float | None  # (predicted − actual) / actual · 100
    at_first_step: bool  # the curve is at or past the target at the first step already


def to_decreasing(values: Any, metric: str) -> Any:
    """Accuracy becomes error = 1 − accuracy (and back: the map is its own inverse); loss and
    error stay as they are. Works on floats and arrays alike."""
    return 1.0 - values if metric == "accuracy" else values


def check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise UserError(
            f"converge.metric: unknown metric '{metric}'", f"choose one of {', '.join(METRICS)}"
        )


def check_number(value: Any, what: str) -> float:
    """`value` as a float; a UserError naming `what` for anything but a real number. The
    Python API's callers pass what they like: text or None failed deep inside as TypeError,
    and True was taken as 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UserError(f"{what} is a number, got {type(value).__name__} {reprlib.repr(value)}")
    return float(value)


def check_target(target: float, metric: str) -> None:
    """A target in `metric`'s units, for `metric` one of METRICS: ensemble.predict, called
    from Python, read an unknown metric ('acc') as loss and answered step 1."""
    check_metric(metric)
    check_number(target, "a target")
    if not math.isfinite(target):
        raise UserError(f"target {target} is not a finite number")
    if metric in ("accuracy", "error") and not 0.0 <= target <= 1.0:
        raise UserError(f"an {metric} target must lie in [0, 1], got {target}", "e.g. 0.94")
    if metric == "loss" and target < 0:
        raise UserError(f"a loss target must be ≥ 0, got {target}")


def weights(n: int) -> np.ndarray:
    """1 for the first third of the points, 4 for the middle third, 16 for the last third."""
    third = np.minimum(3 * np.arange(n) // max(n, 1), 2)
    return np.array([1.0, 4.0, 16.0])[third]


def model(form: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """l(k; θ) for a form, vectorised over k."""
    if form == "optimus":
        return lambda k, p: 1.0 / np.maximum(p[0] * k + p[1], 1e-300) + p[2]
    return lambda k, p: p[0] * np.power(k, -p[1]) + p[2]


def steps_to(form: str, p: Any, target: float, first: float = 0.0) -> np.ndarray:
    """Steps at which l(k) = target (decreasing units); inf when the target is at or below the
    asymptote; `first` when the curve is there by that step: a curve measured from step 1 (or
    from 40, on an epoch axis) is seen to reach a target only from there, never at step 0.
    `p` is (3,) or (n, 3)."""
    p = np.atleast_2d(np.asarray(p, float))
    gap = target - p[:, 2]
    # A crossing beyond float range (overflow) is inf: never, as far as the fit can tell.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if form == "optimus":
            # At or below the target from step 0 when 1/β1 + β2 ≤ target: a curve with β0 = 0
            # stays there, and one exactly at it was 0/0, nan, "never".
            rest = 1.0 / gap - p[:, 1]
            k = np.where(rest <= 0, 0.0, rest / p[:, 0])
        else:
            k = np.power(p[:, 0] / gap, 1.0 / p[:, 1])
    k = np.where(np.isnan(k), np.inf, k)
    return np.where(gap > 0, np.maximum(k, first), np.inf)


def _grid_start(form: str, k: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Best (weighted SSE) point of a grid over the asymptote, the rest solved linearly."""
    f = model(form)
    best, best_sse = None, math.inf
    for asym in np.linspace(0.0, y.min(), GRID, endpoint=False):
        # Points at the asymptote (a loss or an error of exactly 0) have no linear form;
        # they still count in the SSE and in the refinement.
        above = y > asym
        if above.sum() < 2:
            continue
        ka, ya = k[above], y[above]
        if form == "optimus":
            # 1/(l − β2) = β0·k + β1: non-negative least squares keeps β0, β1 ≥ 0.
            (b0, b1), _ = nnls(np.column_stack([ka, np.ones_like(ka)]), 1.0 / (ya - asym))
            p = np.array([b0, b1, asym])
        else:
            # log(l − c) = log a − b·log k: ordinary least squares, then b clipped to ≥ 0.
            slope, icept = np.polyfit(np.log(ka), np.log(ya - asym), 1)
            p = np.array([math.exp(icept), max(-slope, 0.0), asym])
        with np.errstate(over="ignore", invalid="ignore"):  # inf: no better than the best
            sse = float(np.sum(w * (f(k, p) - y) ** 2))
        if sse < best_sse:
            best, best_sse = p, sse
    if best is None and np.sum(y > 0) < 2:
        raise UserError("the curve has fewer than 2 points above 0: nothing to fit")
    if best is None:
        raise UserError("no curve of the form comes near the values: nothing to fit")
    return best


def _refine(
    form: str, k: np.ndarray, y: np.ndarray, w: np.ndarray, start: np.ndarray
) -> OptimizeResult:
    """Weighted least squares from `start`, every coefficient ≥ 0. scipy raises a ValueError
    ("`x` is not within the trust region") where rounding puts a step a hair past its trust
    region's edge: 9 of the 200 bootstrap refits of a rising curve, started from its flat power
    fit next to the bounds (a, b ~ 1e-10), did, a traceback (break-it round 56, C1). Such a
    refit is tried again from the start moved inside the bounds (`INSIDE`); one that fails
    again is a result that did not succeed, its x the start and `failed` set: `fit` reports it
    as not converged, `bootstrap` leaves it out."""
    try:
        return _least_squares(form, k, y, w, start)
    except ValueError:
        pass
    try:
        return _least_squares(form, k, y, w, np.maximum(start, INSIDE))
    except ValueError as e:
        return OptimizeResult(
            x=np.array(start, float), success=False, failed=True, message=f"least squares: {e}"
        )


def _least_squares(
    form: str, k: np.ndarray, y: np.ndarray, w: np.ndarray, start: np.ndarray
) -> OptimizeResult:
    f = model(form)
    sw = np.sqrt(w)
    # scipy's trust region multiplies squares of the residuals: of values near LARGEST they
    # overflow to inf, which it handles by shrinking its step (no warning is the user's).
    with np.errstate(over="ignore", invalid="ignore"):
        return least_squares(
            lambda p: sw * (f(k, p) - y), start, bounds=(0.0, np.inf), x_scale="jac", method="trf"
        )


def _scaled(form: str, p: np.ndarray, scale: float, level: float = 1.0) -> np.ndarray:
    """Parameters for y(k) from parameters for y(k) / level against k / scale (fits run on
    both scaled to ~1); `_scaled(form, p, 1 / scale, 1 / level)` goes back."""
    if form == "optimus":
        return np.array([p[0] / (scale * level), p[1] / level, p[2] * level])
    # A refit of a rising curve can be a step (b ~ 1e7): a = a'·scale^b passes what a float
    # holds, inf (nan for a' = 0), which `bootstrap` leaves out; NumPy's warning is no one's.
    with np.errstate(over="ignore", invalid="ignore"):
        return np.array([p[0] * level * scale ** p[1], p[1], p[2] * level])


def step_scale(form: str, k: np.ndarray) -> float:
    """What a fit divides the steps by: the last step for Optimus, the first for the power
    form, whose a is then about the curve's first value. Against the last step a steep curve
    (k^-150 over 30 steps) put a at 1e-222, which least squares lifted to its floor of 1e-10,
    and the squares of the Jacobian (30^150 · 1e-10) overflowed: a ValueError from scipy
    (break-it round 30, C6)."""
    return float(k.min()) if form == "power" else float(k.max())


def value_scale(y: np.ndarray) -> float:
    """What the values are divided by before a fit: the power of two nearest the largest (1
    when all are 0). Least squares' bounds are absolute (it moves a start on β2 = 0 to 1e-10),
    so values of 1e-11 fitted unscaled got β2 = 1e-10, above every one of them (break-it
    round 14, C1); scaled, the fit of c·y is c times the fit of y. A power of two divides
    without rounding: curves whose largest value lies within [0.71, 1.41) are fitted bit for
    bit as before, and 2^j·y gets exactly 2^j times the fit of y. A largest value above 0 but
    below SMALLEST is refused in one line."""
    top = float(np.max(y))
    if 0.0 < top < SMALLEST:
        # Here rather than in `_check_points`: the ensemble's fit scales by it too.
        exponent = -math.floor(math.log10(top))
        raise UserError(
            f"the curve's values reach only {top:.2g}; a fit divides by their scale and squares "
            "them, past what a float holds",
            f"scale the column, e.g. multiply it by 1e{exponent}",
        )
    return 2.0 ** round(math.log2(top)) if top > 0.0 else 1.0


def in_units(y: np.ndarray, level: float) -> np.ndarray:
    """The values a fit works on: `y` / `level` (`value_scale`), those below TINY of the
    largest as 0."""
    return np.where(y < float(np.max(y)) * TINY, 0.0, y / level)


def _check_points(k: np.ndarray, y: np.ndarray, c: Curve | None = None) -> None:
    """Refuse points no fit can take; a value too large is named by its line (or point) of
    `c` when the curve is known."""
    if len(k) < FEWEST:
        raise UserError(
            f"{len(k)} points are too few to fit a 3-parameter curve", f"need ≥ {FEWEST}"
        )
    if not (np.all(np.isfinite(k)) and np.all(np.isfinite(y))):
        raise UserError("the curve has non-finite values")
    if np.any(k <= 0):
        raise UserError(f"steps must be positive, got {float(k.min()):g}", _count_from_1(k.min()))
    if np.any(y < 0):
        raise UserError("loss/error values must be ≥ 0 (is the metric right?)")
    top = float(np.max(y))
    if top > LARGEST:
        # The fit's sums of weighted squares would overflow a float: every grid point's error
        # reads inf and nothing is ever better than another. Dividing the column helps only
        # when another value stays within TINY of the largest: the rest, divided, are fitted
        # as 0 (`in_units`), and the fit that "divide it by 1e308" led to had one point.
        where = f"{named(c)}: {_at(c, int(np.argmax(y)))}: " if c is not None else ""
        fix = (
            f"scale the column, e.g. divide it by 1e{math.floor(math.log10(top))}"
            if np.sum(y >= top * TINY) >= 2
            else "every other value is below 1e-100 of it, which a fit reads as 0: a typo? "
            "correct it, or leave it out"
        )
        raise UserError(
            f"{where}the curve's values reach {top:.3g}; a fit squares them, past what a float "
            "holds",
            fix,
        )


def _count_from_1(step: float) -> str:
    """The fix for a step ≤ 0: a step 0 is most often steps counted from 0."""
    return "the first step is 1, not 0" if step == 0 else "steps count from 1"


def as_points(steps: Any, values: Any) -> tuple[np.ndarray, np.ndarray]:
    """A curve's steps and values as flat float arrays of one length, as dlperf.fit_curve and
    ensemble.fit take them from Python; a UserError for anything else, which failed as NumPy's
    ValueError (text) or a broadcast error (lengths that differ) from deep inside a fit."""
    k, y = flat_numbers(steps, "steps"), flat_numbers(values, "values")
    if len(k) != len(y):
        raise UserError(
            f"a curve's steps and values are of the same length, got {len(k)} and {len(y)}"
        )
    # Checked here, where the steps become floats: `check_increasing` sees only the floats.
    if (i := merged_steps(k, lambda j: _given_below(steps, j))) is not None:
        given = _given(steps)
        raise float64_merged(
            f"{given[i + 1]} (point {i + 2})", k[i + 1], f"{given[i]} (point {i + 1})"
        )
    return k, y


def _given(steps: Any) -> Any:
    """The steps as given, each exact (Python ints past 2**53, int64), indexed by position."""
    return steps if isinstance(steps, (list, tuple)) else np.asarray(steps)


def _given_below(steps: Any, i: int) -> bool:
    """Whether step `i` as given is below step `i` + 1, compared as given, not as floats."""
    given = _given(steps)
    try:
        return bool(given[i] < given[i + 1])
    except (TypeError, ValueError, IndexError):
        return False


def _boolean(given: Any) -> bool:
    """Whether `given` holds booleans: an array of them (NumPy's, a tensor, a pandas Series),
    or a list or tuple with one, which np.asarray reads as a number ([True, 2] as [1, 2])."""
    dtype = getattr(given, "dtype", None)
    if dtype is not None:
        return str(dtype) in ("bool", "torch.bool")
    return isinstance(given, (list, tuple)) and any(isinstance(v, (bool, np.bool_)) for v in given)


# What NumPy and pandas read as counts of their unit: datetime64 ("M") as nanoseconds (or
# days, ...) since 1970, timedelta64 ("m") as nanoseconds; and the scalars of dates and times.
TIME_KINDS = ("M", "m")
TIMES = (datetime.date, datetime.time, datetime.timedelta, np.datetime64, np.timedelta64)


def _times(given: Any) -> bool:
    """Whether `given` holds dates or times: an array of them (datetime64, timedelta64, a
    DatetimeIndex or a Series of them, tz-aware too), or a list, a tuple or an object array
    with one (pandas' Timestamp is a datetime)."""
    kind = getattr(getattr(given, "dtype", None), "kind", None)
    if kind in TIME_KINDS:
        return True
    if isinstance(given, (list, tuple)):
        return any(isinstance(v, TIMES) for v in given)
    return kind == "O" and any(isinstance(v, TIMES) for v in np.asarray(given, object).ravel())


def _shown(given: Any) -> str:
    """`given` in a one-line error: an array (a Series, an index) by its type and dtype, whose
    repr spans lines; a list or tuple by its shortened repr."""
    dtype = getattr(given, "dtype", None)
    if dtype is not None:
        return f"{type(given).__name__} of {dtype}"
    return f"{type(given).__name__} {one_line(reprlib.repr(given))}"


def flat_numbers(given: Any, what: str) -> np.ndarray:
    """`given`, a flat sequence of numbers, as a float array; a UserError naming `what`.
    Booleans are refused, as a bool step or metric is: a mask was fitted as 1s and 0s. So are
    dates and times: np.asarray reads datetime64 as nanoseconds since 1970 (1.58e18), and a
    fit on them was nonsense with NumPy's warnings, where Python datetimes were refused."""
    if _boolean(given):
        raise UserError(f"{what} are numbers, not booleans, got {reprlib.repr(given)}")
    if _times(given):
        fix = "give each point's step (1, 2, ...)" if what == "steps" else "give numbers"
        raise UserError(f"{what} are numbers, not dates or times, got {_shown(given)}", fix)
    try:
        array = np.asarray(given, float)
    except (TypeError, ValueError):
        raise UserError(
            f"{what} are numbers, got {type(given).__name__} {one_line(reprlib.repr(given))}"
        ) from None
    except OverflowError:  # a Python int past 1.8e308: a traceback from np.asarray
        raise UserError(
            f"{what} hold a number past what a float holds (about 1.8e308), got "
            f"{type(given).__name__} {one_line(reprlib.repr(given))}",
            "subtract the same number from every step, so that the first is 1"
            if what == "steps"
            else "scale the values",
        ) from None
    if array.ndim != 1:
        raise UserError(f"{what} are a flat sequence of numbers, got shape {array.shape}")
    return array


def check_increasing(steps: np.ndarray, what: str) -> None:
    """Steps that repeat or go back are refused, a CSV file's as dlperf.fit_curve's: steps all
    the same failed the fit in LAPACK (LinAlgError, with LAPACK's own lines on stderr), and
    steps that go back were fitted, to nonsense."""
    if np.any(np.diff(steps) <= 0):
        raise UserError(f"{what} must increase from row to row", "give each step once, in order")


def _check_csv_steps(
    path: Path, x: str, steps: np.ndarray, lines: list[int], texts: list[str]
) -> None:
    """`check_increasing` for a CSV's column `x`, naming the first row whose step does not
    follow the one before, and comparing the steps as written where their floats are equal:
    past 2**53 float64 cannot tell 9007199254740993 from 9007199254740992, and steps that do
    increase were blamed for their order. Such steps are still refused (the fit's arithmetic
    is float64's), with the fix that makes them fit."""
    bad = np.flatnonzero(np.diff(steps) <= 0)
    if not bad.size:
        return
    i = int(bad[0])
    before, after = (one_line(texts[j].strip()) for j in (i, i + 1))
    where = f"{path}:{lines[i + 1]}"
    if merged_steps(steps, lambda j: _exactly_below(texts[j], texts[j + 1])) == i:
        raise float64_merged(after, steps[i + 1], f"{before} on line {lines[i]}", where)
    raise UserError(
        f"{where}: column '{one_line(x)}' must increase from row to row: step {after} follows "
        f"step {before} on line {lines[i]}",
        "give each step once, in order",
    )


def merged_steps(steps: np.ndarray, below: Callable[[int], bool]) -> int | None:
    """The point whose step and the next's are the first pair of `steps` that does not
    increase, where float64 made them one number though they were given increasing (`below`
    compares points i and i + 1 as given); None otherwise. The one check of the CSV reader and
    of dlperf.fit_curve: past 2**53 float64 cannot tell 9007199254740993 from 9007199254740992,
    and steps given in order were blamed for their order, a fix that did nothing."""
    bad = np.flatnonzero(np.diff(steps) <= 0)
    if not bad.size:
        return None
    i = int(bad[0])
    return i if steps[i] == steps[i + 1] and below(i) else None


def float64_merged(after: str, read: float, before: str, where: str = "") -> UserError:
    """The error for `merged_steps`' pair: step `after` read as `read`, as `before` was."""
    return UserError(
        f"{where + ': ' if where else ''}step {after} reads as {read:.17g}, the same number as "
        f"step {before}: float64 cannot tell the steps apart",
        "subtract the same number from every step, so that the first is 1",
    )


def _exactly_below(first: str, second: str) -> bool:
    """Whether the number written `first` is below the one written `second`, compared as
    written (Decimal), not as float64 reads them."""
    try:
        return Decimal(first.strip()) < Decimal(second.strip())
    except InvalidOperation:
        return False


def thinned(k: np.ndarray, y: np.ndarray, most: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """At most `most` points of a curve, in the order of their steps: the first and the last
    as they are, and between them the median step and the median value of each of `most` − 2
    runs of consecutive points whose counts differ by at most one. Equal counts keep what the
    fit weighs: each bin stands for as many points, and the thirds of the bins (weighted 1, 4,
    16) are the thirds of the points. `k` and `y` themselves when they hold no more (`most`:
    MAX_POINTS by default)."""
    most = MAX_POINTS if most is None else most
    if len(k) <= most:
        return k, y
    order = np.argsort(k, kind="stable")
    k, y = k[order], y[order]
    bins = most - 2
    size, longer = divmod(len(k) - 2, bins)  # the first `longer` runs hold size + 1 points
    cut = 1 + longer * (size + 1)

    def medians(v: np.ndarray) -> np.ndarray:
        head = np.median(v[1:cut].reshape(longer, size + 1), axis=1)
        tail = np.median(v[cut:-1].reshape(bins - longer, size), axis=1)
        return np.concatenate([v[:1], head, tail, v[-1:]])

    return medians(k), medians(y)


def fit(k: np.ndarray, y: np.ndarray, form: str = "optimus") -> tuple[CurveFit, np.ndarray]:
    """Fit a decreasing curve y(k); returns the fit and its parameters as an array. More than
    MAX_POINTS points are fitted as that many bins (`thinned`); the rmse is over every point."""
    k, y = np.asarray(k, float), np.asarray(y, float)
    _check_points(k, y)
    k_fit, y_fit = thinned(k, y)
    scale, level = step_scale(form, k), value_scale(y)
    w = weights(len(k_fit))
    units = in_units(y_fit, level)
    start = _grid_start(form, k_fit / scale, units, w)
    result = _refine(form, k_fit / scale, units, w, start)
    p = _scaled(form, result.x, scale, level)
    fitted = model(form)(k, p)
    rmse = level * float(np.sqrt(np.mean(((fitted - y) / level) ** 2)))
    converged, message = True, str(result.message)
    if not (result.success and np.all(np.isfinite(p))):
        converged, message = False, f"did not converge ({result.message})"
    elif fitted[np.argmin(k)] - fitted[np.argmax(k)] <= 1e-6 * level:
        # β0 = 0 (or b = 0): the best decreasing curve is a constant, e.g. an accuracy
        # curve fitted as a loss.
        converged, message = False, "is flat: the values do not decrease (is the metric right?)"
    return CurveFit(
        form=form,
        params=dict(zip(PARAMS[form], map(float, p), strict=True)),
        rmse=rmse,
        n_points=len(k),
        first_step=float(k.min()),
        last_step=float(k.max()),
        converged=converged,
        message=message,
        binned=len(k_fit) if len(k_fit) < len(k) else None,
    ), p


def bootstrap(
    k: np.ndarray, y: np.ndarray, form: str, p: np.ndarray, n: int = N_BOOT, seed: int = 0
) -> np.ndarray:
    """Parameter samples (up to n, 3) by resampling the residuals of the fit and refitting; of
    the bins `fit` fitted when there are more than MAX_POINTS points. Refits whose parameters
    a float cannot hold (`_scaled`), and those least squares failed on (`_refine`), are left
    out: n less the rows returned."""
    return refits(k, y, form, p, n, seed)[0]


def refits(
    k: np.ndarray, y: np.ndarray, form: str, p: np.ndarray, n: int = N_BOOT, seed: int = 0
) -> tuple[np.ndarray, int]:
    """`bootstrap`'s samples, and how many of the refits left out least squares failed on."""
    y = np.asarray(y, float)
    level = value_scale(y)  # of every point, as `fit` takes it (the bins may lose a spike)
    k, y = thinned(np.asarray(k, float), y)
    rng = np.random.default_rng(seed)
    # In the units `fit` fitted in (steps and values scaled to ~1: see `value_scale`).
    scale = step_scale(form, k)
    f = model(form)
    start = _scaled(form, p, 1.0 / scale, 1.0 / level)
    fitted = f(k / scale, start)
    resid = in_units(y, level) - fitted
    w = weights(len(k))
    samples = np.empty((n, 3))
    failed = 0
    for i in range(n):
        y_star = np.maximum(fitted + rng.choice(resid, size=len(y), replace=True), 0.0)
        result = _refine(form, k / scale, y_star, w, start)
        if result.get("failed", False):
            failed += 1
            samples[i] = np.nan
        else:
            samples[i] = _scaled(form, result.x, scale, level)
    return samples[np.all(np.isfinite(samples), axis=1)], failed


def intervals(samples: np.ndarray, form: str, point: np.ndarray) -> dict[str, tuple[float, float]]:
    """90% percentile interval of each parameter, widened to hold the fit's own `point`: a
    point on a bound (β2 = 0) can have every refit on one side of it, and an interval that
    excludes its point contradicts itself. With no refits (every one past a float's range,
    `bootstrap`), each is [0, inf): all a coefficient (≥ 0) may be, cannot tell."""
    if not len(samples):
        return dict.fromkeys(PARAMS[form], (0.0, math.inf))
    lo, hi = np.percentile(samples, [5, 95], axis=0)
    lo, hi = np.minimum(lo, point), np.maximum(hi, point)
    return {name: (float(lo[i]), float(hi[i])) for i, name in enumerate(PARAMS[form])}


def heldout_rmse(k: np.ndarray, y: np.ndarray, n_fit: int, form: str) -> float:
    """RMSE on points n_fit.. of a curve fitted to the first n_fit points."""
    _, p = fit(k[:n_fit], y[:n_fit], form)
    return float(np.sqrt(np.mean((model(form)(k[n_fit:], p) - y[n_fit:]) ** 2)))


def compare_forms(k: np.ndarray, y: np.ndarray, n_fit: int) -> dict[str, float | int | str]:
    """Which form predicts later points better: those after the fit window when there are any,
    otherwise the last third of the window, from a fit on its first two thirds."""
    if n_fit < len(k):
        k_all, y_all, n_train = k, y, n_fit
    else:
        k_all, y_all, n_train = k[:n_fit], y[:n_fit], max(4, 2 * n_fit // 3)
    if n_train >= len(k_all):
        return {"n_points": 0}
    errors = {form: heldout_rmse(k_all, y_all, n_train, form) for form in PARAMS}
    return {
        "optimus_rmse": errors["optimus"],
        "power_rmse": errors["power"],
        "n_points": len(k_all) - n_train,
        "better": min(errors, key=errors.__getitem__),
    }


def whole_steps(steps: np.ndarray | None) -> bool:
    """Whether a curve's steps are whole numbers (training steps, whole epochs), or unknown:
    a crossing is then reported at a whole step (`whole_step`). Epochs logged every 0.1
    (`--x epoch`) are not: there the crossing itself is the answer."""
    return steps is None or bool(np.all(np.asarray(steps) == np.round(steps)))


def whole_step(k: float, whole: bool = True) -> float:
    """The first whole step at or past a crossing, on an axis of `whole` steps; rounding
    first keeps float noise (900.0000000000006) from moving an exact crossing to the next
    step. On a fractional axis, the crossing itself, to 12 significant digits (1.6, not
    1.5999999999999999): rounded up to a whole unit, an exact 1.5 epochs read 2 (33 % off),
    and a crossing on an axis of 1e-298 steps read 0."""
    if not math.isfinite(k):
        return math.inf
    return float(math.ceil(round(k, 6))) if whole else float(f"{k:.12g}")


def reported_step(k: float, whole: bool) -> float:
    """`whole_step` as a prediction reports it: an int on an axis of whole steps (90, not
    90.0, in JSON)."""
    step = whole_step(k, whole)
    return int(step) if whole else step


def predict(
    form: str,
    p: np.ndarray,
    samples: np.ndarray,
    target: float,
    metric: str,
    steps: np.ndarray | None = None,
    values: np.ndarray | None = None,
    first: float = 1.0,
) -> Prediction:
    """When the curve reaches `target` (in the metric's units), with a 90% interval, neither
    before `first`, the fit window's first step (1 when not given); compared with the first
    measured step at or past the target when the whole curve is given. Rounded up to whole
    steps unless `steps` holds fractional ones (`whole_steps`)."""
    check_target(target, metric)
    goal = float(to_decreasing(np.array(target), metric))
    k_hat = float(steps_to(form, p, goal, first)[0])
    reachable = math.isfinite(k_hat)
    whole = whole_steps(steps)
    predicted = reported_step(k_hat, whole) if reachable else None
    interval = None
    if reachable:
        # No interpolation, so that samples that never reach the target give an inf bound;
        # with none (`bootstrap` left every refit out) from `first` on, cannot tell.
        reach = (
            steps_to(form, samples, goal, first) if len(samples) else np.array([first, math.inf])
        )
        lo = np.percentile(reach, 5, method="lower")
        hi = np.percentile(reach, 95, method="higher")
        # Widened to hold the point, as `intervals` does.
        point = whole_step(k_hat, whole)
        interval = (min(whole_step(lo, whole), point), max(whole_step(hi, whole), point))
    actual = first_reaching(steps, values, metric, goal)
    return Prediction(
        target, reachable, predicted, interval, actual, error_pct(predicted, actual), k_hat <= first
    )


def first_reaching(steps: Any, values: Any, metric: str, goal: float) -> float | None:
    """The first measured step whose value is at or past `goal` (decreasing units); None
    when there is none, or no measured curve."""
    if steps is None or values is None:
        return None
    hit = np.flatnonzero(to_decreasing(np.asarray(values, float), metric) <= goal)
    return float(np.asarray(steps)[hit[0]]) if len(hit) else None


def error_pct(predicted: float | None, actual: float | None) -> float | None:
    """(predicted − actual) / actual · 100, when both are known."""
    return (predicted - actual) / actual * 100.0 if predicted is not None and actual else None


def check_window(upto: float | None, upto_step: float | None, named: str = "converge.") -> None:
    """The fit's window as given: a fraction in (0, 1] or a finite step > 0, not both.
    `named`: the prefix its names take in the lines (the config's `converge.`; the Python
    API's fit_curve names its own arguments)."""
    if upto is not None and upto_step is not None:
        raise UserError(f"give {named}upto or {named}upto_step, not both")
    if upto is not None and not 0.0 < upto <= 1.0:
        raise UserError(f"{named}upto is a fraction in (0, 1], got {upto}")
    # As --upto-step's check says it: NaN fitted no point ("0 points are too few"), and
    # infinity every point, from Python
    if upto_step is not None and not (math.isfinite(upto_step) and upto_step > 0):
        raise UserError(f"{named}upto_step must be a finite number > 0, got {upto_step}")


def window(k: np.ndarray, upto: float | None, upto_step: float | None) -> int:
    """How many leading points the fit uses: a fraction of them, or those up to a step."""
    check_window(upto, upto_step)
    if upto is not None:
        return max(1, round(upto * len(k)))
    if upto_step is not None:
        return int(np.sum(k <= upto_step))
    return len(k)


def fit_window(c: Curve, upto: float | None, upto_step: float | None, api: bool = False) -> int:
    """`window` of a curve, refused in one line when it holds fewer than FEWEST points: naming
    the curve (its file, or its run and key), the window and what it kept of the curve, and the
    smallest window that keeps FEWEST (a fraction rounded up to one significant digit, or the
    FEWEST-th step). "2 points are too few" named neither the file nor the --upto that cut 40
    points to 2 (break-it round 26, P2 C13). `api`: name dlperf.fit_curve's arguments
    (upto=0.05), not the command's flags (--upto 0.05)."""
    n = window(c.steps, upto, upto_step)
    if n >= FEWEST:
        return n
    total = len(c.steps)
    what = named(c)
    need = f"too few to fit a 3-parameter curve (need ≥ {FEWEST})"
    if total < FEWEST:  # no window helps
        more = (
            "log more points" if c.key is None else "train longer, or fit a key logged more often"
        )
        raise UserError(f"{what} holds {total} point{'s' * (total != 1)}, {need}", more)

    def given(name: str, value: float) -> str:
        return (
            f"{name}={_written(value)}" if api else f"--{name.replace('_', '-')} {_written(value)}"
        )

    if upto is not None:
        told, fits = given("upto", upto), given("upto", _fewest_fraction(total))
    else:
        assert upto_step is not None  # n < total: some window was given
        told, fits = given("upto_step", upto_step), given("upto_step", float(c.steps[FEWEST - 1]))
    raise UserError(
        f"{what}: {told} keeps {n} of its {total} points, {need}",
        f"fit at least {FEWEST}, e.g. {fits}",
    )


def named(c: Curve) -> str:
    """A curve as error lines name it: its CSV file as given, or its run and stored key."""
    what = c.source or c.label
    return f"{what}'s {c.key}" if c.key is not None else what


# What a value of zero error is, in each metric's own words: "above 0" was about 1 − accuracy,
# a number the user never wrote.
AT_ZERO = {"accuracy": "accuracy is 1.0 (error 0)", "error": "error is 0", "loss": "loss is 0"}


def nothing_to_fit(c: Curve, metric: str, n_fit: int) -> UserError | None:
    """The line refusing a fit of the first `n_fit` points of `c` when fewer than 2 of them
    lie above zero error (accuracy 1.0 from the first epoch, as on an easy set): no curve
    decreases through them. None when there is a curve to fit. The values are checked first,
    as `fit` checks them, so that a negative loss is not called 0."""
    check_values(c, metric)
    k, y = c.steps[:n_fit], to_decreasing(c.values[:n_fit], metric)
    _check_points(k, y, c)
    above = int(np.sum(y > 0))
    if above >= 2:
        _refuse_one_seen(c, metric, y)
        return None
    points = f"its {n_fit}" if n_fit == len(c.steps) else f"the {n_fit} fitted"
    best = "below 1.0" if metric == "accuracy" else "above 0"
    return UserError(
        f"{named(c)}: {AT_ZERO[metric]} at {n_fit - above} of {points} points: nothing to fit "
        f"(a curve needs at least 2 points {best})",
        "log the metric more often, e.g. per step rather than per epoch, to see the curve "
        "before it gets there",
    )


def _refuse_one_seen(c: Curve, metric: str, y: np.ndarray) -> None:
    """Refuse a fit whose window `y` holds one value at TINY of its largest or above, and
    others above 0 but below it: a fit reads those as 0 (`in_units`), and the grid said
    "fewer than 2 points above 0" of values that are above 0. A refusal, not `predict`'s
    answer from the measured points, which takes the values at 0 to pass any target."""
    top = float(np.max(y))
    if np.sum(y >= top * TINY) >= 2:
        return
    i = int(np.argmax(y))
    raise UserError(
        f"{named(c)}: {_at(c, i)} holds {metric} {float(c.values[i]):g}, and the {len(y) - 1} "
        "other values fitted lie below 1e-100 of it, which a fit reads as 0: one point to fit",
        "a typo? correct it; if the curve does fall this far at once, log the metric more "
        "often to see it fall",
    )


def _fewest_fraction(total: int) -> float:
    """FEWEST / `total` rounded up to one significant digit (4 of 40: 0.1; of 7: 0.6), raised
    until its `window` of `total` points keeps FEWEST."""
    exact = Decimal(FEWEST) / Decimal(total)
    unit = Decimal(1).scaleb(exact.adjusted())
    fraction = (exact / unit).to_integral_value(rounding=ROUND_CEILING) * unit
    while fraction < 1 and window(np.ones(total), float(fraction), None) < FEWEST:
        fraction += unit  # round() to even may keep one point fewer than the fraction's
    return float(min(fraction, Decimal(1)))


def _written(value: float) -> str:
    """A number as a user writes it: 4, not 4.0; 0.1; 2.5; 1e-05; 123456789 in full."""
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return f"{value:g}" if float(f"{value:g}") == value else repr(value)


@dataclass
class Curve:
    """A measured curve: steps (≥ 1) and the metric's values, as measured."""

    label: str
    steps: np.ndarray
    values: np.ndarray
    steps_per_epoch: float | None = None
    about: dict[str, Any] = field(default_factory=dict)  # a run's model, depth, device
    # The CSV's path as the user gave it, for error lines (the label is its bare name, for
    # tables and legends): "pct.csv" alone does not say which of several folders' is meant.
    source: str | None = None
    # The CSV's line of each point, for error lines that name one; None for a run's curve.
    lines: list[int] | None = field(default=None, repr=False, compare=False)
    # A run's stored key ("val/loss"), for error lines; None for a CSV file's curve.
    key: str | None = None
    # Warnings on how the curve was read (a CSV's step column left unused: `from_csv`)
    notes: list[str] = field(default_factory=list, compare=False)

    @property
    def legend(self) -> str:
        """The configuration, as figures name the curve, e.g. 'resnet56 on cpu (run 7)'; the
        label alone when the configuration is unknown (a CSV file)."""
        parts = [str(v) for k in ("model", "device") if (v := self.about.get(k))]
        return f"{' on '.join(parts)} ({self.label})" if parts else self.label


@dataclass
class FitReport:
    curve: Curve
    metric: str
    n_fit: int  # leading points in the fit window
    fits: dict[str, CurveFit]  # by form
    params: dict[str, np.ndarray]
    samples: dict[str, np.ndarray]  # bootstrap parameter samples, by form
    ci: dict[str, dict[str, tuple[float, float]]]
    heldout: dict[str, float | int | str]
    # bootstrap refits left out of the intervals, by form: past a float's range, or failed
    dropped: dict[str, int] = field(default_factory=dict)
    # of those, the refits least squares failed on (`_refine`), by form
    failed: dict[str, int] = field(default_factory=dict)

    @property
    def note(self) -> str | None:
        """What the fits were made on, when the window held more than MAX_POINTS points, and
        how many refits the intervals left out."""
        said = []
        fitted = self.fits["optimus"]
        if fitted.binned is not None:
            said.append(
                f"{self.curve.label}: fitted {fitted.binned:,} bins of {fitted.n_points:,} "
                "points (each bin's median step and value; the first and last points as they are)"
            )
        for form, left_out in self.dropped.items():
            if left_out:
                asked = left_out + len(self.samples[form])
                said.append(
                    f"{self.curve.label}: {left_out} of {asked} {form} bootstrap refits left out "
                    f"of its intervals: {_why_left_out(left_out, self.failed.get(form, 0))}"
                )
        return "; ".join(said) or None


def _why_left_out(left_out: int, failed: int) -> str:
    """Why `left_out` refits, `failed` of them by least squares, are out of the intervals."""
    if not failed:
        return "their coefficients pass what a float holds"
    if failed == left_out:
        return "least squares failed on them"
    return f"least squares failed on {failed}, the others' coefficients pass what a float holds"


def analyse(curve: Curve, metric: str, n_fit: int, n_boot: int = N_BOOT) -> FitReport:
    """Both forms fitted to the first n_fit points, with bootstrap intervals (none, and no
    samples, with `n_boot` 0), and compared on later points."""
    check_metric(metric)
    unfit = nothing_to_fit(curve, metric, n_fit)  # checks the values too
    if unfit is not None:
        raise unfit
    k, y = curve.steps, to_decreasing(curve.values, metric)
    fits, params, samples, ci, dropped, failed = {}, {}, {}, {}, {}, {}
    for form in PARAMS:
        fits[form], params[form] = fit(k[:n_fit], y[:n_fit], form)
        if n_boot:
            samples[form], failed[form] = refits(k[:n_fit], y[:n_fit], form, params[form], n_boot)
            ci[form] = intervals(samples[form], form, params[form])
            dropped[form] = n_boot - len(samples[form])
    heldout = compare_forms(k, y, n_fit)
    return FitReport(curve, metric, n_fit, fits, params, samples, ci, heldout, dropped, failed)


def check_values(curve: Curve, metric: str) -> None:
    """Refuse accuracy or error values outside [0, 1], and a loss below 0, naming the first by
    its line (or point) and telling percentages to be divided by 100; `analyse` and `converge
    regress` both check with it."""
    values = curve.values
    if metric == "loss" and (out := np.flatnonzero(values < 0)).size:
        # Named here, where the file and line are known: the fit's own check (`_check_points`)
        # knows neither, nor which of regress's sources it is.
        raise UserError(
            f"{curve.source or curve.label}: loss values must be ≥ 0; {_at(curve, int(out[0]))} "
            f"holds {float(values[out[0]]):g}",
            "the curves fitted level off at 0 or above: is converge.metric right? a loss that "
            "goes below 0, as a log-likelihood may: add a constant to it",
        )
    if (
        metric in ("accuracy", "error")
        and (out := np.flatnonzero((values < 0) | (values > 1))).size
    ):
        i = int(out[0])
        # Many training logs write accuracy in percent (94.5): the metric is right, the scale
        # is not. Values outside [0, 100] are no percentages: then the metric may be wrong.
        percent = bool(np.all((values >= 0) & (values <= 100)))
        raise UserError(
            f"{curve.source or curve.label}: {metric} values must lie in [0, 1]; {_at(curve, i)} "
            f"holds {float(values[i]):g}",
            (
                (
                    "percentages? divide the column by 100"
                    if curve.lines is not None
                    else f"percentages? give {metric} as a fraction (0.945, not 94.5)"
                )
                if percent
                else "is converge.metric right?"
            ),
        )


def _at(curve: Curve, i: int) -> str:
    """Where point `i` of `curve` is: its CSV line, or its place in a run's curve."""
    return f"line {curve.lines[i]}" if curve.lines is not None else f"point {i + 1}"


def from_csv(path: Path, x: str | None, y: str) -> Curve:
    """A curve from two CSV columns; without `x` the step is the row number (1, 2, ...)."""
    names = [y] if x is None else [x, y]
    unused = tuple(n for n in STEP_COLUMNS if n != y) if x is None else ()
    lines, texts = read_table(path, names, unused)
    columns = {name: column_numbers(path, name, lines, texts[name]) for name in names}
    values = np.asarray(columns[y])
    steps = np.arange(1.0, len(values) + 1) if x is None else np.asarray(columns[x])
    notes = [n for name in unused if name in texts for n in _unused_steps(path, name, lines, texts)]
    if (bad := np.flatnonzero(steps <= 0)).size:  # named here, where the file and line are known
        step = float(steps[bad[0]])
        raise UserError(
            f"{path}:{lines[bad[0]]}: step {step:g} is not positive", _count_from_1(step)
        )
    if x is not None:
        _check_csv_steps(path, x, steps, lines, texts[x])
    # Labelled with its name's text: as argv brings it in a C locale, or with bytes that are
    # not UTF-8, a name holds surrogate escapes that no table, JSON or figure can write.
    label = file_name_text(path.name)
    return Curve(label, steps, values, source=str(path), lines=lines, notes=notes[:1])


# Column names that say a CSV's rows are steps of training: without --x the row numbers are
# the steps, and such a column is looked at (`_unused_steps`).
STEP_COLUMNS = ("step", "steps", "global_step", "iteration", "iterations", "iter", "epoch")


def _unused_steps(
    path: Path, name: str, lines: list[int], texts: dict[str, list[str]]
) -> list[str]:
    """What to say of column `name`, a step column that a fit on row numbers (no --x) leaves
    unused: refused where its steps go back (a resumed log's repeated steps, rows out of
    order), whose rows were fitted as one ordered curve; else a line saying that the rows are
    the steps, where the column counts other steps (logged every 10: "step 28" predicted for
    step 280). Nothing where it is the row numbers (from 1 or 0), repeats a value (a per-step
    log's epoch) or holds no numbers."""
    try:
        steps = np.asarray(column_numbers(path, name, lines, texts[name]))
    except UserError:  # not a column of steps: words, blanks
        return []
    shown = one_line(name)
    # Back, not level: a per-step log's epoch column repeats each epoch, its rows in order.
    if (back := np.flatnonzero(np.diff(steps) < 0)).size:
        i = int(back[0])
        before, after = (one_line(texts[name][j].strip()) for j in (i, i + 1))
        raise UserError(
            f"{path}:{lines[i + 1]}: column '{shown}' goes from {before} to {after} (a resumed "
            "log, or rows out of order?): without --x the rows are the steps 1, 2, ..., and "
            "these are not in the order of training",
            f"give each step once, in order, and --x {shown} to fit on the column",
        )
    rows = np.arange(1.0, len(steps) + 1)
    if np.array_equal(steps, rows) or np.array_equal(steps, rows - 1):  # epochs from 0 too
        return []
    if (np.diff(steps) == 0).any():  # repeats: no step axis for --x, which refuses them
        return []
    return [
        f"{path}: the steps are the row numbers 1..{len(steps)}; column '{shown}' "
        f"({steps[0]:g} to {steps[-1]:g}) is not used (--x {shown} fits on it)"
    ]


def from_run(store: RunStore, run_id: int, metric: str, key: str | None = None) -> Curve:
    """A stored run's metric: `key`, else the metric's default key (error: 1 − val/acc1).
    Per-epoch metrics (val/*, epoch/*) are logged at step = epoch; they are put on the
    global-step axis when the run knows its steps per epoch."""
    run = store.get_run(run_id)
    stored = key or RUN_KEYS[metric]
    pairs = store.metrics(run_id, stored)
    # val/café typed (NFC), stored as val/cafe\u0301 (NFD), as --where and runs plot take it
    if not pairs and (held := stored_as(stored, store.metric_keys(run_id))) is not None:
        stored, pairs = held, store.metrics(run_id, held)
    if not pairs:
        raise UserError(f"run {run_id} has no metric '{stored}'", "see `dlperf runs show`")
    _check_run_steps(run_id, stored, [s for s, _ in pairs])
    epoch_steps = run.summary.get("steps_per_epoch")
    steps = np.array([s for s, _ in pairs], float)
    if stored.startswith(("val/", "epoch/")) and epoch_steps:
        steps = steps * epoch_steps
    if steps[0] <= 0:  # in step order
        # Named here, where the run is known: the fix `_check_points` gives ("the first step
        # is 1, not 0") is one for a CSV file, and a stored run's steps cannot be edited.
        raise UserError(
            f"run {run_id} logged {stored} from step {steps[0]:g}; a fit counts steps from 1 "
            "(the value after the first step at step 1)",
            f"for this run, fit a CSV of its steps + {1 - steps[0]:g} and its values (from "
            f"`dlperf runs show {run_id} --json`) with --csv FILE --x step --y value; log new "
            "runs from step 1",
        )
    values = np.array([v for _, v in pairs], float)
    if key is None and metric == "error":
        values = 1.0 - values
    return Curve(f"run {run_id}", steps, values, epoch_steps, configuration(run), key=stored)


def _check_run_steps(run_id: int, key: str, logged: list[int]) -> None:
    """`check_increasing` for a stored run's steps (in step order, so only repeats can fail
    it), naming the first step logged more than once: steps all alike failed the fit in LAPACK
    (a LinAlgError traceback), and a repeated step was fitted as two points, no word."""
    again = next((step for step, after in itertools.pairwise(logged) if step == after), None)
    if again is None:
        return
    count = logged.count(again)
    times = "twice" if count == 2 else f"{count} times"
    # A stored run's steps cannot be edited: the fix is a CSV, as for a run from step 0.
    raise UserError(
        f"run {run_id} logged {key} at step {again} {times}; a fit needs each step once",
        f"for this run, fit a CSV of its steps, one value each, from `dlperf runs show {run_id} "
        "--json`: --csv FILE --x step --y value",
    )
