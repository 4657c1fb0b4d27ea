"""Export stored runs to the tools people already browse runs in: MLflow and TensorBoard.

MLflow (the `mlflow` extra: mlflow-skinny, plus alembic for its SQL tracking stores): one
MLflow run per stored run, in one experiment. Params are the flattened config (dotted keys;
non-string values as JSON; an unset key (None) is left out, as MLflow has no null; values
longer than MLflow's limit are cut, and the whole run is always logged as the artifact
`dlperf/run.json`); metrics keep their wall times, all on the global step (see below);
numeric summary figures become `summary/<key>` metrics at step 0; tags hold the flattened
system info (`system.*`), the run's id, kind, status, store and config hash (`dlperf.*`) and
the git commit as MLflow's own `mlflow.source.git.commit`; the run's name, status (a `lost`
run, whose process died, as KILLED) and start and end times are MLflow's own; the run's
artifacts that still exist are logged under their kind.

TensorBoard (the `tensorboard` extra): one event directory per run, `OUT/run-ID-NAME`, with
one scalar series per metric key at its wall times, written with torch's `SummaryWriter`.
Exporting a run again replaces that directory's event files, once every run's new ones are
written (in `OUT/.dlperf-exporting`): an export that fails or is stopped partway leaves the
earlier one of every run whole. An event file's name ends in the id of the store its run is
from (`.dlperf-store-ID`): another store's run of the same id and name is refused there, not
exported over it.

Both put every metric on the global step: the per-epoch keys (val/*, epoch/*, phase/*),
stored at step = epoch, move to the epoch's last step, and an `epoch` series says which
epoch each step is in (dlperf.store.keys). The steps per epoch come from the run's summary,
or, for a run killed or lost before it wrote one, from its config and data as the engine
counts them; a run that tells neither (a scaling point, a tracked loop) keeps its stored steps.

Each exporter returns what it exported (run id -> MLflow run id or event directory) and
its warnings; nothing here prints.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import operator
import os
import re
import shutil
import socket
import sqlite3
import struct
import sys
import tempfile
import threading
import types
import unicodedata
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, unquote_plus, urlsplit

from sqlalchemy import URL, make_url, select
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session

from dlperf import stopping
from dlperf.config.base import LOCALE_FIX
from dlperf.errors import UserError, causes, note_left
from dlperf.formatting import clip, few
from dlperf.parsing import flatten, printable
from dlperf.paths import one_file, writing
from dlperf.store import RunStore, integrity, masked_url
from dlperf.store.ids import STORE_ID_FORM
from dlperf.store.keys import on_global_steps, per_epoch
from dlperf.store.query import tracked
from dlperf.store.record import RunRecord
from dlperf.store.runstore import DRIVER_PACKAGES, dispose, garbled_metrics, size_limited
from dlperf.store.schema import Metric, Run
from dlperf.store.urls import MASK, password_span, secret_option, unescaped_at

TARGETS = ("mlflow", "tensorboard")
EXTRAS = {"mlflow": "MLflow", "tensorboard": "TensorBoard"}
DEFAULT_EXPERIMENT = "dlperf"
# MLflow's limits, for versions that do not export them (mlflow.utils.validation).
MLFLOW_PARAM_CHARS, MLFLOW_TAG_CHARS = 500, 5000
# log_batch takes at most 100 params, 100 tags and 1000 metrics per call.
MLFLOW_BATCH = {"params": 100, "tags": 100, "metrics": 1000}
# MLflow's status of a stored run; a `lost` run (its process gone) ends as KILLED.
MLFLOW_STATUS = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED", "lost": "KILLED"}
# How long to wait for an MLflow server to accept a connection: MLflow's own client retries a
# refused one for about four minutes (7 retries, backoff factor 2) before it says anything.
CONNECT_TIMEOUT_S = 5.0
# MLflow's retries of a request that failed midway, unless the user sets them: 3 wait 2+4+8 s.
MLFLOW_RETRIES = "3"
# MLflow's rule for a metric, param or tag name (its bad_character_message), for versions
# without mlflow.utils.validation's checks.
MLFLOW_NAME = re.compile(r"[/\w.\- :]*")
EVENT_FILES = "events.out.tfevents.*"
# Where an export writes its event files before it moves them into place, inside --out.
STAGING = ".dlperf-exporting"
# An event file's name ends in the id of the store whose run it holds (SummaryWriter's
# filename_suffix): another store's run of the same id and name has the same directory.
STORE_SUFFIX = ".dlperf-store-"
STORE_SUFFIXED = re.compile(rf"{re.escape(STORE_SUFFIX)}({STORE_ID_FORM.pattern})$")
SQLITE_URI = "--uri sqlite:///mlflow.db"
# The database URLs MLflow takes as a SQL tracking store (a driver may follow a +).
SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")
# The database servers whose tracking store is read (and so reached) before MLflow opens it.
PROBED_SCHEMES = ("postgresql", "mysql")
_BAD_OPTION = re.compile(r"bad value for |invalid (connection option|\w+ value)")
# The drivers that take a connect timeout in seconds as `connect_timeout`: libpq's, MySQLdb's
# and PyMySQL's; another driver keeps its own default.
TIMED_DRIVERS = ("psycopg", "psycopg2", "psycopg2cffi", "mysqldb", "pymysql")
# The module of a database driver that MLflow's SQL store may import, and its package where
# the name is not the module's: dlperf's extras carry none but the run store's psycopg.
DRIVERS = {**DRIVER_PACKAGES, "pyodbc": "pyodbc", "pymssql": "pymssql"}
# The table of the schema's version (alembic's) that every MLflow SQL tracking store holds once
# MLflow has set it up: a database with tables but not this one is another program's.
MLFLOW_VERSION_TABLE = "alembic_version"
# The keys an export's warning of values it cannot hold names, the most changed first; the
# tables of another program's database that a refusal names.
KEYS_SHOWN = 5
# What MLflow 3 asks to be set before it takes a directory as its tracking store.
FILE_STORE_OPT_OUT = "MLFLOW_ALLOW_FILE_STORE"
# The most one write of an export adds to MLflow's SQLite database: a batch of 100 params or
# tags of up to 8,000 characters, or of 1,000 metrics, with their indexes, or a new database's
# tables. A write error of a database within this of the file size limit (ulimit -f) is taken
# for that limit. Not the run store's margin (runstore.SIZE_LIMIT_NEAR, a page): MLflow's
# database keeps a rollback journal, and SQLite cuts the file back to its size before the
# write that failed, which may have added hundreds of kilobytes.
MLFLOW_WRITE_MOST = 8 << 20
# MLflow's logger that logs a database error with its traceback before raising it, which
# dlperf then tells in one line.
MLFLOW_DB_LOG = "mlflow.store.db.utils"


def missing_extra(extra: str, module: str | None) -> UserError:
    """The one-line error for an optional dependency that is not installed."""
    return UserError(
        f"exporting to {EXTRAS[extra]} needs {module or extra}, which is not installed: "
        f"pip install 'dlperf[{extra}]'"
    )


def missing_driver(uri: str, module: str) -> UserError:
    """The one line for a tracking URI whose database driver is not installed: `pip install
    'dlperf[mlflow]'`, said before, did not install it (mysql:// needs mysqlclient)."""
    return UserError(
        f"MLflow at {masked_url(uri)}: its database driver {module} is not installed, and "
        "dlperf's extras do not carry it",
        f"pip install {DRIVERS.get(module, module)}, or name a driver that is installed: "
        "dialect+driver://...",
    )


def as_text(value: Any) -> str:
    """A param or tag value: strings as they are, anything else as JSON (true, null, [1, 2])."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def metric_series(store: RunStore, run_id: int) -> dict[str, list[tuple[int, float, float]]]:
    """Every metric of a run as key -> [(step, value, wall_time)], in step order (NULL is NaN),
    at the steps the store keeps; the keys in code-point order on every backend (SQL's
    ORDER BY followed a PostgreSQL database's collation)."""
    query = (
        select(Metric.key, Metric.step, Metric.value, Metric.wall_time)
        .where(Metric.run_id == run_id)
        .order_by(Metric.key, Metric.step, Metric.id)
    )
    series: dict[str, list[tuple[int, float, float]]] = {}
    with Session(store.engine) as s:
        found = s.execute(query).all()
    try:
        for key, step, value, wall_time in found:
            value = math.nan if value is None else float(value)
            series.setdefault(key, []).append((operator.index(step), value, float(wall_time)))
    except (TypeError, ValueError):  # a row set by hand to another type (garbled_metrics)
        garbled = garbled_metrics(store.engine, run_id, found)
        if garbled is None:
            raise
        raise garbled from None
    return {key: series[key] for key in sorted(series)}


def mlflow_held(value: float) -> float:
    """What MLflow gives back for `value`: its SQL store (and so a server on one) keeps no
    infinity, and stores +-inf as +- the largest float."""
    return math.copysign(sys.float_info.max, value) if math.isinf(value) else value


def float32_held(value: float) -> float:
    """What TensorBoard gives back for `value`: its scalars are 32-bit floats (rounded as C
    casts a double to a float)."""
    try:
        held: float = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:  # beyond float32's range: the cast's infinity
        return math.copysign(math.inf, value)
    return held


@dataclass
class Unheld:
    """The values of an export that its format changes in kind: an infinity it makes a number,
    a number it makes infinite, a non-zero it makes zero (rounding to the format's precision
    is not counted). `keys` counts them by metric key, `becomes` by what they become."""

    keys: Counter[str] = field(default_factory=Counter)
    becomes: Counter[str] = field(default_factory=Counter)

    def add(self, key: str, value: float, held: float) -> None:
        if math.isinf(value) and not math.isinf(held):
            change = f"{value!r} becomes {held!r}"
        elif math.isinf(held) and not math.isinf(value):
            change = f"beyond its range becomes {held!r}"
        elif value != 0 and held == 0:
            change = f"too small becomes {held!r}"
        else:
            return
        self.keys[key] += 1
        self.becomes[change] += 1

    def line(self, target: str, runs: Sequence[int] = ()) -> str | None:
        """The export's one warning (None when every value is held): how many values of which
        keys `target` cannot hold, and what they become."""
        total = sum(self.keys.values())
        if not total:
            return None
        keys = ", ".join(f"{k} ({n})" for k, n in self.keys.most_common(KEYS_SHOWN))
        if len(self.keys) > KEYS_SHOWN:
            keys += f" and {len(self.keys) - KEYS_SHOWN} more keys"
        whose = f"run {runs[0]}'s " if len(runs) == 1 else ""
        if len(runs) > 1:
            keys += f" in runs {', '.join(map(str, runs))}"
        becomes = ", ".join(f"{change} ({n})" for change, n in self.becomes.items())
        plural = "" if total == 1 else "s"
        return f"{target} cannot hold {total} value{plural} of {whose}{keys}: {becomes}"


def unheld(points: Iterable[tuple[str, float]], held: Callable[[float], float]) -> Unheld:
    """The values among `points` (key, value) that `held` (what the format gives back) changes
    in kind, counted: an export says so rather than change extreme values silently."""
    found = Unheld()
    for key, value in points:
        if not math.isnan(value):
            found.add(key, value, held(value))
    return found


def unheld_warning(target: str, found: dict[int, Unheld]) -> list[str]:
    """The export's one warning of the values that `target` cannot hold, of all its runs
    (run id -> what `unheld` found in its values), or none."""
    total = Unheld()
    for run_found in found.values():
        total.keys.update(run_found.keys)
        total.becomes.update(run_found.becomes)
    said = total.line(target, [run_id for run_id, f in found.items() if f.keys])
    return [] if said is None else [said]


def steps_per_epoch(
    run: RunRecord, series: dict[str, list[Any]], warnings: list[str]
) -> float | None:
    """A run's steps per epoch: from its summary; for a run with per-epoch metrics that ended
    before writing its summary (killed, lost), the training images of its config over its
    batch size, the incomplete last batch dropped, as the engine trains them; else None.
    None for a loop recorded with dlperf.track, whose keys, val/* too, are at the steps it
    logged: told by what the run is (`tracked`), not by whether its config validates as an
    experiment ({} does, all defaults, and so may a config of the user's own that holds
    every section of one)."""
    if tracked(run):
        return None
    known = run.summary.get("steps_per_epoch")
    if known or run.kind != "run" or not any(map(per_epoch, series)):
        return known
    from dlperf.config import stored_experiment
    from dlperf.data import load_data

    try:
        exp = stored_experiment(run.config, f"run {run.id}")
    except UserError:  # an experiment's sections that this dlperf does not read
        return None
    try:
        images = len(load_data(exp.data).train)
    except (UserError, OSError) as e:
        warnings.append(
            f"run {run.id}: its steps per epoch are unknown ({e}); "
            "its per-epoch metrics stay at step = epoch"
        )
        return None
    return images // exp.train.batch_size or None


def _times(store: RunStore, run_id: int) -> tuple[float, float | None] | None:
    """Start and end of a run in seconds since the epoch (the store keeps naive UTC); None for
    a run deleted since it was listed."""
    with Session(store.engine) as s:
        found = s.execute(select(Run.started, Run.ended).where(Run.id == run_id)).one_or_none()
    if found is None:
        return None
    started, ended = found
    return (
        started.replace(tzinfo=UTC).timestamp(),
        ended.replace(tzinfo=UTC).timestamp() if ended else None,
    )


def _still_stored(store: RunStore, run_id: int) -> bool:
    """Whether the run is stored, asked once all of it that an export writes is read: a run
    deleted meanwhile (another process's `runs delete`) read as one without metrics, exported
    empty over its earlier export. A delete takes a run's rows in one transaction, so a run
    still there was whole when it was read."""
    with Session(store.engine) as s:
        return s.scalar(select(Run.id).where(Run.id == run_id)) is not None


def _runs(store: RunStore, run_ids: Sequence[int]) -> list[RunRecord]:
    """The runs to export, each once, in the order given; an unknown id fails before any export."""
    return [store.get_run(i) for i in dict.fromkeys(run_ids)]


# --- MLflow ------------------------------------------------------------------------------


def _check_reachable(uri: str) -> None:
    """Fail at once, in one line, where MLflow would retry for minutes: a server that refuses
    or does not answer the connection, or a SQLite store file that cannot be opened for
    writing (MLflow retries creating its engine 15 times, logging each)."""
    scheme = uri.partition(":")[0].lower()
    if scheme in ("http", "https"):
        parts = urlsplit(uri)
        host, port = parts.hostname or "localhost", parts.port or (443 if scheme == "https" else 80)
        try:
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as e:
            reason = e.strerror or str(e) or type(e).__name__
            raise UserError(
                f"MLflow at {masked_url(uri)}: cannot connect to {host}:{port} ({reason})",
                "is the tracking server running? `mlflow server` starts one",
            ) from None
    elif (directory := _file_store(uri)) is not None:
        _check_directory(directory)
    elif scheme == "sqlite":
        path = make_url(uri).database
        if not path or path == ":memory:":
            return
        if not Path(path).parent.is_dir():  # MLflow makes it: see that it can, as for file:
            _check_directory(Path(path).parent, path)
            return
        new = not Path(path).exists()
        try:
            with closing(sqlite3.connect(path, timeout=CONNECT_TIMEOUT_S)) as conn:
                conn.execute("BEGIN IMMEDIATE")  # the write lock: a read-only file fails here
                conn.rollback()
        except sqlite3.Error as e:
            raise UserError(
                f"MLflow at {masked_url(uri)}: cannot open {path} to write ({e})"
            ) from None
        finally:
            if new:  # the check's empty file: an export refused before writing leaves none
                Path(path).unlink(missing_ok=True)


def _setup_key(uri: str) -> str | None:
    """What names the SQL tracking store at `uri` on this host (a SQLite file by its real path,
    another database by its URL); None for a server, a directory or SQLite in memory."""
    scheme = uri.partition(":")[0].lower().partition("+")[0]
    if scheme not in SQL_SCHEMES or _file_store(uri) is not None:
        return None
    if scheme == "sqlite":
        path = _sqlite_file(uri)
        return None if path is None else f"sqlite:{path.resolve()}"
    try:
        return make_url(uri).render_as_string(hide_password=False)
    except ArgumentError:  # MLflow says what is wrong with it
        return None


# A server's port when its URL names none, for the backends MLflow takes.
DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
# A server on this host, however the URL names it.
LOCAL_HOSTS = ("", "localhost", "127.0.0.1", "::1")


def _server_database(url: str) -> tuple[Any, ...]:
    """What names a server's database whatever the URL's spelling: backend (not driver),
    host, port, database and (PostgreSQL) the schemas its options search first."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    host = (parsed.host or "").lower()
    options = parsed.query.get("options", "")
    options = options[-1] if isinstance(options, tuple) else options
    found = re.search(r"-c\s*search_path\s*=\s*(\S+)", unquote(options))
    return (
        backend,
        "localhost" if host in LOCAL_HOSTS else host,
        parsed.port or DEFAULT_PORTS.get(backend),
        parsed.database,
        (found.group(1) if found else "public").replace("\\", ""),
    )


def _refuse_the_store_itself(store: RunStore, uri: str) -> None:
    """MLflow's tables are not written into the run store: an export to the store's own file or
    database made MLflow's alembic_version, experiments and params among dlperf's tables (a
    store holding them is foreign to a later migration), then failed halfway ("duplicate
    column name: step"; PostgreSQL: a foreign-key message that named neither)."""
    key = _setup_key(uri)
    if key is None:  # a server or a directory: nothing here tells where it keeps its runs
        return
    path = integrity.store_file(store.engine)
    if key.startswith("sqlite:"):
        given = Path(key.removeprefix("sqlite:"))
        # a link to it, or a hard link, is the store's file too
        same = path is not None and one_file(given, path)
        where = str(path)
    else:
        ours = store.engine.url.render_as_string(hide_password=False)
        same = path is None and store.engine.url.get_backend_name() != "sqlite"
        same = same and _server_database(key) == _server_database(ours)
        where = masked_url(ours)
    if same:
        raise UserError(
            f"MLflow at {masked_url(uri)}: --uri names the run store itself ({where}); MLflow "
            "would write its tables among dlperf's",
            f"give MLflow a database of its own, e.g. {SQLITE_URI}",
        )


def _refuse_a_database_not_mlflows(uri: str) -> None:
    """Nor into another run store, nor another program's database: an export to a second dlperf
    store's file or database wrote MLflow's alembic_version, experiments and params among its
    tables, then failed halfway ("duplicate column name: step"; PostgreSQL: "column run_uuid
    referenced in foreign key constraint does not exist"); into another program's (tables, but
    no MLFLOW_VERSION_TABLE) it made its 60 tables among them, then failed on that program's
    ("no such column: experiments.experiment_id"). Read only; a database this cannot read is
    left to MLflow, and an empty one is MLflow's to set up."""
    scheme = uri.partition(":")[0].lower().partition("+")[0]
    try:
        url = make_url(uri)
    except ArgumentError:  # MLflow says what is wrong with it
        return
    if scheme == "sqlite":
        if not url.database or url.database == ":memory:" or not Path(url.database).is_file():
            return
        found = _sqlite_tables(Path(url.database))
    elif scheme in PROBED_SCHEMES:
        found = _server_tables(uri)
    else:
        return
    if found is None:
        return
    tables, runs_columns = found
    if _dlperf_tables(tables, runs_columns):
        raise UserError(
            f"MLflow at {masked_url(uri)}: --uri names a dlperf run store; MLflow would write "
            "its tables among dlperf's",
            f"give MLflow a database of its own, e.g. {SQLITE_URI}",
        )
    if tables and MLFLOW_VERSION_TABLE not in tables:
        shown = few(sorted(tables), KEYS_SHOWN)
        raise UserError(
            f"MLflow at {masked_url(uri)}: --uri names a database that is not MLflow's "
            f"(tables {shown}, but no {MLFLOW_VERSION_TABLE}); MLflow would write its tables "
            "among them",
            f"give MLflow a database of its own, e.g. {SQLITE_URI}",
        )


def _dlperf_tables(tables: set[str], runs_columns: set[str]) -> bool:
    """Whether a database's tables are a dlperf run store's: its `meta` table (MLflow has
    none; `runs` and `metrics` MLflow has too), or a first release's `runs`, made before
    `meta`, with dlperf's columns."""
    return "meta" in tables or ("runs" in tables and {"kind", "config_hash"} <= runs_columns)


def _sqlite_tables(path: Path) -> tuple[set[str], set[str]] | None:
    """The tables of the SQLite file at `path` and the columns of its `runs`, read only."""
    try:
        uri = f"file:{quote(str(path))}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True, timeout=CONNECT_TIMEOUT_S)) as conn:
            listed = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            # not SQLite's own (sqlite_sequence, sqlite_stat1), which any program's file may hold
            tables = {str(name) for (name,) in listed if not str(name).startswith("sqlite_")}
            columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(runs)")}
    except sqlite3.Error:
        return None
    return tables, columns


def _server_tables(uri: str) -> tuple[set[str], set[str]] | None:
    """The tables of the server database at `uri` (in the schema its search_path names first)
    and the columns of its `runs`; None where they cannot be read once connected, or its
    driver is one SQLAlchemy does not know (MLflow says what is wrong). A database that cannot
    be connected to within CONNECT_TIMEOUT_S (a refused port, a wrong password, no such
    database) is refused here in one line: MLflow retried creating its engine for two minutes,
    logging each of 37 tries, then said so. A driver not installed is named with its package."""
    from sqlalchemy import create_engine, inspect
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    try:
        url = make_url(uri)
        engine = create_engine(url, connect_args=_connect_args(url))
    except ModuleNotFoundError as e:  # the dialect's driver, imported as the engine is made
        raise missing_driver(uri, e.name or str(e)) from None
    except (ArgumentError, ImportError):
        return None
    try:
        try:
            conn = engine.connect()
        except DBAPIError as e:
            reason = _masked_text(_one_line(e.orig or e), uri)
            raise UserError(
                f"MLflow at {masked_url(uri)}: cannot connect to its database ({reason})",
                # libpq's words for an option it refuses, from the URL or a PG* variable: no
                # fault of the server's or the credentials'
                "the driver refuses an option: check the URL's ?name=value options and the PG* "
                "environment variables (PGCONNECT_TIMEOUT, PGSSLMODE)"
                if _BAD_OPTION.search(reason)
                else "is the database server running, and are the URL's user, password and "
                "database right?",
            ) from None
        with conn:
            inspector = inspect(conn)
            tables = set(inspector.get_table_names())
            runs = inspector.get_columns("runs") if "runs" in tables else []
            return tables, {str(column["name"]) for column in runs}
    except SQLAlchemyError:
        return None
    finally:
        dispose(engine)  # shielded: a stop cutting the close printed SQLAlchemy's traceback


def _connect_args(url: URL) -> dict[str, Any]:
    """A connect timeout of CONNECT_TIMEOUT_S for the drivers that take one, unless the URL
    (or libpq's PGCONNECT_TIMEOUT) gives its own: a host that does not answer kept the probe
    waiting for the system's TCP timeout (minutes)."""
    if "connect_timeout" in url.query or url.get_driver_name() not in TIMED_DRIVERS:
        return {}
    if url.get_backend_name() == "postgresql" and os.environ.get("PGCONNECT_TIMEOUT"):
        return {}
    return {"connect_timeout": int(CONNECT_TIMEOUT_S)}


def _tracking_uri(uri: str) -> str:
    """`uri` as MLflow is given it: postgres://, as libpq and most hosts write it and as the
    run store reads it, is postgresql://. MLflow refused postgres:// (its message naming the
    URL with the password in clear), and the refusal of the run store itself missed it."""
    if uri.startswith("postgres://"):
        return "postgresql://" + uri.removeprefix("postgres://")
    return uri


def _refuse_an_unreadable_url(uri: str) -> None:
    """A database URL that SQLAlchemy cannot read at all, its port not a number: the ValueError
    it raised came out of MLflow's engine as a traceback, exit 1; or one whose password holds
    an unescaped @, as the run store refuses it (`urls.unescaped_at`)."""
    if uri.partition(":")[0].lower().partition("+")[0] not in SQL_SCHEMES:
        return
    if unescaped_at(uri):  # the password's tail read as the host, quoted by the driver
        raise UserError(
            f"MLflow at {masked_url(uri)}: its user name or password holds an unescaped @",
            "write @ in a password as %40, e.g. postgresql://user:p%40ss@host/db",
        )
    try:
        make_url(uri)
    except ArgumentError:  # MLflow says what is wrong with it
        return
    except ValueError as e:
        raise UserError(
            f"MLflow at {masked_url(uri)}: not a database URL ({_masked_text(str(e), uri)})",
            "its port, after the host's colon, is a number: dialect://USER:PASSWORD@HOST:PORT/DB",
        ) from None


def _masked_text(text: str, uri: str) -> str:
    """MLflow's or a driver's `text` with every secret of `uri` as ***: MLflow's messages
    repeat the URI as given ("got unsupported URI '...'"), its password in clear, after
    dlperf's masked one. A secret is masked where it stands alone, not inside a longer word
    (a password `x` leaves "exception" whole)."""
    text = text.replace(uri, masked_url(uri))
    secrets = []
    if (span := password_span(uri)) is not None:
        secrets.append(uri[span[0] : span[1]])
    query = uri.partition("?")[2].partition("#")[0]
    for option in query.split("&"):
        key, equals, value = option.partition("=")
        if equals and secret_option(key):
            secrets.append(value)
    shown = {
        form
        for secret in secrets
        for form in (secret, unquote(secret), unquote_plus(secret))
        if form
    }
    for secret in sorted(shown, key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", MASK, text)
    return text


@contextlib.contextmanager
def _one_setup_at_a_time(uri: str) -> Iterator[None]:
    """Held while an export checks, opens and finds its experiment in the SQL tracking store at
    `uri`. MLflow creates a new database's tables (alembic's migrations) and an experiment
    without a lock: of two exports into one new store at once, one failed ("duplicate column
    name: step", "table alembic_version already exists") and was told as the user's mistake,
    and the SQLite check's removal of the empty file it made could remove the database the
    other had just made. So one export at a time on this host takes these steps for a store,
    under an exclusive lock on a file in the temporary directory named by the store (as
    MLflow's own server locks its set-up); a server or a directory takes none. The file is
    removed as the lock is let go (each store's stayed in /tmp for ever): not the database's
    directory, which MLflow may have yet to make, and a server database has none."""
    key = _setup_key(uri)
    if key is None:
        yield
        return
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    path = Path(tempfile.gettempdir()) / f"dlperf-mlflow-setup-{digest}.lock"
    fd = _locked(path)
    try:
        yield
    finally:
        if fd is not None:
            # Removed while still held: whoever waits on this file finds it gone once let in,
            # and locks the path's new file instead (_locked), so one holds it at a time.
            with contextlib.suppress(OSError):  # another user's, in a sticky /tmp: it stays
                path.unlink()
            os.close(fd)  # lets the lock go


def _locked(path: Path) -> int | None:
    """An open descriptor of the file at `path`, exclusively flock'ed, that is still the file
    at `path` (not one a holder removed while this waited on it); None where no lock can be
    had (another user's file /tmp's rules keep from us)."""
    import fcntl

    while True:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            there = os.stat(path)
        except FileNotFoundError:  # removed by the holder this waited on: lock the next
            os.close(fd)
            continue
        except OSError:
            os.close(fd)
            return None
        except BaseException:  # Ctrl-C while waiting
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino):
            return fd
        os.close(fd)  # another's new file is there now: wait on that one


def _file_store(uri: str) -> Path | None:
    """The directory a tracking URI names as MLflow's file store (a plain path, or file:);
    None for any other URI."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    return Path(uri) if not parts.scheme else None


def _check_directory(path: Path, database: str | None = None) -> None:
    """That `path` is a directory MLflow can write to, or can be made: its missing parts made
    and a file written in it; what the check made is removed again. MLflow itself would
    fail later, or (MLflow 3) refuse any directory first and leave the real fault unsaid;
    under a regular file, MLflow's makedirs said only "cannot use DIR: File exists", exit 1.
    `database`: the SQLite file MLflow is to make in `path`; None, `path` is its file store."""
    made: list[Path] = []
    try:
        for directory in reversed([p for p in (path, *path.parents) if not p.exists()]):
            directory.mkdir()
            made.append(directory)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        reason = e.strerror or str(e)
        with contextlib.suppress(OSError):  # a directory that may not be searched: unsaid
            blocker = next(p for p in (path, *path.parents) if p.exists())
            if not blocker.is_dir():
                reason = f"{reason}: {blocker} is a file"
        if database is None:
            raise UserError(
                f"cannot write MLflow's runs to {path}: {reason}",
                f"give a directory that can be written, or a database: {SQLITE_URI}",
            ) from None
        raise UserError(
            f"cannot write MLflow's database {database}: {reason}",
            f"give a database in a directory that can be written, e.g. {SQLITE_URI}",
        ) from None
    finally:
        for directory in reversed(made):
            directory.rmdir()


def _mlflow() -> tuple[Any, Any]:
    """MlflowClient and mlflow.entities, with telemetry off and MLflow's chatter quiet."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("DO_NOT_TRACK", "true")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", MLFLOW_RETRIES)
    try:
        with _third_party_deprecations_unsaid():
            import mlflow  # noqa: F401  (the package itself first: a stale submodule proves nothing)
            import mlflow.entities as entities
            from mlflow.tracking import MlflowClient
    except ModuleNotFoundError as e:  # not a library there that failed to load (TensorBoard's)
        raise missing_extra("mlflow", e.name) from None
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return MlflowClient, entities


def _mlflow_version() -> str:
    import mlflow

    return str(getattr(mlflow, "__version__", "3"))


def _limits() -> tuple[int, int]:
    try:
        from mlflow.utils import validation
    except ImportError:
        return MLFLOW_PARAM_CHARS, MLFLOW_TAG_CHARS
    return (
        getattr(validation, "MAX_PARAM_VAL_LENGTH", MLFLOW_PARAM_CHARS),
        getattr(validation, "MAX_TAG_VAL_LENGTH", MLFLOW_TAG_CHARS),
    )


def _one_line(e: BaseException) -> str:
    text = str(getattr(e, "message", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _numbers(tree: dict[str, Any]) -> Iterable[tuple[str, float]]:
    for key, value in flatten(tree).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            yield key, float(value)


class FileSizeLimited(UserError):
    """A write of an export that the process's file size limit (ulimit -f) refused: not the
    user's input, so exit code 1, as the run store and `report` say it, in one line."""

    exit_code = 1


def _sqlite_file(uri: str) -> Path | None:
    """The file of the SQLite tracking store at `uri`; None for any other store."""
    if uri.partition(":")[0].lower().partition("+")[0] != "sqlite":
        return None
    try:
        database = make_url(uri).database
    except ArgumentError:  # MLflow says what is wrong with it
        return None
    return Path(database) if database and database != ":memory:" else None


def _sqlite_write_failed(e: BaseException) -> bool:
    """Whether SQLite's own error behind `e` (MLflow's exception, SQLAlchemy's around it) is
    a write that the file system refused: an I/O error, or a write cut short ("database or
    disk is full")."""
    for found in causes(e):
        for error in (found, getattr(found, "orig", None)):
            code = getattr(error, "sqlite_errorcode", None)
            failed = isinstance(code, int) and code & 0xFF in (
                integrity.SQLITE_IOERR,
                integrity.SQLITE_FULL,
            )
            if isinstance(error, sqlite3.Error) and failed:
                return True
    return False


def _size_limit_met(uri: str, e: BaseException) -> Path | None:
    """The SQLite database of `uri` where `e` is a write to it that the process's file size
    limit (ulimit -f) refused, which SQLite tells only as "disk I/O error" (EFBIG) or as a
    full database (a write cut short at the limit): a write error, while the database or its
    journal is within MLFLOW_WRITE_MOST of the limit, or past it. None otherwise."""
    path = _sqlite_file(uri)
    if path is None or not _sqlite_write_failed(e):
        return None
    return path if size_limited(path, MLFLOW_WRITE_MOST, ("", "-journal", "-wal")) else None


def _size_limited(uri: str, path: Path, after: str) -> FileSizeLimited:
    return FileSizeLimited(
        f"MLflow at {masked_url(uri)}: a file size limit (ulimit -f) stopped the write of "
        f"{path}: raise it{after}"
    )


@contextlib.contextmanager
def _third_party_deprecations_unsaid() -> Iterator[None]:
    """Within the block (MLflow's part of an export), the deprecation warnings of MLflow and
    the libraries under it are left unsaid, as Python's default filters leave a library's:
    under PYTHONWARNINGS=error (or -W error) SQLAlchemy's SADeprecationWarning, as MLflow's
    tracking store set itself up, ended the export in a 79-line traceback. Outside the block
    the user's filters stand."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        yield


@contextlib.contextmanager
def _database_errors_told_here() -> Iterator[None]:
    """Within the block, MLflow's log of a database error is dropped: it printed the error
    with SQLAlchemy's 40-line traceback just before raising it, and the export tells what it
    raises in one line. Its warnings (an engine being retried) still show."""
    log = logging.getLogger(MLFLOW_DB_LOG)

    def below_errors(record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR

    log.addFilter(below_errors)
    try:
        yield
    finally:
        log.removeFilter(below_errors)


@contextlib.contextmanager
def _made_whole_or_removed(uri: str) -> Iterator[None]:
    """A SQLite database that does not exist yet, and that the block (MLflow's set-up: its
    tables, the experiment) fails to make whole, is removed again: of a new database whose
    tables a file size limit cut short, the next export said "table secrets already exists"."""
    path = _sqlite_file(uri)
    new = path is not None and not path.exists()
    try:
        yield
    except BaseException:
        if new and path is not None:
            with stopping.shielded():  # a second Ctrl-C must not leave half of it
                _remove_database(path)
        raise


def _remove_database(path: Path) -> None:
    """Remove the SQLite database at `path` and its journal, once MLflow's engine of it, kept
    for the process, is let go: a later export in this process would write into the removed
    file through it."""
    module = sys.modules.get("mlflow.store.tracking.sqlalchemy_store")
    engines = getattr(getattr(module, "SqlAlchemyStore", None), "_engine_map", None)
    if isinstance(engines, dict):
        for key, engine in list(engines.items()):
            database = getattr(getattr(engine, "url", None), "database", None)
            if database and Path(database).resolve() == path.resolve():
                engines.pop(key, None)
                engine.dispose()
    for end in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            path.with_name(path.name + end).unlink()


def export_mlflow(
    store: RunStore, run_ids: Sequence[int], uri: str, experiment: str = DEFAULT_EXPERIMENT
) -> dict[str, Any]:
    """Export runs to the MLflow tracking server or store at `uri`, into `experiment`.

    Returns {"to", "uri", "experiment", "experiment_id", "runs": {run id: {"mlflow_run_id",
    "params", "metrics", "points", "tags", "artifacts"}}, "warnings", "gone"}: `gone`, the
    runs deleted (by another process) as they were read, left out. Every export makes new
    MLflow runs: exporting a run twice gives two MLflow runs.
    """
    uri = _tracking_uri(uri)
    _refuse_an_unreadable_url(uri)
    _refuse_the_store_itself(store, uri)
    _refuse_a_database_not_mlflows(uri)
    runs = _runs(store, run_ids)
    with _one_setup_at_a_time(uri):
        _check_reachable(uri)  # before importing MLflow, which alone takes seconds
    client_class, entities = _mlflow()
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    param_chars, tag_chars = _limits()
    warnings: list[str] = []
    exported: dict[str, Any] = {}
    # Every run's params, tags and metrics are made and their names checked before the first
    # write: a name MLflow refuses stopped an export part-way, a run left RUNNING.
    planned = {
        run.id: _plan_mlflow_run(store, entities, run, (param_chars, tag_chars)) for run in runs
    }
    gone = [run_id for run_id, plan in planned.items() if plan is None]
    plans = [plan for plan in planned.values() if plan is not None]
    for plan in plans:
        _check_mlflow_names(plan, len(runs))
        _check_mlflow_times(plan, len(runs))
        if _file_store(uri) is not None:
            _fit_file_store(plan, len(runs))
        warnings += plan.warnings
    if _file_store(uri) is None:  # a directory keeps infinities (as text)
        changed = {
            p.run.id: unheld(((m.key, m.value) for m in p.metrics), mlflow_held) for p in plans
        }
        warnings += unheld_warning("MLflow", changed)
    try:
        with _database_errors_told_here(), _third_party_deprecations_unsaid():
            # A new store's tables, then the experiment, once; a new database left half-made
            # is removed while the set-up is still held.
            with _one_setup_at_a_time(uri), _made_whole_or_removed(uri):
                client = client_class(tracking_uri=uri)
                found = client.get_experiment_by_name(experiment)
                experiment_id = (
                    found.experiment_id if found else client.create_experiment(experiment)
                )
            for plan in plans:
                try:
                    exported[str(plan.run.id)] = _write_mlflow_run(
                        store, client, experiment_id, plan, warnings, list(exported)
                    )
                except (MlflowException, SQLAlchemyError) as e:
                    before = ", ".join(exported) or "none"
                    during = (
                        f" (exporting run {plan.run.id}, left FAILED in MLflow; runs exported "
                        f"before it: {before})"
                    )
                    if (limited := _size_limit_met(uri, e)) is not None:
                        raise _size_limited(uri, limited, during) from None
                    said = f"MLflow at {masked_url(uri)}: {_masked_text(_one_line(e), uri)}"
                    said += during
                    raise UserError(said) from None
    except ImportError as e:  # a SQL tracking store without alembic, or its database's driver
        if e.name in DRIVERS:
            raise missing_driver(uri, e.name) from None
        raise missing_extra("mlflow", e.name) from None
    except (MlflowException, SQLAlchemyError) as e:
        if (limited := _size_limit_met(uri, e)) is not None:
            raise _size_limited(uri, limited, "; nothing was exported") from None
        # MLflow 3 refuses every directory, usable or not, naming its file store's
        # "maintenance mode" and the variable that opts out: say that plainly instead.
        if _file_store(uri) is not None and FILE_STORE_OPT_OUT in str(e):
            raise UserError(
                f"MLflow at {masked_url(uri)}: a directory, which MLflow "
                f"{_mlflow_version()} no longer takes as a tracking store",
                f"use a database, {SQLITE_URI}, or set {FILE_STORE_OPT_OUT}=true",
            ) from None
        raise UserError(f"MLflow at {masked_url(uri)}: {_masked_text(_one_line(e), uri)}") from None
    return {
        "to": "mlflow",
        "uri": masked_url(uri),
        "experiment": experiment,
        "experiment_id": experiment_id,
        "runs": exported,
        "warnings": warnings,
        "gone": gone,
    }


def _stopped_mlflow_run(run_id: int, mlflow_id: str, before: list[str]) -> str:
    whole = ", ".join(before) or "none"
    return (
        f"stopped exporting run {run_id}: MLflow run {mlflow_id} holds the part written before "
        f"the stop, marked KILLED; runs exported whole before it: {whole} (export run {run_id} "
        f"again for a whole one, and delete the part: mlflow runs delete --run-id {mlflow_id})"
    )


@dataclass
class _MlflowRun:
    """What one run's export writes, made before any of it is written."""

    run: RunRecord
    started: float
    ended: float | None
    params: list[Any]
    tags: list[Any]
    metrics: list[Any]
    series: dict[str, list[tuple[int, float, float]]]
    summary: dict[str, float]
    artifacts: list[dict[str, Any]]
    warnings: list[str]
    epoch_added: bool  # the `epoch` series is the export's (`on_global_steps`), not the run's


def _plan_mlflow_run(
    store: RunStore, entities: Any, run: RunRecord, limits: tuple[int, int]
) -> _MlflowRun | None:
    """What the run's export writes, all of it read from the store; None for a run deleted
    since it was listed (`_still_stored`), which is left out."""
    param_chars, tag_chars = limits
    run_id = run.id
    warnings: list[str] = []
    times = _times(store, run_id)
    if times is None:
        return None
    started, ended = times

    params = []
    for key, value in flatten(run.config).items():
        if value is None:
            continue
        text = as_text(value)
        if len(text) > param_chars:
            warnings.append(
                f"run {run_id}: param {key} cut to MLflow's {param_chars} characters "
                "(the whole config is in the artifact dlperf/run.json)"
            )
        params.append(entities.Param(key, clip(text, param_chars)))

    tags: dict[str, Any] = {  # the user's own tags as they are, but not MLflow's namespace
        k: v for k, v in run.tags.items() if not k.startswith("mlflow.")
    }
    tags.update({f"system.{k}": v for k, v in flatten(run.system or {}).items()})
    tags.update(
        {
            "mlflow.source.git.commit": (run.system or {}).get("git_commit"),
            "dlperf.run_id": run_id,
            "dlperf.kind": run.kind,
            "dlperf.status": run.status,
            "dlperf.store_id": store.id,
            "dlperf.config_hash": run.config_hash,
            "dlperf.study_id": run.study_id,
            "dlperf.error": run.error,
        }
    )
    run_tags = [
        entities.RunTag(k, clip(as_text(v), tag_chars)) for k, v in tags.items() if v is not None
    ]

    metrics = []
    stored = metric_series(store, run_id)
    series = on_global_steps(stored, steps_per_epoch(run, stored, warnings))
    for key, points in series.items():
        metrics += [
            entities.Metric(key, value, round(wall_time * 1000), step)
            for step, value, wall_time in points
        ]
    summary_time = round((ended or started) * 1000)
    summary = dict(_numbers(run.summary))
    metrics += [entities.Metric(f"summary/{k}", v, summary_time, 0) for k, v in summary.items()]
    artifacts = store.artifacts(run_id)
    if not _still_stored(store, run_id):
        return None
    added = "epoch" in series and "epoch" not in stored
    return _MlflowRun(
        run, started, ended, params, run_tags, metrics, series, summary, artifacts, warnings, added
    )


def _name_fault(kind: str, name: str) -> str | None:
    """Why MLflow refuses `name` as a metric, param or tag name, or None: MLflow's own check
    (mlflow.utils.validation), or its documented rule where a version lacks that check."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils import validation

    check: Callable[[str], Any] | None = getattr(validation, f"_validate_{kind}_name", None)
    if check is None:
        if MLFLOW_NAME.fullmatch(name):
            return None
        return (
            "Names may only contain alphanumerics, underscores (_), dashes (-), periods (.), "
            "spaces ( ), colon(:) and slashes (/)."
        )
    try:
        check(name)
    except MlflowException as e:
        return _one_line(e).split(" supplied: ", 1)[-1]
    return None


def _check_mlflow_names(plan: _MlflowRun, runs: int) -> None:
    """UserError for the first metric, param or tag name of `plan` that MLflow refuses."""
    run = plan.run
    named = [
        *(("metric", m.key) for m in plan.metrics),
        *(("param", p.key) for p in plan.params),
        *(("tag", t.key) for t in plan.tags),
    ]
    seen: set[tuple[str, str]] = set()
    for kind, name in named:
        if (kind, name) in seen:
            continue
        seen.add((kind, name))
        fault = _name_fault(kind, name)
        if fault is None:
            continue
        where = "a config key" if kind == "param" else f"a {kind} key"
        fix = f"leave run {run.id} out of the export" if runs > 1 else "export another run"
        raise UserError(
            f"run {run.id} ({printable(run.name)!r}): {kind} {name!r} is not a name MLflow "
            f"takes: {fault.rstrip('.')}; nothing was exported",
            f"{fix}, or record the run with {where} MLflow takes",
        )


def _fit_file_store(plan: _MlflowRun, runs: int) -> None:
    """Fit `plan` to MLflow's file store, which keeps each metric, param and tag in a file
    named by its key, folders split at '/': a key that is also another's folder ('epoch'
    beside 'epoch/lr') cannot be kept, and the export failed part-way ("Is a directory"),
    its run left FAILED. The `epoch` series the export adds (`on_global_steps`) beside a
    run's own epoch/* keys is left out, with a warning (it repeats the steps per epoch); a
    clash among the run's own keys is refused before anything is written."""
    if plan.epoch_added and any(k.startswith("epoch/") for k in plan.series):
        plan.metrics = [m for m in plan.metrics if m.key != "epoch"]
        plan.series.pop("epoch")
        plan.warnings.append(
            f"run {plan.run.id}: its epoch series is left out: MLflow's file store keeps "
            "each metric in a file, and 'epoch' is the folder of its epoch/* metrics"
        )
    for kind, keys in (
        ("metric", {m.key for m in plan.metrics}),
        ("param", {p.key for p in plan.params}),
        ("tag", {t.key for t in plan.tags}),
    ):
        folders = {k[: i.start()] for k in keys for i in re.finditer("/", k)}
        clash = sorted(keys & folders)
        if clash:
            inner = min(k for k in keys if k.startswith(f"{clash[0]}/"))
            fix = f"leave run {plan.run.id} out of the export" if runs > 1 else "export it"
            raise UserError(
                f"run {plan.run.id} ({printable(plan.run.name)!r}): {kind}s {clash[0]!r} and "
                f"{inner!r} cannot both be kept in MLflow's file store, which keeps each in a "
                "file named by its key; nothing was exported",
                f"{fix} to a database, {SQLITE_URI}",
            )


def _check_mlflow_times(plan: _MlflowRun, runs: int) -> None:
    """UserError for a time of `plan` before 1970 (a clock set wrong, a store edited): MLflow
    takes no negative time, and refused it part-way, blaming a summary metric, its run left
    FAILED. Its start, end and first metric point, each as MLflow would be given it."""
    run = plan.run
    first = min((w for points in plan.series.values() for _, _, w in points), default=None)
    times = [("started", plan.started), ("ended", plan.ended), ("logged a metric", first)]
    for what, at in times:
        if at is None or round(at * 1000) >= 0:
            continue
        fix = f"leave run {run.id} out of the export" if runs > 1 else "export another run"
        raise UserError(
            f"run {run.id} ({printable(run.name)!r}): {what} {_utc(at)} as stored, before 1970, "
            "which MLflow does not take; nothing was exported",
            f"{fix}, or this one --to tensorboard",
        )


def _utc(at: float) -> str:
    """Seconds since 1970 as a UTC time; as seconds where no date holds them (-1e20)."""
    try:
        when = datetime.fromtimestamp(at, UTC)
    except (OverflowError, OSError, ValueError):
        return f"{at:g} s from 1970"
    return when.isoformat(sep=" ", timespec="seconds").replace("+00:00", " UTC")


def _write_mlflow_run(
    store: RunStore,
    client: Any,
    experiment_id: str,
    plan: _MlflowRun,
    warnings: list[str],
    before: list[str],
) -> dict[str, Any]:
    """Write `plan`'s run to MLflow; `before`: the runs this export wrote whole before it,
    for the line a stop in it leaves."""
    run = plan.run
    # A name holding ESC or NUL (a store of an older dlperf, another writer) is shown escaped.
    name = printable(run.name)
    created = client.create_run(experiment_id, start_time=round(plan.started * 1000), run_name=name)
    mlflow_id = created.info.run_id
    try:
        artifacts = _write_mlflow_parts(store, client, mlflow_id, plan, warnings)
        status = run.status
        if status != "running":
            last = max((w for points in plan.series.values() for _, _, w in points), default=None)
            # A lost run never ended: its last metric is the best guess, its start without one
            # (MLflow would take the moment of export).
            end = plan.ended or last or plan.started
            mlflow_status = MLFLOW_STATUS.get(status, "RUNNING")
            client.set_terminated(mlflow_id, status=mlflow_status, end_time=round(end * 1000))
    except BaseException as e:
        # A run that fails part-way ends FAILED in MLflow, never RUNNING, and one a stop
        # signal cut ends KILLED, MLflow's status for a run its user stopped; the failure that
        # stopped it is what the caller hears, not one from this mark.
        stopped = e if isinstance(e, KeyboardInterrupt) else None
        if stopped is not None:
            # Said after the stop: it left a part-written run that a second export does not
            # replace (it makes another), where nothing was said of it.
            note_left(stopped, _stopped_mlflow_run(run.id, mlflow_id, before))
        # A second stop signal waits for the mark (left RUNNING, the run read as live), a
        # third cuts it; the second's interrupt then holds the first, noted, as its context.
        with stopping.spared(), contextlib.suppress(Exception):
            client.set_terminated(mlflow_id, status="FAILED" if stopped is None else "KILLED")
        raise
    return {
        "mlflow_run_id": mlflow_id,
        "params": len(plan.params),
        "metrics": len(plan.series) + len(plan.summary),
        "points": len(plan.metrics),
        "tags": len(plan.tags),
        "artifacts": artifacts,
    }


def _write_mlflow_parts(
    store: RunStore, client: Any, mlflow_id: str, plan: _MlflowRun, warnings: list[str]
) -> int:
    """Log the run's params, tags, metrics and artifacts; the number of artifacts logged."""
    run, run_id = plan.run, plan.run.id
    logged = {"params": plan.params, "tags": plan.tags, "metrics": plan.metrics}
    for kind, size in MLFLOW_BATCH.items():
        for start in range(0, len(logged[kind]), size):
            client.log_batch(mlflow_id, **{kind: logged[kind][start : start + size]})

    stored_artifacts = plan.artifacts
    artifacts: list[tuple[str, Path]] = []
    for artifact in stored_artifacts:
        kind, path = artifact["kind"], Path(artifact["path"])
        if path.exists():
            artifacts.append((kind, path))
        else:
            missing = _missing(store, run, kind)
            warnings.append(f"run {run_id}: {kind} {path} {missing}, skipped")
    document = {**run.to_dict(), "artifacts": stored_artifacts}
    client.log_dict(mlflow_id, json.loads(json.dumps(document, default=str)), "dlperf/run.json")
    for kind, path in artifacts:
        if path.is_dir():
            client.log_artifacts(mlflow_id, str(path), artifact_path=f"{kind}/{path.name}")
        else:
            client.log_artifact(mlflow_id, str(path), artifact_path=kind)
    return len(artifacts) + 1


def _missing(store: RunStore, run: RunRecord, kind: str) -> str:
    """Why an artifact the store records is not on disk, as far as the store tells. dlperf
    records each once it is written, but a run's checkpoint was recorded as the run started
    before issue 41's seventh round: of a run that saved one at each epoch's end, it was never
    written if no epoch ended, and is gone if the run finished; otherwise the store cannot
    tell (its save may have failed)."""
    from dlperf.engine.checkpoint import EPOCH_ENDED  # torch: only for a missing checkpoint

    if kind != "checkpoint" or not run.config.get("run", {}).get("checkpoint"):
        return "no longer exists"
    if store.last_step(run.id, EPOCH_ENDED) is None:
        return "was never written"
    return "no longer exists" if run.status == "finished" else "is not there"


# --- TensorBoard -------------------------------------------------------------------------


def _summary_writer() -> Any:
    # TensorBoard imports TensorFlow when it is installed (seconds, and a start-up log on
    # stderr) unless the module `tensorboard.compat.notf` exists: its own switch to the
    # TensorFlow stub, which is all that writing event files needs.
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    try:
        import tensorboard  # noqa: F401  (torch's writer needs the package; check it first)
        from torch.utils.tensorboard import SummaryWriter
    except ModuleNotFoundError as e:
        # Not ImportError: a library that is there and failed to load (torch's shared objects
        # under ulimit -v, "failed to map segment") was said to be "not installed"; the CLI
        # tells that load with its cause
        raise missing_extra("tensorboard", e.name or "tensorboard") from None
    return SummaryWriter


@contextlib.contextmanager
def _writer_errors_raised_here() -> Iterator[None]:
    """TensorBoard's writer thread keeps the error of a write it could not make (a file size
    limit, a full disk) for the writer's next call in the exporting thread to raise, and also
    lets it end the thread, whose traceback `threading` printed on stderr before dlperf's one
    line. Within the block, such a thread's error is left to that call; the hook is put back
    once the writer threads that failed have ended (they end as their error is printed)."""
    from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

    before = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.thread, _AsyncWriterThread) and args.thread.exception is not None:
            return  # raised by the writer in the exporting thread
        before(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        for thread in threading.enumerate():
            if isinstance(thread, _AsyncWriterThread) and thread.exception is not None:
                thread.join(timeout=60)
        threading.excepthook = before


def _mark(c: str) -> bool:
    """Whether `c` is a combining mark (Unicode category M*): part of the letter before it."""
    return unicodedata.category(c).startswith("M")


def event_dir_name(run: RunRecord) -> str:
    """`run-ID-NAME`, the name reduced to characters safe in any file system: its letters and
    digits of every script (an ASCII-only name made "résumé" r_sum_, and 日本 nothing) with
    their marks (हिन्दी's vowel signs, Arabic's short vowels), `.`, `_` and `-`, in NFC (é one
    letter, not e and its accent), cut to 60 characters and to 180 bytes in UTF-8, well inside
    a file name's 255."""
    safe = "".join(c if c.isalnum() or c in "._-" or _mark(c) else " " for c in run.name)
    kept = "_".join(unicodedata.normalize("NFC", safe).split()).strip("._")[:60]
    name = kept.encode()[:180].decode(errors="ignore")  # a letter cut in two is dropped
    return f"run-{run.id}-{name}" if name else f"run-{run.id}"


def _check_locale_holds(run: RunRecord, directory: Path) -> None:
    """Refuse, before anything is written, a run directory whose name the file system encoding
    cannot write: a run named in UTF-8 (café, 日本) exported in a C or POSIX locale with UTF-8
    mode off, whose makedirs raised UnicodeEncodeError (exit 1, a traceback). Not a name made
    ASCII instead: the same run exported in a UTF-8 locale would get a second directory."""
    try:
        os.fsencode(directory)
    except UnicodeEncodeError:
        shown = str(directory).encode("ascii", "backslashreplace").decode("ascii")
        raise UserError(
            f"cannot write run {run.id}'s events: {shown} is not a file name in this locale "
            f"({sys.getfilesystemencoding()}); nothing was exported",
            LOCALE_FIX,
        ) from None


def _exported_from(directory: Path) -> set[str]:
    """The ids of the stores whose runs' events earlier exports left in `directory` (none of
    those before round 28, whose files' names do not say)."""
    names = (path.name for path in directory.glob(EVENT_FILES))
    return {found.group(1) for name in names if (found := STORE_SUFFIXED.search(name))}


def _swap_in(staged: Path, directory: Path) -> None:
    """The event files written in `staged` in place of those of `directory`, an earlier
    export's (a second export replaces the first, it does not add to it).

    The new files are moved in before the old ones are unlinked: a SIGKILL between the two
    leaves the run both (until it is exported again), never neither, which unlinking first
    could (the new files then waited in the staging folder the next export removes)."""
    with writing(directory):
        directory.mkdir(parents=True, exist_ok=True)
        olds = list(directory.glob(EVENT_FILES))
        news = {new.name for new in staged.glob(EVENT_FILES)}
        for name in sorted(news):
            shutil.move(staged / name, directory / name)  # a rename: the same file system
        for old in olds:
            if old.name not in news:  # one of the same name was just replaced by the new
                old.unlink()


def export_tensorboard(store: RunStore, run_ids: Sequence[int], out: str | Path) -> dict[str, Any]:
    """Write one TensorBoard event directory per run under `out`: a scalar series per metric.

    Returns {"to", "out", "runs": {run id: {"dir", "metrics", "points"}}, "warnings", "gone"}:
    `gone`, the runs deleted (by another process) as they were read, left out, their earlier
    events kept.
    """
    runs = _runs(store, run_ids)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a directory", "move it, or give another --out")
    # Every run's directory is checked before the first is written: a file in its place
    # failed part-way, SummaryWriter's makedirs raising FileExistsError (exit 1).
    for run in runs:
        directory = out / event_dir_name(run)
        _check_locale_holds(run, directory)
        if directory.exists() and not directory.is_dir():
            raise UserError(
                f"cannot write run {run.id}'s events: {directory} is a file, not a directory; "
                "nothing was exported",
                "move it, or give another --out",
            )
        # Another store's run of the same id and name: replacing its events lost that export.
        others = sorted(_exported_from(directory) - {store.id})
        if others:
            raise UserError(
                f"{directory} holds the events of run {run.id} of another store ({others[0]}); "
                "nothing was exported",
                "give each store its own --out (tensorboard --logdir takes their parent), "
                f"or remove {directory} to replace it",
            )
    # After the checks: TensorBoard's writer imports torch (seconds), which a refusal need not.
    writer_class = _summary_writer()
    exported: dict[str, Any] = {}
    warnings: list[str] = []
    found: dict[int, Unheld] = {}
    gone: list[int] = []
    # What this export makes: --out and its missing parents, outermost first, and run dirs.
    made = [d for d in (*reversed(out.parents), out) if not d.exists()]
    made += [out / event_dir_name(run) for run in runs if not (out / event_dir_name(run)).exists()]
    # Every run's events are written here first, and moved into place only once all are:
    # an export that fails or is stopped partway leaves the earlier one of every run whole
    # (the old files went as each run's new ones were begun, and the failure's cleanup took
    # the new ones). Inside --out: the same file system, so each move is a rename. A run's
    # new files are in place before its old ones go (_swap_in), so removing this folder, as
    # a failure's cleanup or the next export after a SIGKILL does, never takes a run's only
    # events.
    staging = out / STAGING
    try:
        with _writer_errors_raised_here():
            shutil.rmtree(staging, ignore_errors=True)  # a SIGKILLed export's leftovers
            for run in runs:
                directory = out / event_dir_name(run)
                stored = metric_series(store, run.id)
                if not _still_stored(store, run.id):  # its earlier events are not swapped out
                    gone.append(run.id)
                    continue
                series = on_global_steps(stored, steps_per_epoch(run, stored, warnings))
                values = ((key, value) for key, points in series.items() for _, value, _ in points)
                found[run.id] = unheld(values, float32_held)
                with writing(directory):  # a refused write names the run's directory
                    writer = writer_class(
                        log_dir=str(staging / directory.name),
                        filename_suffix=f"{STORE_SUFFIX}{store.id}",
                    )
                    try:
                        for key, points in series.items():
                            for step, value, wall_time in points:
                                writer.add_scalar(key, value, global_step=step, walltime=wall_time)
                    finally:
                        writer.close()
                exported[str(run.id)] = {
                    "dir": str(directory),
                    "metrics": len(series),
                    "points": sum(len(p) for p in series.values()),
                }
        with stopping.shielded():  # a stop must not leave some runs swapped and some not
            for run in runs:
                if run.id not in gone:
                    _swap_in(staging / event_dir_name(run), out / event_dir_name(run))
            # The export is in place: a stop that waited for the swap, or lands from here on,
            # does not unsay it (the command exits 0 with its table, as `run` once its run is
            # stored). Settled inside the block: raised as it ended, the stop exited 143 with
            # nothing printed, every run's events in place.
            stopping.settle()
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        # As a failed report leaves no site: no event file of this export is left (a partial
        # one would show TensorBoard part of a curve), nor a directory it made.
        with stopping.shielded():  # a second Ctrl-C must not cut the cleanup short
            shutil.rmtree(staging, ignore_errors=True)
            for directory in reversed(made):
                # Not empty (something else is in it), or a name the file system encoding
                # cannot write (ValueError): the export's own failure is what is raised.
                with contextlib.suppress(OSError, ValueError):
                    directory.rmdir()
        raise
    warnings += unheld_warning("TensorBoard (32-bit floats)", found)
    return {
        "to": "tensorboard",
        "out": str(out),
        "runs": exported,
        "warnings": warnings,
        "gone": gone,
    }
