"""Break-it round 30, part P3, fixer S5: views that showed less than the store holds.

C3. A step logged twice for one metric (`log(1, loss=1.0); log(1, loss=2.0)`): the `runs show`
    table had one row a step, the last value; it has a row per value, as `Store.frame` does.
C2. `runs repair` of a store missing one of dlperf's tables printed its row as `0 | 0 | 1`, as a
    table copied empty with a damaged stretch: the row says `missing`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import dlperf
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


def test_runs_show_table_has_a_row_per_value_of_a_step(db: str, cli: Cli) -> None:
    """Was `1 │ 2` and `2 │ 3`: the step's first value, 1.0, was not in the table. The n-th
    value of each metric at a step shares the n-th row, as Store.frame lines them up."""
    with dlperf.track("twice", store=db) as run:
        run.log(1, loss=1.0)
        run.log(1, loss=2.0, acc=0.5)
        run.log(2, loss=3.0)
    result = cli("runs", "show", "1")
    assert result.code == 0, result.err
    table = result.out.split("per step\n", 1)[1].splitlines()
    assert table[2:] == [
        "   1 │       0.5 │          1",
        "   1 │         - │          2",
        "   2 │         - │          3",
    ], result.out


def test_runs_repair_table_says_a_table_is_missing(tmp_path: Path, cli: Cli) -> None:
    """Was `metrics │ 0 │ 0 │ 1`, read as an empty table copied with a damaged stretch."""
    source = tmp_path / "renamed.db"
    with dlperf.track("p", store=str(source)) as run:
        run.log(1, loss=1.0)
    with closing(sqlite3.connect(source)) as conn:
        conn.execute("ALTER TABLE metrics RENAME TO metrics_old")
    result = cli("--db", str(source), "runs", "repair", str(tmp_path / "fixed.db"))
    assert result.code == 0, result.err
    assert "metrics   │ missing │        0 │                         1\n" in result.out, result.out
    # the column holds text now, so print_table aligns it left
    assert "runs      │ 1       │        0 │                         0\n" in result.out, result.out
