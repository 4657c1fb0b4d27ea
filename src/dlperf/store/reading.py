"""A current SQLite store read with the standard library alone, for `dlperf runs list`, and
the guard that keeps an output file off the store (`not_the_store`).

Importing SQLAlchemy doubles the start-up of a listing (bench_startup.py), so a command that
only lists runs reads a SQLite store through `sqlite3` when it can tell that this gives the
same answer as `RunStore.open(db, create=False)`: a plain file path or `sqlite:///PATH`
URL, a file at the current schema version in WAL mode, found sound by the same
`PRAGMA quick_check` the store runs when it opens. Anything else (PostgreSQL, a URL with a
query, a store to migrate, a damaged file, any error of the driver) returns None, and the
caller opens the store the long way, which answers, migrates or refuses in its own words.
A missing or empty file reads as a store without runs, as it does there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from dlperf.errors import UserError
from dlperf.paths import no_file_of_bytes, one_file, unnamed_cwd, within
from dlperf.store.files import STORE_NEIGHBOURS, frozen
from dlperf.store.ids import made_store_id
from dlperf.store.query import DELETING_TAG, stale_mark
from dlperf.store.record import RunRecord
from dlperf.store.urls import missing_slashes

# The facts a current store holds in `meta` (schema.STORE_ID, schema.VERSION_KEY) and the
# version it is at (migrations.SCHEMA_VERSION): tests/store/test_reading.py checks they agree.
SCHEMA_VERSION = 3
VERSION_KEY, STORE_ID = "schema_version", "store_id"
CHECK_MAX_BYTES = 256 << 20  # integrity.CHECK_MAX_BYTES: larger stores are not checked on open
PLAIN_URL = "sqlite:///"
RUN_COLUMNS = "id, study_id, name, kind, status, config, config_hash, system, summary, "
RUN_COLUMNS += "started, ended, error"


class Listing(Protocol):
    """What a listing reads of a store: `RunStore` and `SqliteListing` both."""

    def list_runs(
        self, kind: str | None = None, study_id: int | None = None, limit: int | None = None
    ) -> list[RunRecord]: ...

    def get_study(self, study_id: int) -> dict[str, Any]: ...


def sqlite_path(db: str | None) -> Path | None:
    """The file `db` names when it is a plain SQLite path or URL; None for anything else."""
    if not db or not db.strip():  # blank: the default store, as runstore._url reads it
        db = "dlperf.db"
    if "://" in db:
        if not db.startswith(PLAIN_URL):
            return None
        db = db.removeprefix(PLAIN_URL)
    elif missing_slashes(db) is not None:  # `sqlite:x.db`: the long way refuses it
        return None
    else:
        db = os.path.expanduser(db)  # as runstore._url does for a path
    # SQLAlchemy's URL parser reads ?, # and % escapes in these; an empty path, :memory:, a
    # SQLite URI filename and a path ending in / are refused there: all are left to it.
    if not db or db == ":memory:" or db.startswith("file:") or db.endswith("/"):
        return None
    if any(c in db for c in "?#%"):
        return None
    try:  # lone surrogates, a name's bytes that are not UTF-8: the long way refuses it
        db.encode("utf-8")
    except UnicodeEncodeError:
        return None
    # A . or .. after a directory: RunStore.open checks the path as the OS reads it (nope/../x.db
    # with nope missing, x.db/. through a file), where resolving it below would not.
    if any(part in (".", "..") for part in db.split("/")[1:]):
        return None
    try:
        path = Path(db).resolve()
        return path if path.parent.is_dir() else None
    except (OSError, RuntimeError):  # a symlink loop, a working directory gone or too deep:
        return None  # the long way says so


def sqlite_listing(db: str | None) -> Listing | None:
    """The store `db` (as --db takes it) to list, read through `sqlite3`; None when only
    `RunStore.open` can tell what it holds."""
    path = sqlite_path(db)
    if path is None:
        return None
    try:
        if not path.exists():
            return SqliteListing(None, db)
        if path.stat().st_size == 0:
            # Empty; or no store file at all, which reads as size 0 too (a FIFO, a device, a
            # /proc file): the long way refuses those.
            return None if no_file_of_bytes(path) else SqliteListing(None, db)
        listing = SqliteListing(path, db)
        return listing if listing.current() else None
    except (OSError, sqlite3.Error):
        return None


def _storable(study_id: int) -> bool:
    """Whether a SQLite id column can hold `study_id` (as runstore._storable): past 64 bits
    the driver cannot even bind it, and no id is 0 or less."""
    return bool(0 < study_id < 2**63)


def _time(value: str) -> str:
    """A stored DateTime as RunRecord holds it (SQLAlchemy keeps ISO text in SQLite)."""
    return datetime.fromisoformat(value).isoformat(timespec="seconds")


def _run_time(path: Path, run_id: int, column: str, value: Any) -> str:
    try:
        return _time(value)
    except (TypeError, ValueError):  # set by hand: 'yesterday', a number
        raise _unreadable(path, run_id, column, value) from None


def _json(path: Path, run_id: int, column: str, value: Any) -> dict[str, Any] | None:
    with contextlib.suppress(TypeError, ValueError):  # text set by hand, a number
        found = None if value is None else json.loads(value)
        if found is None or isinstance(found, dict):
            return found
    raise _unreadable(path, run_id, column, value)


def _unreadable(path: Path, run_id: int, column: str, value: Any) -> UserError:
    """The one line naming the run and its column, not a JSONDecodeError's traceback or an
    AttributeError where a list or a string stands for an object."""
    from dlperf.store import integrity  # SQLAlchemy's import: only here
    from dlperf.store.schema import Run

    reason = integrity.unreadable(Run.__table__.c[column], value) or integrity.NOT_JSON
    return integrity.garbled_json(path, run_id, column, reason)


class SqliteListing:
    """The runs and studies of one SQLite store file (`path` None: a store without runs);
    `db` opens it the long way if the driver fails while reading (a page found damaged, a
    lock another process holds), to wait or fail in the store's own words."""

    def __init__(self, path: Path | None, db: str | None) -> None:
        self.path = path
        self.db = db

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        assert self.path is not None
        # No wait for a lock another process holds: "database is locked" at once, and the
        # long way waits for it, in attempts a stop can end (its busy timeout, once).
        # Waited here too, in SQLite's busy handler, a read held Ctrl-C for the whole wait
        # and then waited as long again the long way.
        with closing(_connect(self.path)) as conn:
            conn.isolation_level = None  # reads only: no implicit transactions
            yield conn

    def _long_way(self) -> Listing:
        from dlperf.store.runstore import RunStore

        return RunStore.open(self.db, create=False)

    def current(self) -> bool:
        """A store at the current version, in WAL mode, that passes the quick check."""
        assert self.path is not None
        with self._connection() as conn:
            if conn.execute("PRAGMA journal_mode").fetchone() != ("wal",):
                return False  # read the long way, under a read lock (runstore._sqlite_begin)
            tables = {t for (t,) in conn.execute("SELECT name FROM sqlite_master")}
            if "meta" not in tables:
                return False
            query = "SELECT key, value FROM meta WHERE key IN (?, ?)"
            facts = dict(conn.execute(query, (VERSION_KEY, STORE_ID)).fetchall())
            if facts.get(VERSION_KEY) != str(SCHEMA_VERSION) or STORE_ID not in facts:
                return False
            if not made_store_id(facts[STORE_ID]):
                return False  # the long way refuses it in its words
            if self.path.stat().st_size > CHECK_MAX_BYTES:
                return True
            return conn.execute("PRAGMA quick_check(1)").fetchall() == [("ok",)]

    def list_runs(
        self, kind: str | None = None, study_id: int | None = None, limit: int | None = None
    ) -> list[RunRecord]:
        """As `RunStore.list_runs`: newest first, each with its tags in key order."""
        if self.path is None:
            return []
        where: list[str] = []
        args: list[Any] = []
        if kind is not None:  # '' is a kind no run has, not every kind
            where.append("kind = ?")
            args.append(kind)
        if study_id is not None:
            if not _storable(study_id):
                return []  # no study has that id
            where.append("study_id = ?")
            args.append(study_id)
        query = f"SELECT {RUN_COLUMNS} FROM runs"
        query += f" WHERE {' AND '.join(where)}" if where else ""
        query += " ORDER BY id DESC"
        if limit:
            query += " LIMIT ?"
            args.append(limit)
        try:
            with self._connection() as conn:
                conn.execute("BEGIN")  # the runs and their tags from one snapshot
                rows = conn.execute(query, args).fetchall()
                tags = self._tags(conn, [row[0] for row in rows])
                conn.execute("COMMIT")
        except sqlite3.Error:
            return self._long_way().list_runs(kind, study_id, limit)
        return [self._record(row, tags.get(row[0], {})) for row in rows]

    @staticmethod
    def _tags(conn: sqlite3.Connection, ids: list[int]) -> dict[int, dict[str, str]]:
        tags: dict[int, dict[str, str]] = {}
        for start in range(0, len(ids), 500):  # well below SQLite's limit of parameters
            chunk = ids[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            query = f"SELECT run_id, key, value FROM tags WHERE run_id IN ({marks}) ORDER BY key"
            for run_id, key, value in conn.execute(query, chunk):
                # as RunStore reads them (`runstore._tags_of`): a gone delete's mark left out
                if key != DELETING_TAG or not stale_mark(value):
                    tags.setdefault(run_id, {})[key] = value
        return tags

    def _record(self, row: tuple[Any, ...], tags: dict[str, str]) -> RunRecord:
        assert self.path is not None
        run_id, study_id, name, kind, status, config, config_hash, system, summary = row[:9]
        started, ended, error = row[9:]
        return RunRecord.read(
            status,
            _json(self.path, run_id, "system", system),
            id=run_id,
            study_id=study_id,
            name=name,
            kind=kind,
            config=_json(self.path, run_id, "config", config),
            config_hash=config_hash,
            summary=_json(self.path, run_id, "summary", summary) or {},
            started=_run_time(self.path, run_id, "started", started),
            ended=None if ended is None else _run_time(self.path, run_id, "ended", ended),
            error=error,
            tags=tags,
        )

    def get_study(self, study_id: int) -> dict[str, Any]:
        """As `RunStore.get_study`."""
        if self.path is None:  # a store not there: said so, as the store says it
            return self._long_way().get_study(study_id)
        found = None
        if _storable(study_id):
            query = "SELECT id, name, kind, created FROM studies WHERE id = ?"
            try:
                with self._connection() as conn:
                    found = conn.execute(query, (study_id,)).fetchone()
            except sqlite3.Error:
                return self._long_way().get_study(study_id)
        if found is None:
            raise UserError(f"no study {study_id} in the store")
        return {"id": found[0], "name": found[1], "kind": found[2], "created": _time(found[3])}


def recorded_files(path: Path) -> tuple[str, list[tuple[int, str, str]]] | None:
    """The store id of the SQLite store file at `path` and the files its runs recorded (run
    id, kind, path as recorded), read through `sqlite3` without opening the store: nothing is
    made, migrated or waited for. None where no store is there, or it cannot be read so (a
    lock held, another program's file, damage): the store's own opening says so, later."""
    if not path.is_file() or no_file_of_bytes(path):
        return None
    try:
        # As `SqliteListing` reads: read only "mode=ro" left the -wal and -shm files behind
        with closing(_connect(path)) as conn:
            query = "SELECT value FROM meta WHERE key = ?"
            found = conn.execute(query, (STORE_ID,)).fetchone()
            if found is None or not made_store_id(found[0]):
                return None
            files = conn.execute("SELECT run_id, kind, path FROM artifacts").fetchall()
    except sqlite3.Error:
        return None
    return found[0], files


def _connect(path: Path) -> sqlite3.Connection:
    """A `sqlite3` connection reading the store file `path` that waits for no lock another
    process holds. Not "mode=ro" alone, which left the -wal and -shm files behind."""
    if frozen(path):
        uri = f"file:{quote(str(path))}?mode=ro&immutable=1"
        return sqlite3.connect(uri, uri=True, timeout=0)
    return sqlite3.connect(path, timeout=0)


def not_the_store(path: Path, option: str, db: str | None) -> None:
    """Refuse, before anything is written, an output `path` given as `option` that would write
    over the run store `db` names (--db or DLPERF_DB, a SQLite path or URL; None: the default
    ./dlperf.db): its file, a -wal, -shm or -journal file beside it, or a path inside its runs'
    folder (dlperf_runs/<store id>/, which holds their checkpoints). An ONNX file or a figure
    saved over the store replaced every run in it, and an export over a run's checkpoint the
    checkpoint, exit 0. A link to the store counts (`one_file`). The store is read, never
    opened or made; a server's store has no file here to write over."""
    store = sqlite_path(db)
    # A NUL in the name, or a working directory gone: the write itself says so, its way
    if store is None or "\0" in str(path) or unnamed_cwd() is not None:
        return
    where = f"--db {db}" if db and db.strip() else "the default store ./dlperf.db"
    for neighbour in ("", *STORE_NEIGHBOURS):
        if one_file(path, store.with_name(store.name + neighbour)):
            what = f"the run store's {neighbour[1:]} file" if neighbour else "the run store"
            raise UserError(f"{option} {path} is {what} ({where})", "give another file")
    recorded = recorded_files(store)
    if recorded is None:  # no store there yet, or none readable: no runs' folder known
        return
    store_id, files = recorded
    # Its runs' folder under run.out_dir: the default's from here and from the store's
    # folder, and wherever the runs recorded files in one
    folders = {Path.cwd() / "dlperf_runs" / store_id, store.parent / "dlperf_runs" / store_id}
    folders |= {p for _, _, file in files for p in Path(file).parents if p.name == store_id}
    for folder in sorted(folders):
        inside = within(path, folder)
        if inside is not None:
            raise UserError(
                f"{option} {path} is {_held(path, inside, files)} ({where})",
                f"give a path outside {folder}",
            )


def _held(path: Path, inside: Path, files: list[tuple[int, str, str]]) -> str:
    """What the store keeps at `path`, `inside` its runs' folder: a run's recorded file, a
    run's folder, or the folder itself."""
    for run_id, kind, file in files:
        if one_file(path, Path(file)):
            return f"run {run_id}'s {kind}, recorded by the run store"
    run = re.fullmatch(r"run-(\d+)", inside.parts[0]) if inside.parts else None
    if run is not None:
        return f"in run {run.group(1)}'s folder of the run store"
    return "in the run store's folder of its runs' files"
