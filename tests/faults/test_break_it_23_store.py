"""What the 23rd break-it round found in the run store, reproduced first: a store at a version
that always had its id, with the `store_id` row gone, was given a new random id by a read
command (`runs list`), after which every checkpoint of the store read as another store's, and
opened read-only it was called "older than this dlperf" (C2); a write to a missing SQLite file
opened with ?mode=ro named the store "sqlite://", the in-memory stand-in's URL (C3); and
`dlperf run` refused because the store cannot be written left an empty dlperf_runs/<id>/
behind (C4). PostgreSQL cases skip without DLPERF_TEST_POSTGRES_URL."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import make_url

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_22_store import _runs, _schema, _sql
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bi23")


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "bi23")


def _meta(url: str) -> list[object]:
    return _sql(url, "SELECT key || '=' || value FROM meta ORDER BY key")


def _read_only(url: str) -> str:
    """The store at `url` opened read-only: SQLite's ?mode=ro, a PostgreSQL session with
    default_transaction_read_only=on."""
    if url.startswith("sqlite"):
        return f"{url}?mode=ro"
    schema = str(make_url(url).query["options"]).removeprefix("-csearch_path=")
    options = f"-csearch_path={schema} -cdefault_transaction_read_only=on"
    return make_url(url).update_query_dict({"options": options}).render_as_string(False)


# --- C2: a store that lost its store_id row ------------------------------------------------


@pytest.mark.parametrize("version", ["3", "2"])
def test_a_store_that_lost_its_id_is_refused_and_nothing_written(
    cli: Cli, store_url: str, version: str
) -> None:
    """Every store with a version row was given its id in the same transaction: one without
    it lost it. `runs list` wrote a new random id, away from the store's run files."""
    (run_id,) = _runs(store_url)
    edits = ["ALTER TABLE runs DROP COLUMN owner", "DROP TABLE claims"] if version == "2" else []
    _sql(
        store_url,
        *edits,
        "DELETE FROM meta WHERE key = 'store_id'",
        f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'",
    )
    before = _meta(store_url)
    sqlite = store_url.startswith("sqlite")
    fix = "runs repair NEW.db" if sqlite else f"INSERT INTO {_schema(store_url)}.meta"
    for args in (("runs", "list"), ("runs", "show", str(run_id)), ("runs", "tag", "1", "a=b")):
        result = cli("--db", store_url, *args)
        one_line(result, 2, "has no store id", "edited by hand or damaged", fix)
        assert _meta(store_url) == before, args
    with pytest.raises(UserError, match="has no store id"):
        RunStore.open(store_url)
    assert _meta(store_url) == before


def test_a_store_that_lost_its_id_is_refused_so_read_only_too(cli: Cli, store_url: str) -> None:
    """Opened read-only, it said "older than this dlperf and opened read-only" of a store at
    the current version."""
    _runs(store_url)
    _sql(store_url, "DELETE FROM meta WHERE key = 'store_id'")
    result = cli("--db", _read_only(store_url), "runs", "list")
    one_line(result, 2, "has no store id")
    assert "older than this dlperf" not in result.err
    assert "store_id" not in "".join(map(str, _meta(store_url)))


def test_the_fix_named_for_a_lost_id_works(cli: Cli, store_url: str, tmp_path: Path) -> None:
    """SQLite: `runs repair` copies the runs into a store with an id of its own; PostgreSQL:
    the INSERT named puts the id back, and the store opens with it."""
    ids = _runs(store_url, 2)
    store_id = RunStore.open(store_url).id
    _sql(store_url, "DELETE FROM meta WHERE key = 'store_id'")
    if store_url.startswith("sqlite"):
        new = tmp_path / "new.db"
        assert cli("--db", store_url, "runs", "repair", str(new)).code == 0
        assert [r.id for r in RunStore.open(f"sqlite:///{new}").list_runs()] == ids[::-1]
        return
    said = cli("--db", store_url, "runs", "list").err.splitlines()[-1]
    insert = said[said.index(f"INSERT INTO {_schema(store_url)}.meta") :].split(", ID ")[0]
    _sql(store_url, insert.replace("'ID'", f"'{store_id}'"))
    assert RunStore.open(store_url).id == store_id


def test_a_store_of_before_versions_still_gets_an_id(tmp_path: Path) -> None:
    """Version 1 had no id of its own (the first release had no meta table): migrating it
    makes one, as before."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    _runs(url)
    _sql(url, "ALTER TABLE runs DROP COLUMN owner", "DROP TABLE claims", "DROP TABLE meta")
    store = RunStore.open(url)
    assert len(store.id) == 12 and [r.id for r in store.list_runs()] == [1]


# --- C3 and C4: a write to a store that cannot be written ------------------------------------


def test_a_missing_read_only_file_is_named_as_given(tmp_path: Path) -> None:
    """The stand-in store for a missing file named itself "sqlite://" in the refusal."""
    path = tmp_path / "nx.db"
    with pytest.raises(UserError) as caught, dlperf.track("o", store=f"sqlite:///{path}?mode=ro"):
        pass
    said = str(caught.value)
    assert f"run store sqlite:///{path}" in said and "does not exist" in said, said
    assert not path.exists()


def _leftovers(root: Path) -> list[Path]:
    """What is under `root` but SQLite's own -wal and -shm files, which a read-only connection
    to a store in WAL mode makes (SQLite's doing, and gone with the last connection)."""
    return sorted(p for p in root.rglob("*") if not p.name.endswith(("-wal", "-shm")))


@pytest.mark.parametrize("missing", [True, False])
def test_a_run_refused_by_a_read_only_file_makes_nothing(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, missing: bool
) -> None:
    """`dlperf run` made ./dlperf_runs/<store id>/ before the store refused the run."""
    work = tmp_path / "work"
    work.mkdir()
    path = work / "ro.db"
    if not missing:
        _runs(f"sqlite:///{path}")
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = _leftovers(work)
    exp = tiny_exp(epochs=1)
    url = f"sqlite:///{path}?mode=ro"
    result = cli("--db", url, "run", str(exp), "--set", f"run.out_dir={work / 'dlperf_runs'}")
    parts = ("does not exist",) if missing else ("is open read-only",)
    one_line(result, 2, f"run store sqlite:///{path}", *parts)
    assert "sqlite:// " not in result.err
    assert _leftovers(work) == before


def test_a_run_refused_by_a_read_only_session_makes_nothing(
    cli: Cli, tiny_exp: Callable[..., Path], tmp_path: Path, pg_url: str
) -> None:
    _runs(pg_url)
    out = tmp_path / "out"
    exp = tiny_exp(epochs=1)
    result = cli("--db", _read_only(pg_url), "run", str(exp), "--set", f"run.out_dir={out}")
    one_line(result, 2, "cannot write run store")
    assert not out.exists()
    assert _sql(pg_url, "SELECT count(*) FROM runs") == [1]
