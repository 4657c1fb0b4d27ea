"""The run store's schema version and the ordered migrations between versions.

A version row (`meta.schema_version`) and plain migration functions, not alembic: dlperf's
schema has changed only by adding tables and nullable columns, and a store must open without
a migration directory on disk. `MIGRATIONS[v - 1]` takes a store from version v to v + 1.

Version 1 is every store made before versions were recorded (it may lack the tables added
since the first release, and holds no tables of version 3's). A new store is made at the
current version in one step. A store of a newer dlperf, one with version 3's tables but no
version row or a version row but no store id (edited by hand or damaged), or a database
holding tables that are not dlperf's, is refused; so is a current store without one of
dlperf's tables (dropped by hand), by every command as it opens.

Migrations run in one transaction under a lock (SQLite: the write lock taken by BEGIN
IMMEDIATE; PostgreSQL: an advisory lock), so processes opening a store at the same moment
never race; the first to open an older store migrates it, and every later opener (a
sweep's or a report's workers) finds the current version and only reads.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Connection, Dialect, Engine, delete, insert, inspect, select, text

from dlperf.errors import UserError
from dlperf.store.ids import made_store_id
from dlperf.store.schema import STORE_ID, VERSION_KEY, Base, Claim, Meta, Tag

PG_SCHEMA_LOCK = int.from_bytes(b"dlperf", "big")  # any constant of dlperf's own: one lock, one key
OWN_SPACE = (
    "give dlperf a database of its own: a new SQLite file, or a PostgreSQL database "
    "or schema (postgresql+psycopg://.../db?options=-csearch_path%3Ddlperf)"
)


def _add_tags_and_meta(conn: Connection) -> None:
    """Tags (`dlperf runs tag`) and the store's own facts came after the first release."""
    for table in (Tag.__table__, Meta.__table__):
        table.create(conn, checkfirst=True)


def _add_owners_and_claims(conn: Connection) -> None:
    """One writer per run (`runs.owner`) and per sweep point (`claims`)."""
    if "owner" not in {c["name"] for c in inspect(conn).get_columns("runs")}:
        conn.execute(text("ALTER TABLE runs ADD COLUMN owner TEXT"))
    Claim.__table__.create(conn, checkfirst=True)


MIGRATIONS: tuple[Callable[[Connection], None], ...] = (_add_tags_and_meta, _add_owners_and_claims)
SCHEMA_VERSION = len(MIGRATIONS) + 1
# The first version a version row was written for: from it on, a store's id was written in
# the same transaction (version 1, before versions, had none in the first release).
FIRST_VERSIONED = 2
# Columns a migration adds: an older store lacks them and is still dlperf's.
ADDED_COLUMNS = {("runs", "owner")}


def _facts(conn: Connection, tables: set[str]) -> dict[str, str]:
    if Meta.__tablename__ not in tables:
        return {}
    query = select(Meta.key, Meta.value).where(Meta.key.in_([VERSION_KEY, STORE_ID]))
    return {key: value for key, value in conn.execute(query)}


def written(version: str) -> bool:
    """Whether `version` is a schema version as dlperf writes it: str() of a number from 1.
    Short, too: int() refuses a string of over 4300 digits with a ValueError."""
    return (
        len(version) <= 18
        and version.isdecimal()
        and version == str(int(version))
        and int(version) >= 1
    )


def table_named(dialect: Dialect, table: str) -> str:
    """`table` as a fix to run by hand names it: in a PostgreSQL store's schema, quoted as SQL
    needs, as the 64-bit ALTER advice names it (runstore's `_ids_used_up`). In psql, without
    the store URL's search_path, a bare `meta` named no table, or another store's.
    SQLAlchemy's default_schema_name is the session's current_schema(), read as it connected."""
    schema = dialect.default_schema_name
    if dialect.name == "sqlite" or schema is None:
        return table
    return f"{dialect.identifier_preparer.quote(schema)}.{table}"


def _version(
    facts: dict[str, str],
    tables: set[str],
    where: str,
    columns: Callable[[str], set[str]],
    sqlite: bool,
    meta: str = Meta.__tablename__,
) -> int:
    """0 for an empty database (no version row), 1 for a store made before versions were
    recorded. `columns`: a table's column names, read only where the version row is missing
    or garbled. `meta`: the meta table as a server's fix names it (`table_named`)."""
    if VERSION_KEY in facts:
        # Written by hand, or damaged. '0' too: versions start at 1, and 0 stands only for no
        # version row in an empty database; taken as that, a read command made the missing
        # tables of an older store, stamped it current, and it read as damaged from then on.
        # And any spelling but dlperf's own (str of the number): '03' or an Arabic-Indic '٣'
        # passed isdecimal(), and a read command rewrote it as '3'.
        if not written(facts[VERSION_KEY]):
            raise UserError(
                f"run store {where} has schema version {facts[VERSION_KEY]!r}, which no dlperf "
                "writes",
                _repair(where)
                if sqlite
                else f"set it back: UPDATE {meta} SET value = '{_shape(tables, columns)}' "
                f"WHERE key = '{VERSION_KEY}'",
            )
        version = int(facts[VERSION_KEY])
        if version > SCHEMA_VERSION:
            raise UserError(
                f"run store {where} has schema version {version}, newer than this dlperf's "
                f"{SCHEMA_VERSION}",
                "upgrade dlperf to use it",
            )
        if version >= FIRST_VERSIONED and STORE_ID not in facts:
            raise _lost_id(where, sqlite, meta)
        return version
    if not tables:
        return 0
    # Stores of before versions had no `meta` (the first release) or a `meta` with only the
    # store id; none had what version 3 added, which came after versions. Such a store without
    # its version row lost it (edited by hand, damaged): migrating it as an old store would
    # stamp it again, and with its meta gone give it a new id, away from its runs' files.
    if _shape(tables, columns) == SCHEMA_VERSION:
        lost = "its meta table" if Meta.__tablename__ not in tables else "a schema version"
        raise UserError(
            f"run store {where} has no schema version ({lost} is missing), yet it has the "
            f"tables of version {SCHEMA_VERSION}: it was edited by hand or damaged",
            _repair(where)
            if sqlite
            else "restore the meta table from a backup (pg_dump)"
            if Meta.__tablename__ not in tables
            else f"put the row back: INSERT INTO {meta} (key, value) VALUES "
            f"('{VERSION_KEY}', '{SCHEMA_VERSION}')",
        )
    return 1


def _lost_id(where: str, sqlite: bool, meta: str) -> UserError:
    """A store with a version row from 2 on was given its id in the same transaction as the
    row: without it, it lost it. Minting a new one (what a read command did) put the store
    away from its runs' files under <run.out_dir>/<old id>/: every checkpoint then read as
    another store's."""
    return UserError(
        f"run store {where} has no store id (its meta row {STORE_ID!r} is missing): it was "
        "edited by hand or damaged",
        f"copy its runs into a store with an id of its own: dlperf --db {where} runs repair NEW.db"
        if sqlite
        else f"put the row back: INSERT INTO {meta} (key, value) VALUES ('{STORE_ID}', 'ID'), ID "
        "the name of its directory under run.out_dir (12 hexadecimal digits)",
    )


def _shape(tables: set[str], columns: Callable[[str], set[str]]) -> int:
    """SCHEMA_VERSION where the store has what version 3 added (runs.owner, claims), else 1:
    a version its tables can be taken at (migrations only add what is missing)."""
    added = Claim.__tablename__ in tables or ("runs" in tables and "owner" in columns("runs"))
    return SCHEMA_VERSION if added else 1


def _repair(where: str) -> str:
    return f"copy what is readable into a new store: dlperf --db {where} runs repair NEW.db"


def _columns(conn: Connection) -> Callable[[str], set[str]]:
    inspector = inspect(conn)
    return lambda name: {c["name"] for c in inspector.get_columns(name)}


def _refuse_foreign(conn: Connection, tables: set[str], where: str) -> None:
    refuse_foreign(tables, _columns(conn), where)


def refuse_foreign(tables: set[str], columns: Callable[[str], set[str]], where: str) -> None:
    """Tables that are not dlperf's, or dlperf's table names with other columns (MLflow's
    store has `runs`, `metrics` and `tags` too), are another program's data: writing dlperf's
    tables beside them would mix two programs in one schema. `columns`: a table's column
    names, as the caller reads them."""
    foreign = sorted(tables - set(Base.metadata.tables))
    if foreign:
        shown = ", ".join(foreign[:4]) + (
            f" and {len(foreign) - 4} more" if len(foreign) > 4 else ""
        )
        raise UserError(f"run store {where} holds tables that are not dlperf's: {shown}", OWN_SPACE)
    for name in sorted(tables):
        have = columns(name)
        lacking = [
            c.name
            for c in Base.metadata.tables[name].columns
            if c.name not in have and (name, c.name) not in ADDED_COLUMNS
        ]
        if lacking:
            raise UserError(
                f"run store {where}: table {name} is not dlperf's (it has no column "
                f"{', '.join(lacking)})",
                OWN_SPACE,
            )
    # Every store has had `runs` since the first release: dlperf's other names alone (a
    # `meta` key/value table, a very common one) are another program's, and were migrated
    # into a traceback, the file switched to WAL first.
    if tables and "runs" not in tables:
        shown = ", ".join(sorted(tables))
        raise UserError(f"run store {where} holds tables that are not dlperf's: {shown}", OWN_SPACE)


def refuse_foreign_file(
    path: Path, where: str, busy_s: float, begin: Callable[[sqlite3.Connection, str, float], None]
) -> None:
    """Refuse the SQLite file `path` if it is not dlperf's (another program's tables, a store
    of a newer dlperf), reading it only: the store's own connections switch a file to WAL as
    they open it, which rewrote a foreign file's header and left -wal and -shm files beside it
    before it was refused, and waited for the other program's read transaction to end first.
    A lock another process holds is waited for as the store's own reads wait (`begin`,
    runstore's `read_begun`: in attempts a stop can end). A file this cannot read (damaged,
    not a database) is left to the store's own opening, which says what is wrong in its
    words. A refused WAL store is left without the -wal and -shm this read made (`_tidy`)."""
    made = [side for side in _beside(path) if not side.exists()]
    try:
        _refuse_foreign_file(path, where, busy_s, begin)
    except UserError:
        _tidy(path, made)
        raise


def _beside(path: Path) -> tuple[Path, Path]:
    return Path(f"{path}-wal"), Path(f"{path}-shm")


def _tidy(path: Path, made: list[Path]) -> None:
    """Remove the -wal and -shm `made` beside the refused store `path`, if they are there: a
    read-only connection makes them on a WAL store and cannot remove them as it closes, and
    nothing else opens a refused store (an empty -wal and a 32 KiB -shm were left beside a
    store "left as it was"). SQLite's own close removes them: one connection that may write
    reads the file and closes; being the last to close, it checkpoints the WAL (empty: the
    file is not written) and removes both. Another process's connection keeps them."""
    if not any(side.exists() for side in made):
        return
    with (
        contextlib.suppress(sqlite3.Error),
        closing(sqlite3.connect(f"file:{quote(str(path))}", uri=True, timeout=0)) as conn,
    ):
        conn.execute("SELECT count(*) FROM sqlite_master").fetchall()


def _refuse_foreign_file(
    path: Path, where: str, busy_s: float, begin: Callable[[sqlite3.Connection, str, float], None]
) -> None:
    uri = f"file:{quote(str(path))}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True, isolation_level=None)) as conn:
            begin(conn, where, busy_s)
            listed = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            tables = {str(t) for (t,) in listed if not str(t).startswith("sqlite_")}
            facts: dict[str, str] = {}
            if Meta.__tablename__ in tables:
                query = "SELECT key, value FROM meta WHERE key IN (?, ?)"
                rows = conn.execute(query, (VERSION_KEY, STORE_ID)).fetchall()
                facts = {str(key): str(value) for key, value in rows}

            def columns(table: str) -> set[str]:
                quoted = table.replace('"', '""')
                return {str(row[1]) for row in conn.execute(f'PRAGMA table_info("{quoted}")')}

            # Refuses a newer store, and one that lost its version.
            if _version(facts, tables, where, columns, sqlite=True) == SCHEMA_VERSION:
                return  # a current store: the common case
            refuse_foreign(tables, columns, where)
    except sqlite3.Error:
        return


def migrate(reader: Engine, writer: Engine, where: str, create: bool = True) -> str | None:
    """Bring the store to SCHEMA_VERSION, making it if it is empty (unless not `create`:
    then None, and nothing written); return its id (random rather than derived from the URL,
    so a store keeps it when moved and two servers' stores never share one). `writer` is the
    engine whose transactions write; `where` names the store in errors."""
    sqlite = reader.dialect.name == "sqlite"
    with reader.connect() as conn:
        meta = table_named(reader.dialect, Meta.__tablename__)  # connected: its schema is known
        tables = set(inspect(conn).get_table_names())
        facts = _facts(conn, tables)
        if facts.get(VERSION_KEY) == str(SCHEMA_VERSION) and STORE_ID in facts:
            # The common case: a current store, only read.
            _refuse_bad_id(facts[STORE_ID], where, sqlite)
            _refuse_missing(conn, tables)
            return facts[STORE_ID]
        # Refused before any lock, in the order `refuse_foreign_file` refuses a SQLite file:
        # its version, then tables that are not dlperf's, then its id. A PostgreSQL schema
        # of another program's `meta` table alone (store id 'abc') was told to set back an id
        # it never had from dlperf, where a SQLite file of it was "not dlperf's".
        version = _version(facts, tables, where, _columns(conn), sqlite, meta)
        if version < SCHEMA_VERSION:
            _refuse_foreign(conn, tables, where)
        if STORE_ID in facts:
            _refuse_bad_id(facts[STORE_ID], where, sqlite)
    if not tables and not create:
        return None
    with writer.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_SCHEMA_LOCK})
        tables = set(inspect(conn).get_table_names())  # again: another process may have migrated
        facts = _facts(conn, tables)
        version = _version(facts, tables, where, _columns(conn), sqlite, meta)
        if version < SCHEMA_VERSION:
            _refuse_foreign(conn, tables, where)
        if version == 0:
            Base.metadata.create_all(conn)
        else:
            for step in MIGRATIONS[version - 1 :]:
                step(conn)
        if STORE_ID in facts:
            _refuse_bad_id(facts[STORE_ID], where, conn.dialect.name == "sqlite")
        # A new id only for a new store or one of before versions (`_version` refused a
        # later one without its id).
        store_id = facts.get(STORE_ID) or uuid.uuid4().hex[:12]
        conn.execute(delete(Meta).where(Meta.key.in_([VERSION_KEY, STORE_ID])))
        conn.execute(
            insert(Meta),
            [
                {"key": STORE_ID, "value": store_id},
                {"key": VERSION_KEY, "value": str(SCHEMA_VERSION)},
            ],
        )
        return store_id


class MissingTable(Exception):
    """A current store without dlperf's table `table` (dropped by hand): told by the store's
    opener in the words of its backend (integrity.missing_table), which imports this module."""

    def __init__(self, table: str) -> None:
        super().__init__(table)
        self.table = table


def _refuse_missing(conn: Connection, tables: set[str]) -> None:
    """Refuse a current store without one of dlperf's tables (dropped by hand), whatever the
    command: readers and writers alike, as it opens. Before, only a command whose query met
    the table refused it (`runs show` called a store without `metrics` damaged, "dlperf
    neither reads nor writes it"), and `runs tag` then wrote into it, `runs list` read it."""
    missing = set(Base.metadata.tables) - tables
    if missing:
        # Listed again: on PostgreSQL each statement sees what was committed before it, and a
        # migration committed between the first listing and the version row's read made them.
        missing -= set(inspect(conn).get_table_names())
    # A view in its place is not missing: it is refused as what it is, once a write meets it
    # ("runs is a view, not a table"), not as a table dropped
    missing -= set(inspect(conn).get_view_names())
    if missing:
        # One named, as SQLite's and PostgreSQL's own errors name one: `runs` first, without
        # which nothing there is a store's.
        raise MissingTable("runs" if "runs" in missing else min(missing))


def _refuse_bad_id(store_id: str, where: str, sqlite: bool) -> None:
    """A store id that dlperf did not make (set by hand): run files live under
    <run.out_dir>/<store id>/, and '../../etc' wrote a run's checkpoint outside run.out_dir.
    `runs repair` leaves such an id behind: the new store gets one of its own."""
    if made_store_id(store_id):
        return
    # Escaped (a control character, a newline) and cut short: the error stays one line.
    shown = repr(store_id) if len(store_id) <= 24 else f"{store_id[:20]!r}..."
    fix = (
        f"copy its runs into a store with an id of its own: dlperf --db {where} runs repair NEW.db"
        if sqlite
        else "set it back to the id it had (the name of its directory under run.out_dir), "
        "12 hexadecimal digits"
    )
    raise UserError(
        f"run store {where} has store id {shown}, which dlperf does not make (12 hexadecimal "
        "digits): its runs' files would be written outside run.out_dir",
        fix,
    )
