"""Break-it round 58, fixer G4: the steps `dlperf.fit_curve` (and `ensemble.fit`) take, T1's
causes C2 and C3.

C2 (wrong number). NumPy and pandas dates and durations as steps (a DatetimeIndex, its
datetime64 values, a Series of them, a list of np.datetime64, a TimedeltaIndex, timedelta64)
were read as counts of their unit since 1970 (1.58e18 nanoseconds): the fit was nonsense
(β2 = 0.515 where the curve's is 0.2, a target of 0.3 "not reachable") and NumPy's
RuntimeWarnings leaked, while the same times as Python datetimes were refused. Now every date
or time is refused in one line, saying that steps are numbers and to give each point's step.
C3 (message). Steps past 2**53 given in order (2**53, 2**53 + 1, ...) were blamed on their
order ("must increase from row to row (give each step once, in order)"), a fix that did
nothing; the CSV reader said float64 cannot tell them apart and how to shift them. Now the API
says the same, from the one check both use (`curve.merged_steps`). Steps past what a float
holds (Python ints past 1.8e308) were an OverflowError traceback from np.asarray; now one line
with the same fix.
"""

from __future__ import annotations

import datetime
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dlperf
from dlperf.converge import ensemble
from dlperf.errors import UserError
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

K: Any = np.arange(1, 41)
LOSS: Any = 1 / (0.05 * K + 1) + 0.2
WHEN = pd.date_range("2020-01-01", periods=40, freq="min")


def _refused(call: Callable[[], Any]) -> str:
    """The one-line UserError `call` raises, with no NumPy warning on the way."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserError) as e:
            call()
    text = str(e.value)
    assert "\n" not in text
    return text


# --- C2: dates and durations as steps ---------------------------------------------------------


@pytest.mark.parametrize(
    "steps",
    [
        WHEN,
        WHEN.values,
        pd.Series(WHEN),
        WHEN.tz_localize("UTC"),
        list(WHEN.values),
        list(WHEN.to_pydatetime()),
        list(WHEN),
        WHEN - WHEN[0] + pd.Timedelta(1, "s"),
        K.astype("timedelta64[s]"),
        [datetime.timedelta(seconds=int(k)) for k in K],
    ],
    ids=[
        "DatetimeIndex",
        "datetime64",
        "Series",
        "tz-aware",
        "list-of-datetime64",
        "list-of-datetime",
        "list-of-Timestamp",
        "TimedeltaIndex",
        "timedelta64",
        "list-of-timedelta",
    ],
)
def test_dates_and_durations_as_steps_are_refused(steps: Any) -> None:
    text = _refused(lambda: dlperf.fit_curve(steps, LOSS))
    assert text.startswith("steps are numbers, not dates or times, got "), text
    assert "give each point's step (1, 2, ...)" in text


def test_dates_as_values_and_in_the_ensemble_are_refused() -> None:
    assert _refused(lambda: dlperf.fit_curve(K, WHEN)).startswith(
        "values are numbers, not dates or times"
    )
    assert _refused(lambda: ensemble.fit(WHEN.values, LOSS)).startswith(
        "steps are numbers, not dates or times"
    )


@pytest.mark.usefixtures("fewer_bootstrap_fits")
def test_the_same_losses_against_step_numbers_fit_the_true_curve() -> None:
    """The fix the message gives: the row numbers fit β = 0.05, 1, 0.2."""
    fit = dlperf.fit_curve(list(range(1, len(WHEN) + 1)), LOSS)
    assert fit.params["beta2"] == pytest.approx(0.2, abs=1e-6)


# --- C3: steps past 2**53 ---------------------------------------------------------------------

BIG = [2**53 + i for i in range(40)]
MERGED = (
    "step 9007199254740993 (point 2) reads as 9007199254740992, the same number as step "
    "9007199254740992 (point 1): float64 cannot tell the steps apart (subtract the same "
    "number from every step, so that the first is 1)"
)


@pytest.mark.parametrize(
    "steps", [BIG, np.array(BIG), pd.Series(BIG)], ids=["ints", "int64", "Series"]
)
def test_steps_float64_cannot_tell_apart_are_named_as_such(steps: Any) -> None:
    assert _refused(lambda: dlperf.fit_curve(steps, LOSS)) == MERGED
    assert _refused(lambda: ensemble.fit(steps, LOSS)) == MERGED


def test_steps_past_2_53_that_go_back_are_still_blamed_on_their_order() -> None:
    back = [BIG[0], *BIG[:-1]]  # 2**53 twice: a true repeat, not float64's
    text = _refused(lambda: dlperf.fit_curve(back, LOSS))
    assert text.startswith("x (the steps) must increase from row to row"), text


def test_steps_past_what_a_float_holds_are_refused_in_one_line() -> None:
    text = _refused(lambda: dlperf.fit_curve([2**1100 + i for i in range(40)], LOSS))
    assert text.startswith("steps hold a number past what a float holds (about 1.8e308)"), text
    assert text.endswith("(subtract the same number from every step, so that the first is 1)")


def test_the_csv_reader_says_the_same(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    rows = "".join(f"{s},{float(v)!r}\n" for s, v in zip(BIG, LOSS, strict=True))
    path.write_text("step,loss\n" + rows)
    r = cli("converge", "fit", "--csv", str(path), "--x", "step", "--y", "loss")
    assert r.code == 2
    assert (
        f"{path}:3: step 9007199254740993 reads as 9007199254740992, the same number as step "
        "9007199254740992 on line 2: float64 cannot tell the steps apart (subtract the same "
        "number from every step, so that the first is 1)"
    ) in r.err
