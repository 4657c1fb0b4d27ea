"""What `converge fit | predict | regress` find, as records: a curve's fit, the step at which
it reaches a target (one form's or the ensemble's), and a regression of the fits on run
features. `to_dict()` is the command's `--json` document, key for key; the fit's is also the
curve `converge plan --curve` reads back. No NumPy: the command line imports these."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dlperf.analytic.results import Result

Interval = tuple[float, float]
# The start of the basis of a prediction read off the measured points, with no fit behind it
# (a curve with nothing to fit: see `fitting.measured_answer`).
MEASURED_BASIS = "the measured points, no fit"


@dataclass(frozen=True)
class PowerFit(Result):
    """a·k^−b + c fitted to the same window as the Optimus form."""

    a: float
    b: float
    c: float
    ci: dict[str, Interval]  # 90% bootstrap interval per coefficient
    rmse: float
    converged: bool


@dataclass(frozen=True)
class CurveFitResult(Result):
    """One curve's fits: Optimus's l(k) = 1/(β0·k + β1) + β2 at the top level (what `plan
    --curve` reads), the power law under `power`, and which predicts later points better."""

    source: str
    configuration: dict[str, Any]  # a run's model, depth, device
    metric: str
    key: str | None  # a run's stored key the curve was read from (None: a CSV file's column)
    form: str  # "optimus": the form of the top-level coefficients
    beta0: float
    beta1: float
    beta2: float
    ci: dict[str, Interval]
    rmse: float  # on the fit window, in the metric's units
    n_points: int
    last_step: float  # the last step of the fit window
    steps_per_epoch: float | None
    converged: bool
    power: PowerFit
    heldout: dict[str, float | int | str]  # n_points, and each form's rmse and the better


@dataclass(frozen=True)
class StepPrediction(Result):
    """The step at which one form's fit reaches the target, with a 90% bootstrap interval,
    checked on the measured curve when it goes on past the fit window."""

    source: str
    form: str  # optimus | power
    target: float  # in the metric's units
    reachable: bool
    predicted_step: float | None  # an int where the steps are whole (`curve.reported_step`)
    interval: tuple[float | None, float | None] | None  # None at an end never reached
    predicted_epoch: float | None
    actual_step: float | None
    error_pct: float | None
    asymptote: float  # β2 or c, in the decreasing units the form is fitted in
    plateau: float  # the asymptote in the metric's units
    n_points: int
    basis: str
    # The fitted curve is at or past the target by the fit window's first step, which is then
    # the predicted step: the text says it is there already.
    at_first_step: bool = False


@dataclass(frozen=True)
class EnsembleStepPrediction(Result):
    """The step reaching the target as a distribution over curve families: its median and
    calibrated 90% interval, or "cannot tell" and why."""

    source: str
    form: str  # ensemble
    target: float
    verdict: str  # "answer" or "cannot tell"
    reason: str | None
    reachable: bool
    p_reachable: float
    predicted_step: float | None  # an int where the steps are whole (`curve.reported_step`)
    interval: tuple[float | None, float | None] | None
    predicted_epoch: float | None
    actual_step: float | None
    error_pct: float | None
    asymptote: float
    plateau: float
    plateau_interval: Interval
    val_size: int | None  # the validation set an accuracy is counted over, as read
    family_weights: dict[str, float]
    n_points: int
    basis: str
    # The window's first measured point is at or past the target: the predicted step.
    at_first_step: bool = False


AT_TARGET = ("actual_step", "actual_epoch", "predicted_epoch", "error_pct")


@dataclass(frozen=True)
class Comparison(Result):
    """A regression's predicted curve against the measured run of the same configuration;
    with a target, the error of the steps (and epochs) to it."""

    source: str
    legend: str
    n_points: int
    curve_rmse: float
    curve_error_pct: float | None  # None when every measured value is 0
    actual_step: float | None = None
    actual_epoch: float | None = None
    predicted_epoch: float | None = None
    error_pct: float | None = None
    # The prediction's target; the JSON carries it on the prediction, not here.
    target: float | None = None

    def left_out(self) -> Iterable[str]:
        return ("target", *(AT_TARGET if self.target is None else ()))


STEP_FIELDS = (
    "target",
    "predicted_step",
    "predicted_epoch",
    "actual_step",
    "error_pct",
    "at_first_step",
)


@dataclass(frozen=True)
class RegressPrediction(Result):
    """The coefficients and curve an unseen configuration's features predict; with a target,
    the step (and epoch) reaching it, and the measured step of a source with exactly these
    features, if there is one."""

    features: dict[str, str]
    beta0: float
    beta1: float
    beta2: float
    curve: tuple[tuple[float, float], ...]  # (step, value in the metric's units)
    basis: str
    target: float | None = None
    predicted_step: float | None = None  # an int where the steps are whole
    predicted_epoch: float | None = None
    actual_step: float | None = None
    error_pct: float | None = None
    # The predicted curve is at or past the target by the runs' first step, the predicted step.
    at_first_step: bool = False
    compare: Comparison | None = None

    def left_out(self) -> Iterable[str]:
        return (*(STEP_FIELDS if self.target is None else ()), *super().left_out())

    OPTIONAL = ("compare",)


@dataclass(frozen=True)
class Regression(Result):
    """log β regressed on run features: the coefficients, each source's β, and the
    prediction for --predict's configuration."""

    features: tuple[str, ...]
    metric: str
    dropped_features: dict[str, str]  # feature -> the one value every run had
    columns: tuple[str, ...]  # "intercept", numeric features, "feature=level" indicators
    coef: dict[str, list[float]]  # per β, one coefficient per column
    rmse_log: dict[str, float]
    runs: tuple[dict[str, Any], ...]  # source, its features, beta0, beta1, beta2
    prediction: RegressPrediction | None = None

    OPTIONAL = ("prediction",)
