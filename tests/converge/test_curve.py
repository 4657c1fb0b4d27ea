"""dlperf.converge.curve: the Optimus loss model, the power law and target prediction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlperf.converge import curve
from dlperf.errors import UserError

POLLUX_128 = Path(__file__).parents[1] / "fixtures" / "pollux" / "cifar10_validation-128.csv"


def optimus(k: np.ndarray, b0: float, b1: float, b2: float) -> np.ndarray:
    return 1.0 / (b0 * k + b1) + b2


def test_weights_are_1_4_16_by_thirds() -> None:
    assert curve.weights(6).tolist() == [1, 1, 4, 4, 16, 16]
    assert curve.weights(4).tolist() == [1, 1, 4, 16]


def test_recovers_known_betas_from_noisy_curve() -> None:
    rng = np.random.default_rng(0)
    k = np.arange(1.0, 201.0) * 50  # steps 50..10000, as if logged every 50 steps
    y = optimus(k, 2e-3, 0.5, 0.2) + rng.normal(0, 0.005, k.size)
    fit, p = curve.fit(k, y)
    assert fit.converged
    assert fit.params["beta0"] == pytest.approx(2e-3, rel=0.1)
    assert fit.params["beta1"] == pytest.approx(0.5, rel=0.1)
    assert fit.params["beta2"] == pytest.approx(0.2, abs=0.01)
    assert fit.rmse == pytest.approx(0.005, rel=0.2)
    lo, hi = curve.intervals(curve.bootstrap(k, y, "optimus", p, n=50), "optimus", p)["beta2"]
    assert lo <= fit.params["beta2"] <= hi


def test_recovers_known_power_law() -> None:
    rng = np.random.default_rng(1)
    k = np.arange(1.0, 101.0)
    y = 2.0 * k**-0.7 + 0.05 + rng.normal(0, 0.002, k.size)
    fit, _ = curve.fit(k, y, "power")
    assert fit.params["a"] == pytest.approx(2.0, rel=0.05)
    assert fit.params["b"] == pytest.approx(0.7, rel=0.05)
    assert fit.params["c"] == pytest.approx(0.05, abs=0.01)


def test_steps_to_target_inverts_the_model() -> None:
    p = np.array([0.01, 1.0, 0.1])
    k = curve.steps_to("optimus", p, 0.2)[0]  # 1/(0.01k + 1) = 0.1  ->  k = 900
    assert k == pytest.approx(900.0)
    assert curve.steps_to("optimus", p, 0.1)[0] == np.inf  # at the asymptote
    assert curve.steps_to("optimus", p, 0.05)[0] == np.inf  # beyond it
    assert curve.steps_to("optimus", p, 5.0)[0] == 0.0  # already below at step 0
    assert curve.steps_to("power", [2.0, 1.0, 0.0], 0.5)[0] == pytest.approx(4.0)


def test_prediction_error_against_measured_curve() -> None:
    p = np.array([0.01, 1.0, 0.1])
    k = np.arange(1.0, 2001.0)
    accuracy = 1.0 - optimus(k, 0.02, 1.0, 0.1)  # the real curve is twice as fast
    samples = np.tile(p, (10, 1))
    pred = curve.predict("optimus", p, samples, 0.8, "accuracy", k, accuracy)
    assert pred.reachable and pred.predicted_step == 900
    assert pred.interval == (pytest.approx(900.0), pytest.approx(900.0))
    assert pred.actual_step == 450.0  # first step with 1/(0.02k + 1) ≤ 0.1
    assert pred.error_pct == pytest.approx(100.0)


def test_unreachable_target() -> None:
    p = np.array([0.01, 1.0, 0.1])
    pred = curve.predict("optimus", p, np.tile(p, (5, 1)), 0.95, "accuracy")
    assert not pred.reachable
    assert pred.predicted_step is None and pred.interval is None and pred.error_pct is None


@pytest.mark.parametrize(
    ("target", "metric"), [(1.5, "accuracy"), (94.0, "accuracy"), (-0.1, "loss")]
)
def test_target_of_the_wrong_kind(target: float, metric: str) -> None:
    with pytest.raises(UserError):
        curve.check_target(target, metric)


def test_too_few_points_and_bad_steps() -> None:
    with pytest.raises(UserError, match="too few"):
        curve.fit(np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.5, 0.4]))
    with pytest.raises(UserError, match="positive"):
        curve.fit(np.arange(0.0, 5.0), np.linspace(1, 0.5, 5))


def test_window() -> None:
    k = np.arange(1.0, 11.0)
    assert curve.window(k, 0.3, None) == 3
    assert curve.window(k, None, 7) == 7
    assert curve.window(k, None, None) == 10
    with pytest.raises(UserError):
        curve.window(k, 1.5, None)


def test_pollux_resnet18_batch128_prefix() -> None:
    """The real curve: fit the first 30 epochs, compare the forms on the other 70."""
    c = curve.from_csv(POLLUX_128, None, "metric")
    report = curve.analyse(c, "accuracy", curve.window(c.steps, 0.3, None), n_boot=20)
    assert report.n_fit == 30
    assert report.heldout["n_points"] == 70
    assert all(f.converged for f in report.fits.values())
    assert (
        report.fits["optimus"].rmse < 0.06
    )  # the clipped curve is not exactly the model  # accuracy points, fit window
    p = report.params["power"]
    pred = curve.predict("power", p, report.samples["power"], 0.94, "accuracy", c.steps, c.values)
    assert pred.actual_step == 67.0  # epoch 67 first reaches 94.16%


def test_curve_that_reaches_zero_error() -> None:
    """Validation accuracy of exactly 1.0 (common on small data sets) is fitted, not rejected."""
    k = np.arange(1.0, 21.0)
    accuracy = np.minimum(1.0, 1.0 - optimus(k, 0.5, 1.0, 0.0) + 0.1)  # 1.0 from step 18
    assert accuracy.max() == 1.0
    report = curve.analyse(curve.Curve("perfect", k, accuracy), "accuracy", 20, n_boot=10)
    assert report.fits["optimus"].converged
    assert report.fits["optimus"].rmse < 0.06  # the clipped curve is not exactly the model


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    b0=st.floats(1e-4, 1.0),
    b1=st.floats(0.5, 20.0),
    b2=st.sampled_from([0.0, 1e-6, 0.01, 0.3]),
    noise=st.floats(0.0, 0.05),
    n=st.integers(6, 30),
    seed=st.integers(0, 2**16),
)
def test_every_interval_contains_its_point(
    b0: float, b1: float, b2: float, noise: float, n: int, seed: int
) -> None:
    """A fit's 90% interval holds its own point, also when the point sits on a bound (β2 = 0,
    where every bootstrap refit may land on one side of it), and so does the interval of the
    step reaching a target. Issue 29: β2 = 1.13e-19 printed with [6.46e-19, 0.609]."""
    rng = np.random.default_rng(seed)
    k = np.arange(1.0, n + 1)
    y = np.maximum(optimus(k, b0, b1, b2) + rng.normal(0, noise, n), 0.0)
    report = curve.analyse(curve.Curve("random", k, y), "loss", n, n_boot=20)
    for form, fit in report.fits.items():
        for name, value in fit.params.items():
            lo, hi = report.ci[form][name]
            assert lo <= value <= hi, (form, name, value, lo, hi)
        target = float(y[-1]) * 0.9 + float(report.params[form][2]) * 0.1
        p = curve.predict(form, report.params[form], report.samples[form], target, "loss")
        if p.interval is not None:
            assert p.interval[0] <= p.predicted_step <= p.interval[1]


def test_beta2_on_its_bound_lies_inside_its_interval() -> None:
    """The issue's case: a curve falling towards 0 fits β2 ≈ 3e-19, on its bound, and every
    bootstrap refit lands above it: the percentile interval alone was [5.1e-19, 0.022]."""
    rng = np.random.default_rng(1)
    k = np.arange(1.0, 21.0)
    y = np.maximum(optimus(k, 0.3, 1.0, 0.0) + rng.normal(0, 0.02, 20), 0.0)
    fit, p = curve.fit(k, y)
    samples = curve.bootstrap(k, y, "optimus", p, n=50)
    assert np.percentile(samples[:, 2], 5) > p[2]  # the refits all sit above the point
    lo, hi = curve.intervals(samples, "optimus", p)["beta2"]
    assert lo <= fit.params["beta2"] <= hi
    assert hi == pytest.approx(np.percentile(samples[:, 2], 95))


def _csv(tmp_path: Path, header: str, rows: list[tuple[object, ...]]) -> Path:
    path = tmp_path / "log.csv"
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_a_csv_epoch_column_from_0_is_the_row_numbers_not_a_column_left_unused(
    tmp_path: Path,
) -> None:
    """epoch 0..39 counts the rows: no warning that "--x epoch fits on it" (it refuses step 0)."""
    path = _csv(tmp_path, "epoch,loss", [(i, 1 / (i + 1)) for i in range(40)])
    assert curve.from_csv(path, None, "loss").notes == []


def test_a_per_step_csv_whose_epoch_column_repeats_is_read_in_its_row_order(
    tmp_path: Path,
) -> None:
    """epoch 0,0,...,1,1,... beside step 1..40 is a per-step log in order, not a resumed one;
    a column that repeats its values is no step axis to offer as --x either."""
    rows = [(i // 10, i + 1, 1 / (i + 1)) for i in range(40)]
    read = curve.from_csv(_csv(tmp_path, "epoch,step,loss", rows), None, "loss")
    assert (read.steps[-1], read.notes) == (40, [])
    without_step = curve.from_csv(
        _csv(tmp_path, "epoch,loss", [r[::2] for r in rows]), None, "loss"
    )
    assert without_step.notes == []
