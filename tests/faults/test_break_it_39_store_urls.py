"""Break-it round 39, fixer F8: a store URL's password with an unescaped @, and the id of a new
run where rows name runs that are gone.

C1 (T2). A password holding an unescaped `@` followed later by `/`, `?`, `#` or `:`
    (`u:se@cr/et@127.0.0.1:5432/db`, `u:se@cr?et@...`, `u:p@ss:w/o%rd#?x@...`) printed most of
    the password (the mask ended at its first @), the first looked up the DNS name `cr` made
    from it, and none said to write @ as %40: SQLAlchemy had split the rest of the password
    off as a database, a query or a port, so no @ was left in the host to refuse. Now an @
    after the password's first, anywhere but in a query option's value, is refused in the one
    documented line before SQLAlchemy or the driver reads the URL, and every message masks
    the password up to that last @. A URL missing its `//` (`postgresql:u:se/cr@h/db`) and
    one whose user name holds an @ and whose port is no number showed theirs too.
C2 (T2). A new run's id: SQLite kept it above every run id the metrics, tags and artifacts
    name (a run row deleted by hand leaves them), PostgreSQL let its sequence choose, so the
    new run took on the leftover rows of a run that no longer exists (its tags listed by
    `runs list --where tag...`). Both now give an id above every id any row names; on
    PostgreSQL the sequence is moved past them, under a lock that every new run takes.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore
from dlperf.store.runstore import absolute_url
from dlperf.store.urls import masked_url
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]


# C1

HINT = "holds an unescaped @ (write @ in a password as %40"
# Each URL, the parts of its password no message may show.
UNESCAPED = [
    ("postgresql+psycopg://u:se@cr/et@127.0.0.1:5432/db", ("se@", "cr/et", "cr")),
    ("postgresql://u:se@cr?et@127.0.0.1:5432/db", ("se@", "cr?et", "cr")),
    ("postgresql+psycopg://u:p@ss:w/o%rd#?x@127.0.0.1:5432/db", ("p@", "ss:w", "o%rd", "#?x")),
    ("postgresql+psycopg://u:se@cr#et@127.0.0.1:5432/db", ("se@", "cr#et")),
    ("postgresql+psycopg://u:se@cret@127.0.0.1:5432/db", ("se@", "cret")),
    ("postgresql+psycopg://u:a@b?c&d@127.0.0.1:5432/db", ("a@", "b?c", "&d")),
]


@pytest.mark.parametrize(("url", "secrets"), UNESCAPED)
@pytest.mark.parametrize("how", ["--db", "DLPERF_DB"])
def test_an_unescaped_at_in_a_password_is_refused_in_one_line_naming_none_of_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, url: str, secrets: tuple[str, ...], how: str
) -> None:
    if how == "--db":
        result = cli("--db", url, "runs", "list")
    else:
        monkeypatch.setenv("DLPERF_DB", url)
        result = cli("runs", "list")
    assert result.code == 2, result
    assert HINT in result.err and "u:***@127.0.0.1:5432/db" in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert not [s for s in secrets if s in result.err], result.err
    assert "resolve" not in result.err and "port is not a number" not in result.err


@pytest.mark.parametrize(("url", "secrets"), UNESCAPED)
def test_it_is_refused_before_any_name_is_looked_up(
    monkeypatch: pytest.MonkeyPatch, url: str, secrets: tuple[str, ...]
) -> None:
    """psycopg resolves a host through Python's getaddrinfo: the password's `cr` was one."""
    looked_up: list[Any] = []

    def getaddrinfo(*args: Any, **kwargs: Any) -> Any:
        looked_up.append(args[0])
        raise socket.gaierror(socket.EAI_NONAME, "not looked up in this test")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with pytest.raises(UserError, match="holds an unescaped @") as raised:
        RunStore.open(url)
    assert looked_up == []
    assert not [s for s in secrets if s in str(raised.value)], raised.value


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql+psycopg://u:se@cr/et@h:5432/db", "postgresql+psycopg://u:***@h:5432/db"),
        ("postgresql://u:se@cr?et@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:p@ss:w/o%rd#?x@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:pw@h/d@b", "postgresql://u:***@b"),  # refused: which @ is the host's?
        # a user name holding an @, in a URL SQLAlchemy cannot read (its port)
        ("postgresql://u@x:pw@h:port/db", "postgresql://u@x:***@h:port/db"),
        # an @ in a query option's value is the option's, and a URL with it is opened
        ("postgresql://u:pw@h/db?application_name=me@box", "postgresql://u:***@h/db?application_name=me@box"),
        ("postgresql://u@h/db?password=p@ss&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
    ],
)  # fmt: skip
def test_the_mask_runs_to_the_password_s_last_at(url: str, masked: str) -> None:
    assert masked_url(url) == masked


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://u:pw@h/db?application_name=me@box",
        "postgresql+psycopg://u@h/db?password=p@ss",
        "postgresql+psycopg://u:p%40ss@h/d%40b",
        "postgresql+psycopg://u@x@h/db",  # SQLAlchemy reads the user name to the last @
        "sqlite:////tmp/a@b/c@d.db",
    ],
)
def test_an_at_that_is_no_password_s_is_not_refused(url: str) -> None:
    assert absolute_url(url)


def test_an_at_after_the_password_in_the_database_name_is_refused() -> None:
    """`u:pw@h/d@b` is `u:pw@h/d` at host b as well as database d@b at host h: refused, and a
    database so named is written d%40b, as the hint says."""
    with pytest.raises(UserError, match="in a user name or a database's name too"):
        absolute_url("postgresql+psycopg://u:pw@h/d@b")


def test_a_url_missing_its_slashes_masks_a_password_holding_a_slash(cli: Cli) -> None:
    result = cli("--db", "postgresql:u:se/cr@h/db", "runs", "list")
    assert result.code == 2, result
    assert "looks like a URL missing its '//'" in result.err, result.err
    assert "se/cr" not in result.err and "'postgresql:u:***@h/db'" in result.err, result.err


# C2


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bk39_ids")


def _sql(url: str, *statements: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


def _leave_rows_of(url: str, tag_run: int, metric_run: int) -> None:
    """A tag and a metric of runs that do not exist, as a run row deleted by hand leaves them
    (on PostgreSQL only once its foreign keys are dropped by hand too)."""
    if not url.startswith("sqlite"):
        _sql(
            url,
            "ALTER TABLE tags DROP CONSTRAINT tags_run_id_fkey",
            "ALTER TABLE metrics DROP CONSTRAINT metrics_run_id_fkey",
        )
    _sql(
        url,
        f"INSERT INTO tags (run_id, key, value) VALUES ({tag_run}, 'inherited', 'gone')",
        "INSERT INTO metrics (run_id, key, step, value, wall_time) "
        f"VALUES ({metric_run}, 'train/loss', 1, 9.0, 0.0)",
    )


def test_a_new_run_takes_no_id_that_leftover_rows_name_on_either_backend(
    store_url: str,
) -> None:
    store = RunStore.open(store_url)
    first = store.create_run("a", "run", {})
    _leave_rows_of(store_url, first + 1, first + 2)
    new = store.create_run("b", "run", {})
    assert new == first + 3
    assert store.get_run(new).tags == {} and store.metrics(new, "train/loss") == []
    assert store.create_run("c", "run", {}) == new + 1  # and the ids go on from there
    assert [r.tags for r in dlperf.Store(store_url).runs()] == [{}, {}, {}]
    store.engine.dispose()


def test_a_deleted_run_s_id_is_not_given_again_on_either_backend(store_url: str) -> None:
    store = RunStore.open(store_url)
    store.create_run("a", "run", {})
    gone = store.create_run("b", "run", {})
    store.finish_run(gone, "finished")
    store.delete_runs([gone])
    assert store.create_run("c", "run", {}) == gone + 1
    store.engine.dispose()


def test_runs_made_at_once_past_leftover_rows_get_distinct_ids(store_url: str) -> None:
    """Four writers at once, each opening the store for itself: every new id is above the
    leftover rows' and none is given twice (on PostgreSQL the sequence is moved under a lock
    that every new run takes)."""
    store = RunStore.open(store_url)
    first = store.create_run("a", "run", {})
    _leave_rows_of(store_url, first + 5, first + 9)
    ids: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def write() -> None:
        try:
            mine = RunStore.open(store_url)
            start.wait(timeout=60)
            ids.extend(mine.create_run("w", "run", {}) for _ in range(3))
            mine.engine.dispose()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and len(ids) == 12, errors
    assert len(set(ids)) == 12 and min(ids) > first + 9, ids
    store.engine.dispose()
