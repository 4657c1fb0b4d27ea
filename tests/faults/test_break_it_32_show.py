"""Break-it round 32, P3, cause C2: `runs show` of a run of many logged steps.

C2. `runs show N` of a run of 10^5 logged steps printed its summary, then nothing for 2-3
    minutes and 0.5 GB before its per-step table appeared whole (rich measures every cell of
    a table before it prints a row), where `--json` took 7 s. The table shows every row up to
    TABLE_ROWS; of a run with more, its first and last END_ROWS rows, the only ones read from
    the store, and a line saying how many were left out and where to read them all: the
    table's cost no longer grows with the run. `--json` stays complete.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dlperf
from dlperf.formatting import fmt
from dlperf.store import RunStore
from dlperf.store.query import END_ROWS, TABLE_ROWS, show
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]
Row = tuple[str, int, float]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bk32_show")


def _tracked(url: str, rows: list[Row]) -> int:
    """A dlperf.track run holding `rows` (key, step, value), written at once through the store
    (a loop logging them would take minutes)."""
    with dlperf.track("many", store=url) as run:
        pass
    RunStore.open(url).log_metrics(run.id, rows)
    return run.id


def _table(out: str, axis: str = "step") -> tuple[list[list[str]], list[str]]:
    """The cells of `runs show`'s per-`axis` table (below its header and rule) and the lines
    after it."""
    lines = out.split(f"per {axis}\n", 1)[1].splitlines()[2:]
    cells = [[c.strip() for c in line.split("│")] for line in lines if "│" in line]
    return cells, [line for line in lines if "│" not in line]


def _ends(url: str, run_id: int) -> list[list[str]]:
    """The first and last END_ROWS rows of the whole table (every value read), as printed."""
    _, rows = show(RunStore.open(url), run_id).per_epoch()
    return [[fmt(v) for v in row] for row in rows[:END_ROWS] + rows[-END_ROWS:]]


def test_runs_show_of_many_steps_shows_its_ends_and_says_what_was_left_out(
    store_url: str, cli: Cli
) -> None:
    """Was minutes of silence and memory growing with the steps, then every row at once."""
    n = 1000
    keys = ("train/loss", "train/lr", "val/acc1")
    run_id = _tracked(store_url, [(k, s, 1.0 / s) for s in range(1, n + 1) for k in keys])
    result = cli("--db", store_url, "runs", "show", str(run_id))
    assert result.code == 0, result.err
    cells, after = _table(result.out)
    steps = [*range(1, END_ROWS + 1), *range(n - END_ROWS + 1, n + 1)]
    assert [row[0] for row in cells] == [str(s) for s in steps], result.out
    assert cells[-1] == ["1000", "0.001", "0.001", "0.001"], result.out
    left = n - 2 * END_ROWS
    assert after == [
        f"{left} of {n:,} rows left out, between step {END_ROWS} and step {n - END_ROWS + 1}; "
        f"every row: dlperf runs show {run_id} --json (or runs export, runs plot)"
    ], result.out
    document = cli("--db", store_url, "runs", "show", str(run_id), "--json")
    assert document.code == 0, document.err
    shown = json.loads(document.out)
    assert {k: len(v) for k, v in shown["epochs"].items()} == dict.fromkeys(keys, n)
    assert shown["steps"]["val/acc1"] == list(range(1, n + 1))


def _twice_at_the_tail_edge() -> list[Row]:
    """Step 96 of `a` logged three times, the last two in its last END_ROWS values: its rows
    are (96, 1) and (96, 2), not (96, 0), which `b`'s value at 96 holds."""
    a = [("a", s, float(s)) for s in range(1, 101) for _ in range(2 if s > 96 else 1)]
    a += [("a", 96, 96.5), ("a", 96, 96.7)]
    return a + [("b", s, -float(s)) for s in range(1, 101)]


def _one_step_many_times() -> list[Row]:
    """Every value of `x` at step 0; `y` at steps 0 to 149."""
    return [("x", 0, i / 8) for i in range(150)] + [("y", s, float(s)) for s in range(150)]


def _keys_of_other_lengths() -> list[Row]:
    """`short` ends long before `long` does, `late` begins long after."""
    rows = [("short", s, s / 4) for s in range(5)] + [("long", s, float(s)) for s in range(300)]
    return rows + [("late", s, s * 2.0) for s in range(250, 400, 3)]


@pytest.mark.parametrize(
    "rows", [_twice_at_the_tail_edge(), _one_step_many_times(), _keys_of_other_lengths()]
)
def test_runs_show_ends_are_the_whole_tables_ends(
    store_url: str, cli: Cli, rows: list[Row]
) -> None:
    """The rows shown are those of the table every value makes, each value on the row
    Store.frame lines it up on (the n-th value of a key at a step on the n-th row)."""
    run_id = _tracked(store_url, rows)
    result = cli("--db", store_url, "runs", "show", str(run_id))
    assert result.code == 0, result.err
    cells, after = _table(result.out)
    assert cells == _ends(store_url, run_id), result.out
    assert len(after) == 1 and after[0].endswith("(or runs export, runs plot)"), result.out


def test_runs_show_of_table_rows_is_whole_and_one_more_is_cut(db: str, cli: Cli) -> None:
    whole = _tracked(db, [("loss", s, 1.0) for s in range(TABLE_ROWS)])
    cut = _tracked(db, [("loss", s, 1.0) for s in range(TABLE_ROWS + 1)])
    cells, after = _table(cli("runs", "show", str(whole)).out)
    assert [row[0] for row in cells] == [str(s) for s in range(TABLE_ROWS)] and after == []
    cells, after = _table(cli("runs", "show", str(cut)).out)
    assert len(cells) == 2 * END_ROWS
    assert after[0].startswith(f"{TABLE_ROWS + 1 - 2 * END_ROWS} of {TABLE_ROWS + 1} rows")


def test_runs_show_per_epoch_counts_epochs_not_a_training_runs_steps(db: str, cli: Cli) -> None:
    """A training run's table is per epoch (val/, epoch/ keys): its per-step train/ keys are
    neither rows nor counted among those left out."""
    store = RunStore.open(db)
    sections: dict[str, Any] = {"model": {}, "data": {}, "train": {}, "run": {}}
    run_id = store.create_run("trained", "run", sections)
    epochs = 100
    store.log_metrics(run_id, [("val/acc1", e, e / epochs) for e in range(1, epochs + 1)])
    store.log_metrics(run_id, [("train/loss", s, 1.0) for s in range(1, 50 * epochs + 1)])
    store.finish_run(run_id, "finished", {})
    result = cli("runs", "show", str(run_id))
    assert result.code == 0, result.err
    cells, after = _table(result.out, "epoch")
    assert cells[0] == ["1", "0.01"] and cells[-1] == ["100", "1"], result.out
    assert len(cells) == 2 * END_ROWS
    assert after == [
        f"{epochs - 2 * END_ROWS} of {epochs} rows left out, between epoch {END_ROWS} and "
        f"epoch {epochs - END_ROWS + 1}; every row: dlperf runs show {run_id} --json "
        "(or runs export, runs plot)"
    ], result.out


def test_runs_show_left_out_note_separates_thousands_and_names_one_step_once(
    tmp_path: Path, cli: Cli
) -> None:
    """Review F5: the note said "99980 of 100000 rows" where the other count lines say
    "2,300", and of one step logged many times "between step 5 and step 5"."""
    url = f"sqlite:///{tmp_path / 'note.db'}"
    n = 1200
    many = _tracked(url, [("x", s, float(s)) for s in range(1, n + 1)])
    once = _tracked(url, [("x", 5, i / 8) for i in range(150)])
    notes = []
    for run_id in (many, once):
        result = cli("--db", url, "runs", "show", str(run_id))
        assert result.code == 0, result.err
        notes.append(_table(result.out)[1])
    every = "every row: dlperf runs show {} --json (or runs export, runs plot)"
    assert notes == [
        [
            f"1,180 of 1,200 rows left out, between step {END_ROWS} and step "
            f"{n - END_ROWS + 1}; {every.format(many)}"
        ],
        [f"130 of 150 rows left out, at step 5; {every.format(once)}"],
    ]
