"""Break-it round 55, fixer G3: `runs list --kind ''`, the sweep ranking's "runs" column and
`runs compare --study` of a study without runs.

T3 C1: `dlperf runs list --kind ''` (a script's empty `--kind "$K"`) listed every run of every
kind, exit 0, while `--kind ' '` and `--where kind=` were refused: the stores read an empty
kind as no filter, and the listing's check of a kind skipped it (a falsy kind). An empty kind
is now a kind no run holds: refused in one line, exit 2, `error: unknown kind '' (kinds: run,
...)`, on SQLite and PostgreSQL, through the CLI, `Store.runs(kind='')` and the stores'
`list_runs` alike.

T3 C2: the report's sweep ranking and the terminal's sweep table headed the column that holds
each point's run IDs "runs"; beside the report's "finished" count, "2 | 1" read as two runs,
one finished. The column is now headed "run IDs" in both.

T3 C3: `runs compare --study N` of a study with no runs hinted "compare its run with
another": there is no run. That hint is now the one-run study's; a study without runs hints
"compare runs by ID: dlperf runs compare ID ID".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dlperf.api import Store
from dlperf.errors import UserError
from dlperf.store import RunStore
from dlperf.store.query import list_runs
from dlperf.store.reading import SqliteListing
from tests.conftest import CliResult, fresh_store_url


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "fx55")


def _finished(store: RunStore, name: str, config: dict[str, Any], study: int | None) -> int:
    run_id = store.create_run(name, "run", config, study_id=study)
    store.finish_run(run_id, summary={"test_accuracy": 0.5, "epochs": 1})
    return run_id


# --- C1: an empty --kind ----------------------------------------------------------------------


def test_an_empty_kind_is_refused_not_read_as_every_kind(
    cli: Callable[..., CliResult], url: str
) -> None:
    store = RunStore.open(url)
    try:
        _finished(store, "e", {"model": {"name": "smallcnn"}}, None)
        # the store's own listing: an empty kind selects no run (before: every run)
        assert store.list_runs(kind="") == []
        with pytest.raises(UserError) as refused:
            list_runs(lambda: store, kind="")
        assert refused.value.message == "unknown kind ''"
        assert refused.value.hint is not None and refused.value.hint.startswith("kinds: run, ")
    finally:
        store.engine.dispose()
    listed = cli("--db", url, "runs", "list", "--kind", "")
    assert listed.code == 2, listed.out  # before: 0, run 1 listed
    said = " ".join(listed.err.split())
    assert said.startswith("error: unknown kind '' (kinds: run, "), listed.err
    assert listed.out == ""
    # as a blank kind already was
    blank = cli("--db", url, "runs", "list", "--kind", " ")
    assert blank.code == 2 and "unknown kind ' '" in blank.err, blank.err
    with pytest.raises(UserError, match=r"^unknown kind '' \(kinds: run, "):
        Store(url).runs(kind="")
    assert [r.id for r in Store(url).runs(kind="run")] == [1]


def test_the_sqlite_listing_reads_an_empty_kind_as_a_kind(tmp_path: Path) -> None:
    """`runs list` reads a SQLite file without SQLAlchemy (`SqliteListing`): the same."""
    path = tmp_path / "s.db"
    store = RunStore.open(f"sqlite:///{path}")
    _finished(store, "e", {}, None)
    store.engine.dispose()
    listing = SqliteListing(path, f"sqlite:///{path}")
    assert listing.list_runs(kind="") == []  # before: run 1
    assert [r.id for r in listing.list_runs(kind="run")] == [1]


# --- C2: the sweep ranking's column of run IDs ------------------------------------------------


def test_the_sweep_rankings_column_of_run_ids_is_headed_so(
    db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlperf.cli.sweep import _print_summary
    from dlperf.report.site import pages
    from dlperf.report.site.pages import _sweep
    from dlperf.sweep.runner import SweepResult
    from dlperf.sweep.summary import SweepPointResult, SweepRow, axis_winners, group_rows

    store = RunStore.open(db)
    study = store.create_study("lr", "sweep")
    for lr in (0.05, 0.1):
        _finished(store, f"lr-{lr}", {"train": {"lr": lr}}, study)
    # T3's case: one point's run deleted, the other (run 2) alone in the study
    monkeypatch.setattr(pages.figs, "sweep", lambda *_: [])  # the table is the point, not figures
    store.delete_runs([1], force=True)
    page = _sweep(store, store.get_study(study), store.list_runs(study_id=study))
    assert "<th>run IDs</th><th>finished</th>" in page, page[:800]  # before: <th>runs</th>
    assert "<th>runs</th>" not in page

    row = SweepRow.of(SweepPointResult.of_run(2, "finished", {"test_accuracy": 0.5}), {})
    groups = group_rows([row])
    result = SweepResult(study, "lr", {}, None, [row], groups, 2, axis_winners(groups, {}), "d")
    _print_summary(result, None)
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if line.startswith("rank"))
    cells = [c.strip() for c in head.split("┃")]
    assert cells[:3] == ["rank", "point", "run IDs"], out  # before: "runs"


# --- C3: compare --study of a study with no runs ----------------------------------------------


def test_comparing_a_study_without_runs_hints_what_fits(
    cli: Callable[..., CliResult], url: str
) -> None:
    store = RunStore.open(url)
    try:
        empty = store.create_study("empty", "sweep")
        one = store.create_study("one", "sweep")
        run_id = _finished(store, "only", {}, one)
    finally:
        store.engine.dispose()
    r = cli("--db", url, "runs", "compare", "--study", str(empty))
    said = " ".join(r.err.split())
    assert r.code == 2, r.err
    assert (
        f"error: study {empty} holds no runs: compare needs two or more (compare runs by ID: "
        "dlperf runs compare ID ID)"
    ) in said, r.err  # before: (compare its run with another: ...)
    assert "its run" not in said, r.err
    # the one-run study keeps its hint
    r = cli("--db", url, "runs", "compare", "--study", str(one))
    said = " ".join(r.err.split())
    assert r.code == 2, r.err
    assert (
        f"error: study {one} holds one run ({run_id}): compare needs two or more (compare its "
        "run with another: dlperf runs compare ID ID)"
    ) in said, r.err
