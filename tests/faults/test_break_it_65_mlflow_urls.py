"""Round 65 (Y2 causes 1 and 3): `runs export --to mlflow` and a database URL's own mistakes.

Before: a driver option libpq refuses (`?connect_timeout=abc`, `?foo=bar`, `?sslmode=nonsense`,
or `PGCONNECT_TIMEOUT=abc` in the environment, which the line never named) was told with the
hint "is the database server running, and are the URL's user, password and database right?",
blaming the server and the credentials for an option; and a password holding an unescaped @
(`postgres://u:Zq@Xs9@127.0.0.1/db`) was masked in dlperf's part of the line while the driver's
text after it read "failed to resolve host 'Xs9@127.0.0.1'", the rest of the password in clear.

Now a refused option gets a hint naming the URL's options and the PG* variables, and an
unescaped @ is refused before anything connects, as the run store refuses it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import dlperf
from tests.conftest import CliResult

pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
pytest.importorskip("psycopg", reason="the PostgreSQL driver")
pytestmark = pytest.mark.timeout(60)

Cli = Callable[..., CliResult]
OPTION_HINT = (
    "(the driver refuses an option: check the URL's ?name=value options and the PG* "
    "environment variables (PGCONNECT_TIMEOUT, PGSSLMODE))"
)


@pytest.fixture
def one_run(db: str) -> str:
    with dlperf.track("y2", config={"x": 1}, store=db) as run:
        run.log(1, loss=1.0)
    return db


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
