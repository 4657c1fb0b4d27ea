"""dlperf.formatting: numbers as every table and the HTML report print them (fmt), and the
first few of a list (few)."""

from __future__ import annotations

import pytest

from dlperf.formatting import few, fmt


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "-"),
        (True, "yes"),
        (False, "no"),
        (0.0, "0"),
        (0.123456, "0.1235"),
        (1234.5678, "1235"),
        (9999.4, "9999"),
        (12345.6, "12,346"),
        (-2_000_000.0, "-2,000,000"),
        (0.00012345, "0.000123"),  # under 1e-3: three significant digits
        (-0.0005, "-0.0005"),
        (float("nan"), "nan"),
        (float("-inf"), "-inf"),
        (12345, "12345"),  # an int is printed whole, without separators
        ("resnet20", "resnet20"),
        ("a\x1b[2Jb", "a\\x1b[2Jb"),  # an escape sequence in a stored name is shown, not run
    ],
)
def test_fmt(value: object, shown: str) -> None:
    assert fmt(value) == shown


def test_digits_are_significant_digits() -> None:
    assert fmt(3.14159265, digits=2) == "3.1"
    assert fmt(0.5, digits=6) == "0.5"


@pytest.mark.parametrize(
    ("items", "shown"),
    [([], ""), (["a"], "a"), (["a", "b", "c"], "a, b, c"), (list("abcde"), "a, b, c and 2 more")],
)
def test_few_names_three_and_counts_the_rest(items: list[str], shown: str) -> None:
    assert few(items) == shown
