"""Break-it round 20, part RA: gaps in the Python API's argument checks.

- RA1: bytes were refused as run ids, a shape or a metric, but bytearray and memoryview, the
  same bytes, were walked as numbers: compare(bytearray(b'\\x01\\x02')) compared runs 1 and 2,
  compare(bytearray(b'12')) said "no run 49", a metric bytearray(b'1.5') was stored as 1.5;
- RA2: ensemble.band on no steps failed as ValueError ("not enough values to unpack"), and
  booleans were taken as steps 1 and 0 (as values and steps by ensemble.fit and fit_curve);
- RA3: fit_curve's upto_step NaN said "0 points are too few to fit a 3-parameter curve", and
  ∞ fitted every point, where `--upto-step` refuses both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dlperf
from dlperf.converge import ensemble

K = np.arange(1, 31)
ERROR = 0.05 + 0.6 * K**-0.7


def _refused(call: Callable[[], Any], *said: str) -> str:
    """The one-line UserError `call` raises, holding each of `said`."""
    with pytest.raises(dlperf.UserError) as raised:
        call()
    text = str(raised.value)
    assert "\n" not in text, text
    for part in said:
        assert part in text, text
    return text


# --- RA1: bytes in other types ------------------------------------------------------------

BYTES_LIKE = [bytearray(b"\x01\x02"), memoryview(b"\x01\x02"), bytearray(b"12")]
BYTES_IDS = ["bytearray", "memoryview", "bytearray of digits"]


@pytest.mark.parametrize("given", BYTES_LIKE, ids=BYTES_IDS)
def test_compare_refuses_bytes_of_any_type_as_bytes(db: str, given: Any) -> None:
    store = dlperf.Store(db)
    with dlperf.track("a", store=store), dlperf.track("b", store=store):
        pass
    text = _refused(lambda: store.compare(given), "run ids are a list of whole numbers")
    assert type(given).__name__ in text


@pytest.mark.parametrize("given", BYTES_LIKE, ids=BYTES_IDS)
def test_analyze_refuses_bytes_of_any_type_as_a_shape(given: Any) -> None:
    _refused(lambda: dlperf.analyze("resnet18", input_size=given), "input_size")


@pytest.mark.parametrize(
    "value", [bytearray(b"1.5"), memoryview(b"1.5")], ids=["bytearray", "memoryview"]
)
def test_log_refuses_bytes_of_any_type_as_a_metric(db: str, value: Any) -> None:
    store = dlperf.Store(db)
    with dlperf.track("a", store=store) as run:
        _refused(lambda: run.log(1, loss=value), "metric train/loss is a number")
        run.log(2, loss=1.5)
    assert store.metrics(store.runs()[0].id, "loss") == [(2, 1.5)]


# --- RA2: ensemble.band's steps, and booleans as a curve's numbers ---------------------------


@pytest.fixture(scope="module")
def post() -> ensemble.Posterior:
    return ensemble.fit(K, ERROR)


@pytest.mark.parametrize(
    ("steps", "said"),
    [
        ([], "steps are empty"),
        (np.ones(3, bool), "steps are numbers, not booleans"),
        ([True, 2], "steps are numbers, not booleans"),
        ([0, 1], "steps must be positive and finite"),
        ([1.0, float("nan")], "steps must be positive and finite"),
    ],
    ids=["empty", "bool array", "a bool in a list", "step 0", "NaN"],
)
def test_band_refuses_steps_it_cannot_draw(post: ensemble.Posterior, steps: Any, said: str) -> None:
    """Step 0 and NaN drew a NaN band; a negative step, a band before the curve began."""
    _refused(lambda: ensemble.band(post, steps), said)


def test_band_still_draws_one_step(post: ensemble.Posterior) -> None:
    lo, median, hi = ensemble.band(post, [40])
    assert lo.shape == (1,) and lo[0] <= median[0] <= hi[0]


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: ensemble.fit(K, ERROR > 0.2), "values are numbers, not booleans"),
        (lambda: ensemble.fit([True, *K[1:]], ERROR), "steps are numbers, not booleans"),
        (lambda: dlperf.fit_curve(K, ERROR > 0.2), "values are numbers, not booleans"),
        (lambda: dlperf.fit_curve([True, *K[1:]], ERROR), "steps are numbers, not booleans"),
    ],
    ids=["fit values", "fit steps", "fit_curve values", "fit_curve steps"],
)
def test_a_curve_of_booleans_is_refused(call: Callable[[], Any], said: str) -> None:
    """Fitted as 1s and 0s: a mask passed for the values fitted a curve to it."""
    _refused(call, said)


# --- RA3: fit_curve's upto_step -----------------------------------------------------------


@pytest.mark.parametrize(
    "upto_step",
    [float("nan"), float("inf"), -float("inf"), 0, -5],
    ids=["NaN", "infinity", "minus infinity", "zero", "negative"],
)
def test_fit_curve_refuses_an_upto_step_that_is_not_a_finite_step(upto_step: float) -> None:
    said = _refused(
        lambda: dlperf.fit_curve(K, ERROR, upto_step=upto_step),
        f"upto_step must be a finite number > 0, got {float(upto_step)}",
    )
    assert "converge." not in said  # the API's argument, not the config's key


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"upto": 1.5}, "upto is a fraction in (0, 1], got 1.5"),
        ({"upto": 0}, "upto is a fraction in (0, 1], got 0.0"),
        ({"upto": 0.5, "upto_step": 3}, "give upto or upto_step, not both"),
    ],
)
def test_fit_curves_lines_name_its_own_arguments(given: dict[str, float], said: str) -> None:
    """Not the config's `converge.upto`: a notebook passed `upto=`, and no config is read."""
    assert "converge." not in _refused(lambda: dlperf.fit_curve(K, ERROR, **given), said)


def test_fit_curve_still_fits_up_to_a_step_past_the_last() -> None:
    assert dlperf.fit_curve(K, ERROR, upto_step=1e9).params == dlperf.fit_curve(K, ERROR).params
