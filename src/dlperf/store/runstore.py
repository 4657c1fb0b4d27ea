"""The run store: studies, runs, metrics and artifacts in any SQLAlchemy database.

Default: a SQLite file ./dlperf.db in WAL mode with a busy timeout, so a reader (report,
doctor, a second shell) never blocks the writer. `--db` / DLPERF_DB take a SQLAlchemy URL
(e.g. postgresql+psycopg://user@host/db) or a plain file path.

Many processes may write one SQLite store at once (a sweep's runs, the shells of a class):
every write transaction begins IMMEDIATE, taking SQLite's one write lock up front and waiting
for it up to the busy timeout. The driver's default, a deferred BEGIN, may read first and
then fail at once with "database is locked" when it must upgrade to a writer while another
process writes: SQLite cannot wait there without risking a deadlock.

Each store has a random id, made when it is first opened: the files its runs write go under
`<out_dir>/<store id>/`, so two stores used from one directory never share a checkpoint.

A run records the process that writes it (host, pid, the process's start time, the boot id)
in its system JSON under "process": a run stored as `running` whose process is known to be
gone reads as `lost` (`record.RunRecord`). That is computed when read, never written, so any
number of readers may look at once and a run that is resumed is simply `running` again.

One process writes a run: the same process, as JSON, is the run's `owner` while it runs (its
lease, held as long as that process lives). Resuming a stopped run takes it over with a
compare-and-set (`UPDATE ... WHERE owner IS <the owner seen>`), which the database applies
to one process only, on SQLite and PostgreSQL alike; a run whose owner still lives (or lives
on another host, where that cannot be told) is refused. A sweep's points are claimed the
same way (`claim`).

Opening a store checks it (a SQLite file: `integrity`) and brings its schema to the current
version (`migrations`); a URL is printed only through `masked_url`.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import json
import logging
import math
import operator
import os
import re
import resource
import secrets
import shutil
import sqlite3
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from sqlalchemy import (
    Text,
    cast,
    create_engine,
    delete,
    event,
    func,
    inspect,
    make_url,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, Connection, Engine, ExceptionContext, Row
from sqlalchemy.exc import ArgumentError, DatabaseError, IntegrityError, NoSuchModuleError
from sqlalchemy.orm import Session, object_session
from sqlalchemy.pool import StaticPool

from dlperf import stopping
from dlperf.errors import StoreGone, UserError, error_text, interrupted, memory_limit
from dlperf.parsing import finite_json, printable_key, printable_keys, subscripted
from dlperf.paths import error_line, no_file_of_bytes, unnamed_cwd
from dlperf.procs import alive, process_alive, stopped, this_process
from dlperf.store import integrity, migrations
from dlperf.store.files import frozen
from dlperf.store.query import (
    ABSENT,
    DELETING_TAG,
    copy_delete_refusal,
    from_experiment,
    live_deleter,
    no_such_run,
    no_such_study,
    stale_mark,
    that_stores,
)
from dlperf.store.record import RUNNING, STATUSES, RunRecord, place_named, read_place
from dlperf.store.schema import (
    COPY_DIR,
    COPY_FILE,
    DELETED_MAX,
    DELETING,
    HOME,
    HOME_FILE,
    STORE_ID,
    Artifact,
    Base,
    Claim,
    Meta,
    Metric,
    Run,
    Study,
    Tag,
)
from dlperf.store.urls import (
    absent,
    host_part,
    masked_slashless,
    missing_slashes,
    refuse_edged,
    refuse_missing_slashes,
    secret_option,
    unescaped_at,
)
from dlperf.store.urls import masked_url as masked_url  # re-exported: dlperf.store

DEFAULT_DB = "dlperf.db"
# SQLite's primary result codes (the low byte of an extended code); its I/O error and full
# disk are integrity's, which tells a full disk from damage with them too.
SQLITE_BUSY, SQLITE_READONLY, SQLITE_CANTOPEN = 5, 8, 14
# How close to the file size limit (ulimit -f) one of a store's files must be for a disk I/O
# error to be taken for that limit: SQLite's largest writes are a page (at most 64 KiB, and its
# frame header in the -wal) and a 32 KiB region of the -shm.
SIZE_LIMIT_NEAR = 128 << 10
# The files SQLite keeps beside a store in WAL mode, named by these suffixes to the store's.
WAL_FILES = ("-wal", "-shm")
# Every file SQLite writes beside a store: its rollback journal too, which a new store (made in
# rollback mode, then switched to WAL) has while its schema is made. (A super-journal,
# NAME-mjXXXXXXXXX, is written only by a transaction over attached stores: dlperf makes none.)
SIDE_FILES = ("-journal", *WAL_FILES)
# The longest full path of a store SQLite opens: its unix VFS's mxPathname (MAX_PATHNAME, 512)
# less the 8 bytes of "-journal", which its pager must be able to add before it opens a store
# (even one in WAL mode, or read-only). A store's path is made absolute and its links
# resolved first, as SQLite does, so neither a relative name nor a link is shorter.
SQLITE_MAX_PATH = 512 - len("-journal")
PG_DISK_FULL, PG_READ_ONLY = "53100", "25006"
# query_canceled: a statement that ran past statement_timeout, or one a session cancelled
# (pg_cancel_backend).
PG_CANCELLED = "57014"
# The fix of a statement_timeout too short for a store's queries: lifted for its sessions.
NO_STATEMENT_TIMEOUT = (
    "lift it for dlperf's sessions: add -cstatement_timeout=0 to the URL's ?options=, or "
    "ALTER ROLE {role} SET statement_timeout = 0; a cancelled write wrote nothing"
)
PG_LOCK_TIMEOUT = "55P03"  # lock_not_available: a lock not had within lock_timeout
LOCK_WAIT = "dlperf_lock_wait_s"  # a PostgreSQL connection's lock_timeout in s, in its info
# The savepoint each statement of a PostgreSQL write runs in, to try it again once a wait
# for a lock has timed out (`_pg_write`).
PG_ATTEMPT = "dlperf_wait"
# PostgreSQL's states of a server gone: class 08 (connection exception), shut down by an
# administrator or a crash, starting or stopping ("the database system is shutting down").
PG_GONE_CLASS, PG_GONE = "08", ("57P01", "57P02", "57P03")
# idle_session_timeout: the server closed a session that sat idle outside a transaction. The
# server is there; a connection checked out of the pool is pinged first (`_server_engine`),
# so this is met only by one held idle by dlperf itself.
PG_IDLE_CLOSED = "57P05"
# idle_in_transaction_session_timeout: the server closed a session that sat idle inside an
# open transaction (a read's or a write's, between two of its statements). The server is
# there; libpq may lose its message as the socket closes ("server closed the connection
# unexpectedly"), so the session's setting is read as it connects (`_session_set`).
PG_IDLE_IN_TRANSACTION = "25P03"
IDLE_IN_TRANSACTION = "idle_in_transaction_session_timeout"
# A connection's idle_in_transaction_session_timeout as SHOW writes it ("0", "20ms"), in its
# info; and the setting in libpq's options (the URL's ?options=, PGOPTIONS): -c or --.
IDLE_TX_SHOWN = "dlperf_idle_in_transaction"
IDLE_TX_OPTION = re.compile(rf"(?:-c\s*|--){IDLE_IN_TRANSACTION}=(\S+)")
# A write PostgreSQL refused: a trigger's RAISE EXCEPTION (integrity.PG_RAISED), class 23 (a
# constraint violated).
PG_CONSTRAINT_CLASS = "23"
# The lock a new run's id is chosen under in a PostgreSQL store (with its schema's hash), the
# sequence it comes from, and that sequence's end: runs.id is a SERIAL.
PG_RUN_ID_LOCK = int.from_bytes(b"runs", "big")
PG_RUN_IDS, PG_INT_MAX = "pg_get_serial_sequence('runs', 'id')", 2**31 - 1
PG_IDS_USED_UP = "2200H"  # sequence_generator_limit_exceeded: a table's row ids have run out
UNWRITABLE = (
    "the store's file, its directory or its database is read-only: check the file's mode and "
    "attributes (lsattr), the mount, or the database's permissions"
)
# The fix of a PostgreSQL session that may not write, whatever it was refused.
READ_ONLY_SESSION = (
    "open it from a session that may write (not default_transaction_read_only=on, not a standby)"
)
BUSY_TIMEOUT_S = 30  # how long a write waits for the write lock; a SQLite URL's ?timeout= sets it
# How long a connection to a PostgreSQL server may take (libpq's connect_timeout), unless the
# URL's ?connect_timeout= or libpq's PGCONNECT_TIMEOUT says: a port that accepts connections
# and never answers (a hung server, a proxy with nothing behind it) held every command for
# ever, or psycopg's own 130 s.
CONNECT_TIMEOUT_S = 10
LIBPQ_DRIVERS = ("psycopg", "psycopg2", "psycopg2cffi")  # the drivers that read connect_timeout
# One attempt at a lock: SQLite's busy handler waits in C, where a stop signal cannot land, so
# the wait is cut in attempts this long and a stop is seen between two (`_in_attempts`).
BUSY_ATTEMPT_MS = 100
# How long a write still waits for the lock once a stop signal has come: the command must end
# within the stop's grace, and a run's `killed` mark behind a brief write of another process
# (a sweep's points stopped at once) still gets in.
STOP_WAIT_S = 5.0
# A tag's value, at most: a note, not a document. Longer, every table that shows the run's tags
# pads each of its rows to that width (10,000 tags and one 100,000-character value: 1 GB of
# `runs show` output, minutes and 4 GB of memory). MLflow's own tag limit was 5,000 for years.
TAG_VALUE_MAX = 5000
# Where `runs repair NEW.db` writes until its copy is whole: hidden, and named so that no
# command or glob (*.db) takes it for a store; each repair adds -PID-TOKEN of its own
# (`_staging`), so that two repairs into one NEW never write, remove or rename each other's.
REPAIRING = ".{}.repairing"
LEFT = "not found there, nor beside this store: if the run's files were moved, they were left"
WRITES = "dlperf_writes"  # the execution option that makes a SQLite transaction IMMEDIATE
ROLLBACK = "dlperf_rollback"  # a SQLite connection's info: its store is not in WAL mode
# The execution option of a reader's write (the upgrade of an older store, `RunStore._opened`):
# a SQLite store is written in its own journal mode, which readers leave as they found it.
KEEP_MODE = "dlperf_keep_mode"
WRITE = "for its write lock"  # what a write waits for, as its refusal says it
# A read of the first page, which takes a SQLite transaction's read lock (`read_begun`).
READ_LOCK = "SELECT 1 FROM sqlite_master LIMIT 1"
T = TypeVar("T")


def _parsed(url: str) -> URL:
    """`url` parsed, or the one line for one SQLAlchemy cannot read: its own ValueError for a
    port that is not a number (an unclosed IPv6 bracket reads as one) was a traceback."""
    # SQLAlchemy ends a password at its first @: the rest of one with an unescaped @ became
    # the host, which the driver's error quoted and the driver looked up ("failed to resolve
    # host 'cr'"), or the database, the query or a port "not a number". Refused first, on the
    # URL as written, naming neither the host nor the password (masked to its last @).
    if unescaped_at(url):
        raise UserError(
            f"cannot open run store {integrity.shown(masked_url(url))}: its user name or "
            "password holds an unescaped @",
            "write @ in a password as %40, e.g. postgresql+psycopg://user:p%40ss@host/db; "
            "in a user name or a database's name too",
        )
    try:
        parsed = make_url(url)
    except ArgumentError as e:
        raise UserError(f"cannot open run store {masked_url(url)!r}: {e}") from None
    except ValueError:
        # libpq's host list (h1:5432,h2:5433) reads as a port "5432,h2:5433" to SQLAlchemy
        if "," in host_part(url):
            raise UserError(
                f"cannot open run store {masked_url(url)!r}: it lists its hosts in the URL's "
                "host part, as libpq does",
                "give each as a host= query parameter, e.g. "
                "postgresql+psycopg://user@/db?host=h1:5432&host=h2:5433",
            ) from None
        raise UserError(
            f"cannot open run store {masked_url(url)!r}: its port is not a number",
            "e.g. postgresql://user@host:5432/db, an IPv6 host in brackets: [::1]:5432",
        ) from None
    # SQLAlchemy drops a port that is 0 (falsy) from what it passes the driver, which then
    # connected to the default port: another server's store than the URL names. The driver
    # refuses 70000 itself ("invalid port number").
    if parsed.port == 0 or any(_zero(port) for port in _query_ports(parsed)):
        raise UserError(
            f"cannot open run store {integrity.shown(masked_url(url))}: port 0 is not a port",
            "leave it out for the server's default, 5432 for PostgreSQL",
        )
    _query_checked(url, parsed)
    return parsed


def _query_ports(parsed: URL) -> list[str]:
    """The ports a URL's query gives its hosts, as SQLAlchemy's PostgreSQL dialect reads them
    (`_split_multihost_from_url`): host=H:P, each of several, and port=P1,P2."""
    hosts, ports = parsed.query.get("host", ()), parsed.query.get("port", ())
    found = [p for h in _values(hosts) for _, colon, p in [h.rpartition(":")] if colon]
    return found + _values(ports)


def _values(given: str | tuple[str, ...]) -> list[str]:
    """A query option's values: each of one given several times, or a comma-separated one."""
    return list(given) if isinstance(given, tuple) else given.split(",") if given else []


def _zero(port: str) -> bool:
    # '0' or '00': dropped as the URL's own :0 is, where the driver refuses a port 1 itself.
    return port.strip().isdigit() and int(port) == 0


# The query of a URL as SQLAlchemy's parser finds it (sqlalchemy.engine.url._parse_url's
# pattern: a password may hold a ?, a host or a port may not), to read it as it was written.
URL_QUERY = re.compile(
    r"""[\w+]+://
    (?:[^:/]*(?::[^@]*)?@)?
    (?:(?:\[[^/?]+\]|[^/:?]+)?(?::[^/?]*)?)?
    (?:/[^?]*)?
    (?:\?(?P<query>.*))?""",
    re.X | re.S,
)


def _query_checked(url: str, parsed: URL) -> None:
    """Refuse a query part of `url` that SQLAlchemy drops without a word: one without `=`, or
    with an empty value (urllib's parse_qsl keeps neither). `sqlite:////x/q?x.db` read and
    wrote the file `q`; a bare `?mode`, an empty `?timeout=`, a bare `?x` on a PostgreSQL URL
    were ignored, where `?foo=1` is refused."""
    found = URL_QUERY.match(url)
    query = found.group("query") if found is not None else None
    for part in (query or "").split("&"):
        _key, equals, value = part.partition("=")
        if not part or (equals and value):
            continue  # an empty part (a trailing &) drops nothing
        name = integrity.shown(masked_url(url))
        if parsed.get_backend_name() == "sqlite" and not equals:
            fix = (
                "write a ? in the file's name as %3F, e.g. sqlite:///dir/q%3Fx.db; an option "
                "is name=value: a sqlite:/// URL takes ?timeout=SECONDS and ?mode=ro"
            )
        else:
            fix = "give each option as name=value, or leave it out"
        raise UserError(
            f"cannot open run store {name}: its query part {integrity.shown(part)!r} has no "
            "value (SQLAlchemy would drop it)",
            fix,
        )


def _url(db: str | None) -> str:
    refuse_edged(db)  # before SQLAlchemy or the server reads the white space as the URL's
    # A path that is not UTF-8 reaches us with lone surrogates (Python's way with such bytes
    # from argv), which no URL, driver or record can encode: a UnicodeEncodeError traceback.
    if db is not None and not db.isascii():
        from dlperf.config.base import check_utf8_name  # pydantic's import: only here

        check_utf8_name("run store", db)
    # A blank name (DLPERF_DB=' ') is read as an empty one, which the docs promise is the
    # default store: it made a store file named ' '.
    if not db or not db.strip():
        return f"sqlite:///{DEFAULT_DB}"
    # libpq, psql and most hosts (Heroku, Render, Supabase) also spell the scheme postgres://;
    # SQLAlchemy knows it only as postgresql://.
    if db.startswith("postgres://"):
        return "postgresql://" + db.removeprefix("postgres://")
    if "://" in db:
        return db
    refuse_missing_slashes(db)  # `sqlite:x.db` made a store file of that name
    # A plain path names exactly that file: pasted into a URL unescaped, its ?, # and %
    # escapes were read as the URL's query, fragment and escapes (--db 'q?.db' made a file q,
    # 'a%20b.db' one named 'a b.db'). A path in quotes or an environment variable reaches us
    # with its ~ unexpanded.
    plain = URL.create("sqlite", database=os.path.expanduser(db))
    return plain.render_as_string(hide_password=False)


def absolute_url(db: str | None) -> str:
    """The URL `open` reads `db` as, a SQLite file's relative path made absolute (as of now):
    the same store from any working directory, as a `Store` sent to another process says."""
    url = _url(db)
    parsed = _parsed(url)
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return url
    return parsed.set(database=os.path.abspath(path)).render_as_string(hide_password=False)


# The package to install for a SQLAlchemy driver's module, where its name is not the module's:
# "No module named 'MySQLdb'" did not say that mysql:// needs mysqlclient.
DRIVER_PACKAGES = {
    "MySQLdb": "mysqlclient",
    "pymysql": "PyMySQL",
    "psycopg": "'psycopg[binary]'",
    "psycopg2": "psycopg2-binary",
    "cx_Oracle": "cx-Oracle",
}


def _no_driver(name: str, e: ModuleNotFoundError) -> UserError:
    module = e.name or str(e)
    package = DRIVER_PACKAGES.get(module, module)
    return UserError(
        f"cannot open run store {name!r}: its database driver {module} is not installed",
        f"pip install {package}, or name a driver that is installed: dialect+driver://...",
    )


class StoreLocked(UserError):
    """Another process held the SQLite store locked for longer than the busy timeout: not
    the user's input, so exit code 1, but one line (as StoreGone)."""

    exit_code = 1


def _no_dialect(name: str, url: URL) -> UserError:
    """The one line for a URL whose scheme SQLAlchemy has no dialect or driver for."""
    scheme = url.drivername
    known = "a file path, sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB"
    known += ", also written postgresql:// or postgres://"
    if url.get_backend_name() == "postgresql":  # a driver misspelt: postgresql+psycopj://
        what = f"{scheme}:// names no database driver SQLAlchemy knows"
    else:
        what = f"{scheme}:// is not a database scheme SQLAlchemy knows"
    return UserError(
        f"cannot open run store {name!r}: {what}",
        f"dlperf takes {known}; another SQLAlchemy URL needs its dialect installed",
    )


def _server_options(url: URL, name: str) -> None:
    """Refuse an option a server's URL gives more than once: the driver got the values as a
    Python tuple (`bad value for connect_timeout: "('1', '2')"`). Not `host`, which SQLAlchemy
    takes more than once for a PostgreSQL list of hosts to try."""
    for key, value in url.query.items():
        if isinstance(value, tuple) and key != "host":
            # A password's values are not printed (the store's name masks them too).
            values = "" if secret_option(key) else f" ({', '.join(value)})"
            raise UserError(
                f"run store {name}: {key} is given {len(value)} times{values}", "give it once"
            )


def _server_engine(url: URL, name: str) -> Engine:
    """The engine of a server's store: a libpq driver's connections time out by default.

    A PostgreSQL store's sessions speak UTF-8 and run at READ COMMITTED, whatever the URL,
    the role or the database set: in client_encoding SQL_ASCII psycopg hands text back as
    bytes (every command was a TypeError in SQLAlchemy's reading of the server's version),
    in LATIN1 it could not send an emoji (a UnicodeEncodeError); at SERIALIZABLE or
    REPEATABLE READ (default_transaction_isolation) writes at once failed with "could not
    serialize access", where dlperf's writes are made for READ COMMITTED (row locks taken
    as read, compare-and-set updates, upserts). A startup parameter outranks the URL's
    `-c` options and a role's settings.

    A PostgreSQL store's reads run in autocommit, its writes (`_writes`) at READ COMMITTED:
    a read session held its transaction open across the Python work between its queries
    (SQLAlchemy compiling the next one, rows made into objects), where a short
    idle_in_transaction_session_timeout closed it ("terminating connection due to
    idle-in-transaction timeout", `doctor` and `report` at 20 ms). At READ COMMITTED each
    statement of a read saw its own snapshot anyway: autocommit changes no read's rows."""
    _server_options(url, name)
    postgresql = url.get_backend_name() == "postgresql"
    libpq = postgresql and url.get_driver_name() in LIBPQ_DRIVERS
    # A pooled connection is pinged as it is taken, and replaced if the server or a proxy
    # closed it while it sat idle (idle_session_timeout, PgBouncer, a cloud proxy, a
    # firewall): the next write of a run then said "run store ... went away" and left the
    # run lost, though the server had never gone.
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if postgresql:
        kwargs["isolation_level"] = "AUTOCOMMIT"
    connect_args: dict[str, Any] = {"client_encoding": "UTF8"} if libpq else {}
    if libpq and _connect_timeout(url) is None:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    if connect_args:
        kwargs["connect_args"] = connect_args
    engine = create_engine(url, **kwargs)
    if postgresql:
        event.listen(engine, "connect", _session_set)
    return engine


def _writes(engine: Engine, **options: Any) -> Engine:
    """The engine of `engine`'s write transactions: SQLite's IMMEDIATE (WRITES), PostgreSQL's
    at READ COMMITTED (its reads run in autocommit, `_server_engine`)."""
    if engine.dialect.name == "postgresql":
        options["isolation_level"] = "READ COMMITTED"
    return engine.execution_options(**{WRITES: True}, **options)


def _session_set(dbapi_connection: Any, record: Any) -> None:
    """Read floats as they are stored: the server sends them as text with extra_float_digits
    more digits, and a database's, a role's or the URL's setting below 1 rounded every
    metric and wall time read (-15: 1.1 read as 1.0, a wall time as the year 2033). Set in
    the session, it outranks them all; 1 and up print the shortest exact form.

    And wait for a lock at most the busy timeout where nothing set a lock_timeout: a read of a
    table another session held (LOCK TABLE, VACUUM FULL, pg_restore --clean) waited as long
    as it was held; a write waits in attempts of its own (`_pg_write`), `_pg_lock_timeout`
    says the writers' line for a read, with the wait the session had (the URL, the role or
    the database may set their own)."""
    with contextlib.closing(dbapi_connection.cursor()) as cursor:
        cursor.execute("SET extra_float_digits = 3")
        cursor.execute(
            f"SELECT set_config('lock_timeout', '{BUSY_TIMEOUT_S * 1000:.0f}ms', false) "
            "WHERE current_setting('lock_timeout') = '0'"
        )
        cursor.execute(
            "SELECT EXTRACT(EPOCH FROM current_setting('lock_timeout')::interval), "
            f"current_setting('{IDLE_IN_TRANSACTION}')"
        )
        wait, idle = cursor.fetchone()
        record.info[LOCK_WAIT], record.info[IDLE_TX_SHOWN] = float(wait), str(idle)
    dbapi_connection.commit()


def _connect_timeout(url: URL) -> str | None:
    """The connect timeout the URL or the environment sets, as libpq reads them."""
    given = url.query.get("connect_timeout")
    if isinstance(given, tuple):
        given = given[-1]
    return given if given is not None else os.environ.get("PGCONNECT_TIMEOUT") or None


def _no_answer(url: URL, name: str, e: DatabaseError) -> UserError | None:
    """The one line for a server that took the connection and did not answer in time."""
    if url.get_backend_name() != "postgresql" or "timeout expired" not in str(e.orig):
        return None
    given = _connect_timeout(url)
    try:
        seconds = int(float(given)) if given is not None else CONNECT_TIMEOUT_S
    except ValueError:
        seconds = 0
    # As libpq takes it: whole seconds, at least 2; 0 or less, no limit of its own.
    within = f"within {max(seconds, 2)} s" if seconds > 0 else "in time"
    server = integrity.shown(f"{url.host or 'localhost'}:{url.port or 5432}")
    return UserError(
        f"cannot open run store {name}: the server at {server} did not answer {within}",
        "is a PostgreSQL server listening there? A slow server or network needs longer: "
        "add ?connect_timeout=SECONDS to the URL",
    )


def _busy_timeout_s(url: Any) -> float:
    """The busy timeout of a SQLite store's URL: its `?timeout=SECONDS`, else BUSY_TIMEOUT_S."""
    raw = url.query.get("timeout")
    if raw is None:
        return float(BUSY_TIMEOUT_S)
    try:
        seconds = float(raw) if isinstance(raw, str) else math.nan
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise UserError(
            f"run store {integrity.shown(masked_url(str(url)))}: timeout={raw} is not a number "
            "of seconds",
            "e.g. ?timeout=60",
        )
    return seconds


def _sqlite_pragmas(
    dbapi_connection: Any, record: Any, name: str, busy_s: float, read_only: bool = False
) -> None:
    # Transactions are begun by _sqlite_begin, not by the driver's implicit BEGIN before DML.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    # Only read: switching to WAL writes the file's header, which a command that only reads
    # (or one that then refuses the file as damaged) must leave as it was; a writer switches
    # it as it first writes (`_sqlite_begin`). Reading the mode takes a lock that another
    # process holding the store (a sqlite3 shell's BEGIN EXCLUSIVE) may have.
    statement = "PRAGMA journal_mode"
    (mode,) = _in_attempts(lambda: cursor.execute(statement).fetchone(), cursor, name, busy_s)
    _note_mode(record.info, mode)
    if not read_only:
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _note_mode(info: dict[Any, Any], mode: Any) -> None:
    """Note in a connection's `info` whether its store is in rollback-journal mode. An
    in-memory store answers "memory": no other process holds it, so no read lock to take."""
    info[ROLLBACK] = str(mode).lower() not in ("wal", "memory")


def _sqlite_checked(url: URL, name: str) -> Path:
    """The file of the SQLite store `url`, resolved, once its path and options are found
    usable; before an engine is made, which would warn of an option it ignores."""
    where = _store_path(url.database, name)
    _sqlite_options(url, name)
    mode = url.query.get("mode")
    if mode not in (None, "ro"):
        raise UserError(
            f"run store {name}: SQLite mode={mode} is not supported",
            "add ?mode=ro to open it read-only, or give no mode",
        )
    _busy_timeout_s(url)  # the driver would take a timeout that is not a number for a traceback
    return where


def _store_path(path: str | None, name: str, example: str = "--db {}") -> Path:
    """The file a SQLite store's `path` names, resolved; or the one line why no store can be
    kept there. `example`: how a fix gives the path (`runs repair` takes OUT, not --db)."""
    plain, _, query = (path or "").removeprefix("file:").partition("?")
    # Each process, each connection even, its own store; file::memory: and ?mode=memory too.
    if not path or not plain or plain == ":memory:" or "mode=memory" in query:
        raise UserError(
            f"run store {name} is in memory: it would keep nothing",
            f"give a file, e.g. {example.format(DEFAULT_DB)}",
        )
    if path.startswith("file:"):  # the driver would take it for a relative path "file:/..."
        # A URI's file, or a file of this very name (`--db file:x.db` is a plain path): as
        # `sqlite:x.db` is told ./sqlite:x.db.
        itself = example.format(integrity.shown(plain))
        if example == "--db {}":  # `runs repair` takes no URL
            itself = f"sqlite:///{integrity.shown(plain)} or {itself}"
        raise UserError(
            f"run store {name}: SQLite URI filenames (file:...) are not supported",
            f"give the file itself: {itself}, or {example.format('./' + integrity.shown(path))} "
            "for a file of that name",
        )
    if path.endswith("/"):  # Path() drops the slash: the file x.db of "x.db/" was used
        bare = path.rstrip("/") or "/"
        # A directory there: without the slash it is refused as one, so a file in it.
        if os.path.isdir(bare):
            inside = integrity.shown(bare.rstrip("/") + "/" + DEFAULT_DB)
            fix = f"give a file in it, e.g. {example.format(inside)}"
        else:
            bare = integrity.shown(bare)
            fix = f"give the store file without the slash, e.g. {example.format(bare)}"
        raise UserError(f"run store {name}: a store path that ends in / names a directory", fix)
    if not os.path.isabs(path) and (unnamed := unnamed_cwd()) is not None:
        what, fix = unnamed  # resolved, it said "[Errno 2] No such file or directory"
        raise UserError(
            f"{what}, and the run store {integrity.shown(path)} is named relative to it",
            f"{fix}, or give --db an absolute path",
        )
    _directories_as_written(path)
    try:
        where = Path(path).resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop (RuntimeError before Python 3.13)
        raise UserError(f"cannot open run store {name}: {e}") from None
    shown = integrity.shown
    if where.is_dir():
        raise UserError(
            f"run store {shown(path)} is a directory",
            f"give a file in it, e.g. {example.format(shown(path) + '/' + DEFAULT_DB)}",
        )
    # A FIFO, a device or a /proc file reads as size 0: as a missing store (an empty list,
    # exit 0), and wrote as a "disk I/O error".
    odd = no_file_of_bytes(where)
    if odd is not None:
        raise UserError(
            f"run store {shown(path)} is not a regular file ({odd})",
            "give a store file, e.g. --db dlperf.db",
        )
    if not where.parent.exists():  # its directories as written are there: a dangling link's
        raise UserError(
            f"run store directory {shown(where.parent)} does not exist",
            f"the store {shown(path)} is a symbolic link to {shown(where)}",
        )
    _room_beside(where, name)
    _within_sqlite_limit(where, name)
    return where


def _room_beside(where: Path, name: str) -> None:
    """Refuse a store file whose name leaves no room for the files SQLite writes beside it,
    named by a suffix added to the store's: NAME-wal and NAME-shm, and NAME-journal while it
    makes a new store (written in rollback mode first, then switched to WAL). SQLite said only
    "unable to open database file", which blamed the directory, after making an empty store
    file."""
    try:
        most = os.pathconf(where.parent, "PC_NAME_MAX")
    except OSError:
        return  # no limit known: SQLite's own error stands
    new = not where.exists() or where.stat().st_size == 0
    suffixes = SIDE_FILES if new else WAL_FILES
    room = most - max(len(suffix) for suffix in suffixes)
    length = len(os.fsencode(where.name))
    if most > 0 and length > room:
        files = ", ".join(suffixes[:-1]) + f" and {suffixes[-1]}"
        raise UserError(
            f"run store {name}: its file name is {length} bytes, too long for the {files} files "
            f"SQLite writes beside it (at most {room} bytes)",
            "give a shorter name",
        )


def _within_sqlite_limit(where: Path, name: str) -> None:
    """Refuse a store whose full path `where` is longer than SQLite opens (`SQLITE_MAX_PATH`),
    which said only "unable to open database file" and blamed its directory's permissions."""
    length = len(os.fsencode(where))
    if length > SQLITE_MAX_PATH:
        raise UserError(
            f"run store {name}: its full path is {length} bytes, longer than the "
            f"{SQLITE_MAX_PATH} SQLite can open",
            "keep the store in a folder of a shorter path (SQLite reads a symbolic link or a "
            "relative path by its full path too)",
        )


def _directories_as_written(path: str) -> None:
    """Refuse a store path whose directories, as written, the OS would refuse: resolving it
    first (as Path.resolve() and SQLite itself both do) read `nope/../x.db` as x.db with nope
    missing, where open(2) says ENOENT, and `x.db/.` as the file x.db (ENOTDIR)."""
    if os.path.isdir(os.path.dirname(path) or "."):  # the usual case: one stat
        return
    # The first directory the OS cannot go through, named as the user wrote it.
    for end in (i for i, c in enumerate(path) if c == "/"):
        directory = path[:end] or "/"
        try:
            os.stat(directory)
        except FileNotFoundError:
            raise UserError(absent(path, directory=directory)) from None
        except OSError:  # a link loop, a permission: resolve() and SQLite say it in their words
            return
        if not os.path.isdir(directory):
            shown = integrity.shown
            raise UserError(f"run store {shown(path)}: {shown(directory)} is not a directory")


# The options of a sqlite:/// URL that dlperf honours. Any other is refused rather than passed
# on: SQLAlchemy's driver drops SQLite's URI options (?cache=shared, ...) with a two-line
# SAWarning and goes on without them, and its own arguments (?uri=true, ?check_same_thread=,
# ?isolation_level=, ?detect_types=) would change how the path is read or how rows come back
# for the engine alone, while the store's other connections (the one kept on its file, the
# read-only opener, runs list's sqlite3 reader) open the plain file. A user who asked for an
# option is better told it is not applied than left to find out.
SQLITE_OPTIONS = ("timeout", "mode")


def _sqlite_options(url: URL, name: str) -> None:
    for key, value in url.query.items():
        accepted = "a sqlite:/// URL takes ?timeout=SECONDS and ?mode=ro"
        if key not in SQLITE_OPTIONS:
            raise UserError(f"run store {name}: the option {key} is not supported", accepted)
        if isinstance(value, tuple):
            raise UserError(
                f"run store {name}: {key} is given {len(value)} times ({', '.join(value)})",
                f"give it once; {accepted}",
            )


def _name(engine: Engine) -> str:
    """The store as a write's refusal names it: its URL, password masked, without ?mode=ro."""
    return integrity.shown(masked_url(engine.url.render_as_string()))


def _failure_line(e: BaseException) -> str:
    """The error a run that `e` ended is stored with (`error_line`), but a MemoryError under a
    set address-space limit as the command's out-of-memory line says it, the limit named: a
    bare MemoryError was stored as "MemoryError: ", which said neither why nor what to do."""
    limit = memory_limit() if isinstance(e, MemoryError) else ""
    if not limit:
        return error_line(e)
    return f"out of memory: {error_text(e) or type(e).__name__}{limit}"


def _absent(name: str, what: str, read_only: bool) -> tuple[str, str]:
    """Why a write into the store `name`, which is not there (`what` says how), is refused,
    and the fix, for a store opened only to read it (`read_only`: with ?mode=ro)."""
    if read_only:
        return f"run store {name} {what} and is open read-only", "drop ?mode=ro to make it"
    return f"run store {name} {what}", "make it with a command that writes, e.g. dlperf run"


def _sqlite_engine(
    engine: Engine, name: str, where: Path, read_only: bool, immutable: bool = False
) -> Engine:
    """The engine of a SQLite store whose file is `where`. The driver ignores a URL's
    `?mode=ro` (with a warning) and writes: with `read_only` the file is opened read-only
    indeed. `immutable` (a reader's, `files.frozen`): read as on read-only media."""
    if read_only or immutable:
        uri = f"file:{quote(str(where))}?mode=ro"
        if immutable or _on_read_only_media(where):
            uri += "&immutable=1"
        engine = create_engine(
            engine.url,
            creator=lambda: sqlite3.connect(uri, uri=True),
            json_deserializer=functools.partial(_stored_json, where),
        )
    # The file as `_sqlite_checked` resolved it, kept: never resolved again (the store's close
    # at exit, after a working directory was deleted, printed a FileNotFoundError traceback).
    integrity.keep_file(engine, where)
    busy_s = _busy_timeout_s(engine.url)
    pragmas = functools.partial(_sqlite_pragmas, name=name, busy_s=busy_s, read_only=read_only)
    event.listen(engine, "connect", pragmas)
    begin = functools.partial(_sqlite_begin, name=name, busy_s=busy_s, read_only=read_only)
    event.listen(engine, "begin", begin)
    event.listen(engine, "handle_error", integrity.on_error)
    return engine


def _on_read_only_media(where: Path) -> bool:
    """Whether a store opened read-only must be read as immutable: SQLite writes a -shm file
    beside a WAL store even to read it, and where the directory cannot be written (read-only
    media, another user's directory) it could not be read at all. Immutable, it takes no
    locks and reads no -wal, so only where neither -wal nor -shm is there (no process has
    the store open, nothing waits in a -wal); writes another process makes while it is read
    are then not seen."""
    beside = [where.with_name(where.name + end) for end in WAL_FILES]
    return not any(p.exists() for p in beside) and not os.access(where.parent, os.W_OK)


def _stored_json(where: Path, text: str) -> Any:
    """A SQLite store's JSON column as read: text that is not JSON, or JSON that is not an
    object (set by hand), is the one line naming the run, not a JSONDecodeError's traceback
    or an AttributeError of a list read as a dict. (PostgreSQL's json type refuses text that
    is not JSON when it is written.)"""
    with contextlib.suppress(TypeError, ValueError):  # TypeError: a number
        found = json.loads(text)
        if found is None or isinstance(found, dict):
            return found
    raise integrity.garbled_json(where)  # resolved at open: the directory may be gone


def _in_attempts(
    attempt: Callable[[], T],
    cursor: Any,
    name: str,
    busy_s: float,
    wanted: str = "to read it",
    readers: bool = False,
) -> T:
    """`attempt`, a statement that takes a lock on a SQLite store, made again while another
    process holds it, for up to `busy_s`; `cursor` is on the statement's connection, whose
    busy timeout is `busy_s` again after.

    SQLite's busy handler would wait out the whole timeout in C, with a stop signal held
    until it gives up: a read of a store that a sqlite3 shell held in BEGIN EXCLUSIVE kept
    Ctrl-C ~26 s, and said "database is locked" after waiting three times over. So it waits
    BUSY_ATTEMPT_MS at a time: a read's stop raises between two attempts; a write's,
    shielded (dlperf.stopping), ends the wait within STOP_WAIT_S, and cuts no write: none has
    begun. Also where SQLite never calls its handler: switching a new file to WAL upgrades a
    read lock to a write lock, which fails at once with "database is locked" (measured: 5%
    of eight simultaneous opens). `readers`: readers block it too (`_locked`)."""
    start = time.monotonic()
    deadline = start + busy_s
    stop_seen = False
    cursor.execute(f"PRAGMA busy_timeout={min(BUSY_ATTEMPT_MS, round(busy_s * 1000))}")
    try:
        while True:
            try:
                return attempt()
            except (sqlite3.OperationalError, DatabaseError) as e:
                if _sqlite_code(e) != SQLITE_BUSY:
                    raise
                now = time.monotonic()
                if not stop_seen and stopping.requested():
                    stop_seen, deadline = True, min(deadline, now + STOP_WAIT_S)
                if now >= deadline:
                    raise _locked(name, now - start, wanted, readers) from None
                time.sleep(0.01)  # where SQLite did not wait, not a loop at full speed
    finally:
        cursor.execute(f"PRAGMA busy_timeout={round(busy_s * 1000)}")


def read_begun(conn: sqlite3.Connection, name: str, busy_s: float) -> None:
    """Begin a read on a `sqlite3` connection (isolation_level None) and take its read lock,
    waited for in attempts: held to the transaction's end, the read's statements wait for
    nothing after it."""
    conn.execute("BEGIN")
    _in_attempts(lambda: conn.execute(READ_LOCK).fetchall(), conn, name, busy_s)


def _sqlite_begin(conn: Connection, name: str, busy_s: float, read_only: bool = False) -> None:
    writes = conn.get_execution_options().get(WRITES, False)
    info = conn.connection.info
    if not writes:
        conn.exec_driver_sql("BEGIN")
        # Not in WAL mode (a store no writer has written since a tool switched it back), a
        # read waits for a writer: its read lock is taken now, so that its statements wait
        # for nothing after. In WAL mode none waits, and a checkpoint may run in the read.
        if not info.get(ROLLBACK):
            return
    statement = "BEGIN IMMEDIATE" if writes else READ_LOCK
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        keep = conn.get_execution_options().get(KEEP_MODE, False)
        if writes and info.get(ROLLBACK) and not read_only and not keep:
            # A writer's first write switches the store to WAL (outside a transaction, as
            # SQLite requires), so that readers never block it; a new file is made in WAL
            # mode so. Switching upgrades a read lock to a write lock, which fails at once
            # while another process holds one: waited for in attempts too.
            switch = "PRAGMA journal_mode=WAL"
            # Through SQLAlchemy: an error (a read-only file) is the one line of a write's.
            mode = _in_attempts(
                lambda: conn.exec_driver_sql(switch).scalar(), cursor, name, busy_s, WRITE, True
            )
            _note_mode(info, mode)
        _in_attempts(
            lambda: conn.exec_driver_sql(statement).close(),
            cursor,
            name,
            busy_s,
            WRITE if writes else "to read it",
        )
    finally:
        cursor.close()


def _pg_waits(engine: Engine, name: str) -> None:
    """Make each statement of a PostgreSQL store's write wait for a lock in attempts of
    BUSY_ATTEMPT_MS (`_pg_write`): a write is shielded (dlperf.stopping), and a lock waited
    for in libpq held SIGINT and SIGTERM for as long as another session held it, for ever
    behind a session left idle in its transaction."""
    event.listen(engine, "do_execute", functools.partial(_pg_write, name=name, many=False))
    event.listen(engine, "do_executemany", functools.partial(_pg_write, name=name, many=True))

    def no_params(cursor: Any, statement: str, context: Any) -> bool:
        return _pg_write(cursor, statement, None, context, name=name, many=None)

    event.listen(engine, "do_execute_no_params", no_params)


def _pg_write(
    cursor: Any, statement: str, parameters: Any, context: Any, *, name: str, many: bool | None
) -> bool:
    """SQLAlchemy's `do_execute*` hook: a statement of a write transaction (WRITES) run in a
    savepoint with `SET LOCAL lock_timeout` of one attempt; a lock not had in time rolls back
    to the savepoint and tries again, until a stop signal has come and STOP_WAIT_S passed, or
    the busy timeout (as SQLite's, `_sqlite_begin`) has: then the one line of a store locked
    by another process. False (not handled) for every other statement."""
    if not context.execution_options.get(WRITES, False):
        return False
    # SQLAlchemy's own savepoints (begin_nested) wait for no lock, and must not be made
    # inside ours: releasing ours would release them too.
    if statement.lstrip()[:9].upper() in ("SAVEPOINT", "RELEASE S", "ROLLBACK "):
        return False
    dialect = context.dialect
    control = cursor.connection.cursor()  # its own: the statement's cursor keeps its rows
    start = time.monotonic()
    deadline, stop_seen = start + BUSY_TIMEOUT_S, False
    try:
        while True:
            control.execute(f"SAVEPOINT {PG_ATTEMPT}; SET LOCAL lock_timeout = {BUSY_ATTEMPT_MS}")
            try:
                if many is None:
                    dialect.do_execute_no_params(cursor, statement, context)
                elif many:
                    dialect.do_executemany(cursor, statement, parameters, context)
                else:
                    dialect.do_execute(cursor, statement, parameters, context)
            except Exception as e:
                if getattr(e, "sqlstate", None) != PG_LOCK_TIMEOUT:
                    raise
                control.execute(f"ROLLBACK TO SAVEPOINT {PG_ATTEMPT}")
                now = time.monotonic()
                if not stop_seen and stopping.requested():
                    stop_seen, deadline = True, min(deadline, now + STOP_WAIT_S)
                if now >= deadline:
                    raise _pg_locked(name, now - start) from None
                continue
            control.execute(f"RELEASE SAVEPOINT {PG_ATTEMPT}")
            return True
    finally:
        control.close()


def _locked(name: str, waited_s: float, wanted: str = WRITE, readers: bool = False) -> StoreLocked:
    """A SQLite store held by another process past the busy timeout. `readers`: what waited
    was a write to a store in rollback-journal mode (its switch to WAL), which waits for every
    transaction, a read's too: the line said a write transaction was open where only a
    `sqlite3` shell's read was."""
    holds = (
        "a program (another dlperf command, a sqlite3 shell, a database browser) holds a "
        "transaction open on it, reading or writing (in rollback-journal mode, which this "
        "store is in, a write waits for its readers too)"
        if readers
        else "a program holds a write transaction open on it (another dlperf command, a "
        "sqlite3 shell, a database browser)"
    )
    return StoreLocked(
        f"run store {name} is locked by another process: waited {waited_s:.0f} s {wanted}",
        f"{holds}: let it end, then try again; ?timeout=SECONDS on a sqlite:/// URL waits longer",
    )


def _pg_locked(name: str, waited_s: float) -> StoreLocked:
    """`_locked` of a PostgreSQL store: a session holds a lock on what the write changes."""
    return StoreLocked(
        f"run store {name} is locked by another process: waited {waited_s:.0f} s for a lock",
        "a session holds a lock on its rows (another dlperf command, a psql session left in "
        "a transaction: see pg_stat_activity): let it end, then try again",
    )


def _sqlite_code(e: DatabaseError | sqlite3.Error) -> int | None:
    """SQLite's primary result code of `e`, SQLAlchemy's or the driver's own error."""
    code = getattr(getattr(e, "orig", e), "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _no_room(e: DatabaseError, engine: Engine) -> OSError | None:
    """The OSError a full disk or a file size limit (ulimit -f) is, whichever database reports
    it: the CLI then says so in one line (exit 1) instead of a driver traceback."""
    where = str(engine.url.database)
    code = _sqlite_code(e)
    number = errno.ENOSPC if code == integrity.SQLITE_FULL or _pg_state(e) == PG_DISK_FULL else None
    # SQLite reports a full disk met while growing its -shm or -wal file, and any write a file
    # size limit refuses (EFBIG), as an I/O error.
    path = integrity.store_file(engine) if code == integrity.SQLITE_IOERR else None
    if path is not None:  # a file's store (not one in memory), as it was resolved at open
        if integrity.nearly_full(path):
            number = errno.ENOSPC
        elif size_limited(path):
            number = errno.EFBIG
    return None if number is None else OSError(number, os.strerror(number), where)


def size_limited(
    path: Path, near: int = SIZE_LIMIT_NEAR, ends: tuple[str, ...] = ("", *WAL_FILES)
) -> bool:
    """Whether the process's file size limit is what refused a write to the SQLite database
    `path`: one of its files (the database and those named by `ends`: the store's -wal and
    -shm) has come within `near` bytes of it, or past it (a write at an offset past the
    limit is refused too)."""
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit == resource.RLIM_INFINITY:
        return False
    sizes = [0]
    for file in [path.with_name(path.name + end) for end in ends]:
        with contextlib.suppress(OSError):
            sizes.append(file.stat().st_size)
    return max(sizes) + near > limit


def _pg_state(e: DatabaseError) -> str | None:
    return getattr(e.orig, "sqlstate", None)


def _server_gone(name: str, context: ExceptionContext) -> BaseException | None:
    """SQLAlchemy's `handle_error` hook of a server store once it has opened: a connection
    lost or refused (the server stopped, restarted, or the network went) becomes the one-line
    StoreGone, whatever statement met it, instead of the driver's chained traceback. Not a
    stop signal's interrupt landing inside a query: SQLAlchemy counts that as a disconnect
    too (it drops the connection the interrupt left midway), and it said "went away ()"
    before the stop's silent exit 143; the interrupt goes on as itself."""
    orig = context.original_exception
    # A ping of a pooled connection (`pool_pre_ping`) that found it closed: the pool replaces
    # it, unless a hook raises instead.
    if context.is_pre_ping or not isinstance(orig, Exception):  # KeyboardInterrupt, SystemExit
        return None
    state = getattr(orig, "sqlstate", None) or ""
    if state == PG_IDLE_CLOSED:
        return _idle_closed(name, context)
    engine = context.engine
    url = engine.url if engine is not None else make_url("postgresql://")
    shown: str | None = None
    # Not revalidated here (a closed or invalidated connection's `info` would reconnect).
    with contextlib.suppress(Exception):
        conn = context.connection
        if conn is not None and not conn.invalidated and not conn.closed:
            shown = conn.info.get(IDLE_TX_SHOWN)
    idle_in_transaction = _idle_in_transaction(name, url, orig, shown)
    if idle_in_transaction is not None:
        return idle_in_transaction
    # A refused connection carries no state: the driver's OperationalError says it.
    refused = not state and type(orig).__name__ == "OperationalError"
    gone = context.is_disconnect or state.startswith(PG_GONE_CLASS) or state in PG_GONE
    if not (gone or refused):
        return None
    detail = "; ".join(line.strip() for line in str(orig).splitlines() if line.strip())
    return StoreGone(f"run store {name} went away ({detail})")


class IdleClosed(UserError):
    """A connection dlperf held, closed by the server's idle_session_timeout: the server is
    there (not StoreGone, whose run reads as lost), so exit code 1 and one line."""

    exit_code = 1


def _idle_closed(name: str, context: ExceptionContext) -> IdleClosed:
    """The one line of a connection the server closed as idle while dlperf held it (a pooled
    one is pinged and replaced before use): nothing of the statement that met it was run."""
    engine = context.engine
    return IdleClosed(
        f"run store {name}: the server closed a connection that sat idle past its "
        "idle_session_timeout",
        _lift("idle_session_timeout", engine.url.username if engine is not None else None),
    )


def _lift(setting: str, user: str | None) -> str:
    """The fix for a session the server closed for its `setting` (a timeout): try again, or
    turn it off for dlperf's sessions, in the URL or for the role (`user`, the URL's)."""
    role = integrity.shown(user or "ROLE")
    return (
        f"try again; to lift it for dlperf's sessions add -c{setting}=0 to the URL's "
        f"?options=, or ALTER ROLE {role} SET {setting} = 0"
    )


def _idle_in_transaction(
    name: str, url: URL, e: BaseException, shown: str | None = None
) -> IdleClosed | None:
    """The one line of a session the server closed as it sat idle inside a transaction past
    its idle_in_transaction_session_timeout: said by the server (25P03), or, where libpq lost
    that message as the socket closed ("server closed the connection unexpectedly"), by the
    session's setting (`shown`, read as it connected) or the URL's or PGOPTIONS' if it has
    none. Exit 1, as idle_session_timeout's: the server never went away."""
    said = getattr(e, "sqlstate", None) == PG_IDLE_IN_TRANSACTION
    lost = not said and "server closed the connection unexpectedly" in str(e)
    setting = shown if shown is not None else _idle_in_transaction_option(url)
    if not said and not (lost and setting not in (None, "0")):
        return None
    value = f" ({setting})" if setting not in (None, "0") else ""
    return IdleClosed(
        f"run store {name}: the server closed a session that sat idle inside a transaction "
        f"past its {IDLE_IN_TRANSACTION}{value}",
        _lift(IDLE_IN_TRANSACTION, url.username),
    )


def _idle_in_transaction_option(url: URL) -> str | None:
    """idle_in_transaction_session_timeout as libpq's options set it: the URL's ?options=
    outranks PGOPTIONS (libpq reads one or the other), the last -c of a name wins."""
    given = url.query.get("options")
    if isinstance(given, tuple):
        given = given[-1]
    options = given if given is not None else os.environ.get("PGOPTIONS", "")
    found = IDLE_TX_OPTION.findall(options)
    if not found:
        return None
    # A number alone is in the setting's unit, as SHOW writes it.
    return f"{found[-1]}ms" if found[-1].isdecimal() and found[-1] != "0" else str(found[-1])


@dataclass(frozen=True)
class _Session:
    """What a PostgreSQL store's session is, as its server says: the database's encoding,
    statement_timeout (as SHOW writes it: "0", "3ms", "1min") and the schema of its tables
    (its search_path's first that exists)."""

    encoding: str
    statement_timeout: str
    schema: str


def _schema_checked(engine: Engine, name: str) -> _Session:
    """Refuse a PostgreSQL store whose search_path names no schema that exists (a misspelt
    `?options=-csearch_path=...`): it read as an empty store (`runs list` printed an empty
    table, exit 0), and its first write said PostgreSQL's own "no schema has been selected to
    create in; LINE 2: CREATE TABLE meta (". current_schema() is NULL then, and also where
    the schema exists but the user has no USAGE on it: that is said apart, with its GRANT.
    Returns the session's settings, read by the same query."""
    with engine.connect() as conn:
        query = (
            "SELECT current_schema(), current_setting('server_encoding'), "
            "current_setting('statement_timeout')"
        )
        schema, encoding, timeout = conn.exec_driver_sql(query).one()
        if schema is not None:
            return _Session(str(encoding), str(timeout), str(schema))
        path = str(conn.exec_driver_sql("SHOW search_path").scalar() or "")
        user = str(conn.exec_driver_sql("SELECT current_user").scalar())
        schemas = [s.strip() for s in path.split(",") if s.strip()]
        # current_schema() is NULL too for a schema that exists but that the user may not use:
        # "does not exist (create it ...)" sent the user to create what is there.
        names = [_schema_name(s, user) for s in schemas]
        query = (
            "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%(names)s) "
            "AND NOT has_schema_privilege(oid, 'USAGE')"
        )
        unusable = set(conn.exec_driver_sql(query, {"names": names}).scalars())
        # An unquoted name is read in lower case: a schema "Mixed" exists, `Mixed` names mixed.
        query = "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%(names)s)"
        written = [s for s, found in zip(schemas, names, strict=True) if s != found]
        cased = list(conn.exec_driver_sql(query, {"names": written}).scalars())
        query = "SELECT source FROM pg_settings WHERE name = 'search_path'"
        source = str(conn.exec_driver_sql(query).scalar())
        database = str(conn.exec_driver_sql("SELECT current_database()").scalar())
    for schema, found in zip(schemas, names, strict=True):
        if found in unusable:
            raise UserError(
                f"cannot open run store {name}: user {integrity.shown(user)} has no USAGE on "
                f"schema {integrity.shown(schema)}",
                "as its owner or a superuser: GRANT USAGE, CREATE ON SCHEMA "
                f"{integrity.shown(schema)} TO {integrity.shown(user)}",
            )
    missing = (
        f"schema {schemas[0]} does not exist"
        if len(schemas) == 1
        else f"no schema of its search_path ({', '.join(schemas) or 'empty'}) exists"
    )
    if cased:
        lower, quoted = cased[0].lower(), '"' + cased[0].replace('"', '""') + '"'
        missing += f" (unquoted, PostgreSQL reads it as {lower}; {quoted} exists)"
        fix = f"quote it: {_search_path_set(source, user, database, quoted)}"
    elif source == "client":
        fix = "create it, or fix search_path in the URL"
    else:
        fix = (
            f"create it, or {_search_path_set(source, user, database, None)}, or give the URL "
            "a search_path of its own: ?options=-csearch_path%3DSCHEMA"
        )
    raise UserError(f"cannot open run store {name}: {integrity.shown(missing)}", fix)


def _search_path_set(source: str, user: str, database: str, value: str | None) -> str:
    """How to set search_path to `value` (None: reset it) where the session's came from
    (pg_settings.source): the URL's options (a client's), the database's setting, the role's,
    the role's in the database, or the server's configuration. A path set by the database
    was blamed on the URL, which had none."""
    role, db = integrity.shown(user), integrity.shown(database)
    to = "RESET search_path" if value is None else f"SET search_path = '{value}'"
    if source == "database":
        return f"ALTER DATABASE {db} {to}"
    if source == "user":
        return f"ALTER ROLE {role} {to}"
    if source == "database user":
        return f"ALTER ROLE {role} IN DATABASE {db} {to}"
    if source == "client" and value is not None:
        return f"?options=-csearch_path%3D{quote(value, safe='')} in the URL"
    return f"set search_path in the server's configuration ({source})"


def _encoding_checked(session: _Session, url: URL, name: str) -> None:
    """Refuse to write a PostgreSQL store whose database is not UTF8: LATIN1 cannot hold an
    emoji in a run's name, a tag or a value, and SQL_ASCII counts a column's length in bytes
    (and checks nothing). Read, it is read (its sessions speak UTF-8, `_server_engine`)."""
    if session.encoding.upper() in ("UTF8", "UTF-8", "UNICODE"):
        return
    database = integrity.shown(url.database or "NAME")
    raise UserError(
        f"run store {name} is a database in encoding {session.encoding}, which cannot keep "
        "every name, tag and value; dlperf writes only to a UTF8 database",
        f"make one for the store: CREATE DATABASE {database}_utf8 ENCODING 'UTF8' "
        "TEMPLATE template0; this one can still be read",
    )


class QueryCancelled(UserError):
    """The server cancelled a query of the store (statement_timeout, pg_cancel_backend):
    not the user's input, so exit code 1, but one line (as StoreLocked)."""

    exit_code = 1


def _cancelled(name: str, url: URL, timeout: str | None, e: BaseException) -> QueryCancelled:
    """The one line of a query the server cancelled: by its statement_timeout, named with
    its value and how to lift it, unless that is off (0: another session cancelled it)."""
    said = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())
    if timeout == "0":
        return QueryCancelled(
            f"run store {name}: the server cancelled a query ({said})",
            "another session cancelled it (pg_cancel_backend, an administrator): try again; a "
            "cancelled write wrote nothing",
        )
    setting = "statement_timeout" if timeout is None else f"statement_timeout ({timeout})"
    role = integrity.shown(url.username or "ROLE")
    return QueryCancelled(
        f"run store {name}: the server cancelled a query that ran past its {setting}",
        NO_STATEMENT_TIMEOUT.format(role=role),
    )


def _query_cancelled(name: str, timeout: str, context: ExceptionContext) -> BaseException | None:
    """SQLAlchemy's `handle_error` hook of a PostgreSQL store once it has opened: a query
    the server cancelled (57014) becomes the one line of `_cancelled`, whatever read or
    write met it, instead of psycopg's QueryCanceled traceback (`runs show`, `runs delete`,
    `runs export` of a large run, `dlperf.track`'s log)."""
    orig = context.original_exception
    if getattr(orig, "sqlstate", None) != PG_CANCELLED:
        return None
    engine = context.engine
    url = engine.url if engine is not None else make_url("postgresql://")
    return _cancelled(name, url, timeout, orig)


def _pg_lock_timeout(name: str, context: ExceptionContext) -> BaseException | None:
    """SQLAlchemy's `handle_error` hook of a PostgreSQL store once it has opened: a read that
    waited out the session's lock_timeout (`_session_set`) says the writers' line, exit 1."""
    if getattr(context.original_exception, "sqlstate", None) != PG_LOCK_TIMEOUT:
        return None
    conn = context.connection
    return _pg_locked(name, conn.info.get(LOCK_WAIT, BUSY_TIMEOUT_S) if conn else BUSY_TIMEOUT_S)


class IdsUsedUp(UserError):
    """A table of a PostgreSQL store whose row ids have run out: not the user's input, so exit
    code 1, but one line (as StoreLocked)."""

    exit_code = 1


def _ids_used_up(name: str, schema: str, context: ExceptionContext) -> BaseException | None:
    """SQLAlchemy's `handle_error` hook of a PostgreSQL store once it has opened: an INSERT
    whose table's sequence is at its maximum says so in one line, with the fix, not psycopg's
    traceback and the whole INSERT. metrics.id is 64-bit in a store made now; one made before
    has a SERIAL, used up after 2^31 metric rows ever written (a deleted run's are not
    reused), which every `dlperf run` and `dlperf.track` met from then on. The fix names the
    table and sequence in `schema`, the store's (quoted as SQL needs): in psql, without the
    URL's search_path, a bare `metrics` named no table, or another store's."""
    orig = context.original_exception
    if getattr(orig, "sqlstate", None) != PG_IDS_USED_UP:
        return None
    said = "; ".join(line.strip() for line in str(orig).splitlines() if line.strip())
    statement = context.statement or ""
    # An INSERT's table, or the one whose sequence a new run's id is taken from (`_pg_next_id`)
    table = re.match(r"\s*INSERT\s+INTO\s+\"?(\w+)", statement, re.IGNORECASE) or re.search(
        r"nextval\(pg_get_serial_sequence\('(\w+)'", statement
    )
    sequence = re.search(r'sequence "([^"]+)" \((\d+)\)', said)
    if table is None or sequence is None:
        return IdsUsedUp(f"run store {name}: {said}")
    where, (seq, top) = table[1], sequence.groups()
    at = f"{schema}.{where}"
    hint = (
        # The column and its sequence both: a bigint sequence alone fails at the column
        f"widen them (this rewrites the table): ALTER TABLE {at} ALTER COLUMN id TYPE "
        f"bigint; ALTER SEQUENCE {schema}.{seq} AS bigint"
        if where == Metric.__tablename__
        # No store writes 2^31 runs, studies or artifacts: the sequence was set by hand. Back
        # to the largest id; to 1 in an empty table (setval of max(id), NULL, changes nothing).
        else f"its sequence was set near its end by hand: SELECT setval('{schema}.{seq}', "
        f"coalesce(max(id), 0) + 1, false) FROM {at}"
    )
    return IdsUsedUp(
        f"run store {name}: table {where} has used up its row ids (sequence {seq} reached {top})",
        hint,
    )


def _read_only_session(engine: Engine, name: str, e: DatabaseError) -> UserError:
    """The line for a PostgreSQL store that must be written to open (an older store to
    migrate, an empty one to make) in a read-only session (default_transaction_read_only=on,
    a standby): as SQLite's ?mode=ro, with the fix, not only "cannot execute ALTER TABLE in
    a read-only transaction"."""
    with contextlib.suppress(DatabaseError), engine.connect() as conn:
        if inspect(conn).get_table_names():
            return UserError(
                f"run store {name} is older than this dlperf and opened read-only (its "
                "session may not write)",
                "open it once from a session that may write: that upgrades it",
            )
    return UserError(
        f"cannot make run store {name}: its session is read-only ({_one_line(e)})",
        READ_ONLY_SESSION,
    )


def _denied_at_open(engine: Engine, name: str, e: DatabaseError, writer: bool) -> UserError:
    """The line for a PostgreSQL store that a privilege refused while it opened (42501): the
    GRANT that lets it open, and PostgreSQL's message without psycopg's "LINE 2: CREATE
    TABLE meta (" and its caret. Making the store needs CREATE on its schema; reading it,
    SELECT on its tables; a command that writes, INSERT, UPDATE and DELETE too."""
    primary = getattr(getattr(e.orig, "diag", None), "message_primary", None)
    said = primary or next(iter(str(e.orig).strip().splitlines()), "permission denied")
    user, schema = "ROLE", "SCHEMA"
    with contextlib.suppress(DatabaseError), engine.connect() as conn:
        found = conn.exec_driver_sql("SELECT current_user, current_schema()").one()
        user, schema = str(found[0]), str(found[1] or schema)
    who, where = integrity.shown(user), integrity.shown(schema)
    if " for schema " in said:
        fix = (
            f"as its owner or a superuser: GRANT CREATE ON SCHEMA {where} TO {who}, or make "
            "the store once as a role that may"
        )
    elif writer:
        fix = (
            f"as the tables' owner or a superuser: GRANT SELECT, INSERT, UPDATE, DELETE ON ALL "
            f"TABLES IN SCHEMA {where} TO {who}, and GRANT USAGE ON ALL SEQUENCES IN SCHEMA "
            f"{where} TO {who}"
        )
    else:
        fix = (
            "as the tables' owner or a superuser: GRANT SELECT ON ALL TABLES IN SCHEMA "
            f"{where} TO {who}"
        )
    return UserError(f"cannot open run store {name}: {integrity.shown(said)}", fix)


def _schema_name(entry: str, user: str) -> str:
    """The schema an entry of search_path names: a quoted one as written, an unquoted one in
    lower case (as PostgreSQL folds it), "$user" the user's own."""
    if entry.startswith('"') and entry.endswith('"') and len(entry) > 1:
        entry = entry[1:-1].replace('""', '"')
        return user if entry == "$user" else entry
    return user if entry == "$user" else entry.lower()


# Every open store's engine, with the pid that opened it: one exit handler walks them, so a
# notebook opening stores in a loop does not pile up a handler per open.
_OPEN: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()


def _close_at_exit(engine: Engine) -> None:
    """Close the store's connections when the process ends: the last connection to close
    checkpoints the WAL into the file and removes it. Left open, a command's writes stay in
    `<store>-wal` after it exits, and a copy of the store file alone (cp, a backup) holds none
    of them. Not in a forked child: a connection must not be used across a fork."""
    _OPEN[engine] = os.getpid()


@atexit.register
def _close_open() -> None:
    for engine, pid in list(_OPEN.items()):
        if os.getpid() == pid:
            _close(engine)
    _OPEN.clear()


def _close(engine: Engine) -> None:
    path = integrity.store_file(engine)
    if path is None or not path.is_file():  # deleted (or a repair's, removed): not again
        dispose(engine)
        return
    # The file gone or unwritable: nothing to keep.
    with contextlib.suppress(Exception), engine.connect() as conn:
        # No wait: a writer of another process keeps the WAL, and checkpoints it.
        conn.exec_driver_sql("PRAGMA busy_timeout=0")
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    dispose(engine)


def dispose(engine: Engine, close: bool = True) -> None:
    """`engine.dispose(close)` in a shielded block (dlperf.stopping): a stop signal that lands
    as the pooled connections are closed (the last SQLite one checkpoints the WAL: a wide
    window after a large write) waits for the close and is raised once it is done. Raised
    inside the close, SQLAlchemy's pool caught it, logged "Exception closing connection" with
    its traceback to stderr, then raised it again, the other connections left open."""
    with stopping.shielded():
        engine.dispose(close=close)


def _not_a_stop(record: logging.LogRecord) -> bool:
    """A pool's record of an error it raises again, where the error is a stop signal's
    interrupt ("Exception during reset or similar" as a connection is checked in): not
    printed, the interrupt stops the command as anywhere else. SQLAlchemy's pool logs such an
    error with its traceback, and with no handler configured logging's last resort printed it
    to stderr after the stop (docs/faults.md: never a traceback)."""
    return record.exc_info is None or not isinstance(record.exc_info[1], KeyboardInterrupt)


def _quiet_pool_stops() -> None:
    """`_not_a_stop` on every pool class's logger (a pool logs through its class's, by name:
    MLflow's engines' pools too)."""
    from sqlalchemy.pool import Pool

    classes: list[type[Pool]] = [Pool]
    while classes:
        cls = classes.pop()
        classes += cls.__subclasses__()
        logger = logging.getLogger(f"{cls.__module__}.{cls.__name__}")
        if _not_a_stop not in logger.filters:
            logger.addFilter(_not_a_stop)


_quiet_pool_stops()


@dataclass(frozen=True)
class StoreFile:
    """A SQLite store's file as it was opened, to tell at each write whether it is still
    there: SQLite goes on writing a file deleted under it (into its inode, which nobody can
    open again), and a command would end "finished" with its runs kept nowhere."""

    path: Path
    device: int
    inode: int

    @classmethod
    def of(cls, engine: Engine) -> StoreFile | None:
        path = integrity.store_file(engine)
        if path is None or not path.is_file():
            return None
        stat = path.stat()
        return cls(path, stat.st_dev, stat.st_ino)

    def there(self) -> bool:
        try:
            stat = self.path.stat()
        except OSError:
            return False
        return (stat.st_dev, stat.st_ino) == (self.device, self.inode)

    def whereabouts(self) -> tuple[bool, Path | None]:
        """Whether the file this process opened is still linked (moved, or its folder renamed,
        rather than deleted), and its path now if that can be found: through this process's
        own descriptors of it (/proc/self/fd, whose links Linux keeps up to date across a
        rename of the file or of any folder above it). (False, None) where it was deleted,
        or where no descriptor of it can be read (no /proc): as before, a rescue copy."""
        try:
            descriptors = list(Path("/proc/self/fd").iterdir())
        except OSError:
            return False, None
        for descriptor in descriptors:
            try:
                stat = descriptor.stat()
                target = os.readlink(descriptor)
            except OSError:  # closed meanwhile, or not a file
                continue
            if (stat.st_dev, stat.st_ino) != (self.device, self.inode):
                continue
            if stat.st_nlink == 0:
                return False, None
            # " (deleted)": the name it was opened by is gone, another hard link keeps it.
            now = Path(target)
            with contextlib.suppress(OSError):
                found = now.stat()
                if (found.st_dev, found.st_ino) == (self.device, self.inode) and now.is_absolute():
                    return True, now
            return True, None
        return False, None


def _one_line(e: DatabaseError) -> str:
    """The driver's message on one line: psycopg's connection errors add a tabbed second
    line ("Is the server running on that host ...?")."""
    return "; ".join(line.strip() for line in str(e.orig).splitlines() if line.strip())


def _hint(e: DatabaseError, where: Path | None, read_only: bool) -> str | None:
    """The fix of a store that would not open; `where`: a SQLite store's file."""
    if _sqlite_code(e) not in (SQLITE_READONLY, SQLITE_CANTOPEN):
        return None
    if read_only and where is not None:
        wal, shm = (where.with_name(where.name + end) for end in WAL_FILES)
        if wal.exists() and not shm.exists():
            # Read-only already: SQLite reads a -wal only through its -shm, which it cannot
            # make in a folder it may not write; ?mode=ro, the other fix, was given.
            return (
                f"{integrity.shown(wal)} is left beside the store and SQLite needs its -shm to "
                "read it: copy the store with its -wal into a writable directory (or open it "
                "once where it can write)"
            )
    return (
        "SQLite writes -wal and -shm files beside the store: is its directory writable? "
        "A store on read-only media reads with --db 'sqlite:///PATH?mode=ro'"
    )


def _insert_for(engine: Engine) -> Any:
    """The dialect's INSERT, which has ON CONFLICT (PostgreSQL's and SQLite's alike)."""
    if engine.dialect.name == "postgresql":
        return pg_insert
    return sqlite_insert


def _put_meta(s: Session, key: str, value: str) -> None:
    """Set a meta key by an upsert: `Session.merge` reads, then inserts, and on PostgreSQL
    (READ COMMITTED) processes making their first runs in a new store at once all read no
    `home` and all but one insert failed on meta's primary key. Every meta key dlperf sets
    after a store is made goes through here; the last write wins."""
    bind = s.get_bind()
    upsert = _insert_for(bind.engine if isinstance(bind, Connection) else bind)(Meta).values(
        key=key, value=value
    )
    s.execute(upsert.on_conflict_do_update(index_elements=[Meta.key], set_={"value": value}))


def _meta(s: Session, key: str) -> str | None:
    return s.scalar(select(Meta.value).where(Meta.key == key))


def _elsewhere(recorded: str | None, here: str) -> Path | str | None:
    """The SQLite file `recorded` names while it is still there and another file than `here`
    (a byte copy's original); None when it is `here`, or gone (the store was moved). A
    PostgreSQL store's place (its tables moved into this file, then maybe `runs repair`) is
    named as an original that may still be there: a SQLite store cannot look on the server,
    and read as a path that is gone it made this file the owner of `<store id>/`, whose
    `runs delete` removed the files the server's store still records."""
    if recorded is None or recorded == here:
        return None
    place = read_place(recorded)
    if place is not None:
        named = place_named(place)
        return named[1] if named is not None else "a PostgreSQL store"
    with contextlib.suppress(OSError):
        if Path(recorded).is_file() and not Path(recorded).samefile(here):
            return Path(recorded)
    return None


def _identity(device: int, inode: int) -> str:
    """A file as meta `home_file` records it: its device and inode, which a rename keeps."""
    return f"{device}:{inode}"


def _store_id_of(path: Path) -> str | None:
    """The store id of the SQLite file `path`, read only; None for a file that is no store,
    or cannot be read now. Through its -wal where it has one; without, the file alone
    (immutable): a read-only connection to a WAL store left a -wal and a -shm beside it."""
    wal, shm = (path.with_name(path.name + end) for end in WAL_FILES)
    how = "mode=ro" if wal.exists() and shm.exists() else "immutable=1"
    with contextlib.suppress(sqlite3.Error):
        uri = f"file:{quote(str(path))}?{how}"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)) as conn:
            row = conn.execute(f"SELECT value FROM meta WHERE key = '{STORE_ID}'").fetchone()
            return None if row is None else str(row[0])
    return None


def _renamed(recorded: str, identity: str, here: Path, store_id: str) -> Path | None:
    """The home store's file renamed (`mv a.db lab.db`, its folder kept): the file of
    `identity` (the `home_file` its home records), still a store with this id, in
    the folder of the `recorded` path or in this store's. Not looked for further: where it
    is not found, the store at hand takes the files over as from a home deleted."""
    for folder in dict.fromkeys((Path(recorded).parent, here.parent)):
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                # The inode is the directory entry's own, free; the device costs a stat.
                if not identity.endswith(f":{entry.inode()}"):
                    continue
                with contextlib.suppress(OSError):
                    stat = entry.stat(follow_symlinks=False)
                    same = _identity(stat.st_dev, stat.st_ino) == identity
                    found = Path(entry.path)
                    ours = same and entry.is_file(follow_symlinks=False)
                    if ours and _store_id_of(found) == store_id:
                        return found
    return None


def _server_place(engine: Engine) -> str | None:
    """Where a PostgreSQL store lives, as its `home` records it: the server (its system
    identifier), the database and the schema of its tables, by oid. A copy (CREATE DATABASE
    ... TEMPLATE, a pg_dump restored, the tables copied into another schema) has the same
    store id and another place; a database or schema renamed keeps its oid, and its place."""
    if engine.dialect.name != "postgresql":
        return None
    server, found = None, None
    # The control data is readable by every role unless an administrator revoked it: then
    # the database's and the schema's oids alone tell a copy apart.
    with contextlib.suppress(DatabaseError), engine.connect() as conn:
        query = "SELECT system_identifier::text FROM pg_control_system()"
        server = conn.exec_driver_sql(query).scalar()
    # A server that fails here fails the store's first write too, which says so in one line.
    with contextlib.suppress(DatabaseError), engine.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT d.oid::bigint, d.datname, n.oid::bigint, n.nspname FROM pg_database d, "
            "pg_namespace n WHERE d.datname = current_database() AND n.oid = "
            "(SELECT relnamespace FROM pg_class WHERE oid = to_regclass('meta'))"
        ).one_or_none()
    if found is None:
        return None
    database, database_name, schema, schema_name = found
    place = {
        "server": server,
        "database": [database, database_name],
        "schema": [schema, schema_name],
    }
    return json.dumps({"postgresql": place}, sort_keys=True)


def _server_elsewhere(s: Session, recorded: str | None, here: str) -> str | None:
    """The PostgreSQL store `recorded` names, as a line names it, while it is another store
    than `here` and may still be there (a copy's original); None when it is `here`, or gone
    from this server (the copy is the store now, as a SQLite store moved). One on another
    server cannot be looked for: its copy keeps the original's files for good."""
    them, us = read_place(recorded), read_place(here)
    named = place_named(them) if them is not None else None
    if them is None or us is None or named is None:
        return None
    server, key, shown = them.get("server"), named[0], named[1]
    ours = (int(us["database"][0]), int(us["schema"][0]))
    same_server = server is None or us.get("server") is None or server == us.get("server")
    if same_server and key == ours:
        return None
    if not same_server:
        return f"{shown} on another server (system identifier {server})"
    if key[0] != ours[0]:
        query = "SELECT 1 FROM pg_database WHERE oid = :oid"
        there = s.scalar(text(query), {"oid": key[0]}) is not None
    else:
        query = "SELECT 1 FROM pg_class WHERE relname = 'meta' AND relnamespace = :oid"
        there = s.scalar(text(query), {"oid": key[1]}) is not None
    return shown if there else None


@dataclass
class _Users:
    """What the runs a delete leaves use of the runs it deletes (`_users`), with the ids of
    the runs that use it: recorded files they train on (data.root: distill's pretrain run on
    the npz its select run records, recording none itself), and runs whose weights they
    start from, by the deleted run and model.weights ("run:N", distill's finetune run, or
    the path of the checkpoint it records)."""

    data: dict[str, list[int]] = field(default_factory=dict)
    weights: dict[tuple[int, str], list[int]] = field(default_factory=dict)


def _users(s: Session, recorded: dict[str, int], gone: Sequence[int]) -> _Users:
    """`_Users` of the runs `gone` and their recorded files (`recorded`, each with its run),
    from every other run's config, read as text: a config that is not JSON (set by hand)
    uses nothing, and stops no delete."""
    users, deleted = _Users(), set(gone)
    query = select(Run.id, cast(Run.config, Text)).where(Run.id.not_in(gone)).order_by(Run.id)
    for run_id, stored in s.execute(query):
        try:
            config = json.loads(stored)
        except (TypeError, ValueError):
            continue
        sections = [config.get(k) if isinstance(config, dict) else None for k in ("data", "model")]
        data, model = (section if isinstance(section, dict) else {} for section in sections)
        if isinstance(root := data.get("root"), str) and root in recorded:
            users.data.setdefault(root, []).append(run_id)
        weights = model.get("weights")
        if not isinstance(weights, str):
            continue
        source = weights.removeprefix("run:")
        start = int(source) if weights != source and source.isdigit() else recorded.get(weights)
        if start in deleted:
            users.weights.setdefault((start, weights), []).append(run_id)
    # Those a kept file is recorded to (`delete_runs`), locked as the deleted runs are: a
    # delete of one meanwhile (PostgreSQL) is waited for, and it is then no user (the row
    # recorded to it failed its foreign key).
    them = sorted({i for ids in users.data.values() for i in ids})
    there = set(
        s.scalars(select(Run.id).where(Run.id.in_(them)).order_by(Run.id).with_for_update())
    )
    users.data = {
        p: left for p, ids in users.data.items() if (left := [i for i in ids if i in there])
    }
    return users


def _runs_that(ids: list[int], verb: str) -> str:
    """Runs named as the subject of `verb` (said of one run): "run 3 trains", "runs 3, 5 train"."""
    if len(ids) == 1:
        return f"run {ids[0]} {verb}"
    return f"runs {', '.join(map(str, ids))} {verb.removesuffix('s')}"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _record(run: Run, tags: dict[str, str] | None = None) -> RunRecord:
    for column in ("config", "system", "summary"):
        value = getattr(run, column)
        if value is not None and not isinstance(value, dict):
            raise _not_an_object(run, column)
    return RunRecord.read(
        run.status,
        run.system,
        id=run.id,
        study_id=run.study_id,
        name=run.name,
        kind=run.kind,
        config=run.config,
        config_hash=run.config_hash,
        summary=run.summary or {},
        started=run.started.isoformat(timespec="seconds"),
        ended=run.ended.isoformat(timespec="seconds") if run.ended else None,
        error=run.error,
        tags=tags or {},
    )


def _not_an_object(run: Run, column: str) -> UserError:
    """The one line naming a run whose JSON column a hand edit set to what is no object (a
    list, a number, a string): PostgreSQL's driver hands it over as it is, where SQLite's
    reader refuses its text (reading._json), and every reader crashed on it with an
    AttributeError. A SQLite store's line offers `runs repair`; a server's, the fix by hand."""
    session = object_session(run)
    assert session is not None  # a run read in a session, still in it
    engine = session.get_bind().engine
    path = integrity.store_file(engine)
    if path is not None:
        return integrity.garbled_json(path, run.id, column, integrity.NOT_OBJECT)
    name = integrity.shown(masked_url(engine.url.render_as_string(hide_password=False)))
    runs = migrations.table_named(engine.dialect, Run.__tablename__)  # in its schema, for psql
    return UserError(
        f"run {run.id}'s {column} in run store {name} {integrity.NOT_OBJECT}; "
        "dlperf cannot read that run",
        f"set it to an object again: UPDATE {runs} SET {column} = '{{}}' WHERE id = {run.id}",
    )


def _tags_of(s: Session, run_ids: Sequence[int]) -> dict[int, dict[str, str]]:
    """The tags of `run_ids`, by run, in key order; queried in chunks that stay well below
    SQLite's limit on the parameters of one statement. The mark of a `runs delete --force`
    that is gone (`query.stale_mark`: SIGKILLed while it waited, it deleted nothing) is left
    out: listed, shown, selected by --where and exported, it read as a delete under way of a
    run that stays (and then runs again, resumed) for good. `take_over` removes it."""
    tags: dict[int, dict[str, str]] = {}
    ids = list(run_ids)
    for start in range(0, len(ids), 500):
        query = select(Tag.run_id, Tag.key, Tag.value).where(
            Tag.run_id.in_(ids[start : start + 500])
        )
        # Sorted here, by code point as SQLite's ORDER BY: PostgreSQL's follows the database's
        # collation (en-US put `_x 1 a A` where SQLite has `1 A _x a`).
        for run_id, key, value in sorted(s.execute(query), key=operator.itemgetter(1)):
            if key != DELETING_TAG or not stale_mark(value):
                tags.setdefault(run_id, {})[key] = value
    return tags


def _storable(s: Session, run_id: int) -> bool:
    """Whether an id column (a run's, a study's) can hold `run_id` at all: a SQLite integer
    has 64 bits (beyond, the driver cannot even bind it), PostgreSQL's `integer` 32 (beyond,
    a query fails)."""
    bits = 64 if s.get_bind().dialect.name == "sqlite" else 32
    return bool(0 < run_id < 2 ** (bits - 1))


@contextmanager
def _times_read(s: Session) -> Iterator[None]:
    """Runs loaded by SQLAlchemy, whose reading of a time set by hand to what is not one
    raises a ValueError ('yesterday') or a TypeError (a number) that names no run: the one
    line naming the run (integrity.garbled_run); anything else is raised as it was."""
    try:
        yield
    except (TypeError, ValueError):
        engine = s.get_bind().engine
        path = integrity.store_file(engine)
        garbled = None if path is None else integrity.garbled_run(path)
        if garbled is None:
            raise
        raise garbled from None


def _stored_run(s: Session, run_id: int, lock: bool = False) -> Run:
    """The lookup of a run by the id a user gave: any integer, however large, that names no
    stored run is "no run N", not an error of the database's integer type. With `lock` (a
    write that needs the run to stay), its row is locked as it is read (PostgreSQL; SQLite's
    write lock is already held): looked at unlocked, a run deleted by another process before
    this write's end failed the tags' foreign key, a traceback, where it is "no run N"."""
    with integrity.reading(run_id), _times_read(s):
        run = s.get(Run, run_id, with_for_update=lock) if _storable(s, run_id) else None
    if run is None:
        raise no_such_run(s.get_bind(), str(run_id))
    return run


def _owner(process: dict[str, Any]) -> str:
    """A process as the owner columns hold it: the same text for the same process, so that
    an owner compares equal in SQL."""
    return json.dumps(process, sort_keys=True)


def _same(column: Any, value: Any) -> Any:
    """`column` holds `value` (SQL's `=` never matches a null)."""
    return column.is_(None) if value is None else column == value


def went_on_in(elsewhere: str, again: str) -> str:
    """The advice for a copy's row of a run that was training when the store was copied: its
    process went on in `elsewhere` (`RunStore.writes_elsewhere`), where the run is to be seen;
    `again` (the words of the command that says it) trains it in this store. Said by
    `doctor`'s unfinished finding and by `run --resume`'s refusal."""
    return (
        f"its process wrote {elsewhere} (this store is a copy of it), where it went on: see it "
        f"there; to train it in this store, {again}"
    )


def writer_refusal(run: RunRecord, elsewhere: str | None = None) -> UserError | None:
    """Why this process may not become the writer of `run`: it finished, or it is running
    in a process that lives (or lives on another host, where that cannot be told).
    `elsewhere`: the store that process writes, of which this store is a copy
    (`RunStore.writes_elsewhere`): the run is that store's, and to wait for it or stop it
    (the original's run) was no advice."""
    if run.status == "finished":
        return UserError(f"run {run.id} already finished", "start a new run instead")
    if run.status != RUNNING:
        return None
    if elsewhere is not None:
        return UserError(
            f"{that_stores(run.id, run.process, elsewhere)}, and trains on there",
            "see it in that store; to train it in this one, start it again here",
        )
    process = run.process or {}
    who = f" in pid {process.get('pid')} on {process.get('host')}" if process else ""
    return UserError(
        f"run {run.id} is running{who}: one process writes a run at a time",
        "wait for it to end, or stop it; a run whose process is gone can be resumed",
    )


def _fits(column: Any, value: str, what: str, hint: str) -> None:
    """Refuse, before anything is written, text that the store's `column` cannot keep as it
    is: PostgreSQL refuses a string longer than the column (StringDataRightTruncation) or
    holding a NUL character, where SQLite keeps either whole. So the limits are dlperf's, the
    same on every backend, and existing SQLite stores that hold longer text still read. Text
    that is not UTF-8 (a lone surrogate, what Python makes of a file name's byte that is not
    UTF-8) neither driver can encode: a UnicodeEncodeError traceback."""
    limit = column.type.length
    if limit is not None and len(value) > limit:
        raise UserError(
            f"{what} is {len(value)} characters long; the run store keeps at most {limit}", hint
        )
    if "\x00" in value:
        raise UserError(f"{what} holds a NUL character, which the run store cannot keep", hint)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(
            f"{what} is not UTF-8 text", "give text without undecodable bytes"
        ) from None


def _keepable(text: str) -> str:
    """`text` (a run's error) as every backend keeps it: a lone surrogate, which neither
    driver can encode, and NUL, which PostgreSQL's text refuses, written as Python escapes.
    Refused instead, a failed run's mark raised a UnicodeEncodeError in place of its error
    and left it `running`."""
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _shown(text: str) -> str:
    """Text as an error quotes it: its start, if it is long."""
    return repr(text) if len(text) <= 24 else f"{text[:20]!r}..."


@dataclass
class Deleted:
    """What `RunStore.delete_runs` did: the runs, the files and directories it removed, the
    recorded files it left in place, each with the reason, and what the runs left lose
    (`notes`: a run that starts from a deleted run's weights)."""

    runs: list[int]
    removed: list[str]
    kept: list[tuple[str, str]]
    notes: list[str] = field(default_factory=list)


@dataclass
class _Plan:
    """What deleting one run takes from disk, as (path, the store's directory it lies under)
    pairs, and what it keeps, with why: recorded in meta with the rows' deletion, until done."""

    remove: list[tuple[str, str]]
    kept: list[tuple[str, str]]
    # The deleting process (`_owner`): while it lives, the files are its to remove, and the
    # run is gone to every other delete. None: a record of an older dlperf.
    owner: str | None = None

    def recorded(self) -> dict[str, Any]:
        return {
            "remove": [list(r) for r in self.remove],
            "kept": [list(k) for k in self.kept],
            "owner": self.owner,
        }

    def cut_short(self, me: str, force: bool) -> bool:
        """Whether the delete that recorded this plan stopped before its files went (killed),
        so that another delete finishes it; not while its process lives (two deletes of one
        run at once: the second took the first's files and reported its runs as its own).
        One on another host, which cannot be told from here, only with `force`."""
        alive = self.alive(me)
        return alive is False or (alive is None and force)

    def alive(self, me: str) -> bool | None:
        """Whether the deleting process still runs (None: on another host, which cannot be
        told from here). An older dlperf's record, this process's own and one garbled by
        hand (its owner no process) count as gone."""
        try:
            owner = json.loads(self.owner) if self.owner not in (None, me) else None
        except ValueError:
            owner = None
        return process_alive(owner) if isinstance(owner, dict) else False


def _deleting(s: Session) -> dict[int, _Plan]:
    """The runs whose rows a delete removed and whose files it had not removed yet (it was
    killed in between), with what it meant to remove. A record garbled by hand is an empty
    plan, dropped by the next delete."""
    plans: dict[int, _Plan] = {}
    found = select(Meta.key, Meta.value).where(Meta.key.startswith(DELETING, autoescape=True))
    for key, value in s.execute(found):
        run_id = integrity.deleting_run(key)
        if run_id is None:
            continue  # a key set by hand: not ours
        try:
            data = json.loads(value)
            owner = data.get("owner")
            plans[run_id] = _Plan(
                [(str(t), str(r)) for t, r in data["remove"]],
                [(str(p), str(w)) for p, w in data["kept"]],
                owner if isinstance(owner, str) else None,
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            plans[run_id] = _Plan([], [])
    return plans


_STUDY_DIR = re.compile(r"study-[0-9]+")  # a study's directory (sweep, distill), `_emptied`


def _study_dir(target: Path, root: Path) -> bool:
    """Whether `target` is a study's directory `root/study-<id>/`, not one of that name
    elsewhere under the store's directory `root` (in a run's own, or the user's)."""
    return target.parent == root and _STUDY_DIR.fullmatch(target.name) is not None


def _emptied(s: Session, gone: Sequence[int]) -> dict[int, int]:
    """The studies that a delete of the runs `gone` leaves without a run, each with the last
    of its runs deleted: the study's directory `study-<id>/` goes with it (sweep's and
    distill's figures are recorded by no run; a staleness study's figure is)."""
    query = select(Run.study_id, func.max(Run.id)).where(Run.id.in_(gone))
    rows = s.execute(query.group_by(Run.study_id)).all()
    last = {study: run_id for study, run_id in rows if study is not None}
    left = set(s.scalars(select(Run.study_id).where(Run.study_id.in_(last), Run.id.not_in(gone))))
    return {study: run_id for study, run_id in last.items() if study not in left}


def _study_over(s: Session, folder: Path, gone: Sequence[int], keeping: list[Path]) -> bool:
    """Whether the study directory `folder` (`_study_dir`) is done with: its study has no run
    left once the runs `gone` are deleted, and no file in it is kept. A folder of that name
    that is no stored study's is not."""
    study = int(folder.name.removeprefix("study-"))
    if any(k.is_relative_to(folder) for k in keeping) or not _storable(s, study):
        return False
    left = select(Run.id).where(Run.study_id == study, Run.id.not_in(gone)).limit(1)
    return s.get(Study, study) is not None and s.scalar(left) is None


def _take(
    run_id: int,
    target: Path,
    root: Path,
    mine: set[str],
    removed: list[str],
    kept: list[tuple[str, str]],
) -> None:
    """Remove what a delete of run `run_id` planned: a file, or the run's own directory
    `root/run-<id>/`; then the directories left empty up to `root`. Checked again here, as
    the plan may come from the store's meta: only under one of this store's own directories
    (`mine`; a byte copy carries its original's records, whose files are not its to remove)."""
    own = root / f"run-{run_id}"
    if not target.is_absolute() or ".." in target.parts or root.name not in mine:
        return
    if target == root or not target.is_relative_to(root):
        return
    try:
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir() and (target == own or _study_dir(target, root)):
            shutil.rmtree(target)
        elif target.is_dir():
            kept.append((str(target), "a directory the run does not own"))
            return
        else:
            return  # gone already (another delete finishing this one took it)
    except FileNotFoundError:
        return
    except OSError as e:
        kept.append((str(target), f"cannot remove it: {e.strerror or e}"))
        return
    removed.append(str(target))
    for parent in target.parents:  # directories left empty, up to the store's own
        if parent == root or not parent.is_relative_to(root):
            break
        try:
            parent.rmdir()
        except OSError:
            break


@dataclass
class Recording:
    """A run being recorded: how it will be marked when its `with` block ends normally."""

    id: int
    status: str = "finished"
    summary: dict[str, Any] | None = None
    error: str | None = None

    def fail(self, error: str, summary: dict[str, Any] | None = None) -> None:
        """End as failed without raising: the command goes on (e.g. the next point)."""
        self.status, self.error = "failed", error
        if summary is not None:
            self.summary = summary


# Every store this process opened (not the in-memory stand-ins: their one connection is the
# store). A forked child (a multiprocessing worker) that used the connections in their pools
# used its parent's sessions: children reading at once broke them, and the error said that
# the server went away. SQLAlchemy's recipe: the child forgets them, and connects anew.
_INHERITED: weakref.WeakSet[Engine] = weakref.WeakSet()


def _forget_inherited() -> None:
    for engine in list(_INHERITED):
        with contextlib.suppress(Exception):  # as `_dispose`: nothing to say it to
            engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_inherited)


def _dispose(engine: Engine, opened_in: int) -> None:
    """Closes the pooled connections of a store's engine; in a forked child, only forgets
    them, as SQLAlchemy advises: closing would end its parent's sessions on the same sockets.
    Silent where it fails (out of memory under `ulimit -v`, a server gone): a collector's
    callback can only print "Exception ignored", and what it would close is dropped anyway."""
    with contextlib.suppress(Exception):
        dispose(engine, close=os.getpid() == opened_in)


def _pg_next_id(s: Session) -> int | None:
    """A new run's id in a PostgreSQL store: its sequence's next, unless rows of a run deleted
    by hand (its foreign keys dropped by hand first) name that id or a later one: then the id
    above them all, and the sequence moved to it. The new run took those rows' tags and
    metrics as its own, and SQLite gave it another id (`_next_id`). Chosen under a lock that
    every new run of the store's schema takes until its transaction ends: moving the sequence
    is no transaction's, and could hand out again an id another process had just taken. None
    where runs.id has no sequence (the database then says what it lacks)."""
    s.execute(
        text("SELECT pg_advisory_xact_lock(:key, hashtext(current_schema()))"),
        {"key": PG_RUN_ID_LOCK},
    )
    chosen = s.scalar(text(f"SELECT nextval({PG_RUN_IDS})"))
    if chosen is None:
        return None
    columns = (Run.id, Metric.run_id, Tag.run_id, Artifact.run_id)
    top = max(s.scalar(select(func.max(c))) or 0 for c in columns)
    # At the sequence's end (ids set there by hand) no id is above them: the sequence's own.
    if chosen > top or top >= PG_INT_MAX:
        return int(chosen)
    s.execute(text(f"SELECT setval({PG_RUN_IDS}, :id)"), {"id": top + 1})
    return top + 1


# Each table but runs whose row id a sequence gives (SERIAL, BIGSERIAL, IDENTITY: none where
# pg_get_serial_sequence finds none), with its largest id, where that sequence would hand out
# an id not above it. pg_sequence_last_value is NULL before the first nextval; both it and
# setval are asked of a sequence only where this user may (CASE keeps the order), and one at
# its end (ids set there by hand) is left as it is, as `_pg_next_id` leaves runs'. None in
# a read-only session (a standby): setval is refused there, and failed the open as a store
# "older than this dlperf", where its writes say what the session lacks.
_PG_BEHIND = (
    "SELECT seq, top FROM ("
    + " UNION ALL ".join(
        f"SELECT pg_get_serial_sequence('{t.name}', 'id')::regclass AS seq, "
        f"(SELECT max(id) FROM {t.name}) AS top"
        for t in Base.metadata.sorted_tables
        if [c.name for c in t.primary_key] == ["id"] and t.name != Run.__tablename__
    )
    + ") AS t JOIN pg_sequence ON seqrelid = seq WHERE top < seqmax "
    "AND current_setting('transaction_read_only') = 'off' AND CASE WHEN "
    "has_sequence_privilege(seq, 'UPDATE') AND has_sequence_privilege(seq, 'SELECT, USAGE') "
    "THEN top > coalesce(pg_sequence_last_value(seq), 0) END"
)


def _pg_ids_past_rows(writer: Engine) -> None:
    """Moves the sequence of each table of `_PG_BEHIND` past the largest id the table holds,
    as `_pg_next_id` moves runs': a SQLite store's tables copied in by hand keep their ids
    and leave the sequences at 1, and the first metric, study or artifact written took a
    copied row's id (a UniqueViolation, the run left failed with the SQL as its error). At a
    writer's open, not at each write: a sequence is behind only after such a copy, and once
    moved never again, as every id after comes from it. Checked again under `_pg_next_id`'s
    lock: two writers opening at once would both move it, the second back below ids the
    first had handed out meanwhile. A table dropped, its id renamed or its SELECT revoked by
    hand moves none: such a store opened before, and says what it lacks where a command
    meets it (`integrity.on_error`), not as SQL at every open."""
    try:
        with writer.begin() as conn:
            if conn.execute(text(_PG_BEHIND)).first() is None:
                return
            conn.execute(
                text("SELECT pg_advisory_xact_lock(:key, hashtext(current_schema()))"),
                {"key": PG_RUN_ID_LOCK},
            )
            conn.execute(text(f"SELECT setval(seq, top) FROM ({_PG_BEHIND}) AS behind"))
    except DatabaseError as e:
        edited = (integrity.PG_NO_TABLE, integrity.PG_NO_COLUMN, integrity.PG_NO_PRIVILEGE)
        if _pg_state(e) not in edited:
            raise


class RunStore:
    def __init__(self, engine: Engine, store_id: str, read_only: bool = False) -> None:
        self.engine = engine
        self.id = store_id
        self.read_only = read_only
        # Why a write is refused, where not only "open read-only": the stand-in of a store
        # that is not there (`_empty`) says which store, and that it is not there.
        self._unwritable: tuple[str, str] | None = None
        self._writer = _writes(engine)
        self._file: StoreFile | None = None
        # A server store's place (`_server_place`), for a writer: a SQLite store's is its file.
        self._server: str | None = None
        self._keeper: sqlite3.Connection | None = None
        # Whether `run --resume` continues each run this store object records: asked when
        # the store has gone, and can no longer be read.
        self._resumable: dict[int, bool] = {}
        # Whether a write already went to the deleted store's file (`_writing`): it said the
        # store had gone, and a caller that tries it again (dlperf.track's flush at the end of
        # its block) wrote its rows twice into what `_rescue` saves.
        self._wrote_after_gone = False
        # A store dropped without `engine.dispose()` closes its pooled connections then, not
        # whenever the collector reaches them: psycopg warns of each connection "deleted
        # while still open" (a ResourceWarning that once failed CI in an unrelated test).
        # Not at exit: `_close_open` closes SQLite's there, checkpointing the WAL first.
        weakref.finalize(self, _dispose, engine, os.getpid()).atexit = False

    @classmethod
    def open(
        cls, db: str | None = None, create: bool = True, *, writes: bool | None = None
    ) -> RunStore:
        """The store at `db` (a URL or a SQLite file path), checked and brought to the current
        schema. Without `create` (the commands that only read), a database that is empty, or
        a SQLite file that is missing or empty, reads as a store without runs and nothing is
        written into it; so does one opened read-only (SQLite's `?mode=ro`), into which every
        write is refused. `writes` (default: `create`) says this process writes a store that
        is there: its SQLite file is kept (`_keep_file`); `create=False, writes=True` is a
        writer that never makes a store (`runs tag`, `runs delete`)."""
        url = _url(db)
        parsed = _parsed(url)
        name = integrity.shown(masked_url(url))  # as every line names it
        try:
            sqlite = parsed.get_backend_name() == "sqlite"
            where = _sqlite_checked(parsed, name) if sqlite else None
            # The driver would ignore SQLite's mode with a warning: _sqlite_engine honours it.
            engine = (
                create_engine(
                    parsed.difference_update_query(["mode"]),
                    json_deserializer=functools.partial(_stored_json, where),
                )
                if where is not None
                else _server_engine(parsed, name)
            )
        except ModuleNotFoundError as e:  # the URL's driver
            raise _no_driver(name, e) from None
        except NoSuchModuleError:  # SQLAlchemy's "Can't load plugin: sqlalchemy.dialects:x"
            raise _no_dialect(name, parsed) from None
        except (ArgumentError, ImportError) as e:
            raise UserError(f"cannot open run store {masked_url(url)!r}: {e}") from None
        try:
            store = cls._opened(engine, parsed, name, where, create, writes)
        except BaseException:
            _dispose(engine, os.getpid())  # a refused store leaves no connection open
            raise
        if store.engine is not engine:  # a stand-in (`_empty`): the one opened is not kept
            _dispose(engine, os.getpid())
        return store

    @classmethod
    def _opened(
        cls,
        engine: Engine,
        parsed: URL,
        name: str,
        where: Path | None,
        create: bool,
        writes: bool | None,
    ) -> RunStore:
        """`open`'s store on the engine it made: checked, migrated, with its listeners."""
        sqlite = where is not None
        read_only = sqlite and parsed.query.get("mode") == "ro"
        writing = (create if writes is None else writes) and not read_only
        if not sqlite:
            # psycopg warns of a connection it could not close cleanly ("error ignored
            # terminating <psycopg.Pipeline ...>") when a server goes mid-run, before dlperf's
            # own one line says that the store went away.
            psycopg = logging.getLogger("psycopg")
            if psycopg.getEffectiveLevel() < logging.ERROR:
                psycopg.setLevel(logging.ERROR)
        if where is not None:
            # A reader's file read as immutable: its connections neither write it nor leave a
            # file beside it.
            immutable = not writing and not read_only and frozen(where)
            engine = _sqlite_engine(engine, name, where, read_only, immutable)
            # A file missing or empty: opening it would write a header.
            path = integrity.store_file(engine)
            missing = path is not None and (not path.exists() or path.stat().st_size == 0)
            if (read_only or not create) and missing:
                assert path is not None
                there = path.exists()
                what = "is an empty file" if there else "does not exist"
                return cls._empty(_absent(_name(engine), what, read_only), absent(str(path), what))
            # Before a connection switches it to WAL. Not of a file read as immutable: nothing
            # switches it, and the check's own connection (mode=ro) left a -wal and a -shm.
            if not read_only and not missing and not immutable:
                migrations.refuse_foreign_file(where, name, _busy_timeout_s(parsed), read_begun)
        session: _Session | None = None
        try:
            if parsed.get_backend_name() == "postgresql":
                session = _schema_checked(engine, name)
                if writing:  # before a new store's tables are made in it
                    _encoding_checked(session, parsed, name)
            integrity.check(engine)
            # A reader upgrades an older store too (the first command to open it does), but
            # leaves its journal mode: the next command that writes switches it to WAL.
            writer = _writes(engine, **{KEEP_MODE: not writing})
            store_id = migrations.migrate(engine, writer, name, create and not read_only)
            if session is not None and writing and store_id is not None:  # PostgreSQL's
                _pg_ids_past_rows(writer)
            integrity.opened(engine)
        except migrations.MissingTable as e:
            raise integrity.missing_table(engine, e.table) from None
        except DatabaseError as e:  # also "file is not a database"
            no_room = _no_room(e, engine)
            if no_room:
                raise no_room from None
            if read_only and _sqlite_code(e) == SQLITE_READONLY:
                raise UserError(
                    f"run store {name} is older than this dlperf and opened read-only",
                    "open it once without ?mode=ro: that upgrades it",
                ) from None
            if _pg_state(e) == PG_READ_ONLY:
                raise _read_only_session(engine, name, e) from None
            if _pg_state(e) == PG_LOCK_TIMEOUT:  # `_session_set`'s, met as it migrates
                raise _pg_locked(name, BUSY_TIMEOUT_S) from None
            if _pg_state(e) == PG_CANCELLED:
                timeout = None if session is None else session.statement_timeout
                raise _cancelled(name, parsed, timeout, e.orig or e) from None
            if _pg_state(e) == integrity.PG_NO_PRIVILEGE:
                raise _denied_at_open(engine, name, e, writing) from None
            if not sqlite and (closed := _idle_in_transaction(name, parsed, e.orig or e)):
                raise closed from None
            raise _no_answer(parsed, name, e) or UserError(
                f"cannot open run store {name}: {_one_line(e)}", _hint(e, where, read_only)
            ) from None
        if store_id is None:  # an empty database, opened only to read it
            # A SQLite file by its absolute path, as "is an empty file" names it, not by a
            # URL the user may never have typed (sqlite:///nt.db)
            path = integrity.store_file(engine)
            shown_as = _name(engine) if path is None else integrity.shown(path)
            unwritable = _absent(shown_as, "holds no store yet", read_only)
            return cls._empty(unwritable, unwritable[0])
        place = _server_place(engine) if not sqlite and writing else None
        if not sqlite:  # installed only now: a server that cannot be reached at open is bad input
            if session is not None:
                _pg_waits(engine, name)
                cancelled = functools.partial(_query_cancelled, name, session.statement_timeout)
                event.listen(engine, "handle_error", cancelled)
                locked = functools.partial(_pg_lock_timeout, name)
                event.listen(engine, "handle_error", locked)
                schema = engine.dialect.identifier_preparer.quote(session.schema)
                event.listen(engine, "handle_error", functools.partial(_ids_used_up, name, schema))
            event.listen(engine, "handle_error", functools.partial(_server_gone, name))
            # Only now too: an open probes for tables that are missing from a new store.
            event.listen(engine, "handle_error", integrity.on_error)
        store = cls(engine, store_id, read_only)
        store._server = place
        _INHERITED.add(engine)
        if sqlite and writing:
            store._keep_file()
        if sqlite:
            # A reader's too: its connections, left to the interpreter's end, were never
            # closed, and left an empty -wal and -shm beside the store (compare, doctor).
            _close_at_exit(engine)
        return store

    def opened_file(self) -> StoreFile | None:
        """The SQLite file this store opened (its device and inode), None for a server's store
        or a stand-in: a writer noted it as it opened (`_keep_file`), a reader is noted now."""
        return self._file if self._file is not None else StoreFile.of(self.engine)

    def _keep_file(self) -> None:
        """Note the store's file and hold one connection to it of our own: if the file is
        deleted while this process writes it, that connection still reads everything the
        store held (its pages and its WAL stay open), and `_rescue` copies it out."""
        self._file = StoreFile.of(self.engine)
        if self._file is None:
            return
        keeper = sqlite3.connect(self._file.path, check_same_thread=False)
        busy_s = _busy_timeout_s(self.engine.url)
        keeper.execute(f"PRAGMA busy_timeout={round(busy_s * 1000)}")
        # A writer's store, checked: in WAL mode from now (a no-op on one already in it, as
        # the stores dlperf makes are), so that the WAL this connection holds open is the one
        # every write goes to; readers leave the mode as they found it. A store that cannot
        # be written (a read-only file) is left as it is: its first write says so, in the
        # words of every write's refusal, not in sqlite3's traceback.
        switch = "PRAGMA journal_mode=WAL"
        with contextlib.suppress(sqlite3.Error):
            _in_attempts(
                lambda: keeper.execute(switch).fetchone(),
                keeper,
                _name(self.engine),
                busy_s,
                WRITE,
                readers=True,  # a store in WAL mode already is switched without a wait
            )
        keeper.execute("SELECT count(*) FROM meta").fetchall()  # opens the WAL, held from now
        self._keeper = keeper
        # Closed with the engine's connections: a caller that disposes the engine and then
        # moves the file must not leave a connection behind on it.
        # Not in a forked child, which forgets its parent's connections (`_forget_inherited`).
        opened_in = os.getpid()
        event.listen(
            self.engine,
            "engine_disposed",
            lambda _engine: keeper.close() if os.getpid() == opened_in else None,
        )

    @classmethod
    def _empty(cls, unwritable: tuple[str, str] | None = None, absent: str = "") -> RunStore:
        """A store without runs, in memory, for readers of a store that holds nothing yet.
        `unwritable`: the refusal of a write (a message and its fix), naming the store as
        given: the stand-in's own URL is "sqlite://", an in-memory store. `absent`: why there
        is no store, which a run asked of it says (`_stored_run`)."""
        options = {ABSENT: absent} if absent else {}
        # One connection, which any thread may read (as a file's store and a server's are);
        # sqlite3 refused it to every thread but the one that made it.
        engine = create_engine(
            "sqlite://",
            poolclass=StaticPool,
            connect_args={"check_same_thread": False},
            execution_options=options,
        )
        store = cls(engine, migrations.migrate(engine, engine, "(empty)") or "", read_only=True)
        store._unwritable = unwritable
        return store

    def release(self) -> None:
        """Close the pooled connections, which a database's connection limit counts; the
        store stays usable (a later read connects anew, to the same file: a relative path is
        not resolved again in a working directory changed or removed since, `keep_file`)."""
        dispose(self.engine)

    def artifact_dir(self, out_dir: str | Path) -> Path:
        """Where this store's new runs keep their files under `out_dir`: one directory per
        store, so run 1 of one store never overwrites (or is read as) run 1 of another; a byte
        copy of a store still there has one of its own (`_copy_dir`). A loop of symbolic links
        is the OSError the OS names it (ELOOP), as the directory's use would raise:
        Path.resolve() raised a RuntimeError before Python 3.13."""
        try:
            where = Path(out_dir).resolve()
        except RuntimeError:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(out_dir)) from None
        return where / self._dir_name()

    def _dir_name(self) -> str:
        """The store id, or a copy's own directory name, written the first time a copy asks
        (a store only read has the id)."""
        here = self._here()
        if here is None:
            return self.id
        with Session(self.engine) as s:
            home, name, made_for = (_meta(s, key) for key in (HOME, COPY_DIR, COPY_FILE))
            if name is not None and made_for == here:
                return name
            if name is None and self._home_elsewhere(s, home) is None:
                return self.id
        with self._writing() as s:
            return self._copy_dir(s, make=True) or self.id

    def _here(self) -> str | None:
        """Where this store lives, as `home` and `copy_file` record it: a SQLite store's file,
        a PostgreSQL store's place (`_server_place`); None for a store only read."""
        return str(self._file.path) if self._file is not None else self._server

    def _elsewhere(self, s: Session, recorded: str | None) -> Path | str | None:
        """The store `recorded` (a `home`, a `copy_file`) names while it is another one than
        this and still there: a SQLite file (`_elsewhere`), a PostgreSQL database or schema
        (`_server_elsewhere`)."""
        if self._file is not None:
            return _elsewhere(recorded, str(self._file.path))
        if self._server is not None:
            if recorded is not None and read_place(recorded) is None:
                # A SQLite store's tables moved onto the server carry its file's path: while
                # that file is there, this store is its copy (read as no place at all, this
                # store took `<store id>/` for its own, and its runs delete removed the
                # file's runs' checkpoints). Gone (or on a host where this path is not it),
                # the server's store owns the directory, as a SQLite store does whose original
                # is gone.
                with contextlib.suppress(OSError, ValueError):
                    if Path(recorded).is_absolute() and Path(recorded).is_file():
                        return Path(recorded)
                return None
            return _server_elsewhere(s, recorded, self._server)
        return None

    def _home_elsewhere(self, s: Session, home: str | None) -> Path | str | None:
        """The store the `home` recorded names while it is another one than this and still
        there (`_elsewhere`), or, its path gone, its file renamed (`_renamed`): a backup made
        before the original was renamed took the path gone for its own store moved, deleted
        the original's checkpoints and wrote its next runs into the original's `run-<id>/`.
        None when the home is this store, moved or not, or was deleted."""
        original = self._elsewhere(s, home)
        if original is not None or self._file is None or home is None:
            return original
        here = self._file.path
        identity = _meta(s, HOME_FILE)
        if identity is None or identity == _identity(self._file.device, self._file.inode):
            return None  # recorded by an older dlperf, or this very file: the home
        if read_place(home) is not None or os.path.lexists(home):
            return None  # a server's place, or this file by another name (`_elsewhere`)
        return _renamed(home, identity, here, self.id)

    def _copy_dir(self, s: Session, make: bool) -> str | None:
        """The directory of this store's own under an out_dir while it is, or once was, a
        copy of a store still there (`_copy_of`): a copy and its original hand out the same
        next run id, and both wrote `<store id>/run-<id>/`, one overwriting the other's
        checkpoint. Made with `make` when a copy has none yet; kept by the copy for good, moved
        too, and not by a copy of it, whose recorded store is still there: that makes its own."""
        here = self._here()
        if here is None:
            return None
        name, made_for = _meta(s, COPY_DIR), _meta(s, COPY_FILE)
        if name is not None and self._elsewhere(s, made_for) is None:
            if made_for != here:  # the copy was moved
                _put_meta(s, COPY_FILE, here)
            return name
        if not make or self._copy_of(s) is None:
            return None
        name = f"{self.id}-{secrets.token_hex(4)}"
        _put_meta(s, COPY_DIR, name)
        _put_meta(s, COPY_FILE, here)
        return name

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        """One write transaction; a full disk comes out as OSError(ENOSPC), a file size limit
        as OSError(EFBIG). Nothing is written into a store found damaged."""
        integrity.refuse_writes(self.engine)
        name = _name(self.engine)
        if self._unwritable is not None:
            raise UserError(*self._unwritable)
        if self.read_only:
            raise UserError(f"run store {name} is open read-only", "drop ?mode=ro to write to it")
        if self._file is not None and not self._file.there():
            linked, now = self._file.whereabouts()
            if linked:  # moved, whole where it is now: it takes no write from a path it left
                where = f" to {integrity.shown(now)}" if now is not None else ""
                raise StoreGone(f"run store {integrity.shown(self._file.path)} was moved{where}")
            shown = integrity.shown(self._file.path)
            gone = StoreGone(f"run store {shown} was deleted or replaced")
            if self._wrote_after_gone:
                raise gone
            # This write goes where the store's earlier ones went (the file's old inode,
            # through the connection kept for it), so that `_rescue` copies it out too; a
            # new connection would make an empty file at the path instead. Only the first:
            # it is said to have failed, and a second would be it again.
            assert self._keeper is not None
            kept = create_engine("sqlite://", creator=lambda: self._keeper, poolclass=StaticPool)
            with stopping.shielded(), Session(kept) as s, s.begin():
                yield s
            self._wrote_after_gone = True
            raise gone
        try:
            # A stop signal waits for the transaction's end: one cut inside SQLAlchemy could
            # leave a connection holding SQLite's write lock, and the run's own `killed` mark
            # would then wait out the busy timeout behind it.
            with stopping.shielded(), Session(self._writer) as s, s.begin():
                yield s
        except DatabaseError as e:  # PostgreSQL's read-only transaction is an InternalError
            no_room = _no_room(e, self.engine)
            if no_room:
                raise no_room from None
            if _sqlite_code(e) == SQLITE_READONLY:
                raise UserError(
                    f"cannot write run store {name}: {_one_line(e)}", UNWRITABLE
                ) from None
            if _pg_state(e) == PG_READ_ONLY:  # the session's, not a file's: no lsattr
                raise UserError(
                    f"cannot write run store {name}: its session is read-only ({_one_line(e)})",
                    READ_ONLY_SESSION,
                ) from None
            if _sqlite_code(e) == SQLITE_BUSY:
                raise _locked(name, _busy_timeout_s(self.engine.url)) from None
            raise

    # --- writing -----------------------------------------------------------------------

    def create_study(self, name: str, kind: str) -> int:
        _fits(Study.__table__.c.name, name, f"study name {_shown(name)}", "give a shorter name")
        with self._writing() as s:
            study = Study(name=name, kind=kind, created=_now())
            s.add(study)
            s.flush()
            return study.id

    def create_run(
        self,
        name: str,
        kind: str,
        config: dict[str, Any],
        config_hash: str | None = None,
        system: dict[str, Any] | None = None,
        study_id: int | None = None,
    ) -> int:
        """A new `running` run owned by this process. A `system` record gains "process"
        (`this_process()`), so that readers can tell a run whose process is gone
        (`RunRecord.status`)."""
        _fits(Run.__table__.c.name, name, f"run name {_shown(name)}", "give a shorter run.name")
        # as dlperf.track and every command check it first: no --where could name such a key
        printable_keys(config, subscripted("config"))
        me = this_process()
        if system is not None:
            system = {**system, "process": self._writer_record(me)}
        with self._writing() as s:
            run = Run(
                name=name,
                kind=kind,
                status="running",
                config=config,
                config_hash=config_hash,
                system=system,
                study_id=study_id,
                started=_now(),
                owner=_owner(me),
            )
            next_id = self._next_id(s)
            if next_id is not None:
                run.id = next_id
            self._copy_of(s)  # a new store's first run records whose files these are
            s.add(run)
            s.flush()
            self._resumable[run.id] = from_experiment(kind, config, system)
            return run.id

    def _writer_record(self, me: dict[str, Any]) -> dict[str, Any]:
        """`me` (`this_process()`) as a run's `process` records it: with the store it writes,
        by which a copy of this store tells a run its own process writes from one whose
        process writes this store (`writes_elsewhere`)."""
        here = self._here()
        return me if here is None else {**me, "store": here}

    def writes_elsewhere(self, run: RunRecord) -> str | None:
        """The other store `run`'s process writes, while that store is still there: `run` was
        running when this store was copied from it (`cp`, a backup, `runs repair`, a pg_dump
        restored), and its process writes that store, not this one, whose row of it is a copy
        that nothing updates. None for a run this store's own process writes, and for one
        recorded by a dlperf that recorded no store."""
        recorded = (run.process or {}).get("store")
        if not isinstance(recorded, str):
            return None
        with Session(self.engine) as s:
            if self._here() is not None:
                other = self._other_store(s, run.process)
            elif self.engine.dialect.name == "postgresql":
                # A reader (doctor, report) has no place until it asks: reading it at every
                # open costs two queries that `runs list` never needs. Without it, a
                # PostgreSQL copy's doctor advised resuming the original's run.
                place = _server_place(self.engine)
                other = None if place is None else _server_elsewhere(s, recorded, place)
            else:  # a SQLite reader: its file, as a writer's
                path = integrity.store_file(self.engine)
                exists = path is not None and path.is_file()
                other = _elsewhere(recorded, str(path)) if exists else None
        return None if other is None else str(other)

    def _other_store(self, s: Session, process: Any) -> Path | str | None:
        """The store a `process` record (a run's, a claim's holder) says it writes, while that
        is another store than this one and still there (`_elsewhere`); None otherwise."""
        recorded = process.get("store") if isinstance(process, dict) else None
        return self._elsewhere(s, recorded) if isinstance(recorded, str) else None

    def _written_elsewhere(self, s: Session, run_id: int) -> bool:
        """`writes_elsewhere` of run `run_id`, read in the transaction `s`."""
        return self._process_elsewhere(s, run_id)[1] is not None

    def _process_elsewhere(self, s: Session, run_id: int) -> tuple[Any, Path | str | None]:
        """Run `run_id`'s recorded process, and the other store it writes (`_other_store`),
        read in the transaction `s`."""
        system = s.scalar(select(Run.system).where(Run.id == run_id))
        process = system.get("process") if isinstance(system, dict) else None
        return process, self._other_store(s, process)

    def _copy_of(self, s: Session) -> Path | str | None:
        """The store this one is a copy of while that one is still there: the SQLite file of
        a byte copy (`cp`, a backup), the PostgreSQL database or schema of a TEMPLATE copy or
        a pg_dump restored (named by `_server_elsewhere`). Both carry one store id, so the
        files under `<out_dir>/<store id>/` are the original's, and deleting a run in the copy
        must not remove them. None for the store that owns them, which this records as their
        home when none is recorded yet or the recorded store is gone (the store was moved, or
        its original deleted). A SQLite home is recorded with its file's identity
        (`HOME_FILE`), by which a copy tells its original renamed from one gone
        (`_home_elsewhere`)."""
        here = self._here()
        if here is None:
            return None
        home = _meta(s, HOME)
        original = self._home_elsewhere(s, home)
        if original is not None:
            return original
        if home != here:
            _put_meta(s, HOME, here)
        if self._file is not None:
            identity = _identity(self._file.device, self._file.inode)
            if _meta(s, HOME_FILE) != identity:  # a new home, or one recorded before
                _put_meta(s, HOME_FILE, identity)
        return None

    def _next_id(self, s: Session) -> int | None:
        """A new run's id: above every id a run was given or a row names, on every backend.
        SQLite gives a new row the largest id + 1, so deleting the newest run would hand its
        id to the next: a different run answering to `dlperf runs show 7`, and to any note
        that names it. Deleting runs records the largest id deleted; new ids stay above it, and
        above every run the other tables name: a run row deleted by hand (sqlite3's foreign
        keys are off) leaves its metrics, tags and artifacts, which the next run took as its
        own. PostgreSQL's sequence never gives an id twice, but rows left by hand name ids too
        (`_pg_next_id`). None lets the database choose (another dialect)."""
        if self.engine.dialect.name == "postgresql":
            return _pg_next_id(s)
        if self.engine.dialect.name != "sqlite":
            return None
        # Metrics' and tags' max is one seek (an index leads with run_id; the typeof filter
        # keeps it one); artifacts are few. Only integers: a run id edited by hand into text
        # sorts above every number, and was a TypeError.
        columns = (Run.id, Metric.run_id, Tag.run_id, Artifact.run_id)
        named = [s.scalar(select(func.max(c)).where(func.typeof(c) == "integer")) for c in columns]
        floor = _meta(s, DELETED_MAX)
        top = max([int(floor or 0), *(i or 0 for i in named)])
        # One at SQLite's largest rowid (edited by hand) leaves no id above it: SQLite then
        # picks one (the largest run id + 1, or an unused one) rather than an OverflowError.
        return top + 1 if top < integrity.ROWID_MAX else None

    @contextmanager
    def recording(self, run_id: int) -> Iterator[Recording]:
        """Mark `run_id` finished (or as `Recording.fail` said) when the block ends, killed on
        Ctrl-C or SIGTERM (a KeyboardInterrupt, dlperf.stopping; raised again as one when the
        code it landed in wrapped it in another exception), failed on any other exception,
        which propagates. Every command that writes runs goes through here."""
        if run_id not in self._resumable:
            with Session(self.engine) as s:
                found = s.execute(
                    select(Run.kind, Run.config, Run.system).where(Run.id == run_id)
                ).first()
            if found is not None:
                self._resumable[run_id] = from_experiment(found.kind, found.config, found.system)
        with stopping.shielded():
            yield from self._recorded(run_id)

    def _recorded(self, run_id: int) -> Iterator[Recording]:
        """`recording`, inside a shielded block: a stop signal cuts only the block's body, so
        the run is always marked (one that lands while it is marked is raised once it is)."""
        record = Recording(run_id)
        try:
            with stopping.unshielded():
                yield record
        except StoreGone as e:
            # The run cannot be marked: left `running`, it reads as lost once this process
            # has ended, and resumes from its last checkpoint like a SIGKILLed run.
            if e.run_id is not None:
                raise
            raise self._gone(run_id, e) from None
        except BaseException as e:
            # Marked failed instead where the store refuses the mark (`_mark`): the stop or
            # the error that ended the run is still what the command ends with.
            if interrupted(e):
                self._mark(run_id, "killed", error=stopping.stopped_by())
                if isinstance(e, KeyboardInterrupt):
                    raise
                raise KeyboardInterrupt from e
            # Out of memory as it is marked (a tight `ulimit -v` that what ended the run hit
            # first): the run is left `running`, read as lost, and the command ends with what
            # ended the run, not with the mark's SystemError.
            # error_line: an exception whose own __str__ raises is still marked and raised,
            # and a full disk is stored as the one line tells it, not as Python's OSError
            with contextlib.suppress(MemoryError, SystemError):
                self._mark(run_id, "failed", error=_failure_line(e))
            raise
        refused = self._mark(run_id, record.status, record.summary, record.error)
        if refused is not None:
            raise refused

    def _mark(
        self,
        run_id: int,
        status: str,
        summary: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> UserError | None:
        """`finish_run` at the end of a recording. dlperf's own writes meet no trigger or
        constraint that refuses them, so one that does was added to the store by hand; left
        to propagate, it left the run `running` (read as lost) behind a traceback. The run is
        then marked failed, without its summary, saying why, and the one line returned (None
        when marked as asked); if the store refuses that too, the line is raised: the run
        could not be marked, and how to mend it."""
        try:
            self.finish_run(run_id, status, summary=summary, error=error)
            return None
        except (DatabaseError, UserError) as e:
            said = _refusal(e)
            if said is None:  # a lock, a full disk, damage, a server gone: as it was
                raise
        path = integrity.store_file(self.engine)
        url = self.engine.url.render_as_string()
        name = integrity.shown(path if path is not None else masked_url(url))
        why = f"the run store refused to mark it {status} ({said})"
        try:
            self.finish_run(run_id, "failed", error=why if error is None else f"{error}; {why}")
        except (DatabaseError, UserError) as e:
            if _refusal(e) is None:
                raise
            ended = "" if error is None else f" ({error})"
            raise UserError(
                f"run {run_id} could not be marked {status}{ended}: run store {name} refused "
                f"every write that ends it ({said}); it reads as lost",
                f"drop the trigger or constraint added to its runs table by hand, then "
                f"`dlperf run --resume {run_id}` continues it from its last checkpoint",
            ) from None
        return UserError(
            f"run {run_id} is marked failed: run store {name} refused to mark it {status} ({said})",
            "drop the trigger or constraint added to its runs table by hand",
        )

    def _gone(self, run_id: int, e: StoreGone) -> StoreGone:
        """The one line for a store gone while `run_id` was recording: how to resume it, and
        for a SQLite file, where everything it held was saved."""
        resumable = self._resumable.get(run_id, False)
        resume = f"dlperf run --resume {run_id}"
        if self._file is None:
            again = (
                f"continue it with `{resume}`"
                if resumable
                else "run it again (only a `dlperf run` experiment resumes)"
            )
            return StoreGone(
                f"{e.message} while run {run_id} was recording",
                f"run {run_id} reads as lost now; once the store is back, {again}",
                run_id,
            )
        linked, now = self._file.whereabouts()
        if linked and self._checkpointed_there():
            return self._moved(run_id, e, now)
        saved = self._rescue(run_id)
        if saved is None:
            said = e.message
            if not os.path.isabs(self.engine.url.database or "") and unnamed_cwd() is not None:
                # ./dlperf.db, the default: the store went with the directory it was named in
                said += " with the working directory that held it"
            return StoreGone(
                f"{said} while run {run_id} was recording; nothing was saved", None, run_id
            )
        back = f"move it back to {integrity.shown(self._file.path)} to keep it"
        if not self._file.path.parent.is_dir():  # its folder deleted too: "move it back" failed
            back = f"make the folder {integrity.shown(self._file.path.parent)} again, then {back}"
        return StoreGone(
            f"{e.message} while run {run_id} was recording; everything it held, run "
            f"{run_id}'s metrics up to now included, is saved in {saved}",
            back + (f", then `{resume}`" if resumable else ""),
            run_id,
        )

    def _checkpointed_there(self) -> bool:
        """Move the store's WAL into its file, through the connection kept to it: a file
        moved without its -wal (mv x.db elsewhere/) then holds every write, the one that met
        the move included. False where it could not all be moved (a reader of another process
        holds part of it): a rescue copy is made instead, as of a deleted store."""
        assert self._keeper is not None
        with contextlib.suppress(sqlite3.Error):
            found = self._keeper.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            busy, logged, moved = found
            return not busy and logged == moved
        return False

    def _moved(self, run_id: int, e: StoreGone, now: Path | None) -> StoreGone:
        """The one line for a store moved (or its folder renamed) while `run_id` recorded: no
        rescue copy (a second store with the same id), and no "move it back" to a folder
        that may be gone, but where it is and how to go on from there."""
        assert self._file is not None
        held = (
            f"{e.message} while run {run_id} was recording; it holds everything written to it "
            "before"
        )
        there = integrity.shown(now) if now is not None else "ITS_NEW_PATH"
        if now is not None:
            self._rebase_checkpoints(run_id, now)
        go_on = (
            f"continue it there with `dlperf --db {there} run --resume {run_id}`"
            if self._resumable.get(run_id, False)
            else f"run it again with --db {there} (store={there} to dlperf.track)"
        )
        if now is None:
            go_on = f"it is no longer at {integrity.shown(self._file.path)}: find it, then {go_on}"
        return StoreGone(held, f"run {run_id} reads as lost; {go_on}", run_id)

    def _rebase_checkpoints(self, run_id: int, now: Path) -> None:
        """Point the run's checkpoint rows that lay under the store's folder, and moved with
        it, at where they are now: stored absolute, the old path made the `--resume` that
        `_moved` offers fail ("checkpoint ... is missing") with the file whole beside the
        store. Written through the connection kept to the file, then checkpointed into it."""
        assert self._file is not None and self._keeper is not None
        keeper, old = self._keeper, self._file.path.parent
        with contextlib.suppress(sqlite3.Error):
            rows = keeper.execute(
                "SELECT id, path FROM artifacts WHERE run_id = ? AND kind = 'checkpoint'",
                (run_id,),
            ).fetchall()
            for row_id, stored in rows:
                if not Path(stored).is_relative_to(old) or os.path.lexists(stored):
                    continue
                moved = now.parent / Path(stored).relative_to(old)
                if moved.is_file():
                    keeper.execute(
                        "UPDATE artifacts SET path = ? WHERE id = ?", (str(moved), row_id)
                    )
            keeper.commit()
            keeper.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _rescue(self, run_id: int) -> Path | None:
        """Copy the deleted store, through the connection kept to it, beside the run's last
        checkpoint (else beside where the store was, else here); None if no place takes it."""
        assert self._file is not None and self._keeper is not None
        keeper = self._keeper
        found = keeper.execute(
            "SELECT path FROM artifacts WHERE run_id = ? AND kind = 'checkpoint' "
            "ORDER BY id DESC LIMIT 1",
            (run_id,),
        ).fetchone()
        places = [Path(found[0]).parent] if found else []
        places.append(self._file.path.parent)
        with contextlib.suppress(OSError):  # the working directory deleted: no "here"
            places.append(Path.cwd())
        name = f"{self._file.path.stem}.rescued-run{run_id}{self._file.path.suffix or '.db'}"
        for place in places:
            target = place / name
            if not place.is_dir() or target.exists():
                continue
            try:
                copy = sqlite3.connect(target)
                try:
                    keeper.backup(copy)
                finally:
                    copy.close()
            except (OSError, sqlite3.Error):
                for leftover in (target, target.with_name(target.name + "-journal")):
                    leftover.unlink(missing_ok=True)
                continue
            return target
        return None

    @contextmanager
    def new_run(
        self,
        name: str,
        kind: str,
        config: dict[str, Any],
        config_hash: str | None = None,
        system: dict[str, Any] | None = None,
        study_id: int | None = None,
    ) -> Iterator[Recording]:
        """create_run, then record it as `recording` does: a stop signal that lands between
        the two waits, so a run made is always marked."""
        with stopping.shielded():
            run_id = self.create_run(name, kind, config, config_hash, system, study_id)
            yield from self._recorded(run_id)

    def log_metrics(
        self, run_id: int, rows: Iterable[tuple[str, int, float] | tuple[str, int, float, float]]
    ) -> None:
        """Insert a batch of (key, step, value[, wall_time]) in one statement; a row without
        its own wall time gets the time of this call."""
        now = time.time()
        batch = [
            {
                "run_id": run_id,
                "key": row[0],
                "step": int(row[1]),
                # + 0.0: -0.0 as 0.0, as SQLite keeps it, so PostgreSQL reads back the same
                "value": float(row[2]) + 0.0,
                "wall_time": float(row[3]) if len(row) > 3 else now,
            }
            for row in rows
        ]
        for key in dict.fromkeys(str(row["key"]) for row in batch):
            _fits(Metric.__table__.c.key, key, f"metric key {_shown(key)}", "give a shorter key")
            printable_key(key, f"metric key {_shown(key)}")  # no --key could name it
        if batch:
            with self._writing() as s:
                s.execute(Metric.__table__.insert(), batch)

    def add_artifact(self, run_id: int, kind: str, path: str | Path) -> None:
        with self._writing() as s:
            s.add(Artifact(run_id=run_id, kind=kind, path=str(path)))

    def update_run(self, run_id: int, **fields: Any) -> None:
        with self._writing() as s:
            s.execute(update(Run).where(Run.id == run_id).values(**fields))

    def take_over(self, run_id: int) -> None:
        """Make this process the one writer of the stopped run `run_id` (a resume): `running`
        again, owned by this process. Refused (UserError, see `writer_refusal`) while another
        process writes it, and when another process takes it over first: the update applies
        only to the run as it was read (owner, status, end), so of two processes that read it
        at once the database lets one through.

        The mark of a `runs delete --force` (`query.DELETING_TAG`) goes with the take-over:
        its delete is gone (SIGKILLed while it waited) or cannot be told from here, and the
        resumed run is no run being deleted. While that delete lives the run is its to delete
        (it does so once the run's process has marked it): refused."""
        with Session(self.engine) as s:
            run = _stored_run(s, run_id)
            owner, status, ended = run.owner, run.status, run.ended
            record = _record(run)
            mark = s.scalar(select(Tag.value).where(Tag.run_id == run_id, Tag.key == DELETING_TAG))
        refusal = writer_refusal(record, self.writes_elsewhere(record))
        if refusal is not None:
            raise refusal
        if (pid := live_deleter(mark)) is not None:
            # a stopped delete (SIGSTOP, Ctrl-Z) acts on the kill only once it is continued
            then = f", then kill -CONT {pid}: it is stopped" if stopped(pid) else ""
            raise UserError(
                f"run {run_id} is being deleted by `dlperf runs delete` (pid {pid}); not resumed",
                f"let that delete end, or stop it (kill {pid}{then}) to keep the run",
            )
        me = this_process()
        system = (
            None if record.system is None else {**record.system, "process": self._writer_record(me)}
        )
        with self._writing() as s:
            taken = s.connection().execute(
                update(Run)
                .where(
                    Run.id == run_id,
                    _same(Run.owner, owner),
                    Run.status == status,
                    _same(Run.ended, ended),
                )
                .values(status="running", ended=None, error=None, system=system, owner=_owner(me))
            )
            if taken.rowcount != 1:
                raise UserError(
                    f"run {run_id} was taken over by another process just now",
                    f"see dlperf runs show {run_id}",
                )
            if mark is not None:  # only a mark as read: no live delete marks a stopped run
                s.execute(
                    delete(Tag).where(
                        Tag.run_id == run_id, Tag.key == DELETING_TAG, Tag.value == mark
                    )
                )

    def claim(self, study_id: int, key: str) -> dict[str, Any] | None:
        """Claim the point `key` of study `study_id` (a sweep's) for this process: None when it
        is this process's now, else the process that holds it. A claim whose process is gone
        is taken over (compare-and-set on its owner, as `take_over`). A claim is kept after
        its point ends: the caller checks that the point did not finish meanwhile."""
        me = _owner(self._writer_record(this_process()))
        where = (Claim.study_id == study_id, Claim.key == key)
        with self._writing() as s:
            try:
                with s.begin_nested():  # of two processes inserting at once, one fails here
                    s.add(Claim(study_id=study_id, key=key, owner=me))
            except IntegrityError:
                pass
            held = s.scalars(select(Claim.owner).where(*where)).one()
            if held != me and self._claim_free(s, json.loads(held)):
                s.execute(update(Claim).where(*where, Claim.owner == held).values(owner=me))
                held = s.scalars(select(Claim.owner).where(*where)).one()
        return None if held == me else json.loads(held)

    def _claim_free(self, s: Session, holder: dict[str, Any]) -> bool:
        """Whether a point's claim by `holder` (a process, with the store it writes) is free to
        take: its process is gone, or it writes another store, of which this one is a copy
        (copied while that sweep ran): it never trains the point here, and a copy's sweep
        skipped the point for good, "pid N runs it"."""
        return process_alive(holder) is False or self._other_store(s, holder) is not None

    def set_tags(self, run_id: int, tags: dict[str, str | None]) -> dict[str, str]:
        """Set a run's tags (a value of None or "" removes the tag); returns all its tags."""
        for key, value in tags.items():
            _fits(Tag.__table__.c.key, key, f"tag key {_shown(key)}", "give a shorter key")
            printable_key(key, f"tag key {_shown(key)}")  # no --where tag.KEY could name it
            if value:
                what = f"tag {_shown(key)}: its value {_shown(value)}"
                _fits(Tag.__table__.c.value, value, what, "give printable text")
            if value and len(value) > TAG_VALUE_MAX:
                raise UserError(
                    f"tag {key}: its value is {len(value)} characters long; the run store "
                    f"keeps at most {TAG_VALUE_MAX}",
                    "give a shorter value (a file's path rather than its text)",
                )
        removed = [k for k, v in tags.items() if not v]
        kept = [{"run_id": run_id, "key": k, "value": v} for k, v in tags.items() if v]
        with self._writing() as s:
            _stored_run(s, run_id, lock=True)
            if removed:
                s.execute(delete(Tag).where(Tag.run_id == run_id, Tag.key.in_(removed)))
            if kept:
                # An upsert, not delete-then-insert: under PostgreSQL's READ COMMITTED two
                # processes tagging one key at once both deleted nothing, and the second
                # insert failed on tags' primary key (its other tags lost). The last wins.
                upsert = _insert_for(self.engine)(Tag).values(kept)
                s.execute(
                    upsert.on_conflict_do_update(
                        index_elements=[Tag.run_id, Tag.key],
                        set_={"value": upsert.excluded.value},
                    )
                )
            return _tags_of(s, [run_id]).get(run_id, {})

    def delete_runs(self, run_ids: Sequence[int], force: bool = False) -> Deleted:
        """Delete runs with their metrics, tags and artifact rows (one transaction; an unknown
        id, or a run whose owner lives, deletes nothing), then the files they recorded. With
        `force`, a run whose owner runs on another host (who cannot be stopped from here) goes
        too, and so does a copy's row of a run whose owner writes another store
        (`writes_elsewhere`); one whose owner lives on this host and writes this store never
        does: stop it first (`query.stop`). Without `force`, a copy's row of a run whose owner
        lives and writes another store is refused as that store's run (`copy_delete_refusal`).

        Only what a run owns goes: a recorded file under this store's artifact directory
        (`<out_dir>/<store id>/`, or a copy's own, `_copy_dir`) that no other run records, and
        the run's own directory `run-<id>/` there, recorded file or not (a checkpoint.part.pt
        left by a first checkpoint write cut short; found by the run's run.out_dir, a relative
        one from here and from the store's folder). Directories left empty are removed up to
        the store's directory. A recorded file elsewhere (the user's device catalog, a detector
        saved to a path of the user's choice), shared with another run, or another run's
        training data (its data.root: distill's pseudo-labelled npz; theirs from then on,
        recorded, to go with the last of them) is kept, and so is
        every file of a store that is a byte copy of another still there (`_copy_of`) outside
        the copy's own directory. A file not found where it was recorded is looked for beside
        the store (`_beside`), else named as left.

        The files to remove are recorded (meta `deleting_run_<id>`) in the transaction that
        deletes the rows, and the record goes once they are gone: a delete killed in between
        (SIGKILL, an OOM kill, a power cut) is finished by the next `runs delete` of that run,
        or of any run. A stop signal once the rows are committed waits for the files (the
        caller's `stopping.shielded()` block, if any, for the report too)."""
        ids = list(dict.fromkeys(run_ids))
        with self._writing() as s:
            # Locked as they are found, until the end (PostgreSQL; SQLite's write lock is
            # already held): a resume taking a run over meanwhile waits, then finds it gone,
            # and of two deletes of one run the second waits, then finds no run (found by an
            # unlocked read first, both said "deleted run N"). In id order: two deletes of
            # overlapping runs lock them in one order, and never wait on each other.
            query = select(Run.id, Run.owner, Run.config)
            query = query.where(Run.id.in_([i for i in ids if _storable(s, i)]))
            owners = s.execute(query.order_by(Run.id).with_for_update()).all()
            found = {i for i, _, _ in owners}
            me = _owner(this_process())  # a process may delete the runs it writes itself
            # Every run whose files a delete cut short left (not one another delete is
            # still removing: that run is gone to this one).
            records = _deleting(s)
            pending = {i: p for i, p in records.items() if p.cut_short(me, force)}
            elsewhere = [i for i in ids if i not in found and i in records and i not in pending
                         and records[i].alive(me) is None]  # fmt: skip
            if elsewhere:
                raise UserError(
                    f"run {', '.join(map(str, elsewhere))}: its delete was begun on another "
                    "host, which cannot be checked from here; nothing deleted",
                    "once that delete is no longer running, pass --force to finish it",
                )
            missing = [str(i) for i in ids if i not in found and i not in pending]
            if missing:
                raise no_such_run(s.get_bind(), ", ".join(missing), "; nothing deleted")
            # An owner that lives, or (unless `force`) that runs on another host, where that
            # cannot be told, may still write its run.
            running = {i: process_alive(json.loads(o)) for i, o, _ in owners if o and o != me}
            if force:  # a copy's row of a run another store's process writes (`query.stop`)
                running = {i: a for i, a in running.items() if not self._written_elsewhere(s, i)}
            live = [i for i, a in running.items() if a is True or (a is None and not force)]
            # A copy's row of a run whose process writes the original (not `force`: those
            # went above) is that store's, not one to stop: said as `query.to_delete` says it.
            writers = {i: self._process_elsewhere(s, i) for i in live}
            copies = {i: pw for i, pw in writers.items() if pw[1] is not None}
            here = [i for i in live if i not in copies]
            if here:
                # --force helps only where the owner is on another host (None), not given yet.
                unknown = not force and any(running[i] is None for i in here)
                raise UserError(
                    f"run {', '.join(map(str, here))} is running; nothing deleted",
                    "stop it first, or pass --force" if unknown else "stop it first",
                )
            if copies:
                raise copy_delete_refusal([(i, p, str(w)) for i, (p, w) in copies.items()])
            gone = [i for i in ids if i in found]
            recorded = select(Artifact.run_id, Artifact.path, Artifact.kind)
            recorded = recorded.where(Artifact.run_id.in_(gone)).order_by(Artifact.id)
            rows = s.execute(recorded).all()
            owned, kinds = [(r.run_id, r.path) for r in rows], {r.path: r.kind for r in rows}
            original = self._copy_of(s)
            own = self._copy_dir(s, make=False)
            mine = {own} if own is not None else set()
            if original is None:
                mine.add(self.id)
            stores = self._owners(s, original) if original is not None else {}
            shared = set(
                s.scalars(
                    select(Artifact.path).where(
                        Artifact.path.in_({p for _, p in owned}), Artifact.run_id.not_in(gone)
                    )
                )
            )
            users = _users(s, {p: i for i, p in owned}, gone)
            notes = [
                f"{_runs_that(them, 'starts')} from run {i}'s weights (model.weights = {spec}), "
                "which are deleted now"
                for (i, spec), them in sorted(users.weights.items())
            ]
            plans: dict[int, _Plan] = {i: _Plan([], [], me) for i in gone}
            for run_id, path in owned:
                plan = plans[run_id]
                if path in shared:
                    plan.kept.append((path, "another run records it too"))
                elif path in users.data:
                    who = _runs_that(users.data[path], "trains")
                    plan.kept.append((path, f"{who} on it (its data.root)"))
                elif original is not None and not any(p.name in mine for p in Path(path).parents):
                    there = self._found(Path(path))
                    if there is not None:  # one deleted already (in the original) is not kept
                        whose = self._whose(Path(path), stores)
                        why = f"this store is {whose}, whose run it is too"
                        plan.kept.append((str(there), why))
                else:
                    self._plan_file(run_id, Path(path), mine, plan)
            # A file kept for the runs that train on it is theirs now: it goes with the last
            # of them, where no run left would record it.
            s.add_all(
                Artifact(run_id=i, kind=kinds[path], path=path)
                for path, them in users.data.items()
                if path not in shared
                for i in them
            )
            for run_id, _, config in owners:
                self._plan_run_dir(run_id, config, mine, plans[run_id])
            self._plan_studies(s, gone, {i: c for i, _, c in owners}, mine, plans)
            for table in (Tag, Metric, Artifact):
                s.execute(delete(table).where(table.run_id.in_(gone)))
            s.execute(delete(Run).where(Run.id.in_(gone)))
            for run_id, plan in plans.items():  # gone with the rows, or not at all
                _put_meta(s, f"{DELETING}{run_id}", json.dumps(plan.recorded()))
            if self.engine.dialect.name == "sqlite" and gone:
                floor = _meta(s, DELETED_MAX)
                _put_meta(s, DELETED_MAX, str(max([*gone, int(floor or 0)])))
            plans = {**pending, **plans}
        # The rows are gone: a stop signal now waits for the files, so that what is on disk
        # agrees with the store, and is raised at the end (at the caller's block's end when
        # it reports the deletion first).
        with stopping.shielded():
            removed: list[str] = []
            kept: list[tuple[str, str]] = []
            for run_id, plan in plans.items():
                kept.extend(plan.kept)
                for target, root in plan.remove:
                    _take(run_id, Path(target), Path(root), mine, removed, kept)
            with self._writing() as s:
                keys = [f"{DELETING}{i}" for i in plans]
                s.execute(delete(Meta).where(Meta.key.in_(keys)))
        return Deleted(ids, removed, kept, notes)

    def deleting(self, force: bool = False) -> set[int]:
        """The runs whose delete was cut short after their rows went (`delete_runs`): a new
        `runs delete` of them finishes removing their files. Not one another process is still
        deleting (it is no run to this one), nor, without `force`, one begun on another host."""
        me = _owner(this_process())
        with Session(self.engine) as s:
            return {i for i, plan in _deleting(s).items() if plan.cut_short(me, force)}

    def _plan_studies(
        self,
        s: Session,
        gone: Sequence[int],
        configs: dict[int, Any],
        mine: set[str],
        plans: dict[int, _Plan],
    ) -> None:
        """The directories `study-<id>/` of the studies a delete of the runs `gone` leaves
        without a run (`_emptied`), each with the plan of its last run, found as a run's own
        directory is: their figures (sweep, distill) and distill's npz, recorded or not; not
        while a file in one is kept (a run outside the study trains on the npz). One kept so
        before goes with that file, once it is removed (`_study_over`)."""
        keeping = [Path(p) for plan in plans.values() for p, _ in plan.kept]
        for study_id, run_id in _emptied(s, gone).items():
            plan, planned = plans[run_id], len(plans[run_id].remove)
            self._plan_run_dir(run_id, configs[run_id], mine, plan, f"study-{study_id}")
            plan.remove[planned:] = [
                (target, root) for target, root in plan.remove[planned:]
                if not any(k.is_relative_to(target) for k in keeping)
            ]  # fmt: skip
        for plan in plans.values():
            for n, (target, root) in enumerate(plan.remove):
                folder = Path(target).parent
                if _study_dir(folder, Path(root)) and _study_over(s, folder, gone, keeping):
                    plan.remove[n] = (str(folder), root)

    def _plan_run_dir(
        self, run_id: int, config: Any, mine: set[str], plan: _Plan, directory: str = ""
    ) -> None:
        """The run's own directory `<out_dir>/<name>/run-<id>/` (or `directory` there: the
        `study-<id>/` of a study left without runs, `_emptied`) for each of this store's
        directory names (`mine`), found from the run's run.out_dir (a relative one from here
        and from the store's folder, and beside the store when moved), whether or not the
        run recorded a file in it (a first checkpoint write cut short leaves only its .part)."""
        run = config.get("run") if isinstance(config, dict) else None
        out_dir = run.get("out_dir") if isinstance(run, dict) else None
        if not isinstance(out_dir, str) or not out_dir:
            return
        bases = [Path(out_dir)]
        if not bases[0].is_absolute():
            folder = self._file.path.parent if self._file is not None else None
            bases = [*([folder / out_dir] if folder is not None else [])]
            with contextlib.suppress(OSError):  # a working directory deleted under us
                bases.append(Path.cwd() / out_dir)
        planned = {t for t, _ in plan.remove}
        for base in bases:
            for name in sorted(mine):
                try:
                    root = (base / name).resolve()
                except (OSError, RuntimeError):  # a loop of links: nothing of ours there
                    continue
                if not root.is_dir():  # moved whole with the store (`_beside`), or none
                    moved = self._beside(root)
                    if moved is None:
                        continue
                    root = moved
                target = root / (directory or f"run-{run_id}")
                if str(target) in planned or not target.is_dir() or target.is_symlink():
                    continue
                planned.add(str(target))
                plan.remove.append((str(target), str(root)))

    def _plan_file(self, run_id: int, path: Path, mine: set[str], plan: _Plan) -> None:
        """What removing the recorded file `path` of run `run_id` takes (into `plan`): the
        file, or its run's own directory `run-<id>/` that holds it, where it is or beside the
        store; else why it is kept. Nothing is removed here (`_take` does)."""
        root = next((p for p in path.parents if p.name in mine), None)
        if not path.is_absolute() or ".." in path.parts or root is None:
            why = f"not under this store's artifact directory .../{self.id}/"
            plan.kept.append((str(path), why))
            return
        target = root / f"run-{run_id}" if path.is_relative_to(root / f"run-{run_id}") else path
        planned = {t for t, _ in plan.remove}
        if str(target) in planned:
            return  # with the run's directory, already
        if not os.path.lexists(target):
            moved = self._beside(root) or root
            there = moved / target.relative_to(root)
            if str(there) in planned:
                return
            if not os.path.lexists(there):
                plan.kept.append((str(path), LEFT))
                return
            root, target = moved, there
        if target.is_dir() and not target.is_symlink() and target != root / f"run-{run_id}":
            plan.kept.append((str(path), "a directory the run does not own"))
            return
        plan.remove.append((str(target), str(root)))

    def _owners(self, s: Session, original: Path | str) -> dict[str, Path | str]:
        """The stores whose runs' files a copy keeps, by the directory each writes them in:
        the original's `<store id>`, and the directory of the copy this store was copied from
        (`_copy_dir`) while that copy is still there."""
        owners = {self.id: original}
        name = _meta(s, COPY_DIR)
        copied = self._elsewhere(s, _meta(s, COPY_FILE))
        if name is not None and copied is not None:
            owners[name] = copied
        return owners

    def _found(self, path: Path) -> Path | None:
        """Where a run's recorded file is: there, or beside the store in a folder moved or
        copied whole (`_beside`, from the artifact directory `<store id>[-<token>]` up)."""
        if os.path.lexists(path):
            return path
        ours = (p for p in path.parents if p.name == self.id or p.name.startswith(f"{self.id}-"))
        root = next(ours, None)
        moved = self._beside(root) if root is not None else None
        if root is None or moved is None:
            return None
        there = moved / path.relative_to(root)
        return there if os.path.lexists(there) else None

    def _whose(self, path: Path, owners: dict[str, Path | str]) -> str:
        """What this byte copy is to the store whose run's file `path` is: a copy of the store
        whose directory (`_owners`) holds it, else of the copy of the original that made
        that directory its own."""
        original = owners[self.id]
        for parent in path.parents:
            if parent.name in owners:
                return f"a copy of {owners[parent.name]}"
            if parent.name.startswith(f"{self.id}-"):  # `_copy_dir`'s, of a copy before ours
                return f"a copy of another copy of {original}"
        return f"a copy of {original}"

    def _beside(self, root: Path) -> Path | None:
        """Where a folder moved whole, the store's file and its runs' out_dir in it, put the
        artifact directory `root` (recorded as absolute paths to the old place): the same
        trailing path beside the store's file, when that is a directory. A reader's file
        too (`_file` is a writer's), so that show, export and trace find what delete does."""
        path = self._file.path if self._file is not None else integrity.store_file(self.engine)
        if path is None:  # a server's store, one in memory: no folder to move
            return None
        folder = path.parent
        for start in range(len(root.parts) - 1, 0, -1):
            candidate = folder.joinpath(*root.parts[start:])
            if candidate.is_dir():
                return candidate
        return None

    def finish_run(
        self,
        run_id: int,
        status: str = "finished",
        summary: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        assert status in STATUSES, status
        if error is not None:  # an exception's text, whatever it holds: kept, escaped
            error = _keepable(error)
        fields: dict[str, Any] = {"status": status, "ended": _now(), "error": error, "owner": None}
        if summary is not None:
            fields["summary"] = finite_json(summary)
        self.update_run(run_id, **fields)

    # --- reading -----------------------------------------------------------------------

    def get_run(self, run_id: int) -> RunRecord:
        with Session(self.engine) as s:
            run = _record(_stored_run(s, run_id), _tags_of(s, [run_id]).get(run_id))
        return self._data_now(run)

    def _data_now(self, run: RunRecord) -> RunRecord:
        """`run` with its data.root where that file is now (`_now_at`): a file of this store's
        (distill's pseudo-labelled npz) in a project folder moved whole is read beside the
        store, as the run's recorded files are (`artifacts`)."""
        data = run.config.get("data")
        if not isinstance(data, dict) or not isinstance(root := data.get("root"), str):
            return run
        if (now := self._now_at(root)) == root:
            return run
        return replace(run, config={**run.config, "data": {**data, "root": now}})

    def list_runs(
        self, kind: str | None = None, study_id: int | None = None, limit: int | None = None
    ) -> list[RunRecord]:
        query = select(Run).order_by(Run.id.desc())
        if kind is not None:  # '' is a kind no run has, not every kind
            query = query.where(Run.kind == kind)
        if study_id is not None:
            query = query.where(Run.study_id == study_id)
        if limit:
            query = query.limit(limit)
        with Session(self.engine) as s:
            if study_id is not None and not _storable(s, study_id):
                return []  # no study has that id
            # SQLite: the ids first, so that a garbled column is blamed on a run of this
            # listing, in its order (SQLAlchemy's reading of it names no run). A server's
            # json type holds JSON, and a run's column that is no object is named by its run.
            ids: list[int] = []
            if self.engine.name == "sqlite":
                ids = list(s.scalars(query.with_only_columns(Run.id)))
            with integrity.reading(*ids), _times_read(s):
                runs = list(s.scalars(query))
            tags = _tags_of(s, [r.id for r in runs])
            return [self._data_now(_record(r, tags.get(r.id))) for r in runs]

    def get_study(self, study_id: int) -> dict[str, Any]:
        """A study by the id a user gave: any integer, however large, that names no stored
        study is "no study N", not an error of the database's integer type."""
        with Session(self.engine) as s:
            study = s.get(Study, study_id) if _storable(s, study_id) else None
            if study is None:
                raise no_such_study(s.get_bind(), study_id)
            return {
                "id": study.id,
                "name": study.name,
                "kind": study.kind,
                "created": study.created.isoformat(timespec="seconds"),
            }

    def find_study(self, name: str, kind: str) -> int | None:
        """The id of the newest study called `name` of `kind`, if any."""
        query = (
            select(Study.id)
            .where(Study.name == name, Study.kind == kind)
            .order_by(Study.id.desc())
            .limit(1)
        )
        with Session(self.engine) as s:
            return s.scalar(query)

    def metrics(
        self, run_id: int, key: str, limit: int | None = None, last: bool = False
    ) -> list[tuple[int, float]]:
        """(step, value) pairs of one metric, in step order; `limit`: only the first that
        many (`last`: the last), read alone (`runs show`'s table of a run of many steps)."""
        order = [Metric.step.desc(), Metric.id.desc()] if last else [Metric.step, Metric.id]
        query = (
            select(Metric.step, Metric.value)
            .where(Metric.run_id == run_id, Metric.key == key)
            .order_by(*order)
            .limit(limit)
        )
        with Session(self.engine) as s:
            found = s.execute(query).all()[:: -1 if last else 1]
        try:
            return [
                (operator.index(step), math.nan if value is None else float(value))
                for step, value in found
            ]
        except (TypeError, ValueError):
            garbled = garbled_metrics(self.engine, run_id, found)
            if garbled is None:
                raise
            raise garbled from None

    def metric_keys(self, run_id: int) -> list[str]:
        """The run's metric keys, sorted by code point on every backend (`_tags_of`)."""
        query = select(Metric.key).where(Metric.run_id == run_id).distinct()
        with Session(self.engine) as s:
            return sorted(s.scalars(query))

    def last_step(self, run_id: int, key: str) -> int | None:
        query = select(func.max(Metric.step)).where(Metric.run_id == run_id, Metric.key == key)
        with Session(self.engine) as s:
            return s.scalar(query)

    def delete_metrics_after(self, run_id: int, keys_steps: Sequence[tuple[str, int]]) -> None:
        """Drop metrics logged after a checkpoint, so a resumed run does not repeat steps."""
        with self._writing() as s:
            for key_prefix, step in keys_steps:
                s.execute(
                    Metric.__table__.delete().where(
                        Metric.run_id == run_id,
                        Metric.key.startswith(key_prefix),
                        Metric.step > step,
                    )
                )

    def artifacts(self, run_id: int) -> list[dict[str, Any]]:
        """The files run `run_id` recorded, in order, each where `runs delete` finds it: where
        it was recorded, else beside the store in a project folder moved whole (`_found`), so
        that show, export, trace and resume agree with delete; else as recorded."""
        query = select(Artifact).where(Artifact.run_id == run_id).order_by(Artifact.id)
        with Session(self.engine) as s:
            return [{"kind": a.kind, "path": self._now_at(a.path)} for a in s.scalars(query)]

    def _now_at(self, recorded: str) -> str:
        """Where the file recorded at `recorded` is now (`_found`), or `recorded`."""
        if not recorded or os.path.lexists(recorded):  # "" is no file, not "." found
            return recorded
        found = self._found(Path(recorded))
        return str(found) if found is not None else recorded


def _refusal(e: BaseException) -> str | None:
    """What the store said, where `e` (or what it was raised from) is a write refused by a
    trigger (SQLite's RAISE, PostgreSQL's RAISE EXCEPTION) or a constraint; None for any
    other failure."""
    seen: BaseException | None = e
    while seen is not None:
        orig = seen.orig if isinstance(seen, DatabaseError) else seen
        state = getattr(orig, "sqlstate", None) or ""
        if (
            isinstance(orig, sqlite3.IntegrityError)
            or state == integrity.PG_RAISED
            or state[:2] == PG_CONSTRAINT_CLASS
        ):
            return str(orig).strip().splitlines()[0]
        seen = seen.__cause__
    return None


def garbled_metrics(
    engine: Engine, run_id: int, rows: Sequence[Row[*tuple[Any, ...]]]
) -> UserError | None:
    """The one line for run `run_id`'s metric `rows` (as read, their columns named as the
    table's) whose step, value or wall time a reader could not take: set by hand to another
    type, which SQLite keeps whatever the column's type. None where no such value is found,
    or the store is not a SQLite file (PostgreSQL's typed columns keep none)."""
    path = integrity.store_file(engine)
    if path is None:
        return None
    columns = Metric.__table__.c
    for row in rows:
        for name, value in row._mapping.items():
            reason = integrity.unreadable(columns[name], value)
            if reason is not None:
                shown = _shown(value) if isinstance(value, str) else repr(value)
                return integrity.garbled_json(
                    path, run_id, "metrics", f"hold a {name} that {reason} ({shown})", "such rows"
                )
    return None


def _of_target(e: OSError, staged: str, target: str) -> OSError:
    """`e`, met writing the hidden `staged` copy of a repair, as the user's `target`: the line
    names the file they asked for, which is the one they must make room for."""
    if e.filename is None or os.fspath(e.filename) != staged:
        return e
    return OSError(e.errno, e.strerror, target)


def _checkpointed(engine: Engine, target: str) -> None:
    """Move the repair's copy from its -wal into its file (a failure of it raised as any
    write's, for `repair` to tell): the close's own checkpoint fails without a word, and on a
    disk with room for the -wal but not for the file it is copied into, the file renamed to
    `target` held part of the copy (the rest left in a hidden -wal), and repair said it wrote
    every run."""
    with engine.connect() as conn:
        busy, logged, moved = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
    if busy or logged != moved:  # no other connection is open to it: none should block it
        raise OSError(errno.EIO, "its copy could not be checkpointed", target)


def _target_exists(target: str) -> UserError:
    return UserError(
        f"{integrity.shown(target)} exists", "repair writes a new store: give a new file name"
    )


def _staging(target: str) -> str:
    """The hidden name a repair into `target` writes its copy under: of this repair alone.
    Repairs into `target` killed before they ended (SIGKILL, a power cut) left theirs: those
    of a process no longer running are removed (and the one name all repairs shared before);
    a live repair's, on this host or another sharing the folder, is left to it."""
    base = os.path.join(os.path.dirname(target), REPAIRING.format(os.path.basename(target)))
    folder, prefix = os.path.dirname(base) or ".", os.path.basename(base)
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            # A kill as the copy's schema was made left its -journal: it was kept for good.
            for suffix in SIDE_FILES:
                rest = rest.removesuffix(suffix)
            mine = re.fullmatch(r"-(\d+)-[0-9a-f]+", rest)
            if rest and (mine is None or alive(int(mine[1]))):
                continue
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
    return f"{base}-{os.getpid()}-{secrets.token_hex(4)}"


def _claim(staged: str, target: str) -> None:
    """Put the whole copy `staged` at `target`, unless a file is there by now: another repair
    into `target` that ended first. A hard link, which never replaces a file, then the staged
    name removed; `os.replace` would have put this copy over the other's."""
    try:
        os.link(staged, target)
    except FileExistsError:
        raise _target_exists(target) from None
    except OSError as e:
        # A file system without hard links (FAT, some FUSE and network mounts): renamed,
        # checked just before.
        if e.errno not in (errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise _of_target(e, staged, target) from None
        if os.path.lexists(target):
            raise _target_exists(target) from None
        os.rename(staged, target)
        return
    os.unlink(staged)


def repair(db: str | None, out: str) -> integrity.Repaired:
    """Copy what can still be read of the SQLite store `db` (a URL or path, as `--db` takes)
    into a new store file `out` (a path, checked as `--db`'s are); the damaged file is only
    read. The copy is written under a hidden temporary name of its own beside `out`
    (`_staging`) and put at `out` once whole, unless a file is there by then (`_claim`): a
    repair killed midway (SIGKILL, a power cut) leaves no file at `out` that opens as a store
    with fewer runs, or none, and of two repairs into one `out` the second to end says it
    exists."""
    url = _parsed(_url(db))
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        raise UserError(
            f"runs repair reads a SQLite store file, not {integrity.shown(masked_url(str(url)))}",
            "for PostgreSQL use its own tools: pg_dump, pg_amcheck",
        )
    # Checked as --db's is (a directory, `nope/../x.db` through a missing nope), and waited
    # for with the same busy timeout.
    source = _sqlite_checked(url, integrity.shown(masked_url(str(url))))
    busy_s = _busy_timeout_s(url)
    if not source.is_file():
        raise UserError(absent(str(source)))
    target = os.path.expanduser(out)
    if not target.strip() or "://" in target:
        raise UserError(
            f"runs repair writes a new SQLite store file, not {masked_url(target)!r}",
            "give its path, e.g. dlperf runs repair repaired.db",
        )
    if missing_slashes(target) is not None:  # `sqlite:x.db` wrote a file of that very name
        given = masked_slashless(target)
        raise UserError(
            f"runs repair writes a new SQLite store file, not the URL {given!r}",
            f"give its path, e.g. dlperf runs repair repaired.db, or ./{given} for a file "
            "of that name",
        )
    if not target.isascii():  # refused here, not as the hidden name it is staged under
        from dlperf.config.base import check_utf8_name  # pydantic's import: only here

        check_utf8_name("run store", target)
    # As --db's: not resolved first (which dropped "new.db/"'s slash and read file:new.db as
    # a file of that name), so the OS's own refusals stand.
    where = _store_path(target, integrity.shown(target), "dlperf runs repair {}")
    if os.path.lexists(target):  # a link too, dangling or not: it is not replaced
        raise _target_exists(target)
    staged = _staging(target)
    leftovers = [Path(staged + suffix) for suffix in ("", *SIDE_FILES)]
    new: RunStore | None = None
    try:  # making the new store fails too (a full disk): what it wrote goes, as for a copy
        try:
            new = RunStore.open(staged)
        except OSError as e:  # a full disk, ulimit -f: said of NEW, not of its hidden name
            raise _of_target(e, staged, target) from None
        try:
            done = integrity.copy_readable(source, new._writer, where, busy_s)
            if done.store_id is None:
                # The id the new store was made with, written now: a store with a version row
                # and no id lost it, and is refused (`migrations._lost_id`).
                with new._writer.begin() as conn:
                    conn.execute(Meta.__table__.insert(), {"key": STORE_ID, "value": new.id})
            _checkpointed(new.engine, target)
        except sqlite3.OperationalError as e:
            if not integrity.held(e):
                raise
            raise _locked(integrity.shown(source), busy_s, "to read it") from None
        except DatabaseError as e:  # the copy's commit or checkpoint: a full disk, ulimit -f
            no_room = _no_room(e, new.engine)
            if no_room is None:
                raise
            raise _of_target(no_room, staged, target) from None
        # Every connection closed: the WAL (now empty) is removed, so the one file renamed
        # holds the whole copy.
        dispose(new.engine)
        _claim(staged, target)
        return done
    except BaseException:
        if new is not None:
            dispose(new.engine)
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)
        raise
