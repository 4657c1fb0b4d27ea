"""Break-it round 69, fixer F8: PostgreSQL's idle_in_transaction_session_timeout.

Before: a session the server closed because dlperf left it idle inside an open transaction
(SQLSTATE 25P03, "terminating connection due to idle-in-transaction timeout") was told in
libpq's words, by command and timing: "cannot open run store ...: terminating connection due
to idle-in-transaction timeout" (exit 2, the code of bad input), "run store ... went away"
(exit 1, though the server never left) or, where libpq lost the server's message as the
socket closed, "server closed the connection unexpectedly; This probably means the server
terminated abnormally". statement_timeout and idle_session_timeout each had one line naming
the setting and how to lift it.

Now: one line, exit 1, at open and mid-command, naming idle_in_transaction_session_timeout
(with the session's value: read as it connects, or from the URL's ?options= / PGOPTIONS
where the server's message was lost) and how to lift it for dlperf's sessions. And a
read no longer sits idle inside a transaction at all: a PostgreSQL store's reads run in
autocommit (its writes still in one READ COMMITTED transaction each), so the Python work
between a read session's queries (`doctor`, `report` at 20 ms) is not killed by the setting.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.orm import Session

import dlperf
from dlperf.errors import StoreGone, UserError
from dlperf.store import RunStore, migrations
from dlperf.store.schema import Run
from tests.conftest import fresh_store_url
from tests.faults.test_break_it_26_pg import _with_options

SETTING = "idle_in_transaction_session_timeout"
LIFT = (
    "try again; to lift it for dlperf's sessions add -cidle_in_transaction_session_timeout=0 "
    "to the URL's ?options=, or ALTER ROLE {role} SET idle_in_transaction_session_timeout = 0"
)


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "fx69f8")


def _said(name: str, value: str) -> str:
    return (
        f"run store {name}: the server closed a session that sat idle inside a transaction "
        f"past its {SETTING} ({value})"
    )


def test_a_write_held_idle_in_its_transaction_mid_command_is_one_line(pg_url: str) -> None:
    """Mid-command: a write transaction of an open store, left idle past the session's
    200 ms, is closed by the server; the next statement says the setting, its value as the
    session read it, and its fix: exit 1, not StoreGone ("went away")."""
    with dlperf.track("idle", store=pg_url) as r:
        r.log(1, loss=0.5)
    url = _with_options(pg_url, f"{SETTING}=200")
    store = RunStore.open(url, create=False)
    try:
        with pytest.raises(UserError) as closed, Session(store._writer) as s, s.begin():
            s.execute(text("SELECT 1"))
            time.sleep(0.6)
            s.execute(text("SELECT 1"))
    finally:
        store.engine.dispose()
    error = closed.value
    assert not isinstance(error, StoreGone)
    assert error.exit_code == 1
    role = make_url(pg_url).username
    assert error.message.startswith("run store postgresql+psycopg://"), error.message
    assert error.message.endswith(_said("", "200ms")[len("run store ") :]), error.message
    assert error.hint == LIFT.format(role=role)


def test_reads_do_not_sit_idle_inside_a_transaction(pg_url: str) -> None:
    """A read session's Python work between its queries (here 0.5 s of it) is no longer
    spent inside an open transaction: under a 100 ms idle_in_transaction_session_timeout
    the second query of the session reads (it was closed by the server: `doctor` and
    `report` failed so at 20 ms). Writes still run in one READ COMMITTED transaction."""
    with dlperf.track("idle", store=pg_url) as r:
        r.log(1, loss=0.5)
    store = RunStore.open(_with_options(pg_url, f"{SETTING}=100"), create=False)
    try:
        with Session(store.engine) as s:
            assert s.scalar(select(func.count()).select_from(Run)) == 1
            time.sleep(0.5)
            assert s.scalar(select(Run.name)) == "idle"
        with Session(store._writer) as s, s.begin():
            level = s.scalar(text("SHOW transaction_isolation"))
            began = s.scalar(text("SELECT now()"))
            time.sleep(0.01)
            assert (level, s.scalar(text("SELECT now()"))) == ("read committed", began)
        assert store.get_run(r.id).status == "finished"
        assert store.metrics(r.id, "train/loss") == [(1, 0.5)]
    finally:
        store.engine.dispose()


def test_a_store_whose_open_sits_idle_in_a_transaction_says_the_setting(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At open: the transaction that makes a new store's tables, held idle (here made slow
    on purpose) past the URL's 100 ms, says the one line, exit 1 (was "cannot open run store
    ...: terminating connection due to idle-in-transaction timeout", exit 2, or libpq's
    "server closed the connection unexpectedly ... terminated abnormally")."""
    facts = migrations._facts

    def slow(conn: Connection, tables: set[str]) -> Any:
        time.sleep(0.4)
        return facts(conn, tables)

    monkeypatch.setattr(migrations, "_facts", slow)
    url = _with_options(pg_url, f"{SETTING}=100")
    with pytest.raises(UserError) as closed:
        RunStore.open(url)
    error = closed.value
    assert not isinstance(error, StoreGone)
    assert error.exit_code == 1
    assert error.message.endswith(_said("", "100ms")[len("run store ") :]), error.message
    assert error.hint == LIFT.format(role=make_url(pg_url).username)


@pytest.mark.parametrize(
    ("options", "env", "value"),
    [
        (f"-csearch_path=s -c{SETTING}=1", None, "1ms"),
        (f"--{SETTING}=5s", None, "5s"),
        (None, f"-c {SETTING}=20", "20ms"),
    ],
)
def test_a_lost_message_is_told_by_the_session_setting(
    options: str | None, env: str | None, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where libpq lost the server's message ("server closed the connection unexpectedly"),
    the URL's ?options= (else PGOPTIONS) says the setting was on: the same line."""
    from dlperf.store.runstore import _idle_in_transaction

    if env is None:
        monkeypatch.delenv("PGOPTIONS", raising=False)
    else:
        monkeypatch.setenv("PGOPTIONS", env)
    url = make_url("postgresql+psycopg://who@h/d")
    if options is not None:
        url = url.update_query_dict({"options": options})
    lost = psycopg.OperationalError(
        "consuming input failed: server closed the connection unexpectedly\n"
        "\tThis probably means the server terminated abnormally"
    )
    closed = _idle_in_transaction("S", url, lost)
    assert closed is not None
    assert closed.message == _said("S", value)
    assert closed.hint == LIFT.format(role="who")
    # Without the setting on, a lost connection is not blamed on it.
    monkeypatch.delenv("PGOPTIONS", raising=False)
    assert _idle_in_transaction("S", make_url("postgresql+psycopg://who@h/d"), lost) is None
    off = url.update_query_dict({"options": f"-c{SETTING}=0"})
    assert _idle_in_transaction("S", off, lost) is None
