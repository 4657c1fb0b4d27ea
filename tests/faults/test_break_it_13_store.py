"""What the thirteenth break-it round found in reading the run store, reproduced first: a run
deleted by another process while `report` or `doctor` read the runs they had listed aborted the
command with "no run N in the store", exit 2, and no site (C1); a stop signal landing in a
PostgreSQL query said "run store ... went away ()" before exiting 143 (C2); a PostgreSQL URL
whose search_path names no schema that exists listed an empty store, and a write said
PostgreSQL's raw "no schema has been selected to create in" (C8)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, make_url

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import POSTGRES, CliResult, fresh_store_url
from tests.faults.test_break_it_10_store import a_run
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bi13")


# --- C1: a run deleted between listing and reading ---------------------------------------------


def _deleted_after_listing(monkeypatch: pytest.MonkeyPatch, url: str, victim: int) -> list[int]:
    """RunStore.list_runs as it is, except that right after the first listing of the newest
    runs another process's store deletes run `victim` (`dlperf runs delete` in a second shell,
    landing between the command's listing and its reading of the runs listed). Returns the
    ids deleted so far."""
    listed = RunStore.list_runs
    deleted: list[int] = []

    def listing(
        self: RunStore,
        kind: str | None = None,
        study_id: int | None = None,
        limit: int | None = None,
    ) -> list[Any]:
        runs = listed(self, kind, study_id, limit)
        if limit is not None and not deleted:
            other = RunStore.open(url)
            other.delete_runs([victim])
            other.engine.dispose()
            deleted.append(victim)
        return runs

    monkeypatch.setattr(RunStore, "list_runs", listing)
    return deleted


def _note_once(err: str, victim: int) -> None:
    """One line of stderr tells of the deleted run, as a note, not an error."""
    said = [line for line in err.splitlines() if f"run {victim}" in line]
    assert len(said) == 1, err
    assert said[0].startswith("note: ") and "deleted" in said[0], err
    assert "error" not in err and "Traceback" not in err, err


def test_a_run_deleted_while_report_reads_is_left_out(
    cli: Cli, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was 'error: no run 2 in the store (see `dlperf runs list`)', exit 2, no site: the
    user named no run 2."""
    first, victim, last = (a_run(store_url) for _ in range(3))
    monkeypatch.setattr("dlperf.system.usable_cores", lambda: 1)  # pages drawn in-process
    deleted = _deleted_after_listing(monkeypatch, store_url, victim)
    out = tmp_path / "site"
    result = cli("--db", store_url, "report", "--last", "3", "--out", str(out))
    assert deleted == [victim]
    assert result.code == 0, result.err
    _note_once(result.err, victim)
    assert "2 run(s)" in result.out, result.out
    assert (out / "index.html").is_file()
    assert {p.name for p in out.glob("run-*.html")} == {f"run-{first}.html", f"run-{last}.html"}
    assert f"run-{victim}.html" not in (out / "index.html").read_text(encoding="utf-8")


def test_a_run_deleted_while_report_reads_is_left_out_of_its_json(
    cli: Cli, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, victim, last = (a_run(store_url) for _ in range(3))
    monkeypatch.setattr("dlperf.system.usable_cores", lambda: 1)
    _deleted_after_listing(monkeypatch, store_url, victim)
    result = cli("--db", store_url, "report", "--last", "3", "--out", str(tmp_path / "s"), "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["runs"] == [last, first]
    _note_once(result.err, victim)


def test_a_run_deleted_while_doctor_reads_is_left_out(
    cli: Cli, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, victim, last = (a_run(store_url) for _ in range(3))
    _deleted_after_listing(monkeypatch, store_url, victim)
    result = cli("--db", store_url, "doctor", "--last", "3")
    assert result.code == 0, result.err
    _note_once(result.err, victim)
    assert f"run {first} " in result.out and f"run {last} " in result.out, result.out
    assert f"run {victim} " not in result.out, result.out
    assert "2 run(s) examined" in result.out, result.out


def test_a_run_deleted_while_doctor_reads_is_left_out_of_its_json(
    cli: Cli, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, victim, last = (a_run(store_url) for _ in range(3))
    _deleted_after_listing(monkeypatch, store_url, victim)
    result = cli("--db", store_url, "doctor", "--last", "3", "--json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["runs"] == [first, last]
    assert {f["run_id"] for f in document["findings"]} <= {first, last}
    _note_once(result.err, victim)


def test_a_run_named_that_is_not_stored_is_still_bad_input(cli: Cli, store_url: str) -> None:
    """What the user named is checked up front, as before: only a run deleted after it was
    chosen is left out."""
    a_run(store_url)
    one_line(cli("--db", store_url, "doctor", "7"), 2, "no run 7 in the store")


# --- C2: a stop signal landing inside a query --------------------------------------------------


@pytest.fixture
def stop_in_next_query(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Once RunStore.get_run is called, a real SIGTERM reaches the process (whose handler
    `main()` installed) inside its first query, as the driver is about to send it: where a
    scheduler's stop lands while a command reads a server's store. Yields the statements
    so interrupted."""
    armed: list[bool] = []
    hit: list[str] = []
    original = RunStore.get_run

    def get_run(self: RunStore, run_id: int) -> Any:
        armed.append(True)
        return original(self, run_id)

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if armed and not hit:
            hit.append(statement)
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(RunStore, "get_run", get_run)
    event.listen(Engine, "before_cursor_execute", before)
    try:
        yield hit
    finally:
        event.remove(Engine, "before_cursor_execute", before)


def test_a_stop_inside_a_query_is_no_store_gone(
    cli: Cli, store_url: str, stop_in_next_query: list[str]
) -> None:
    """PostgreSQL: exit 143 after 'error: run store postgresql+psycopg://... went away ()':
    SQLAlchemy counts an interrupt inside a query as a disconnect, and the store's hook took
    every disconnect for a server gone. SQLite said nothing, as both should."""
    run_id = a_run(store_url)
    result = cli("--db", store_url, "runs", "show", str(run_id))
    assert stop_in_next_query, "no query was interrupted"
    assert result.code == 143, (result.out, result.err)
    assert "went away" not in result.err and "error" not in result.err, result.err
    assert "Traceback" not in result.err, result.err


def test_a_ctrl_c_inside_a_query_of_the_api_is_the_interrupt(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python API in a notebook, where Ctrl-C is Python's own KeyboardInterrupt: on
    PostgreSQL it came out as StoreGone, 'run store ... went away ()'."""
    run_id = a_run(store_url)
    store = dlperf.Store(store_url)

    def interrupt(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        raise KeyboardInterrupt

    event.listen(Engine, "before_cursor_execute", interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            store.run(run_id)
    finally:
        event.remove(Engine, "before_cursor_execute", interrupt)
    assert store.run(run_id).id == run_id  # the store still reads after the interrupt


# --- C8: a search_path naming no schema that exists --------------------------------------------


@pytest.fixture
def missing_schema_url() -> str:
    if not POSTGRES:
        pytest.skip("PostgreSQL store tests need a server: set DLPERF_TEST_POSTGRES_URL")
    url = make_url(POSTGRES).update_query_dict({"options": "-csearch_path=no_such_schema"})
    return url.render_as_string(hide_password=False)


MISSING = "schema no_such_schema does not exist"
FIX = "create it, or fix search_path in the URL"


@pytest.mark.parametrize(
    "args", [("runs", "list"), ("runs", "tag", "1", "a=b"), ("doctor",), ("runs", "show", "1")]
)
def test_a_search_path_of_no_schema_is_one_line(
    cli: Cli, missing_schema_url: str, args: tuple[str, ...]
) -> None:
    """`runs list` printed an empty table, exit 0; a write PostgreSQL's 'no schema has been
    selected to create in; LINE 2: CREATE TABLE meta (; ^'."""
    one_line(cli("--db", missing_schema_url, *args), 2, MISSING, FIX)


def test_a_search_path_of_no_schema_is_refused_by_the_api(missing_schema_url: str) -> None:
    with pytest.raises(UserError) as caught:
        dlperf.Store(missing_schema_url).runs()
    assert MISSING in str(caught.value) and FIX in str(caught.value)
    assert "CREATE TABLE" not in str(caught.value)


def test_a_search_path_of_several_missing_schemas_names_them(cli: Cli) -> None:
    if not POSTGRES:
        pytest.skip("PostgreSQL store tests need a server: set DLPERF_TEST_POSTGRES_URL")
    options = {"options": "-csearch_path=nope_a,nope_b"}
    url = make_url(POSTGRES).update_query_dict(options).render_as_string(hide_password=False)
    one_line(cli("--db", url, "runs", "list"), 2, "no schema of its search_path (nope_a, nope_b)")


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "bi13")


def test_a_search_path_whose_first_schema_is_missing_uses_the_next(cli: Cli, pg_url: str) -> None:
    """As PostgreSQL itself does: the first schema of the path that exists is the store's."""
    run_id = a_run(pg_url)
    schema = str(make_url(pg_url).query["options"]).removeprefix("-csearch_path=")
    options = {"options": f"-csearch_path=no_such_schema,{schema}"}
    both = make_url(pg_url).update_query_dict(options).render_as_string(hide_password=False)
    result = cli("--db", both, "runs", "tag", str(run_id), "a=b")
    assert result.code == 0, result.err
    store = RunStore.open(pg_url)
    assert store.get_run(run_id).tags == {"a": "b"}
    store.engine.dispose()
