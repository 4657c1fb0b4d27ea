"""Break-it round 38, T2 causes C1, C5 and C6: `converge fit` of a rising curve, `converge plan`
of a curve that does not fall, `converge fit RUN` of a run that logged a step more than once.

C1. A loss that rises (3 − (1/(0.002k + 0.5) + 0.3), steps 10 to 1000) was warned as a flat
fit, and then NumPy's own "overflow encountered in scalar power" and "invalid value encountered
in subtract" came on stderr, and the power form's a had the interval nan–nan (JSON [null,
null]): every bootstrap refit was a step (b ~ 1e7), whose a = a'·10^b passes what a float
holds. Now such refits are left out of the intervals and counted in a note; with none left,
the interval is [0, inf) (cannot tell), never nan.
C5. A curve file with beta0 = 0 (1/(0·k + 1) + 0.3, 1.3 at every step) was "unreachable: the
curve levels off at 0.3 loss" for a target of 0.5, above 0.3; beta0 = beta1 = 0 (1/0 at every
step) too. Now "does not fall: beta0 is 0 (it stays at 1.3 loss)", and "not a curve".
C6. A tracked run's steps were not checked as a CSV's are: val/loss logged 20 times at step 1
ended in LAPACK's lines and a LinAlgError traceback; step 20 logged twice was fitted as two
points, no word. Now one line naming the run, the key and the step, exit 2.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import dlperf
from dlperf.converge import curve
from dlperf.converge.plan import remaining_steps
from dlperf.errors import UserError
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

# --- C1: a rising curve's bootstrap -----------------------------------------------------------

STEPS = np.arange(10.0, 1001.0, 10.0)
RISING = 3 - (1 / (0.002 * STEPS + 0.5) + 0.3)


@pytest.mark.usefixtures("fewer_bootstrap_fits")
def test_fit_of_a_rising_curve_says_it_without_numpy_warnings(cli: Cli, tmp_path: Path) -> None:
    """The report's curve, by the command: the flat warning and a note of the refits left
    out, no raw NumPy warning, and every interval a number or an open end."""
    path = tmp_path / "rise.csv"
    rows = "".join(f"{k:g},{float(v)!r}\n" for k, v in zip(STEPS, RISING, strict=True))
    path.write_text("step,loss\n" + rows)
    args = ("converge", "fit", "--csv", str(path), "--x", "step", "--y", "loss")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = cli(*args)
        doc = json.loads(cli(*args, "--json").out)
    assert r.code == 0, r.err
    assert [str(w.message) for w in caught if w.category is RuntimeWarning] == []
    assert "the power fit is flat" in r.err
    assert "note: rise.csv: 20 of 20 power bootstrap refits left out" in r.err
    assert "nan" not in r.out
    assert doc["power"]["ci"]["a"] == [0.0, None]  # [0, inf): cannot tell
    assert all(low is not None for low, _ in doc["power"]["ci"].values())


def test_a_bootstrap_keeps_only_refits_a_float_holds() -> None:
    _, p = curve.fit(STEPS, RISING, "power")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        samples = curve.bootstrap(STEPS, RISING, "power", p, n=5)
    assert samples.shape == (0, 3)
    assert curve.intervals(samples, "power", p) == dict.fromkeys("abc", (0.0, math.inf))
    goal = float(p[2]) + 0.1  # above the flat fit: reached from the first step
    reach = curve.predict("power", p, samples, goal, "loss", first=10.0)
    assert reach.reachable and reach.interval == (10.0, math.inf)


# --- C5: a curve file whose beta0 is 0 --------------------------------------------------------


def _curve(tmp_path: Path, beta0: float, beta1: float) -> Path:
    path = tmp_path / "curve_flat.json"
    path.write_text(json.dumps({"metric": "loss", "beta0": beta0, "beta1": beta1, "beta2": 0.3}))
    return path


def test_plan_of_a_curve_that_does_not_fall(cli: Cli, tmp_path: Path) -> None:
    path = _curve(tmp_path, 0, 1)
    r = cli("converge", "plan", "--curve", str(path), "--speed-params",
            "theta0=0.01,theta1=0.1,theta2=0.2,theta3=0.01,theta4=0.01", "--batch", "256",
            "--target", "0.5", "--ps", "1", "--workers", "1-2")  # fmt: skip
    one_line(r, 2, "target 0.5 is unreachable: the curve in", "curve_flat.json does not fall: "
             "beta0 is 0 (it stays at 1.3 loss)")  # fmt: skip
    assert "levels off" not in r.err
    # At or above where it stays, it is there from the start.
    assert remaining_steps(path, 1.3).steps == 0
    assert remaining_steps(path, 2.0).steps == 0


def test_plan_of_beta0_and_beta1_both_0(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"curve_flat\.json: beta0 and beta1 are both 0: not a"):
        remaining_steps(_curve(tmp_path, 0, 0), 0.5)


# --- C6: a tracked run that logged a step more than once ------------------------------------


def _logged(db: str, steps: list[int]) -> None:
    """Run 1: dlperf.track logging val/loss at `steps`, in that order."""
    with dlperf.track("repeats", store=db) as run:
        for step in steps:
            run.log(step, **{"val/loss": 1 / (0.002 * step + 0.5) + 0.3})


def test_fit_of_a_run_that_logged_a_step_again(cli: Cli, db: str) -> None:
    _logged(db, [10, 20, 20, *range(30, 101, 10), 5, 1])  # 5 and 1 late: sorted, not refused
    # before: fitted "13 points to step 100", step 20 twice, no word
    r = cli("converge", "fit", "1")
    one_line(r, 2, "run 1 logged val/loss at step 20 twice; a fit needs each step once",
             "a CSV of its steps, one value each")  # fmt: skip


def test_fit_and_predict_of_a_run_that_logged_one_step_only(cli: Cli, db: str) -> None:
    _logged(db, [1] * 20)
    # before: LAPACK's "On entry to DLASCL parameter number 4 had an illegal value" and a
    # LinAlgError traceback, exit 1
    for args in (("fit", "1"), ("predict", "1", "--target", "1.5")):
        one_line(cli("converge", *args), 2, "run 1 logged val/loss at step 1 20 times")
