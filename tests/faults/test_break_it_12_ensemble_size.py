"""The twelfth break-it round (part C, cause C5b): `converge predict --form ensemble` (the
default) on a curve of very many rows.

`converge predict --csv big.csv --x step --y metric --upto 0.5` took 125 s and 5.4 GB for
10^6 rows, 17 s for 10^5: the ensemble's grid posterior solved every family's least squares
over every point of the window (commit 6a2cabb bounded `converge fit` and `--form
power|optimus` only). It now fits the grid to the same 1,000 bins (`curve.thinned`), while
what the bins' medians would shrink stays the raw points': the noise simulated after the
window, the spacing of the measurements, the lowest value, the trend, and the validation
set's size (which no longer builds a table of every value against every candidate size). A
window of at most 1,000 points gets the answer it got before, bit for bit.

How long a prediction takes is counted, not timed: the size of every grid problem solved.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlperf.converge import curve, ensemble, fitting
from tests.conftest import CliResult
from tests.faults.test_break_it_12_curve_size import BINS, NOTE, TooBig, _by_hand, _csv, _note

pytestmark = pytest.mark.usefixtures("fewer_bootstrap_fits")  # 20 refits, not 200

Cli = Callable[..., CliResult]

ROWS = 200_000
SIGMA = 0.01  # the noise of every point of the power laws (_power_law of curve_size)


def _power_law(n: int, seed: int = 12) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    k = np.arange(1.0, n + 1)
    return k, 2.0 * k**-0.35 + 0.15 + rng.normal(0.0, SIGMA, n)


@pytest.fixture
def problems(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The number of points of each grid problem (one family's least squares at every grid
    point) the ensemble solves."""
    sizes: list[int] = []
    real = ensemble._grid_fit

    def counted(f: ensemble.Family, theta: Any, x: np.ndarray, *args: Any) -> Any:
        sizes.append(len(x))
        if sizes[-1] > 2 * BINS:
            raise TooBig(f"a grid problem of {sizes[-1]:,} points")
        return real(f, theta, x, *args)

    monkeypatch.setattr(ensemble, "_grid_fit", counted)
    yield sizes


def test_an_ensemble_of_200000_points_solves_problems_of_at_most_1000(
    problems: list[int],
) -> None:
    k, y = _power_law(ROWS)
    post = ensemble.fit(k, y)
    # before: TooBig, a grid problem of 200,000 points (each family's of 384 shapes x 200
    # plateaus over every point: 125 s and 5.4 GB at 10^6 rows). One per family, or two when
    # the posterior is narrower than the grid and weighed again (break-it round 14, C7).
    assert problems in ([BINS] * len(ensemble.FAMILIES), [BINS] * 2 * len(ensemble.FAMILIES))
    assert (post.n_points, post.binned, post.last_step, post.spacing) == (ROWS, BINS, ROWS, 1.0)
    assert "to 1,000 bins of 200,000 points up to step 200000" in ensemble.basis(post)


Fitted = tuple[np.ndarray, np.ndarray, ensemble.Posterior, ensemble.Posterior]


@pytest.fixture(scope="module")
def fitted() -> Fitted:
    """The 200,000-point power law, its posterior, and that of the curve thinned by hand."""
    k, y = _power_law(ROWS)
    return k, y, ensemble.fit(k, y), ensemble.fit(*_by_hand(k, y))


def test_the_noise_trend_and_lowest_value_are_the_raw_points(fitted: Fitted) -> None:
    _, y, post, by_hand = fitted
    # The noise carried past the window is the points' own (0.01), measured every step, not
    # that of bin medians of 200 points (about 0.01·1.25/√200 every 200 steps).
    assert post.noise == pytest.approx(SIGMA, rel=0.1)
    assert by_hand.noise < 0.2 * SIGMA and by_hand.spacing > 150
    assert post.trend == ensemble.trend(y)
    assert post.trend.noise == pytest.approx(SIGMA, rel=0.1)
    assert post.best == y.min() < by_hand.best - 3 * SIGMA
    # The posterior itself is the bins': the same grid weights as the curve thinned by hand.
    assert np.array_equal(post.weight, by_hand.weight)
    assert np.array_equal(post.c, by_hand.c) and np.array_equal(post.a, by_hand.a)


def test_the_answer_agrees_with_the_curve_thinned_by_hand(fitted: Fitted) -> None:
    k, y, post, by_hand = fitted
    # 0.17: the smooth curve, 2·k^−0.35 + 0.15, gets there at 100^(1/0.35) ≈ 520,000, within
    # 3x the 200,000 steps seen; noisy points of the window already touched it, no bin did.
    got = ensemble.predict(post, 0.17, "loss", k, y)
    hand = ensemble.predict(by_hand, 0.17, "loss")
    assert got.verdict == hand.verdict == "answer"
    # The plateau is the posterior's: the bins', to the last digits.
    assert got.plateau_interval == pytest.approx(hand.plateau_interval, rel=1e-9)
    assert got.plateau == pytest.approx(0.15, rel=0.02)
    # The step: a measured point of the window reached 0.17 (a dip of 3 noise at step 24,974),
    # so it is that step, with P(reach) 1, inside the window (break-it round 12, C7; before,
    # the smooth crossing past the window, ≈ 520,000, which `actual step` contradicted).
    assert got.predicted_step == got.actual_step == curve.first_reaching(k, y, "loss", 0.17)
    assert got.p_reachable == 1.0 and got.interval is not None and got.interval[1] <= ROWS
    # The bins reached no 0.17: their posterior's smooth crossing is the true one (within
    # 10%), and with their own noise (medians every 200 steps) earlier, but within 25%.
    smooth = ensemble.predict(by_hand, 0.17, "loss", noise=0)
    assert smooth.predicted_step == pytest.approx(100 ** (1 / 0.35), rel=0.1)
    assert hand.predicted_step == pytest.approx(smooth.predicted_step, rel=0.25)
    # P(reach) of a target no point reached is the posterior's: the bins', to the last digits.
    low, low_hand = (ensemble.predict(p, 0.14, "loss") for p in (post, by_hand))
    assert post.best > 0.14 and low.p_reachable == pytest.approx(low_hand.p_reachable, rel=1e-9)


def test_converge_predict_ensemble_on_half_of_20000_rows_is_bounded_and_said(
    cli: Cli, tmp_path: Path, problems: list[int]
) -> None:
    big = _csv(tmp_path / "big.csv", 20_000)
    args = ("--x", "step", "--y", "metric", "--upto", "0.5", "--target", "0.22")
    result = cli("converge", "predict", "--csv", str(big), *args, "--json")
    # before: TooBig, a grid problem of the window's 10,000 points (two per family when the
    # posterior is weighed again, as in the test above)
    assert problems in ([BINS] * len(ensemble.FAMILIES), [BINS] * 2 * len(ensemble.FAMILIES))
    assert _note(result) == f"note: big.csv: fitted 1,000 bins of 10,000 points {NOTE}"
    doc = json.loads(result.out)
    assert doc["n_points"] == 10_000 and doc["verdict"] == "answer"
    # 2·k^−0.35 + 0.15 = 0.22 at k = (2/0.07)^(1/0.35) ≈ 14,300, but a measured point of the
    # first 10,000 steps already reached 0.22 through the noise: that step is the answer, as
    # `actual step` counts it (break-it round 12, C7; before, the smooth crossing, 14,300)
    assert doc["predicted_step"] == doc["actual_step"] < 10_000 and doc["p_reachable"] == 1.0
    assert doc["plateau"] == pytest.approx(0.15, rel=0.1)
    assert "1,000 bins of 10,000 points" in doc["basis"]


def _accuracy(n: int, val: int = 144, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """An accuracy curve counted over a validation set of `val` images."""
    rng = np.random.default_rng(seed)
    k = np.arange(1.0, n + 1)
    err = 0.9 * k**-0.4 + 0.05 + rng.normal(0, SIGMA, n)
    return k, np.clip(np.round((1 - err) * val), 0, val) / val


def test_the_validation_set_size_of_many_values_takes_little_memory() -> None:
    _, v = _accuracy(2_000)
    tracemalloc.start()
    try:
        found = ensemble.val_size(v)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == 144
    # before: 2,000 values against each of 100,000 candidate sizes, 1.6 GB per array
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB"


def _snapshot(metric: str, target: float, window: int = 250) -> tuple[Any, ...]:
    k, y = _power_law(2 * window) if metric == "loss" else _accuracy(2 * window)
    # What ensemble_prediction reads of the report: the curve, its metric and window.
    r = curve.FitReport(curve.Curve("small", k, y), metric, window, {}, {}, {}, {}, {})
    p, post = fitting.ensemble_prediction(r, target)
    return p, post.noise, post.trend, post.spacing, post.binned, post.weight.tolist()


def test_a_window_of_250_points_is_answered_as_before_bit_for_bit() -> None:
    # The answers before the change (numpy 2 as constraints.txt pins it).
    p, noise, trend, _, binned, _ = _snapshot("loss", 0.24)
    assert binned is None
    assert (p.verdict, p.predicted_step, p.n_points) == ("cannot tell", None, 250)
    assert p.p_reachable == pytest.approx(0.9686338260503897, rel=1e-12)
    assert p.plateau == pytest.approx(0.142877186194443, rel=1e-12)
    assert p.plateau_interval == pytest.approx((0.1386749160122535, 0.17019194237867477), rel=1e-12)
    assert noise == pytest.approx(0.009535725823036295, rel=1e-12)
    assert trend.z == pytest.approx(196.0228159939484, rel=1e-12)
    assert p.basis == (
        "Bayesian average of 6 curve families (pow 95%, hyperbolic 1%, exp 1%, mmf 1%, "
        "weibull 1%, linear 1%) fitted to 250 points up to step 250, log prior on the "
        "plateau; median and 90% interval of the posterior"
    )
    p, noise, _, _, _, _ = _snapshot("accuracy", 0.96)
    assert (p.val_size, p.verdict) == (144, "cannot tell")
    assert p.p_reachable == pytest.approx(0.21169555845357554, rel=1e-12)
    assert p.plateau_interval == pytest.approx((0.935, 0.965625), rel=1e-12)
    assert noise == pytest.approx(0.008938743831308485, rel=1e-12)


@pytest.mark.parametrize("metric, target, window", [("loss", 0.2, BINS), ("accuracy", 0.96, 250)])
def test_at_most_1000_points_the_cap_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, metric: str, target: float, window: int
) -> None:
    capped = _snapshot(metric, target, window)
    assert capped[4] is None
    monkeypatch.setattr(curve, "MAX_POINTS", 10**9)
    assert _snapshot(metric, target, window) == capped


def test_one_point_past_the_cap_is_binned() -> None:
    k, y = _power_law(BINS + 1)
    post = ensemble.fit(k, y)
    assert (post.n_points, post.binned) == (BINS + 1, BINS)
