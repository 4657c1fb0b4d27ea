"""Break-it round 70, T2 cause 1: a tracked run that logged no metric keeps `final: {}` in its
summary. Before: `runs compare` showed a row `final │ {} │ {}` (docs/run.md: rows with no value in
any run are left out), `runs show` a `final` row of `{}`, and `--json` and `Store.compare()` a
`final` key beside `final.train/loss`. Now an empty table is no result: no row, no key."""

from __future__ import annotations

import json
from collections.abc import Callable

import dlperf
from tests.conftest import CliResult


def _three(db: str) -> None:
    with dlperf.track("a", config={"a": 1}, store=db):
        pass  # logs nothing
    with dlperf.track("b", config={"a": 2}, store=db):
        pass
    with dlperf.track("c", config={"a": 3}, store=db) as run:
        run.log(1, loss=1.0)


def test_a_run_that_logged_nothing_has_no_final_row(cli: Callable[..., CliResult], db: str) -> None:
    _three(db)
    shown = cli("runs", "compare", "1", "2")
    assert shown.code == 0, shown.err
    assert "{}" not in shown.out
    assert not any(line.split("│")[0].strip() == "final" for line in shown.out.splitlines())
    document = json.loads(cli("runs", "compare", "1", "3", "--json").out)
    assert "final" not in document["summary"]
    assert document["summary"]["final.train/loss"] == [None, 1.0]
    assert "{}" not in cli("runs", "show", "1").out
    assert "final" not in dlperf.Store(db).compare([1, 2, 3]).summary
