"""dlperf.parsing: comma lists, NAME=VALUE lists, count ranges and the "did you mean" hint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.parsing import (
    depth,
    did_you_mean,
    file_name_text,
    parse_list,
    parse_names,
    parse_numbers,
    parse_pairs,
    parse_range,
    stem_name,
)

BAD = UserError("bad list")


def test_did_you_mean_names_the_closest_or_falls_back() -> None:
    choices = ["resnet20", "resnet32", "smallcnn"]
    assert did_you_mean("smalcnn", choices, "see the list") == "did you mean smallcnn?"
    assert did_you_mean("resnet2", choices, "", n=2, quote=True) == (
        "did you mean 'resnet32', 'resnet20'?"  # difflib's order: best first, then z to a
    )
    assert did_you_mean("vgg", choices, "see the list") == "see the list"
    assert did_you_mean("lrr", {"lr": 1, "seed": 2}, "") == "did you mean lr?"  # a dict's keys


def test_parse_list_converts_every_part() -> None:
    assert parse_list("1, 8,32", int, BAD, minimum=1) == [1, 8, 32]
    assert parse_list("0.5,2", float, BAD) == [0.5, 2.0]
    for text in ("1,x", "1,,2", "", "0,1"):
        with pytest.raises(UserError, match="bad list"):
            parse_list(text, int, BAD, minimum=1)
    assert parse_list("0,-1", int, BAD) == [0, -1]  # no minimum: any integers


def test_parse_names_drops_empty_parts() -> None:
    assert parse_names(" depth, gpu,") == ["depth", "gpu"]
    assert parse_names(",") == []


def test_parse_pairs_and_numbers() -> None:
    assert parse_pairs("a=1, b = x", "--opt", "--opt a=1") == {"a": "1", "b": "x"}
    with pytest.raises(UserError, match=r"--opt takes NAME=VALUE,\.\.\., got 'a' \(e\.g\. --o"):
        parse_pairs("a", "--opt", "--opt a=1")
    with pytest.raises(UserError, match="--opt: a is given twice in 'a=1,a=2'"):
        parse_pairs("a=1,a=2", "--opt", "--opt a=1")
    assert parse_numbers("w=8,p=2.5", "--opt", "--opt w=8") == {"w": 8.0, "p": 2.5}
    for text in ("w=fast", "w=nan", "w=inf"):
        with pytest.raises(UserError, match="--opt: every value must be a number"):
            parse_numbers(text, "--opt", "--opt w=8")


def test_parse_range() -> None:
    assert parse_range("1-4,8", "workers") == [1, 2, 3, 4, 8]
    assert parse_range("2,4", "ps") == [2, 4]
    for bad in ("0-2", "a", "3-x"):
        with pytest.raises(UserError):
            parse_range(bad, "workers")


def test_depth_counts_levels_without_recursing() -> None:
    assert [depth(1), depth([1]), depth({"a": [1, [2]]}), depth({})] == [1, 2, 4, 1]
    deep: list[object] = []
    for _ in range(100_000):  # far past the interpreter's recursion limit
        deep = [deep]
    assert depth(deep) == 100_001


def test_a_file_name_is_shown_with_bad_bytes_replaced_and_controls_escaped() -> None:
    raw = os.fsdecode(b"caf\xe9\x1b[2J")  # Latin-1 bytes and an escape sequence
    assert file_name_text(raw) == "caf\ufffd\\x1b[2J"
    assert stem_name(Path(f"/d/{raw}.toml")) == file_name_text(raw)
