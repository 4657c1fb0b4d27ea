"""A damaged SQLite store: found, refused in one line, never written, and what can still be
read copied into a new store (`dlperf runs repair`).

An existing store file gets `PRAGMA quick_check` when first opened in a process (again only
if the file has changed since): it reads every page but not every index entry, so it costs
one pass over the file, about 0.65 s for a 67 MiB store of a million metric rows on the
2-core development VM. Over CHECK_MAX_BYTES a check would add seconds to every command, so
such a store is not checked on open. Damage a check does not see, or damage done while the
store is open, is caught where SQLite reports it: any query that meets a malformed page
raises the same one-line error, and from then on the process refuses to write into that
store.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import sqlite3
import weakref
from collections.abc import Iterator
from contextlib import closing, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Column, DateTime, Engine, Float, Integer, select
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.sql.sqltypes import JSON

from dlperf.errors import UserError
from dlperf.store.ids import made_store_id
from dlperf.store.migrations import SCHEMA_VERSION, written
from dlperf.store.schema import (
    COPY_DIR,
    COPY_FILE,
    DELETED_MAX,
    DELETING,
    HOME,
    HOME_FILE,
    STORE_ID,
    VERSION_KEY,
    Artifact,
    Meta,
    Metric,
    Run,
    Study,
    Tag,
)
from dlperf.store.urls import masked_url
from dlperf.store.urls import shown as shown  # re-exported: every store line names it so

SQLITE_ERROR, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_CORRUPT, SQLITE_NOTADB = 1, 5, 6, 11, 26
SQLITE_IOERR, SQLITE_FULL = 10, 13
NEARLY_FULL = 1 << 20  # bytes free under which a disk I/O error is taken for a full disk
SQLITE_CONSTRAINT_TRIGGER = 1811  # RAISE(ABORT|FAIL|ROLLBACK, ...) in a trigger
# A CHECK, UNIQUE or NOT NULL constraint: never dlperf's (its tables have no CHECK or UNIQUE,
# and dlperf fills every NOT NULL column; a primary key's violation, which `claim` expects, is
# SQLITE_CONSTRAINT_PRIMARYKEY), so one added by hand.
SQLITE_CONSTRAINT_ADDED = (275, 2067, 1299)  # SQLITE_CONSTRAINT_CHECK, _UNIQUE, _NOTNULL
# PostgreSQL's states for a schema changed by hand: plpgsql's RAISE (a trigger added), a
# column or table dropped, a table replaced by a view that cannot be written.
PG_RAISED, PG_NO_COLUMN, PG_NO_TABLE, PG_NOT_A_TABLE = "P0001", "42703", "42P01", "42809"
PG_NO_PRIVILEGE = "42501"  # insufficient_privilege: "permission denied for table tags"
# Integrity constraints dlperf's tables do not have: check, exclusion, not-null (every
# column dlperf leaves empty is nullable); a unique violation is one too unless it is of a
# table's primary key (`claim` expects its claims_pkey's).
PG_CONSTRAINT_ADDED = ("23514", "23P01", "23502")
PG_UNIQUE = "23505"
CHECK_MAX_BYTES = 256 << 20
ROWID_MIN, ROWID_MAX = -(2**63), 2**63 - 1
_passed: set[tuple[int, int, int, int]] = set()  # (device, inode, size, mtime) of checked files
_damaged: dict[Path, str] = {}  # stores this process found damaged, and how: never written
_opened: set[Path] = set()  # store files this process opened as SQLite databases
# The file of each SQLite engine, resolved once, as the store opened (`keep_file`): a relative
# path resolved later meets a working directory removed or changed since (a FileNotFoundError
# traceback, or another directory's file). Kept by the engine's dialect, which its
# execution_options copies share and `Engine.dispose` keeps: kept by its pool, which a dispose
# replaces, the file was resolved again after a store object's finalizer disposed its engine,
# and at exit `runstore._close_open` printed that traceback, its working directory deleted.
_files: weakref.WeakKeyDictionary[Any, Path] = weakref.WeakKeyDictionary()


def store_file(engine: Engine) -> Path | None:
    """The file of a SQLite store; None for one in memory, and for a server's store: its URL's
    database is a name on the server, and a file or directory of that name in the current
    directory is no store (checked as one, PostgreSQL was sent SQLite's PRAGMA quick_check)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return None
    path = _files.get(engine.dialect)
    if path is None:  # an engine no store opened (`keep_file`): resolved now, once
        path = _files[engine.dialect] = Path(database).resolve()
    return path


def keep_file(engine: Engine, path: Path) -> None:
    """Note `path`, resolved as the store opened, as the file of the SQLite `engine`."""
    _files[engine.dialect] = path


def damaged(path: Path, detail: str) -> UserError:
    """The one-line error for a damaged store; from now on this process never writes it."""
    _damaged[path] = detail
    return UserError(
        f"run store {shown(path)} is damaged ({detail}); dlperf neither reads nor writes it",
        f"restore it from a backup, or copy what is still readable into a new store with "
        f"`dlperf --db {shown(path)} runs repair NEW.db`",
    )


NOT_JSON, NOT_OBJECT, NOT_TIME = "is not JSON", "is not a JSON object", "is not a time"
NOT_INTEGER, NOT_NUMBER = "is not an integer", "is not a number"


def unreadable(column: Column[Any], value: Any) -> str | None:
    """Why a stored value of `column` cannot be read as dlperf reads it (NOT_JSON, NOT_OBJECT,
    NOT_TIME, NOT_INTEGER, NOT_NUMBER), None if it can: every JSON column holds an object, a
    time is ISO text as SQLAlchemy writes it into SQLite, and a number is what the readers'
    `operator.index` (an integer: a step of 1.5 is no step) or `float` take. SQLite keeps
    whatever a hand edit sets, whatever the column's type."""
    if value is None:
        return None
    if isinstance(column.type, Integer):
        return None if isinstance(value, int) else NOT_INTEGER
    if isinstance(column.type, Float):
        try:
            float(value)
        except (TypeError, ValueError):
            return NOT_NUMBER
        return None
    if isinstance(column.type, JSON):
        try:  # a number stored as one (`SET config = 7`) is JSON's number
            found = json.loads(value) if isinstance(value, str | bytes) else value
        except ValueError:
            return NOT_JSON
        return None if found is None or isinstance(found, dict) else NOT_OBJECT
    if isinstance(column.type, DateTime):
        try:
            datetime.fromisoformat(value)
        except (TypeError, ValueError):
            return NOT_TIME
    return None


def garbled_json(
    path: Path,
    run_id: int | None = None,
    column: str | None = None,
    reason: str = NOT_JSON,
    left_out: str = "such runs",
) -> UserError:
    """The one-line error for a run whose config, system, summary, time or metric rows cannot
    be read (text set by hand, a tool of another program): `run_id`, `column` and `reason`
    when the reader knows them, else the first such run found in `path`; `left_out`, what
    `runs repair` leaves out of the copy."""
    if run_id is None or column is None:
        run_id, column, reason = _first_garbled(path) or (run_id, column, reason)
    which = f"run {run_id}'s {column}" if run_id is not None else "a run's JSON column"
    return UserError(
        f"{which} in run store {shown(path)} {reason}; dlperf cannot read that run",
        f"copy what is readable, all but {left_out}, into a new store with "
        f"`dlperf --db {shown(path)} runs repair NEW.db`",
    )


def garbled_run(path: Path) -> UserError | None:
    """The one line for the first run of `path` that cannot be read, if there is one: what
    SQLAlchemy's reading of a time set by hand raised (a ValueError, or a TypeError for a
    number) names no run."""
    found = _first_garbled(path)
    return None if found is None else garbled_json(path, *found)


# The runs this thread reads now (`reading`): SQLAlchemy's reading of a garbled column knows
# no run, and the store's first garbled run was named instead of the one asked about.
_READING: ContextVar[tuple[int, ...]] = ContextVar("dlperf_reading_runs", default=())


@contextmanager
def reading(*run_ids: int) -> Iterator[None]:
    """Name these runs first, while they are read, where a garbled column is found."""
    token = _READING.set(run_ids)
    try:
        yield
    finally:
        _READING.reset(token)


def _first_garbled(path: Path) -> tuple[int, str, str] | None:
    """The first garbled run of `path`, its column and why: of the runs being read first
    (`reading`), else of the whole store."""
    columns = [c for c in Run.__table__.columns if isinstance(c.type, JSON | DateTime)]
    names = ", ".join(c.name for c in columns)
    queries: list[tuple[str, tuple[int, ...]]] = [
        (f"SELECT id, {names} FROM runs WHERE id = ?", (i,)) for i in _READING.get()
    ]
    queries.append((f"SELECT id, {names} FROM runs", ()))
    try:
        with closing(sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)) as conn:
            for query, params in queries:
                for run_id, *values in conn.execute(query, params):
                    for column, value in zip(columns, values, strict=True):
                        reason = unreadable(column, value)
                        if reason is not None:
                            return int(run_id), column.name, reason
    except (sqlite3.Error, OverflowError):  # OverflowError: an id past 64 bits
        return None
    return None


def check(engine: Engine) -> None:
    """Refuse a store file that fails `PRAGMA quick_check`, before anything writes to it."""
    path = store_file(engine)
    if path is None:
        return  # in memory
    try:
        stat = path.stat()
    except FileNotFoundError:
        return  # a new store
    if not 0 < stat.st_size <= CHECK_MAX_BYTES:
        return
    key = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key in _passed:
        return
    with engine.connect() as conn:
        # One problem is enough to refuse, and stops the check at the first.
        found = conn.exec_driver_sql("PRAGMA quick_check(1)").scalars().all()
    if found != ["ok"]:
        # e.g. "*** in database main ***\nPage 17: btreeInitPage() returns error code 11"
        where = " ".join(line for line in found[0].splitlines() if not line.startswith("***"))
        raise damaged(path, f"quick_check: {where}")
    _passed.add(key)
    _damaged.pop(path, None)  # a file put back in its place (restored from a backup)


def missing_table(engine: Engine, table: str) -> UserError:
    """The one line for a store at the current version without dlperf's table `table`
    (dropped by hand), in the words its first query to meet it gives on its backend; a
    SQLite file is damaged, and never written from now on."""
    path = store_file(engine)
    if path is not None:
        return damaged(path, f"no such table: {table}; its tables are not as dlperf made them")
    said = f'relation "{table}" does not exist'
    return _edited(masked_url(engine.url.render_as_string()), said, None)


def opened(engine: Engine) -> None:
    """Note a store that opened: if SQLite later calls it "not a database", its header was
    damaged since (before it opened, that is a file that never was a store: bad input)."""
    path = store_file(engine)
    if path is not None:
        _opened.add(path)


def refuse_writes(engine: Engine) -> None:
    path = store_file(engine)
    if path in _damaged:
        raise damaged(path, _damaged[path])


def on_error(context: ExceptionContext) -> BaseException | None:
    """SQLAlchemy's `handle_error` hook (SQLAlchemy raises what it returns): a malformed page
    met by any query, and a schema changed by hand (a trigger that refuses a write, a view or
    a missing column where dlperf made a table), become the one-line error."""
    engine = context.engine
    if engine is None:
        return None
    if engine.dialect.name != "sqlite":
        return _server_edited(context, engine)
    code = getattr(context.original_exception, "sqlite_errorcode", None)
    path = store_file(engine)
    if code is None or path is None:
        return None
    if code & 0xFF == SQLITE_CORRUPT or (code & 0xFF == SQLITE_NOTADB and path in _opened):
        return damaged(path, str(context.original_exception))
    if code == SQLITE_CONSTRAINT_TRIGGER:
        return _edited(str(path), _refused(context), path)
    if code in SQLITE_CONSTRAINT_ADDED:
        return _edited(str(path), _refused(context, "a constraint"), path)
    if code & 0xFF == SQLITE_ERROR:
        view = re.fullmatch(
            r"cannot modify (\S+) because it is a view", str(context.original_exception)
        )
        if view is not None:
            # `runs repair` copies tables, not views: it would leave every run out.
            return UserError(
                f"run store {shown(path)} is not as dlperf made it ({view[1]} is a view, not a "
                "table)",
                f"drop the view and rename the table it reads back to {view[1]}",
            )
        if path in _opened and _not_as_made(context):
            return damaged(
                path, f"{context.original_exception}; its tables are not as dlperf made them"
            )
    return None


def _edited(name: str, detail: str, path: Path | None) -> UserError:
    """The one line for a store whose schema was changed by hand: `path` for a SQLite file,
    which `runs repair` copies into a store as dlperf makes one (no trigger, no view)."""
    if path is None:
        hint = "its schema was changed by hand: undo that change, or use a new database"
    else:
        hint = (
            f"copy its runs into a store as dlperf makes one, without what was added by hand, "
            f"with `dlperf --db {shown(path)} runs repair NEW.db`"
        )
    return UserError(f"run store {shown(name)} is not as dlperf made it ({detail})", hint)


def _refused(context: ExceptionContext, by: str = "a trigger") -> str:
    """What a trigger (or `by`) refused, by the statement it refused: "a trigger refused an
    INSERT into metrics: nope"."""
    said = _first_line(context)
    what = re.match(
        r"\s*(INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)",
        context.statement or "",
        re.IGNORECASE,
    )
    if what is None:
        return f"{by} refused a write: {said}"
    verb = what[1].split()[0].upper()
    article, word = {"INSERT": ("an", "into"), "UPDATE": ("an", "of")}.get(verb, ("a", "from"))
    return f"{by} refused {article} {verb} {word} {what[2]}: {said}"


def _server_edited(context: ExceptionContext, engine: Engine) -> UserError | None:
    """A PostgreSQL store's schema changed by hand: psycopg's UndefinedColumn, UndefinedTable,
    WrongObjectType, a trigger's RaiseException or a constraint's violation, met by dlperf's
    own query. Registered once the store has opened (an open probes for missing tables)."""
    state = getattr(context.original_exception, "sqlstate", None)
    if state == PG_NO_PRIVILEGE:
        return _denied(context, engine)
    if state in PG_CONSTRAINT_ADDED or (state == PG_UNIQUE and not _primary_key(context)):
        detail = _refused(context, "a constraint")
        return _edited(masked_url(engine.url.render_as_string()), detail, None)
    if state not in (PG_RAISED, PG_NO_COLUMN, PG_NO_TABLE, PG_NOT_A_TABLE):
        return None
    detail = _refused(context) if state == PG_RAISED else _first_line(context)
    return _edited(masked_url(engine.url.render_as_string()), detail, None)


def _primary_key(context: ExceptionContext) -> bool:
    """Whether a unique violation is of its table's primary key, named as PostgreSQL names
    it (`<table>_pkey`)."""
    diag = getattr(context.original_exception, "diag", None)
    table, constraint = getattr(diag, "table_name", None), getattr(diag, "constraint_name", None)
    return table is not None and constraint == f"{table}_pkey"


def _denied(context: ExceptionContext, engine: Engine) -> UserError:
    """A PostgreSQL store whose role may not write (or read) dlperf's tables: the one line a
    read-only SQLite store gets, not psycopg's InsufficientPrivilege traceback. A SELECT ...
    FOR UPDATE (`runs delete` locks its runs) needs UPDATE: it is a write."""
    name = shown(masked_url(engine.url.render_as_string()))  # the passwords hidden
    statement = (context.statement or "").lstrip().upper()
    # PostgreSQL's three forms: `policy for table "t"`, a restrictive policy's `policy "p" for
    # table "t"`, an upsert's `policy (USING expression) for table "t"`.
    policy = re.search(
        r'row-level security policy (?:".*?" |\(USING expression\) )?for table "?([^"]+)"?',
        _first_line(context),
    )
    if policy is not None:  # the role may hold every grant: a policy refuses the row
        return UserError(
            f"run store {name} refuses writes: a row-level security policy on {policy[1]} "
            f"refuses it ({_first_line(context)})",
            f"drop the policy, or `ALTER TABLE {policy[1]} DISABLE ROW LEVEL SECURITY` as the "
            "table's owner",
        )
    if statement.startswith(("INSERT", "UPDATE", "DELETE")) or " FOR UPDATE" in statement:
        return UserError(
            f"run store {name} refuses writes: {_first_line(context)}",
            "grant the role INSERT, UPDATE and DELETE on dlperf's tables and USAGE on their "
            "sequences, or give another store",
        )
    return UserError(
        f"run store {name} refuses reads: {_first_line(context)}",
        "grant the role SELECT on dlperf's tables, or give another store",
    )


def _first_line(context: ExceptionContext) -> str:
    """The driver's message without what psycopg adds below it (CONTEXT, LINE 1: ...); a
    trigger may raise an empty one."""
    return next(iter(str(context.original_exception).strip().splitlines()), "no reason given")


def _not_as_made(context: ExceptionContext) -> bool:
    """Whether SQLite says that one of dlperf's tables or columns is missing. A current store
    is not inspected when it opens (only one to migrate is), so a table or column dropped by
    hand is first met here, by dlperf's own query."""
    said = str(context.original_exception)
    return (
        said.startswith(("no such table: ", "no such column: ")) or " has no column named " in said
    )


# --- repair ---------------------------------------------------------------------------------


# The tables a repair copies: studies before runs, and runs before the rows that name them.
COPIED = (Meta, Study, Run, Metric, Artifact, Tag)
# The meta rows that say whose files `<out_dir>/<store id>/` are: a repaired store keeps them.
WHOSE_FILES = (HOME, HOME_FILE, COPY_DIR, COPY_FILE)


@dataclass
class Copied:
    """One table's rows: copied, unreadable stretches skipped, and rows left out because
    they are garbled or belong to a run (or study) that could not be read. `missing`: the
    store has no such table (dropped or renamed by hand), one stretch none of whose rows
    could be read."""

    copied: int = 0
    skipped_stretches: int = 0
    left_out: int = 0
    missing: bool = False


@dataclass
class Repaired:
    source: Path
    out: Path
    store_id: str | None
    tables: dict[str, Copied] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return self.tables[Run.__tablename__].copied


def _refused_io(e: sqlite3.Error) -> bool:
    """Whether SQLite failed for an I/O error or a full disk, not for damage it read."""
    return (getattr(e, "sqlite_errorcode", 0) & 0xFF) in (SQLITE_IOERR, SQLITE_FULL)


def nearly_full(path: Path) -> bool:
    """Whether the disk holding the SQLite database `path` is (nearly) full: SQLite reports a
    full disk met while growing a store's -shm or -wal as an I/O error, and this tells it
    apart."""
    return shutil.disk_usage(path.parent).free < NEARLY_FULL


def held(e: sqlite3.Error) -> bool:
    """Whether SQLite failed because another process holds the file locked, past the busy
    timeout: the store is not damaged, and no row may be skipped for it."""
    return (getattr(e, "sqlite_errorcode", 0) & 0xFF) in (SQLITE_BUSY, SQLITE_LOCKED)


def _works(conn: sqlite3.Connection, query: str, after: int) -> bool:
    try:
        conn.execute(query + " LIMIT 1", (after,)).fetchall()
        return True
    except sqlite3.DatabaseError as e:
        if held(e):
            raise
        return False


def _readable(
    conn: sqlite3.Connection, table: str, columns: list[str], counts: Copied
) -> Iterator[tuple[Any, ...]]:
    """The rows of `table` that can be read, in rowid order, stepping over damaged pages as
    SQLite's `.recover` does: after a failure, probe ever further rowids until a scan starts,
    then narrow back (binary search) to the first rowid past the damage, so the rows of
    intact pages beside it are kept."""
    names = ", ".join(f'"{c}"' for c in columns)
    query = f'SELECT rowid, {names} FROM "{table}" WHERE rowid > ? ORDER BY rowid'
    after = ROWID_MIN
    while True:
        try:
            for row in conn.execute(query, (after,)):
                after = row[0]
                yield row[1:]
            return
        except sqlite3.DatabaseError as e:
            if held(e):
                raise
            counts.skipped_stretches += 1
        failed, step = after, 1
        while not _works(conn, query, min(failed + step, ROWID_MAX)):
            if failed + step >= ROWID_MAX:
                return
            step *= 2
        good = min(failed + step, ROWID_MAX)
        while good - failed > 1:  # the damage ends somewhere in (failed, good]
            middle = (failed + good) // 2
            if _works(conn, query, middle):
                good = middle
            else:
                failed = middle
        after = good


def deleting_run(key: str) -> int | None:
    """The run whose cut-short delete the meta key `deleting_run_<id>` records, as
    `RunStore.delete_runs` writes it; None for a key of that prefix set by hand (the one
    reading of the key, for the delete that finishes it and for repair's copy)."""
    digits = key.removeprefix(DELETING)
    if not re.fullmatch(r"[1-9][0-9]{0,18}", digits) or int(digits) > ROWID_MAX:
        return None
    return int(digits)


def _sound(table: Any, row: dict[str, Any]) -> bool:
    """A row whose required columns hold values and whose JSON, time and number columns can
    be read (`unreadable`): a garbled page that SQLite still reads, or a value set by hand (a
    metric's step 'abc'), must not become a run that breaks `runs show`."""
    for column in table.columns:
        value = row.get(column.name)
        if (value is None and not column.nullable) or unreadable(column, value) is not None:
            return False
    return True


def _source_tables(source: Path, busy_s: float) -> tuple[sqlite3.Connection, dict[str, list[str]]]:
    """A read-only connection to `source` (nothing, not even a checkpoint of its WAL, is
    written into a damaged file) that waits `busy_s` for another process's lock, as the
    store's other connections do, and its tables' columns."""
    # Quoted: in a URI, a path's ?, # and % escapes are the query, fragment and escapes
    # (p%41.db read the store pA.db; h#1.db made a file h, and dropped mode=ro with the rest).
    try:  # connecting fails too: a file dlperf may not read
        conn = sqlite3.connect(f"file:{quote(str(source))}?mode=ro", uri=True, timeout=busy_s)
        with contextlib.ExitStack() as failing:
            failing.callback(conn.close)  # unless its tables are read
            tables = {
                name: [c[1] for c in conn.execute(f'PRAGMA table_info("{name}")')]
                for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
            failing.pop_all()
    except sqlite3.DatabaseError as e:
        if held(e):
            raise
        if _refused_io(e) and nearly_full(source):
            # The read-only open of a WAL store makes and grows its -shm beside it, which a
            # full disk refuses as an I/O error: the store is sound, and every command on it
            # says the disk is full (it was "nothing can be read ... restore it from a backup").
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(source)) from None
        raise UserError(
            f"run store {shown(source)}: nothing can be read ({e})", "restore it from a backup"
        ) from None
    # An empty file reads as a database without tables; another program's meta or tags table
    # alone is no store either (`--db` refuses it), and was "repaired" into 0 runs, exit 0.
    if Run.__tablename__ not in tables:
        conn.close()
        raise UserError(
            f"run store {shown(source)} holds no runs table (an empty file, or another program's "
            "database): there is nothing to repair"
        )
    return conn, tables


def _versions(old: sqlite3.Connection, tables: dict[str, list[str]]) -> list[Any]:
    """The store's schema version rows as stored; none where they cannot be read."""
    if not {"key", "value"} <= set(tables.get(Meta.__tablename__, ())):
        return []
    try:
        return [
            version
            for (version,) in old.execute(
                f'SELECT value FROM "{Meta.__tablename__}" WHERE key = ?', (VERSION_KEY,)
            )
        ]
    except sqlite3.DatabaseError as e:
        if held(e):
            raise
        return []


def _refuse_newer(versions: list[Any], source: Path) -> None:
    """A store of a newer schema is not damaged: copied into this dlperf's schema, its new
    columns and tables would be dropped without a word, so it is refused as `--db` refuses it.
    A version that cannot be read, or that no dlperf writes, is damage and is repaired."""
    for version in versions:
        # As `--db` reads it: a version no dlperf writes ('04') is damage, not a newer store.
        if isinstance(version, str) and written(version) and int(version) > SCHEMA_VERSION:
            raise UserError(
                f"run store {shown(source)} has schema version {int(version)}, newer than this "
                f"dlperf's {SCHEMA_VERSION}",
                "upgrade dlperf to repair it",
            )


def copy_readable(source: Path, target: Engine, out: Path, busy_s: float) -> Repaired:
    """Copy every readable, sound row of the SQLite store `source` into the new, empty store
    at `target`. The store keeps its id and its home, so its runs' files on disk stay its own,
    and a repaired copy beside a live original keeps them in `runs delete`; rows of a
    run (or a study) that could not be read are left out (a run of a lost study is kept,
    unlinked), and the ids of lost runs are never handed out again. A delete cut short
    (`deleting_run_<id>`) is carried over, for the repaired store's `runs delete` to finish
    where the files are its own. A lock another process holds past `busy_s` seconds raises
    sqlite3's OperationalError (`held`): it is no damage."""
    old, old_tables = _source_tables(source, busy_s)
    done = Repaired(source, out, None)
    kept: dict[str, set[Any]] = {Study.__tablename__: set(), Run.__tablename__: set()}
    named_runs: set[int] = set()  # runs that any readable row names, copied or not
    # Deletes cut short (`RunStore.delete_runs`): their records wait for the runs to be read.
    deleting: dict[int, tuple[Any, ...]] = {}
    meta_insert = ""
    floor = 0
    try:
        versions = _versions(old, old_tables)
        _refuse_newer(versions, source)
        # The tables the store had, missing now: a store of before versions lacks meta, which
        # came with them, and tags, which came before them; every versioned store has them
        # all. Told by the meta table, not by a version row that cannot be read (damage too).
        lacking = {t.__tablename__ for t in COPIED} - old_tables.keys()
        if Meta.__tablename__ in lacking and Tag.__tablename__ in lacking:
            lacking -= {Meta.__tablename__, Tag.__tablename__}
        with target.begin() as conn:
            conn.execute(Meta.__table__.delete())  # the old store's facts replace the new one's
            for table in COPIED:
                t = table.__table__
                counts = done.tables.setdefault(t.name, Copied())
                if t.name in lacking:
                    # Its rows are lost as a damaged page's are: said so, not as an empty table
                    # copied cleanly.
                    counts.missing = True
                    counts.skipped_stretches += 1
                columns = [c.name for c in t.columns if c.name in old_tables.get(t.name, ())]
                if not columns:
                    continue
                insert = (
                    f'INSERT OR IGNORE INTO "{t.name}" ({", ".join(columns)}) '
                    f"VALUES ({', '.join('?' * len(columns))})"
                )
                batch: list[tuple[Any, ...]] = []
                for values in _readable(old, t.name, columns, counts):
                    row = dict(zip(columns, values, strict=True))
                    if isinstance(row.get("run_id"), int):
                        named_runs.add(row["run_id"])
                    if t.name == Run.__tablename__ and row["study_id"] not in kept["studies"]:
                        row["study_id"] = None
                    orphan = "run_id" in row and row["run_id"] not in kept["runs"]
                    if orphan or not _sound(t, row):
                        counts.left_out += 1
                        continue
                    meta = t.name == Meta.__tablename__
                    if meta and row["key"] == STORE_ID and not made_store_id(row["value"]):
                        counts.left_out += 1  # set by hand: the new store makes its own
                        continue
                    if meta and row["key"].startswith(DELETING):
                        run_id = deleting_run(row["key"])
                        if run_id is None:
                            counts.left_out += 1  # set by hand: no delete of ours
                        else:
                            named_runs.add(run_id)  # its id is never handed out again
                            deleting[run_id] = tuple(row.values())
                            meta_insert = insert
                        continue
                    # The home too: at another path the repaired store is a copy of the
                    # original, whose files `runs delete` keeps; moved in its place, the owner.
                    # So with a copy's own directory and the copy's file it was made for.
                    if meta and row["key"] not in (STORE_ID, *WHOSE_FILES):
                        if row["key"] == DELETED_MAX:
                            floor = int(row["value"])
                        continue  # the new store's version and floor are written below
                    if t.name in kept:
                        kept[t.name].add(row["id"])
                    batch.append(tuple(row.values()))
                    counts.copied += 1
                    if len(batch) == 1000:
                        conn.exec_driver_sql(insert, batch)
                        batch = []
                if batch:
                    conn.exec_driver_sql(insert, batch)
            done.store_id = conn.scalar(select(Meta.value).where(Meta.key == STORE_ID))
            if done.store_id is None:  # the store gets a new id: no other store's files are its
                conn.execute(Meta.__table__.delete().where(Meta.key.in_(WHOSE_FILES)))
            # The files a delete cut short still has to remove: the repaired store's next
            # `runs delete` finishes it, where it owns them (moved in place of the damaged
            # file; beside a live original it is its copy, and `_take` keeps the original's).
            # Not for a run whose rows were read after all (its files are a kept run's), nor
            # in a store with a new id (the files under the old id's directory are not its).
            counts = done.tables[Meta.__tablename__]
            pending = [v for i, v in deleting.items() if i not in kept[Run.__tablename__]]
            counts.left_out += len(deleting) - len(pending)
            if pending and done.store_id is not None:
                conn.exec_driver_sql(meta_insert, pending)
                counts.copied += len(pending)
            else:
                counts.left_out += len(pending)
            top = max([floor, *named_runs, *kept["runs"]])
            conn.execute(
                Meta.__table__.insert(),
                [
                    {"key": DELETED_MAX, "value": str(top)},
                    {"key": VERSION_KEY, "value": str(SCHEMA_VERSION)},
                ],
            )
    finally:
        old.close()
    return done
