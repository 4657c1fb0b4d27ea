"""Round 63 (W2 causes 1-3): `runs export --to mlflow` and database tracking URIs.

Before: `--uri postgres://user:PASSWORD@...` (libpq's spelling, which the run store reads as
postgresql://) went to MLflow as it was, which refused it in a message repeating the URI with
its password in clear after dlperf's masked one; that spelling also slipped past the refusal
of the run store itself. A PostgreSQL tracking URI that could not be reached (a refused port,
a wrong password) took about two minutes and 37 lines of MLflow's engine retries before the
one line. `mysql://` said "needs MySQLdb ... pip install 'dlperf[mlflow]'", which does not
install it. A port that is not a number ended in SQLAlchemy's traceback out of MLflow, exit 1.

Now: postgres:// is read as postgresql://, as the run store reads it; every secret of the URI
is masked inside MLflow's and the driver's text too; a database server is connected to first,
with a short timeout, and one that cannot be reached is refused at once in one line; a missing
driver is named with its own package; an unreadable URL is refused in one line.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import make_url

import dlperf
from tests.conftest import POSTGRES, CliResult, fresh_store_url

pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")

# Each of these took MLflow's two minutes of retries before: the limit fails them.
pytestmark = pytest.mark.timeout(60)

Cli = Callable[..., CliResult]
SECRET = "s3cretpw"
CONNECT_HINT = (
    "(is the database server running, and are the URL's user, password and database right?)"
)


@pytest.fixture
def one_run(db: str) -> str:
    """The `cli` store, holding run 1: an export gets past its run ids to MLflow."""
    with dlperf.track("f4", config={"x": 1}, store=db) as run:
        run.log(1, loss=1.0)
    return db


def _one_line(result: CliResult) -> str:
    assert result.code == 2, result.err
    assert result.out == ""
    assert result.err.count("\n") == 1, result.err
    assert SECRET not in result.err
    return result.err


def test_postgres_spelling_is_read_as_postgresql_and_its_password_unsaid(
    cli: Cli, one_run: str
) -> None:
    uri = f"postgres://dlperf:{SECRET}@127.0.0.1:1/f4"  # a refused port: nothing leaves the host
    err = _one_line(cli("runs", "export", "1", "--to", "mlflow", "--uri", uri))
    start = (
        "error: MLflow at postgresql://dlperf:***@127.0.0.1:1/f4: cannot connect to its database "
        '(connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused'
    )
    assert err.startswith(start), err
    assert err.endswith(f") {CONNECT_HINT}\n"), err


def test_unreachable_postgresql_is_refused_at_once_in_one_line(cli: Cli, one_run: str) -> None:
    uri = "postgresql://dlperf:x@127.0.0.1:1/f4"
    err = _one_line(cli("runs", "export", "1", "--to", "mlflow", "--uri", uri))
    assert err.startswith("error: MLflow at postgresql://dlperf:***@127.0.0.1:1/f4: cannot connect")
    assert "retried" not in err and "Connection refused" in err


def test_a_secret_is_masked_inside_mlflows_own_message(cli: Cli, one_run: str) -> None:
    """A scheme MLflow refuses: its message repeats the URI, now masked as dlperf's is."""
    uri = f"postgres+psycopg://u:{SECRET}@127.0.0.1:1/x?sslpassword={SECRET}2"
    err = _one_line(cli("runs", "export", "1", "--to", "mlflow", "--uri", uri))
    masked = "postgres+psycopg://u:***@127.0.0.1:1/x?sslpassword=***"
    assert err.startswith(f"error: MLflow at {masked}: "), err
    assert f"got unsupported URI '{masked}'" in err


def test_mysql_without_its_driver_names_the_package(cli: Cli, one_run: str) -> None:
    if importlib.util.find_spec("MySQLdb") is not None:
        pytest.skip("mysqlclient is installed here")
    uri = f"mysql://u:{SECRET}@127.0.0.1:1/x"
    err = _one_line(cli("runs", "export", "1", "--to", "mlflow", "--uri", uri))
    assert err == (
        "error: MLflow at mysql://u:***@127.0.0.1:1/x: its database driver MySQLdb is not "
        "installed, and dlperf's extras do not carry it (pip install mysqlclient, or name a "
        "driver that is installed: dialect+driver://...)\n"
    )


def test_a_port_that_is_not_a_number_is_one_line(cli: Cli, one_run: str) -> None:
    uri = f"postgresql://u:{SECRET}@127.0.0.1:abc/db"
    err = _one_line(cli("runs", "export", "1", "--to", "mlflow", "--uri", uri))
    assert err == (
        "error: MLflow at postgresql://u:***@127.0.0.1:abc/db: not a database URL (invalid "
        "literal for int() with base 10: 'abc') (its port, after the host's colon, is a "
        "number: dialect://USER:PASSWORD@HOST:PORT/DB)\n"
    )


@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL run store of its own schema, holding run 1 (skipped without a server)."""
    for url in fresh_store_url("postgresql", tmp_path, "bk63m"):
        with dlperf.track("f4", config={"x": 1}, store=url) as run:
            run.log(1, loss=1.0)
        yield url


def test_postgres_spelling_of_the_run_store_itself_is_refused(cli: Cli, pg_store: str) -> None:
    plain = make_url(pg_store).set(drivername="postgresql").render_as_string(hide_password=False)
    uri = "postgres://" + plain.removeprefix("postgresql://")
    result = cli("--db", pg_store, "runs", "export", "1", "--to", "mlflow", "--uri", uri)
    assert result.code == 2, result.err
    assert result.err.count("\n") == 1, result.err
    assert "--uri names the run store itself" in result.err, result.err


@pytest.mark.skipif(not POSTGRES, reason="needs a server: set DLPERF_TEST_POSTGRES_URL")
def test_a_wrong_password_is_refused_at_once_in_one_line(cli: Cli, one_run: str) -> None:
    assert POSTGRES is not None
    wrong = make_url(POSTGRES).set(password=SECRET)
    uri = wrong.render_as_string(hide_password=False)
    err = _one_line(cli("runs", "export", "1", "--to", "mlflow", "--uri", uri))
    assert err.startswith(f"error: MLflow at {wrong.render_as_string()}: cannot connect"), err
    assert "password authentication failed" in err and err.endswith(f"{CONNECT_HINT}\n")


# Round 65 (Y2 causes 1 and 3): a refused driver option was blamed on the server and the
# credentials ("is the database server running ..."); a password holding an unescaped @ had
# its tail printed by the driver as a host. Now the first gets a hint naming the URL's
# options and the PG* variables, and the second is refused before anything connects.
OPTION_HINT = (
    "(the driver refuses an option: check the URL's ?name=value options and the PG* "
    "environment variables (PGCONNECT_TIMEOUT, PGSSLMODE))"
)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("?connect_timeout=abc", "bad value for connect_timeout: 'abc'"),
        ("?foo=bar", 'invalid connection option "foo"'),
    ],
)
def test_an_option_the_driver_refuses_is_named_as_such(
    cli: Cli, one_run: str, query: str, reason: str
) -> None:
    uri = f"postgresql://u:pw@127.0.0.1:1/y2{query}"  # refused before any connection is tried
    done = cli("runs", "export", "1", "--to", "mlflow", "--uri", uri)
    assert done.code == 2, done.err
    assert done.err == (
        f"error: MLflow at postgresql://u:***@127.0.0.1:1/y2{query}: cannot connect to its "
        f"database ({reason}) {OPTION_HINT}\n"
    )


def test_a_bad_pgconnect_timeout_gets_the_options_hint(
    cli: Cli, one_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "abc")
    done = cli("runs", "export", "1", "--to", "mlflow", "--uri", "postgresql://u:pw@127.0.0.1:1/y2")
    assert done.code == 2, done.err
    assert done.err.endswith(f"(bad value for connect_timeout: 'abc') {OPTION_HINT}\n"), done.err


def test_an_unescaped_at_in_the_password_is_refused_unsaid(cli: Cli, one_run: str) -> None:
    uri = "postgres://dlperf:Zq@Xs9@127.0.0.1:1/y2"
    done = cli("runs", "export", "1", "--to", "mlflow", "--uri", uri)
    assert done.code == 2, done.err
    assert done.err == (
        "error: MLflow at postgresql://dlperf:***@127.0.0.1:1/y2: its user name or password "
        "holds an unescaped @ (write @ in a password as %40, e.g. postgresql://user:p%40ss@host/db)\n"
    )
    assert "Xs9" not in done.err
