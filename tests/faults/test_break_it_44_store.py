"""Break-it round 44, fixer F8: `runs compare`'s Δ past float range, and three lines that
named the wrong thing.

T2 C2 (wrong number). `runs compare` of two finite configs near ±1e308 showed an infinite
change: lr 0.1 against 1e308 read `+1e+308 (+inf%)`, -1.7e308 against 1.7e308 `+inf (+inf%)`,
three runs `+inf% -inf%`, and 5e-324 against 1 `+1 (+inf%)`: `query.delta` took `v - first`
and its share of the first in floats, which overflow. Now a difference or share a float
cannot hold is worked out exactly (Fraction) and shown to 4 significant digits, as `fmt`
shows a large float: `+3.4e+308`, `+1e+311%`; a share of 10^15 % or more is shown so too,
not as every digit of its float. `--json` holds no Δ: its values are the stored finite
numbers, as before.
T2's notes (wrong words, each already one line and exit 2):
- an experiment file one byte over the 1 MiB cap read "is 1.0 MiB; ... holds at most 1 MiB",
  as if within it. Now, where the MiB figures round alike, both sizes are said in bytes.
- `runs trace` of an empty file, or of one that is not JSON, said JSON's `Expecting value:
  line 1 column 1 (char 0)`, and of a binary one a codec's error. Now the line says the file
  is empty, or is not JSON (nor gzip), and that it is no Chrome/Kineto trace.
- `runs tag 1 zw=a<U+200B>b` called U+200B "a control character or a byte that is not
  UTF-8". Now the line names the character and its kind: "holds U+200B, a format character"
  (a byte that is not UTF-8 is still called that).
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dlperf import traces
from dlperf.errors import UserError
from dlperf.store.query import delta, tag_changes

Cli = Callable[..., Any]


def _one_line(r: Any, said: str) -> None:
    assert r.code == 2, r.err
    assert r.out == ""
    assert len(r.err.splitlines()) == 1, r.err[:500]
    assert said in r.err, r.err


# --- T2 C2: runs compare's Δ past float range ------------------------------------------------


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([0.1, 1e308], "+1e+308 (+1e+311%)"),
        ([-1.7e308, 1.7e308], "+3.4e+308 (+200.0%)"),
        ([1.7e308, -1.7e308], "-3.4e+308 (-200.0%)"),
        ([-1.7976931348623157e308, 1.7976931348623157e308], "+3.595e+308 (+200.0%)"),
        ([5e-324, 1.0], "+1 (+2.024e+325%)"),
        ([0.1, 1e308, -1.7e308], "+1e+311% -1.7e+311%"),
        ([-1.7e308, 1.7e308, 0.1], "+200.0% +100.0%"),
        ([0.0, 1.7e308, -1.7e308], "+1.7e+308 -1.7e+308"),
        ([1e-300, 1.0], "+1 (+1e+302%)"),  # finite as a float, but 302 digits in fixed
        ([1e300, -(10**400)], "-1e+400 (-1e+102%)"),  # an int past float range: no OverflowError
    ],
)
def test_a_change_past_float_range_is_finite_and_short(values: list[Any], shown: str) -> None:
    assert delta(values) == shown


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([0.05, 0.02], "-0.03 (-60.0%)"),  # docs/run.md's example, as before
        ([8, 9, 4], "+12.5% -50.0%"),
        ([0.0, 2.0], "+2"),
        ([1.0, math.inf], "+inf (+inf%)"),  # an infinity logged is an infinite change
        ([1.0, 1.0], "0"),
        ([1.0, "a", 2.0], "- +100.0%"),
    ],
)
def test_ordinary_changes_read_as_before(values: list[Any], shown: str) -> None:
    assert delta(values) == shown


def test_runs_compare_shows_the_finite_change_and_json_the_stored_values(cli: Cli, db: str) -> None:
    import json

    import dlperf

    for name, lr in [("a", 0.1), ("b", 1e308), ("c", -1.7e308)]:
        with dlperf.track(name, config={"lr": lr}, store=db):
            pass
    r = cli("runs", "compare", "1", "2")
    assert r.code == 0, r.err
    (row,) = [line for line in r.out.splitlines() if line.startswith("lr")]
    assert row.split()[-2:] == ["+1e+308", "(+1e+311%)"], row
    r = cli("runs", "compare", "2", "3")
    (row,) = [line for line in r.out.splitlines() if line.startswith("lr")]
    assert row.split()[-2:] == ["-2.7e+308", "(-270.0%)"], row
    r = cli("runs", "compare", "1", "2", "3")
    (row,) = [line for line in r.out.splitlines() if line.startswith("lr")]
    assert row.split()[-2:] == ["+1e+311%", "-1.7e+311%"], row
    r = cli("runs", "compare", "2", "3", "--json")
    assert json.loads(r.out)["config_diff"] == {"lr": [1e308, -1.7e308]}  # no Δ, as before
    assert "inf" not in r.out.lower()


# --- T2's note: a file one byte over the 1 MiB cap read as within it ---------------------------


def test_a_file_one_byte_over_the_cap_says_both_sizes_in_bytes(cli: Cli, tmp_path: Path) -> None:
    from dlperf.config.loading import FILE_MAX_BYTES

    head = '[model]\nname = "smallcnn"\n[data]\nname = "digits"\n'
    over = tmp_path / "e_over.toml"
    over.write_text(head + "#" * (FILE_MAX_BYTES + 1 - len(head) - 1) + "\n")
    assert over.stat().st_size == FILE_MAX_BYTES + 1
    _one_line(
        cli("config", "show", str(over)),
        "e_over.toml is 1,048,577 bytes; an experiment or sweep file holds at most "
        "1,048,576 bytes (1 MiB)",
    )
    at = tmp_path / "e_eq.toml"
    at.write_text(head + "#" * (FILE_MAX_BYTES - len(head) - 1) + "\n")
    assert at.stat().st_size == FILE_MAX_BYTES
    assert cli("config", "show", str(at)).code == 0
    big = tmp_path / "big.toml"
    big.write_text(head + "#" * (FILE_MAX_BYTES + 200_000) + "\n")
    _one_line(cli("config", "show", str(big)), "big.toml is 1.2 MiB; an experiment or sweep")


# --- T2's note: runs trace of an empty or non-JSON file ----------------------------------------


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        ("empty.json", b"", "it is empty (not a Chrome/Kineto trace)"),
        ("blank.json", b"  \n", "it holds nothing but white space (not a Chrome/Kineto trace)"),
        ("text.json", b"hello world", "it is not JSON (not a Chrome/Kineto trace)"),
        ("nul.json", b"\0\0\0\0", "it is not JSON (not a Chrome/Kineto trace)"),
        ("bin.json", b"\xd3\xff\x00\x9c" * 50, "it is neither JSON text nor gzip"),
        (
            "e.json.gz",
            gzip.compress(b"", mtime=0),
            "it decompresses to nothing (not a Chrome/Kineto",
        ),
        (
            "t.json.gz",
            gzip.compress(b"hello", mtime=0),
            "it is not JSON (not a Chrome/Kineto trace)",
        ),
        ("b.json.gz", gzip.compress(b"\xd3\xff" * 9, mtime=0), "it is gzip, but not of JSON text"),
    ],
    # Named by the file alone: the same on every xdist worker, whatever the data's bytes
    ids=["empty", "blank", "text", "nul", "bin", "empty gz", "text gz", "binary gz"],
)
def test_a_trace_that_is_empty_or_not_json_is_named_so(
    tmp_path: Path, name: str, data: bytes, said: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UserError) as refused:
        traces.load(path)
    assert refused.value.message == f"cannot read the trace {path}: {said}" or (
        refused.value.message.startswith(f"cannot read the trace {path}: {said}")
    ), refused.value.message
    assert "Expecting value" not in refused.value.message
    assert "codec" not in refused.value.message


def test_json_cut_short_still_says_where(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text('{"traceEvents": [{"ph": "X"')
    with pytest.raises(UserError, match=r"cannot read the trace .*cut\.json: Expecting ','"):
        traces.load(path)


# --- T2's note: a tag value's format character was called a control character ------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("a\u200bb", "holds U+200B, a format character"),
        ("a\u202eb", "holds U+202E, a format character"),
        ("a\nb", "holds U+000A, a control character"),
        ("a\x1b[31mb", "holds U+001B, a control character"),
        ("a\ue000b", "holds U+E000, a private-use character"),
    ],
)
def test_a_tag_value_names_the_character_it_holds(value: str, said: str) -> None:
    with pytest.raises(UserError) as refused:
        tag_changes([f"zw={value}"])
    assert said in refused.value.message, refused.value.message
    assert "control character or" not in refused.value.message
    assert refused.value.hint == "give printable text"


def test_runs_tag_of_a_format_character_is_one_line(cli: Cli, db: str) -> None:
    import dlperf

    with dlperf.track("t", store=db):
        pass
    _one_line(cli("runs", "tag", "1", "zw=a\u200bb"), "holds U+200B, a format character")
