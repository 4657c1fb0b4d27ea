"""Break-it round 44, lead: a finite number past a float's range is refused as 10**400 is.

T2's C1 (case 38): `log` refused `10**400` and `Fraction(10**400)` ("a number no float holds",
as docs/api.md says: float() raises OverflowError) but stored `Decimal("1e400")` and
`np.longdouble("1e400")` as inf, and their negatives as -inf, exit 0: float() of those returns
an infinity without raising. Now each is refused in the same one `UserError` line, which also
reads "must be a number a float can hold" (it said "is a number a float can hold"); a value
that is an infinity (Decimal's, NumPy's) is still stored as one.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dlperf
from dlperf.errors import UserError


@pytest.mark.parametrize(
    "value",
    [
        Decimal("1e400"),
        Decimal("-1e400"),
        np.longdouble("1e400"),
        -np.longdouble("1e400"),
        10**400,
        Fraction(10**400),
    ],
    ids=["Decimal", "-Decimal", "longdouble", "-longdouble", "int", "Fraction"],
)
def test_a_finite_number_past_a_float_is_refused(db: str, value: Any) -> None:
    if isinstance(value, np.longdouble) and math.isinf(value):  # a longdouble as wide as a float
        pytest.skip("this machine's longdouble holds no number past a float's range")
    with dlperf.track("big", store=db) as run, pytest.raises(UserError) as e:
        run.log(1, x=value)
    said = str(e.value)
    assert said.startswith("metric train/x must be a number a float can hold (up to 1.798e+308)")
    assert "\n" not in said
    assert dlperf.Store(db).metric_keys(run.id) == []


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (Decimal("Infinity"), math.inf),
        (Decimal("-Infinity"), -math.inf),
        (np.longdouble("inf"), math.inf),
        (Decimal("1e308"), 1e308),
    ],
    ids=["Decimal inf", "Decimal -inf", "longdouble inf", "Decimal 1e308"],
)
def test_an_infinity_or_a_float_sized_number_is_stored(db: str, value: Any, kept: float) -> None:
    with dlperf.track("inf", store=db) as run:
        run.log(1, x=value)
    assert dlperf.Store(db).metrics(run.id, "train/x") == [(1, kept)]
