"""Break-it round 25, part P3, causes 1 and 2 of the run store.

1. A copy of a PostgreSQL store (CREATE DATABASE ... TEMPLATE, a pg_dump restore, its tables
   copied into another schema) kept the original's store id and wrote its runs' files into the
   same `<out_dir>/<store id>/run-N/`: both hand out the same next run id, so one overwrote the
   other's checkpoint, and `runs delete` in the copy removed the original's files. A SQLite
   byte copy was told apart since round 22; a server's store now records where it lives too.
2. A store URL's query part without `=` (or with an empty value) was dropped by SQLAlchemy's
   parser without a word: `sqlite:////x/q?x.db` read and wrote the file `q`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, create_engine, make_url, text

from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import POSTGRES, CliResult, fresh_store_url
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "fx25")


def _copy_schema(conn: Connection, source: str, target: str) -> None:
    """Every table of schema `source` into a new schema `target`, with sequences of its own
    at the source's values: what a pg_dump of the schema restored under another name gives."""
    conn.execute(text(f"CREATE SCHEMA {target}"))
    tables = conn.execute(
        text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": source}
    ).scalars()
    for table in list(tables):
        conn.execute(text(f"CREATE TABLE {target}.{table} (LIKE {source}.{table} INCLUDING ALL)"))
        serial = conn.execute(
            text(
                "SELECT column_name, pg_get_serial_sequence(:t, column_name) "
                "FROM information_schema.columns WHERE table_schema = :s AND table_name = :n "
                "AND (column_default LIKE 'nextval%' OR is_identity = 'YES')"
            ),
            {"t": f"{source}.{table}", "s": source, "n": table},
        ).all()
        for column, sequence in serial:
            # A LIKE copy of a serial column still draws from the source's sequence.
            own = f"{target}.{table}_{column}_seq"
            conn.execute(text(f"CREATE SEQUENCE IF NOT EXISTS {own}"))
            conn.execute(text(f"SELECT setval('{own}', last_value, is_called) FROM {sequence}"))
            conn.execute(
                text(f"ALTER TABLE {target}.{table} ALTER {column} SET DEFAULT nextval('{own}')")
            )
        conn.execute(text(f"INSERT INTO {target}.{table} SELECT * FROM {source}.{table}"))


def _checkpoint(store: RunStore, out: Path, run_id: int, body: bytes) -> Path:
    where = store.artifact_dir(out) / f"run-{run_id}" / "checkpoint.pt"
    where.parent.mkdir(parents=True)
    where.write_bytes(body)
    store.add_artifact(run_id, "checkpoint", where)
    return where


def test_a_copy_of_a_postgresql_store_keeps_its_files_apart(pg_url: str, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    original = RunStore.open(pg_url)
    first = original.create_run("r", "run", {"lr": 0.02})
    kept = _checkpoint(original, out, first, b"original's run")
    original.finish_run(first)
    with original.engine.connect() as conn:
        schema = str(conn.exec_driver_sql("SELECT current_schema()").scalar())
    copy_schema = f"dlperf_fx25copy_{uuid.uuid4().hex[:8]}"
    assert POSTGRES is not None
    database = make_url(POSTGRES).database
    admin = create_engine(POSTGRES)
    try:
        with admin.begin() as conn:
            _copy_schema(conn, schema, copy_schema)
        copy_url = make_url(POSTGRES).update_query_dict({"options": f"-csearch_path={copy_schema}"})
        copy = RunStore.open(copy_url.render_as_string(hide_password=False))
        try:
            assert copy.id == original.id  # a copy: the same store id, the same runs
            # Both hand out the same next id; each writes its run's files apart.
            mine, theirs = (
                copy.create_run("c", "run", {"lr": 0.03}),
                original.create_run("o", "run", {"lr": 0.02}),
            )
            assert mine == theirs
            assert copy.artifact_dir(out) != original.artifact_dir(out)
            assert original.artifact_dir(out) == out.resolve() / original.id
            ours = _checkpoint(copy, out, mine, b"copy's run")
            theirs_file = _checkpoint(original, out, theirs, b"original's second run")
            assert ours.read_bytes() == b"copy's run"
            assert theirs_file.read_bytes() == b"original's second run"
            # Deleting the copied run in the copy leaves the original's checkpoint alone.
            deleted = copy.delete_runs([first])
            assert kept.read_bytes() == b"original's run"
            assert deleted.removed == []
            assert [why for path, why in deleted.kept] == [
                f"this store is a copy of PostgreSQL database {database}, schema {schema}, "
                "whose run it is too"
            ]
            # Its own run's files go with it.
            assert copy.delete_runs([mine]).removed == [str(ours.parent)]
            assert theirs_file.read_bytes() == b"original's second run"
            # The original is still the owner of its directory, and deletes there.
            assert original.delete_runs([first]).removed == [str(kept.parent)]
        finally:
            copy.engine.dispose()
    finally:
        original.engine.dispose()
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {copy_schema} CASCADE"))
        admin.dispose()


@pytest.mark.parametrize(
    ("url", "part", "fix"),
    [
        ("sqlite:///{root}/q?x.db", "x.db", "%3F"),
        ("sqlite:///{root}/r.db?&mode", "mode", "name=value"),
        ("sqlite:///{root}/s.db?timeout=", "timeout=", "name=value"),
        ("postgresql+psycopg://u:p@127.0.0.1:1/db?x", "x", "name=value"),
    ],
)
def test_a_url_query_part_without_a_value_is_refused(
    cli: Cli, tmp_path: Path, url: str, part: str, fix: str
) -> None:
    db = url.format(root=tmp_path)
    result = cli("--db", db, "runs", "list")
    one_line(result, 2, f"query part {part!r} has no value", fix)
    with pytest.raises(UserError, match="has no value"):
        RunStore.open(db)
    assert not any(p.name in ("q", "r.db", "s.db") for p in tmp_path.iterdir())


def test_a_run_that_cannot_be_marked_for_want_of_memory_ends_with_what_ended_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a tight `ulimit -v`, what ended a run (a library's import out of memory) left too
    little to mark it: the mark's SystemError replaced the run's own error, and the command
    printed a traceback of both. The run's error is what propagates; the run reads as lost."""
    store = RunStore.open(str(tmp_path / "s.db"))

    def out_of_memory(*args: object, **kwargs: object) -> None:
        raise SystemError("<function RunStore.update_run> returned NULL without an exception")

    monkeypatch.setattr(store, "finish_run", out_of_memory)
    with pytest.raises(MemoryError), store.new_run("r", "run", {}, "h", {}):
        raise MemoryError
    monkeypatch.undo()
    [run] = store.list_runs()
    assert run.status == "running"  # read as lost once this process has ended


def test_a_store_collected_out_of_memory_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its finaliser closes the pool; one that failed printed "Exception ignored in:
    <finalize object ...>" with a MemoryError under a tight `ulimit -v`."""
    from dlperf.store import runstore

    engine = create_engine("sqlite://")

    def out_of_memory(close: bool = True) -> None:
        raise MemoryError

    monkeypatch.setattr(engine, "dispose", out_of_memory)
    runstore._dispose(engine, 0)  # no exception
