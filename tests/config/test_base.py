"""dlperf.config.base: the strict Section, the shared value ranges, and the UTF-8 check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from dlperf.config.base import (
    NOT_UTF8,
    PRECISIONS,
    Count,
    Figure,
    Fraction,
    Section,
    _escaped,
    _not_utf8,
)

BAD = "caf\udce9"  # b"caf\xe9" (Latin-1) as Python decodes it from argv: a surrogate escape


class Toy(Section):
    count: Count = 1
    share: Fraction = 0.0
    peak: Figure | None = None
    name: str = "x"
    path: Path | None = None
    extra: dict[str, Any] = {}  # noqa: RUF012


def error(**values: Any) -> dict[str, Any]:
    with pytest.raises(ValidationError) as e:
        Toy(**values)
    return e.value.errors()[0]  # type: ignore[return-value]


def test_precisions_are_the_three_names() -> None:
    assert PRECISIONS == ("fp32", "bf16", "fp16")


def test_strict_types_refuse_text_and_booleans_for_numbers() -> None:
    assert error(count="5")["type"] == "int_type"
    assert error(count=True)["type"] == "int_type"


def test_unknown_keys_are_refused() -> None:
    assert error(cuont=2)["type"] == "extra_forbidden"


def test_ranges_hold_at_their_edges() -> None:
    assert Toy(count=2**31 - 1).count == 2**31 - 1
    assert error(count=2**31)["type"] == "less_than"
    assert error(count=0)["type"] == "greater_than_equal"
    assert Toy(share=0.0).share == 0.0
    assert error(share=1.0)["type"] == "less_than"  # a fraction is below 1
    assert Toy(peak=1e9).peak == 1e9
    assert error(peak=1e9 * 1.0001)["type"] == "less_than_equal"
    assert Toy(peak=1e-6).peak == 1e-6
    assert error(peak=1e-6 * 0.9999)["type"] == "greater_than_equal"
    assert error(peak=0.0)["type"] == "greater_than_equal"


def test_inf_and_nan_are_refused() -> None:
    assert error(peak=float("inf"))["type"] in ("finite_number", "less_than_equal")
    assert error(share=float("nan"))["type"] == "finite_number"


def test_assignment_is_validated_too() -> None:
    toy = Toy()
    with pytest.raises(ValidationError):
        toy.count = 0
    assert toy.count == 1


def test_text_that_is_not_utf8_is_refused_naming_the_escaped_bytes() -> None:
    e = error(name=BAD)
    assert e["type"] == NOT_UTF8
    assert e["msg"] == (
        "is not UTF-8: 'caf\\xe9' (rename the file or folder so that its name is UTF-8)"
    )


def test_not_utf8_inside_a_path_list_or_table_says_where() -> None:
    assert error(path=Path("/tmp") / BAD)["type"] == NOT_UTF8
    e = error(extra={"files": ["ok", BAD]})
    assert "(at files[1])" in e["msg"]
    e = error(extra={BAD: 1})  # a key
    assert "'caf\\xe9'" in e["msg"] and "(at" not in e["msg"]


def test_not_utf8_finds_the_first_bad_text_and_its_place() -> None:
    assert _not_utf8("fine", "") is None
    assert _not_utf8(3, "") is None
    assert _not_utf8({"a": {"b": ["x", BAD]}}, "") == (BAD, "a.b[1]")
    assert _not_utf8((BAD,), "k") == (BAD, "k[0]")


def test_escaped_writes_bytes_as_ls_b_does() -> None:
    assert _escaped(BAD) == "caf\\xe9"
    assert _escaped("plain é") == "plain é"
    assert _escaped("\ud800") == "\\ud800"  # a lone surrogate no byte made
