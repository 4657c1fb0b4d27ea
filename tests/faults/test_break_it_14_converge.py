"""The fourteenth break-it round (converge, C1 and C7): curves at any scale, and the ensemble's
plateau on a curve measured with little noise.

C1: `converge fit` of the Optimus curve 1/(0.05k + 1) + 0.2 times 1e-11 said β2 = 1e-10, above
every measured value (1.15e-11 down to 5.3e-12), and `converge predict --form optimus
--target 5e-12` said "not reachable" with that asymptote (truth: β2 = 2e-12, reached at step
47); at 1e-30 the fit called the curve flat. The fit scaled the steps but not the values, so
least squares' nudge of β2 = 0 into its bounds (1e-10) and the flat test's floor (1e-12) were
absolute. Now the values are divided by the power of two nearest their largest before fitting
and the parameters scaled back: the fit of c·y is c times the fit of y, from 1e-30 to 1e149
(values from 1e40 to 1e150 were called flat too). The ensemble (`converge predict`'s default)
had absolute floors too (a goal counted reached within 1e-12, a plateau prior floored at
1e-12): values of 1e-11 reached 5e-12 at step 41, not 47; it is solved on the same scaled
values.

C7: `converge predict` of that Optimus curve with 0.1% noise gave the plateau [0.3307, 0.3334]
(truth 0.2), the hyperbolic family (exactly the curve's form) 1% of the weight and Weibull 95%,
and "cannot tell" for 0.35 (reached at step 114); without noise [0.3307, 0.3307]. The grid's
spacing outweighed the likelihood: the hyperbolic family's scale grid (steps of 43%) has no
point near the curve's s = 0.5, so its best point misfit 8x more than the noise, and a
posterior on one grid point (1.2 effective) took the family whose grid fell nearest. A
posterior narrower than the grid now has each family's shape grid moved onto its own least-
squares optimum (by less than a step) and is weighed again.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.converge import curve, ensemble
from tests.conftest import CliResult
from tests.faults.test_break_it_12_converge import _csv

pytestmark = pytest.mark.usefixtures("fewer_bootstrap_fits")  # 20 refits, not 200

Cli = Callable[..., CliResult]
STEPS = np.arange(1.0, 41.0)
OPTIMUS = 1.0 / (0.05 * STEPS + 1.0) + 0.2  # β = (0.05, 1, 0.2)


def _json(cli: Cli, *args: str) -> dict[str, object]:
    r = cli("converge", *args, "--json")
    assert r.code == 0, (r.code, r.err)
    assert "warning" not in r.err and "Traceback" not in r.err, r.err
    doc: dict[str, object] = json.loads(r.out)
    return doc


def test_a_fit_of_tiny_values_finds_their_asymptote_below_them(cli: Cli, tmp_path: Path) -> None:
    """The repro: values of 1e-11 got β2 = 1e-10 (above them all), silently."""
    path = _csv(tmp_path, (OPTIMUS * 1e-11).tolist())
    doc = _json(cli, "fit", "--csv", str(path), "--x", "step", "--y", "metric")
    assert doc["beta2"] == pytest.approx(2e-12, rel=1e-6)
    assert doc["beta0"] == pytest.approx(0.05e11, rel=1e-6)
    assert doc["beta1"] == pytest.approx(1e11, rel=1e-6)
    assert doc["rmse"] < 1e-20 and doc["converged"] is True
    power = doc["power"]
    assert isinstance(power, dict)
    assert 0.0 <= power["c"] < float(OPTIMUS.min() * 1e-11), power  # c was floored at 1e-10


def test_predict_of_tiny_values_reaches_a_target_above_their_asymptote(
    cli: Cli, tmp_path: Path
) -> None:
    path = _csv(tmp_path, (OPTIMUS * 1e-11).tolist())
    doc = _json(cli, "predict", "--csv", str(path), "--x", "step", "--y", "metric",
                "--form", "optimus", "--target", "5e-12")  # fmt: skip
    # 1/(0.05k + 1) + 0.2 = 0.5 at k = 46.67: the first whole step is 47.
    assert doc["reachable"] is True and doc["predicted_step"] == 47, doc
    assert doc["asymptote"] == pytest.approx(2e-12, rel=1e-6)


def test_a_curve_of_1e_minus_30_is_not_called_flat(cli: Cli, tmp_path: Path) -> None:
    path = _csv(tmp_path, (OPTIMUS * 1e-30).tolist())
    doc = _json(cli, "fit", "--csv", str(path), "--x", "step", "--y", "metric")
    assert doc["converged"] is True and doc["beta2"] == pytest.approx(2e-31, rel=1e-6)


def _curve(form: str, p: np.ndarray) -> np.ndarray:
    return curve.model(form)(STEPS, p)


NOISY = OPTIMUS + np.random.default_rng(3).normal(0, 0.002, STEPS.size)
SCALES = [1e-30, 1e-20, 1e-11, 1e-6, 1e-3, 1e3, 1e11, 1e20, 1e30, 1e40, 1e80, 1e149]


@pytest.mark.parametrize("form", ["optimus", "power"])
@pytest.mark.parametrize("values", [OPTIMUS, NOISY], ids=["exact", "noisy"])
def test_the_fit_of_c_times_a_curve_is_c_times_its_fit(form: str, values: np.ndarray) -> None:
    """fit(c·y) = c·fit(y): the same curve, its parameters and its flags at any scale (the
    Optimus form called values from 1e40 to 1e150 flat, and anything below ~1e-9 wrong)."""
    unit, p1 = curve.fit(STEPS, values, form)
    assert unit.converged, unit.message
    for c in SCALES:
        fitted, pc = curve.fit(STEPS, values * c, form)
        assert fitted.converged, (c, fitted.message)
        np.testing.assert_allclose(_curve(form, pc) / c, _curve(form, p1), rtol=1e-6)
        assert fitted.rmse / c == pytest.approx(unit.rmse, rel=1e-3, abs=1e-12)
        # The parameters themselves: the asymptote and amplitude scale with c, the rest by
        # the model's own scaling (Optimus: β0, β1 as 1/c; the power law's b not at all).
        back = pc * (np.array([c, c, 1 / c]) if form == "optimus" else np.array([1 / c, 1, 1 / c]))
        np.testing.assert_allclose(back, p1, rtol=1e-4, atol=1e-9)


def test_bootstrap_intervals_scale_with_the_values() -> None:
    """The residual bootstrap refits in the same scaled units: its samples are c times those
    of the curve at scale 1 (β2 = 1e-10 was its floor at 1e-11 too)."""
    _, p1 = curve.fit(STEPS, NOISY)
    s1 = curve.bootstrap(STEPS, NOISY, "optimus", p1, n=20)
    for c in (1e-11, 1e60):
        _, pc = curve.fit(STEPS, NOISY * c)
        sc = curve.bootstrap(STEPS, NOISY * c, "optimus", pc, n=20)
        np.testing.assert_allclose(sc[:, 2] / c, s1[:, 2], rtol=1e-4, atol=1e-9)
        np.testing.assert_allclose(sc[:, :2] * c, s1[:, :2], rtol=1e-4)


def _ensemble(values: np.ndarray, target: float) -> ensemble.EnsemblePrediction:
    return ensemble.predict(ensemble.fit(STEPS, values), target, "loss", STEPS, values)


@pytest.mark.parametrize("values", [OPTIMUS, NOISY], ids=["exact", "noisy"])
def test_the_ensemble_answers_c_times_a_curve_as_the_curve(values: np.ndarray) -> None:
    """`converge predict`'s default: the same step, c times the plateau, at any scale. A goal
    reached within 1e-12 (absolute) and a plateau prior floored at 1e-12 made values of 1e-11
    reach 5e-12 at step 41, not 47."""
    unit = _ensemble(values, 0.5)
    assert unit.verdict == "answer" and unit.predicted_step is not None
    assert 44 <= unit.predicted_step <= 50, unit
    for c in (1e-30, 1e-11, 1e100):
        scaled = _ensemble(values * c, 0.5 * c)
        assert (scaled.verdict, scaled.predicted_step) == (unit.verdict, unit.predicted_step), c
        assert scaled.interval == unit.interval, c
        # To least squares' tolerance: a posterior narrower than the grid is moved onto each
        # family's optimum (C7), and least squares is not scale-exact.
        assert scaled.plateau / c == pytest.approx(unit.plateau, rel=1e-6), c
        np.testing.assert_allclose(
            np.array(scaled.plateau_interval) / c, unit.plateau_interval, rtol=1e-6
        )
        # Without noise the hyperbolic family and mmf at d = 1 are the same curve, fitted to
        # the float's rounding: which of the two gets the weight is the rounding's choice.
        if values is NOISY:
            assert scaled.family_weight == pytest.approx(unit.family_weight, abs=1e-5), c


def _noisy_optimus(noise: float, seed: int = 1) -> np.ndarray:
    """The Optimus curve with relative Gaussian noise (seed 1 at 1e-3: the tester's file)."""
    return OPTIMUS * (1.0 + noise * np.random.default_rng(seed).standard_normal(STEPS.size))


def test_the_ensemble_holds_a_low_noise_optimus_curves_plateau(cli: Cli, tmp_path: Path) -> None:
    """The repro: 0.1% noise, target 0.35 (1/(0.05k + 1) + 0.2 = 0.35 at k = 113.3)."""
    path = _csv(tmp_path, _noisy_optimus(1e-3).tolist())
    doc = _json(cli, "predict", "--csv", str(path), "--x", "step", "--y", "metric",
                "--target", "0.35")  # fmt: skip
    lo, hi = doc["plateau_interval"]  # type: ignore[misc]
    assert lo <= 0.2 <= hi and hi - lo < 0.02, doc  # was [0.3307, 0.3334]
    assert doc["verdict"] == "answer", doc  # was "cannot tell"
    first, last = doc["interval"]  # type: ignore[misc]
    assert first <= 114 <= last, doc
    assert doc["family_weights"]["hyperbolic"] > 0.5, doc  # type: ignore[index]


@pytest.mark.parametrize("noise", [0.0, 1e-6, 1e-4])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_ensembles_plateau_holds_the_truth_at_any_low_noise(noise: float, seed: int) -> None:
    """To the noise's own size (and the float's): the plateau, the Optimus form's weight
    (hyperbolic, or mmf at d = 1: the same curve) and the step."""
    p = _ensemble(_noisy_optimus(noise, seed), 0.35)
    lo, hi = p.plateau_interval
    assert lo - noise - 1e-9 <= 0.2 <= hi + noise + 1e-9, (noise, p)
    assert p.family_weight["hyperbolic"] + p.family_weight["mmf"] > 0.9, (noise, p)
    assert p.verdict == "answer" and p.interval is not None, (noise, p)
    assert p.interval[0] <= 114 <= p.interval[1], (noise, p)


@pytest.mark.xfail(
    strict=True,
    reason="C7, left: at 0.1% noise the plateau's 90% interval holds 0.2 in about 1 case of 4 "
    "(0 before; at 0.3%, where the grid is not too coarse and nothing changed, 1 in 2), not 9 "
    "of 10; the step's interval holds 114 in 20 of 20. Moved onto each family's optimum, the "
    "grid still has one shape point across the narrow ridge of (plateau, shape) the points "
    "allow: the interval is the plateau's spread at that shape, narrower than over the ridge.",
)
def test_the_plateau_interval_covers_at_about_its_rate_at_low_noise() -> None:
    held = 0
    for seed in range(10, 16):
        lo, hi = _ensemble(_noisy_optimus(1e-3, seed), 0.35).plateau_interval
        held += lo <= 0.2 <= hi
    assert held >= 5


def test_a_window_that_reached_0_is_weighed_again_with_its_plateau_at_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every plateau of a window that reached 0 is 0: moving the grid moves only the shapes
    (least squares refused bounds of [0, 0] for the plateau)."""
    monkeypatch.setattr(ensemble, "MIN_SPREAD", math.inf)  # every posterior weighed again
    y = OPTIMUS - OPTIMUS.min()
    post = ensemble.fit(STEPS, y)
    assert np.all(post.c == 0.0)
    p = ensemble.predict(post, 0.01, "loss", STEPS, y)
    reached = float(STEPS[np.argmax(y <= 0.01)])
    assert p.plateau_interval == (0.0, 0.0) and p.predicted_step == p.actual_step == reached, p
