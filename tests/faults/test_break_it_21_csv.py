"""The twenty-first break-it round (P2, cause 11 and a minor): CSVs for `converge`.

Cause 11: a ';'-separated CSV (as Excel writes it in locales whose decimal mark is ',') was
told "csv/semicomma.csv:2: 2 fields where the header has 1 (quote a field that holds a
comma)", or, with '.' decimals, "has no column 'iteration' (did you mean 'iteration;metric'?)":
a fix that does not help. dlperf reads ',' between fields only; where the comma reading fails
and the header splits into more columns at ';' than at ',', the line now says the file looks
';'-separated and how to save it. It is not read as ';'-separated: with ',' decimals a value
such as 1.000 is ambiguous (one, or a thousand with a grouping mark). A comma CSV that reads
today is never refused for a ';' in a column's name.

Minor: "pct.csv: accuracy values must lie in [0, 1]" named the file without the folder the
user gave (csv/pct.csv); it names the path as given now.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliResult

Cli = Callable[..., CliResult]
VALUES = [0.17273, 0.23333, 0.31, 0.36, 0.40, 0.43, 0.45, 0.46]
SEMICOLON = "looks ';'-separated"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _fit(cli: Cli, path: Path | str, *extra: str) -> CliResult:
    return cli("converge", "fit", "--csv", str(path), "--x", "iteration", "--y", "metric",
               "--metric", "accuracy", *extra)  # fmt: skip


@pytest.mark.parametrize("decimal", [",", "."])
def test_a_semicolon_csv_is_named_as_such_with_the_fix(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decimal: str
) -> None:
    """The repro: ',' decimals were told to quote a comma, '.' decimals 'did you mean'."""
    rows = "".join(f"{i};{str(v).replace('.', decimal)}\n" for i, v in enumerate(VALUES, 1))
    _write(tmp_path / "csv" / "semi.csv", "iteration;metric\n" + rows)
    monkeypatch.chdir(tmp_path)
    r = _fit(cli, "csv/semi.csv")
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    line = lines[0]
    assert line.startswith("error: csv/semi.csv"), line
    assert SEMICOLON in line and "'iteration;metric'" in line, line
    assert "',' between fields" in line and "'.' for decimals" in line, line
    assert "quote a field" not in line and "did you mean" not in line, line


def test_a_semicolon_csv_with_a_bom_and_crlf_is_named_too(cli: Cli, tmp_path: Path) -> None:
    """Excel's "CSV UTF-8" in such a locale: a BOM, CRLF line ends, ';' and ',' decimals."""
    rows = "".join(f"{i};{str(v).replace('.', ',')}\r\n" for i, v in enumerate(VALUES, 1))
    path = tmp_path / "excel.csv"
    path.write_bytes(("\ufeffiteration;metric\r\n" + rows).encode("utf-8"))
    r = _fit(cli, path)
    assert r.code == 2 and SEMICOLON in r.err and "'iteration;metric'" in r.err, r.err


def test_a_semicolon_speed_table_is_named_as_such(cli: Cli, tmp_path: Path) -> None:
    """`converge speed fit` reads through the same reader."""
    path = _write(
        tmp_path / "speed.csv",
        "workers;ps;global_batch;step_time_s\n1;1;256;0,5\n2;1;256;0,33\n4;2;256;0,2\n",
    )
    r = cli("converge", "speed", "fit", "--csv", str(path), "--model", "optimus-sync")
    assert r.code == 2, (r.code, r.out, r.err)
    assert SEMICOLON in r.err and "quote a field" not in r.err, r.err


def test_a_comma_csv_with_a_semicolon_in_a_column_name_still_reads(
    cli: Cli, tmp_path: Path
) -> None:
    """No false alarm: 'metric;val' is a column of a comma CSV, and the fit reads it."""
    rows = "".join(f"{i},{v}\n" for i, v in enumerate(VALUES, 1))
    path = _write(tmp_path / "c.csv", "iteration,metric;val\n" + rows)
    r = cli("converge", "fit", "--csv", str(path), "--x", "iteration", "--y", "metric;val",
            "--metric", "accuracy", "--json")  # fmt: skip
    assert r.code == 0, (r.code, r.err)
    assert json.loads(r.out)["n_points"] == len(VALUES)


def test_a_comma_csv_still_says_quote_a_field_that_holds_a_comma(cli: Cli, tmp_path: Path) -> None:
    """The old hint stays where it is the fix: a comma CSV with an unquoted comma in a text
    field (not a decimal comma, 0,6, which is told to write '.' since round 24)."""
    path = _write(tmp_path / "c.csv", "iteration,metric,note\n1,0.5,x\n2,0.6,a, b\n")
    r = _fit(cli, path)
    assert r.code == 2 and "quote a field that holds a comma" in r.err, r.err
    assert SEMICOLON not in r.err, r.err


def test_the_accuracy_range_line_names_the_path_as_given(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The minor: 'pct.csv: accuracy values must lie in [0, 1]' for csv/pct.csv."""
    rows = "".join(f"{i},{v * 100}\n" for i, v in enumerate(VALUES, 1))
    _write(tmp_path / "csv" / "pct.csv", "iteration,metric\n" + rows)
    monkeypatch.chdir(tmp_path)
    r = _fit(cli, "csv/pct.csv")
    assert r.code == 2, (r.code, r.out, r.err)
    assert "error: csv/pct.csv: accuracy values must lie in [0, 1]" in r.err, r.err
