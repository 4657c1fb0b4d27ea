"""The twenty-fifth break-it round (data tester, P2), converge's CSV reader and curves.

C1: a CSV field over the csv module's 131,072 characters (a stray opening quote in a large
file swallows the rest of it) was a 57-line `_csv.Error` traceback. C2: an unclosed quote in a
small file was blamed on the last line, with the rest of the file in the message. C7: a short
row was "'loss' is not a number: None". C8: accuracy in percent was told to check
converge.metric. C9: "must increase from row to row" named no line, and integer steps past
2**53 that do increase were blamed for their order. C10: a header padded with spaces (the old
Ultralytics results.csv) was "no column 'epoch' (columns:   epoch, ...)". Each is now one line
and exit 2 naming the line and the fix, or read right.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dlperf.converge.tables import read_numbers
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult

Cli = Callable[..., CliResult]
STEPS = np.arange(1, 41)
LOSS = 1 / (0.05 * STEPS + 0.5) + 0.2
ROWS = [f"{k},{v:.6f}" for k, v in zip(STEPS, LOSS, strict=True)]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _fit(cli: Cli, path: Path, *args: str) -> CliResult:
    return cli("converge", "fit", "--csv", str(path), *args)


# --- C1: a field over the csv module's limit ------------------------------------------------

# Enough rows after line 7 that a field opened there runs past 131,072 characters.
_LONG = [f"{k},{1 / (0.0005 * k + 0.5) + 0.2:.6f}" for k in range(1, 15_001)]


@pytest.mark.parametrize(
    ("lines", "command", "said"),
    [
        (  # a stray opening quote on line 7 of a large file: the rest of it is one field
            ["step,loss", *_LONG[:5], '6,"1.950000', *_LONG[6:]],
            ["converge", "fit", "--csv", "{csv}", "--x", "step", "--y", "loss"],
            "t.csv:7: an opening quote (\") is never closed: '6,\"1.950000'",
        ),
        (  # a field of 200,000 digits, no quote: `speed fit` reads through the same reader
            ["step,loss", *ROWS[:5], "6," + "1" * 200_000, *ROWS[6:]],
            ["converge", "speed", "fit", "--csv", "{csv}", "--model", "pollux"],
            "t.csv:7: a field of over 131,072 characters",
        ),
        (  # the header's own line, read by `dialect` to tell ',' from tabs
            ["step," + "x" * 200_000, *ROWS],
            ["converge", "fit", "--csv", "{csv}", "--x", "step", "--y", "loss"],
            "t.csv:1: a field of over 131,072 characters",
        ),
    ],
    ids=["stray quote", "long field", "long header"],
)
def test_a_field_past_the_csv_limit_is_one_line_naming_where_it_starts(
    cli: Cli, tmp_path: Path, lines: list[str], command: list[str], said: str
) -> None:
    path = _write(tmp_path / "t.csv", lines)
    result = cli(*(str(path) if arg == "{csv}" else arg for arg in command))
    one_line_error(result, said)
    assert len(result.err) < 400, result.err  # an excerpt, not the field


# --- C2: an unclosed quote in a small file --------------------------------------------------


def test_an_unclosed_quote_is_named_at_its_line_with_a_short_excerpt(
    cli: Cli, tmp_path: Path
) -> None:
    path = _write(tmp_path / "quote.csv", ["step,loss", *ROWS[:5], '6,"0.5', *ROWS[6:]])
    result = _fit(cli, path, "--x", "step", "--y", "loss")
    one_line_error(result, f"{path}:7: an opening quote (\") is never closed: '6,\"0.5'")
    assert len(result.err) < 300, result.err


# --- C7: a short row ------------------------------------------------------------------------


def test_a_short_row_is_named_as_short(cli: Cli, tmp_path: Path) -> None:
    path = _write(tmp_path / "short.csv", ["step,loss", *ROWS[:5], "6", *ROWS[6:]])
    result = _fit(cli, path, "--x", "step", "--y", "loss")
    one_line_error(result, f"{path}:7: 1 field where the header has 2")
    assert "None" not in result.err


# --- C8: accuracy in percent ----------------------------------------------------------------


def test_accuracy_in_percent_is_told_to_divide_by_100(cli: Cli, tmp_path: Path) -> None:
    accuracy = 100 * (1 - (1 / (0.05 * STEPS + 0.5) + 0.05) / 3)
    rows = [f"{k},{a:.3f}" for k, a in zip(STEPS, accuracy, strict=True)]
    path = _write(tmp_path / "pct.csv", ["epoch,acc", *rows])
    result = _fit(cli, path, "--x", "epoch", "--y", "acc", "--metric", "accuracy")
    one_line_error(result, f"{path}: accuracy values must lie in [0, 1]; line 2 holds 37.727")
    assert "divide the column by 100" in result.err
    assert "converge.metric" not in result.err


# --- C9: steps that do not increase, or only beyond float precision ---------------------------


@pytest.mark.parametrize(
    ("steps", "said", "fix"),
    [
        (  # integers that increase by 1, past 2**53: float64 reads the 2nd as the 1st
            [str(2**53 + i) for i in range(40)],
            f"t.csv:3: step {2**53 + 1} reads as {2**53}, the same number as step {2**53} "
            "on line 2",
            "subtract the same number from every step",
        ),
        (  # one row out of order, named by its line
            [str(k) for k in (1, 2, 3, 5, 4, *range(6, 41))],
            "t.csv:6: column 'step' must increase from row to row: step 4 follows step 5 on line 5",
            "give each step once, in order",
        ),
    ],
    ids=["past 2**53", "unsorted"],
)
def test_steps_that_do_not_increase_are_named_by_line(
    cli: Cli, tmp_path: Path, steps: list[str], said: str, fix: str
) -> None:
    rows = [f"{k},{v:.6f}" for k, v in zip(steps, LOSS, strict=True)]
    path = _write(tmp_path / "t.csv", ["step,loss", *rows])
    result = _fit(cli, path, "--x", "step", "--y", "loss")
    one_line_error(result, said)
    assert fix in result.err


# --- C10: a header padded with spaces ---------------------------------------------------------


def test_a_header_padded_with_spaces_is_read_by_its_names(cli: Cli, tmp_path: Path) -> None:
    """The old Ultralytics results.csv pads every field to 23 characters."""
    lines = [f"{'epoch':>23},{'train/loss':>23}"]
    lines += [f"{k - 1:>23},{v:>23.5f}" for k, v in zip(STEPS, LOSS, strict=True)]
    path = _write(tmp_path / "yolo.csv", lines)
    at, columns = read_numbers(path, ["epoch", "train/loss"])
    assert at[:2] == [2, 3] and columns["epoch"][:2] == [0.0, 1.0]
    assert columns["train/loss"][0] == pytest.approx(LOSS[0], abs=1e-5)
    result = _fit(cli, path, "--x", "Epoch", "--y", "train/loss")
    one_line_error(result, "has no column 'Epoch' (did you mean 'epoch'?)")
