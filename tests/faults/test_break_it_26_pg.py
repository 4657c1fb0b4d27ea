"""Break-it round 26, part P3, fixer B: a PostgreSQL store under a server's settings.

1. A database in SQL_ASCII (or a session whose client_encoding is SQL_ASCII): psycopg hands
   text back as bytes, and every command was a 116-line TypeError from SQLAlchemy's reading
   of the server's version.
2. A database in LATIN1 (or a session whose client_encoding is LATIN1): a name, a tag or a
   value with a character LATIN1 cannot hold was a UnicodeEncodeError traceback. dlperf's
   sessions now speak UTF-8 whatever the URL, role or database says; a database that is not
   UTF8 is read, and refused to a writer at open, in one line naming its encoding.
3. statement_timeout (the URL's options, a role's setting) cancelling a query: a 92-line
   QueryCanceled traceback from `runs show`, and psycopg's OperationalError out of
   dlperf.track. Now one line naming the setting; a cancelled write wrote nothing.
4. default_transaction_isolation=serializable: writes at once (`runs tag`, track's writers)
   failed with SerializationFailure. dlperf's sessions run at READ COMMITTED, which its writes
   are made for (row locks, compare-and-set updates, upserts).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import DatabaseError

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.conftest import POSTGRES, TINY, CliResult, fresh_store_url
from tests.faults.test_break_it_10_store import _schema
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]
WAIT_S = 60.0  # how long a test waits for an event another session makes happen


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "fx26b")


def _with_options(url: str, *settings: str) -> str:
    """`url` with `-c` settings added to its libpq options (the fixture's search_path kept)."""
    parsed = make_url(url)
    options = " ".join([str(parsed.query.get("options", "")), *(f"-c{s}" for s in settings)])
    return parsed.update_query_dict({"options": options.strip()}).render_as_string(
        hide_password=False
    )


@pytest.mark.parametrize(
    "encoding", ["options=-cclient_encoding=SQL_ASCII", "client_encoding=latin1"]
)
def test_a_session_not_in_utf8_reads_and_writes_any_text(
    pg_url: str, encoding: str, cli: Cli
) -> None:
    """SQL_ASCII: every command was a TypeError; LATIN1: an emoji a UnicodeEncodeError."""
    key, value = encoding.split("=", 1)
    url = pg_url
    if key == "options":
        url = _with_options(pg_url, value.removeprefix("-c"))
    else:
        url = make_url(pg_url).update_query_dict({key: value}).render_as_string(False)
    listed = cli("--db", url, "runs", "list")
    assert listed.code == 0, listed.err
    with dlperf.track("ünï🚀", {"lr": 0.1}, store=url) as r:
        r.log(1, loss=0.5)
    tagged = cli("--db", url, "runs", "tag", "1", "e=€🚀")
    assert tagged.code == 0, tagged.err
    store = RunStore.open(url, create=False)
    try:
        run = store.get_run(1)
        assert (run.name, run.tags, run.status) == ("ünï🚀", {"e": "€🚀"}, "finished")
    finally:
        store.engine.dispose()


@pytest.fixture
def other_database() -> Iterator[Callable[[str], str]]:
    """Makes databases in an encoding (TEMPLATE template0), dropped after; skips where the
    test role may not create databases."""
    if not POSTGRES:
        pytest.skip("PostgreSQL store tests need a server: set DLPERF_TEST_POSTGRES_URL")
    admin = create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    made: list[str] = []

    def make(encoding: str) -> str:
        name = f"dlperf_t26_{encoding.lower()}_{uuid.uuid4().hex[:8]}"
        with admin.connect() as conn:
            try:
                conn.execute(
                    text(
                        f"CREATE DATABASE {name} ENCODING '{encoding}' TEMPLATE template0 "
                        "LC_COLLATE 'C' LC_CTYPE 'C'"
                    )
                )
            except DatabaseError as e:
                pytest.skip(f"the test role may not create a database: {e.orig}")
        made.append(name)
        return make_url(POSTGRES).set(database=name).render_as_string(hide_password=False)

    yield make
    with admin.connect() as conn:
        for name in made:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
def test_a_database_not_in_utf8_is_read_and_refused_to_a_writer(
    other_database: Callable[[str], str], encoding: str, cli: Cli, tmp_path: Path
) -> None:
    url = other_database(encoding)
    assert cli("--db", url, "runs", "list").code == 0  # SQL_ASCII: a TypeError traceback
    with pytest.raises(UserError) as refused, dlperf.track("ünï🚀", store=url) as r:
        r.log(1, loss=0.5)
    assert f"encoding {encoding}" in str(refused.value)
    assert "ENCODING 'UTF8'" in str(refused.value)
    exp = tmp_path / "exp.toml"
    exp.write_text(TINY.format(epochs=1))
    one_line(cli("--db", url, "run", str(exp), "--set", "run.name=🚀x"), 2, f"encoding {encoding}")
    one_line(cli("--db", url, "runs", "tag", "1", "e=€🚀"), 2, f"encoding {encoding}")
    # Nothing half-written: the refusal came before the store was made.
    engine = create_engine(url, connect_args={"client_encoding": "UTF8"})
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            ).scalar()
    finally:
        engine.dispose()
    assert tables == 0


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s"
        time.sleep(0.05)


def test_a_statement_timeout_is_one_line_and_a_cancelled_write_writes_nothing(
    pg_url: str, cli: Cli
) -> None:
    with dlperf.track("kept", store=pg_url) as r:
        r.log(1, loss=0.5)
    url = _with_options(pg_url, "statement_timeout=1000")
    schema = _schema(pg_url)
    assert POSTGRES is not None
    admin = create_engine(POSTGRES)
    try:
        store = RunStore.open(url, create=False)
        # A read held behind a lock runs into the timeout for certain, however fast the host.
        with admin.begin() as conn:
            conn.execute(text(f"LOCK TABLE {schema}.metrics IN ACCESS EXCLUSIVE MODE"))
            with pytest.raises(UserError) as cancelled:
                store.metrics(1, "train/loss")
            shown = cli("--db", url, "runs", "show", "1")
        store.engine.dispose()
        assert "statement_timeout (1s)" in str(cancelled.value)
        assert cancelled.value.exit_code == 1  # type: ignore[attr-defined]
        one_line(shown, 1, "statement_timeout (1s)", "-cstatement_timeout=0")
        # A write that runs past it: a trigger that sleeps longer than the timeout.
        with admin.begin() as conn:
            conn.execute(
                text(
                    f"CREATE FUNCTION {schema}.slow() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN PERFORM pg_sleep(60); RETURN NULL; END $$"
                )
            )
            conn.execute(
                text(
                    f"CREATE TRIGGER slow BEFORE INSERT ON {schema}.metrics "
                    f"FOR EACH STATEMENT EXECUTE FUNCTION {schema}.slow()"
                )
            )
        # psycopg's OperationalError before.
        with pytest.raises(UserError) as stopped, dlperf.track("cut", store=url) as r:
            r.log(1, loss=0.5)
        assert "statement_timeout (1s)" in str(stopped.value)
        reader = RunStore.open(pg_url, create=False)
        try:
            run = reader.get_run(2)
            assert run.status == "failed" and "statement_timeout" in str(run.error)
            assert reader.metric_keys(2) == []  # the cancelled insert wrote nothing
            assert reader.metrics(1, "train/loss") == [(1, 0.5)]
        finally:
            reader.engine.dispose()
    finally:
        admin.dispose()


def test_writes_at_once_under_serializable_isolation_succeed(pg_url: str) -> None:
    with dlperf.track("tagged", store=pg_url) as r:
        r.log(1, loss=0.5)
    url = _with_options(pg_url, "default_transaction_isolation=serializable")
    schema = _schema(pg_url)
    assert POSTGRES is not None
    admin = create_engine(POSTGRES)
    store = RunStore.open(url, create=False, writes=True)
    outcome: list[BaseException | dict[str, str]] = []

    def tag() -> None:
        try:
            outcome.append(store.set_tags(1, {"a": "1"}))
        except BaseException as e:
            outcome.append(e)

    try:
        with admin.connect() as conn:
            # Another writer of run 1, whose update commits once the tagger waits for its row:
            # at SERIALIZABLE (or REPEATABLE READ) the tagger then failed at once.
            conn.execute(text(f"UPDATE {schema}.runs SET name = 'renamed' WHERE id = 1"))
            tagger = threading.Thread(target=tag)
            tagger.start()
            _wait_for(
                lambda: bool(
                    conn.execute(
                        text(
                            "SELECT count(*) FROM pg_locks WHERE NOT granted "
                            "AND pid <> pg_backend_pid()"
                        )
                    ).scalar()
                ),
                "tagger waiting for the row",
            )
            conn.commit()
        tagger.join(WAIT_S)
        assert not tagger.is_alive()
        assert outcome == [{"a": "1"}], outcome
        assert store.get_run(1).name == "renamed"
    finally:
        store.engine.dispose()
        admin.dispose()
