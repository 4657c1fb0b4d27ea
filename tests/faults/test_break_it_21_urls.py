"""Break-it 21, P3 C1 and C5: a store URL's password is never printed, however it is given,
and a URL dlperf cannot use says what it takes.

- A password given as a query option (libpq's `?password=`, `?sslpassword=`) was printed
  whole in every message that names the store: only `user:password@` was masked.
- A password holding an unescaped `@` was masked by dlperf, but SQLAlchemy read its tail as
  part of the host, and the driver's own error quoted that host (`'tail@127.0.0.1'`).
- `?connect_timeout=1&connect_timeout=2` reached libpq as a Python tuple, and an unknown
  scheme said only SQLAlchemy's "Can't load plugin".

The masking needs no server: a refused connection to a closed port on 127.0.0.1 names the
store too. One test runs against a PostgreSQL server (`DLPERF_TEST_POSTGRES_URL`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from dlperf.store import RunStore, masked_url
from tests.conftest import CliResult, fresh_store_url

SECRET = "TopSecret42"


@pytest.fixture(scope="module")
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: bound once to learn a free one, then
    closed, so that a connection to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _leaks(result: CliResult, *secrets: str) -> list[str]:
    said = result.out + result.err
    return [secret for secret in secrets if secret in said]


@pytest.mark.parametrize("key", ["password", "sslpassword", "PASSWORD"])
def test_query_password_is_masked(
    cli: Callable[..., CliResult], closed_port: int, key: str
) -> None:
    url = f"postgresql+psycopg://dlperf@127.0.0.1:{closed_port}/x?{key}={SECRET}"
    result = cli("--db", url, "runs", "list")
    assert result.code == 2, result
    assert not _leaks(result, SECRET), result.err
    assert f"{key}=***" in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1, result.err


def test_query_password_is_masked_in_repairs_refusal(
    cli: Callable[..., CliResult], closed_port: int, tmp_path: Path
) -> None:
    url = f"postgresql+psycopg://dlperf@127.0.0.1:{closed_port}/x?password={SECRET}"
    result = cli("--db", url, "runs", "repair", str(tmp_path / "r.db"))
    assert result.code == 2, result
    assert "runs repair reads a SQLite store file" in result.err, result.err
    assert not _leaks(result, SECRET), result.err
    assert "password=***" in result.err, result.err


@pytest.mark.parametrize(
    ("userinfo", "secrets"),
    [
        ("dlperf:top@Secret42", ("Secret42", "top@")),
        ("dlperf:aa@Bb42@Cc42", ("Bb42", "Cc42", "aa@")),
    ],
)
def test_unescaped_at_in_password_is_refused_before_connecting(
    cli: Callable[..., CliResult], closed_port: int, userinfo: str, secrets: tuple[str, ...]
) -> None:
    url = f"postgresql+psycopg://{userinfo}@127.0.0.1:{closed_port}/x"
    result = cli("--db", url, "runs", "list")
    assert result.code == 2, result
    assert not _leaks(result, *secrets), result.err
    assert "write @ in a password as %40" in result.err, result.err
    # Refused before any connection: not the driver's "failed to resolve host".
    assert "resolve" not in result.err and "refused" not in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1, result.err


def test_repeated_connect_timeout_is_named_not_a_tuple(
    cli: Callable[..., CliResult], closed_port: int
) -> None:
    url = (
        f"postgresql+psycopg://dlperf:{SECRET}@127.0.0.1:{closed_port}/x"
        "?connect_timeout=1&connect_timeout=2"
    )
    result = cli("--db", url, "runs", "list")
    assert result.code == 2, result
    assert "connect_timeout is given 2 times (1, 2)" in result.err, result.err
    assert "give it once" in result.err, result.err
    assert "('1', '2')" not in result.err, result.err
    assert not _leaks(result, SECRET), result.err


def test_repeated_password_option_names_no_value(
    cli: Callable[..., CliResult], closed_port: int
) -> None:
    url = f"postgresql+psycopg://dlperf@127.0.0.1:{closed_port}/x?password={SECRET}&password=Ab12"
    result = cli("--db", url, "runs", "list")
    assert result.code == 2, result
    assert "password is given 2 times" in result.err, result.err
    assert not _leaks(result, SECRET, "Ab12"), result.err


@pytest.mark.parametrize("url", ["bogus://x", "postgresql+bogus://u@h/db"])
def test_unknown_scheme_names_the_schemes_dlperf_takes(
    cli: Callable[..., CliResult], url: str
) -> None:
    result = cli("--db", url, "runs", "list")
    assert result.code == 2, result
    assert "Can't load plugin" not in result.err, result.err
    assert "sqlite:///PATH" in result.err and "postgresql+psycopg://" in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1, result.err


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            f"postgresql+psycopg://u@h/db?password={SECRET}&sslmode=require",
            "postgresql+psycopg://u@h/db?password=***&sslmode=require",
        ),
        (
            f"postgresql://u:{SECRET}@h/db?sslpassword={SECRET}&sslpassword=x",
            "postgresql://u:***@h/db?sslpassword=***&sslpassword=***",
        ),
        # Not a URL SQLAlchemy reads (a port not a number): the pattern masks it still.
        (
            f"postgresql://u@h:abc/db?a=1&password={SECRET}#f",
            "postgresql://u@h:abc/db?a=1&password=***#f",
        ),
        # A path is no query: nothing in it is masked (SQLAlchemy escapes its =).
        # as typed (round 28): a URL without a password is not rebuilt, which escaped it
        ("sqlite:////tmp/a&password=x.db", "sqlite:////tmp/a&password=x.db"),
    ],
)
def test_masked_url(url: str, shown: str) -> None:
    assert masked_url(url) == shown


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "urls")


def test_a_working_query_password_is_masked_once_open(
    cli: Callable[..., CliResult], pg_url: str
) -> None:
    """A URL whose password is a query option opens the store (libpq reads it); a message
    that names the store after it opened (here a schema edited by hand) masks it too."""
    parsed = make_url(pg_url)
    password = parsed.password
    assert password, "DLPERF_TEST_POSTGRES_URL carries its password in user:password@"
    url = parsed.set(password=None).update_query_dict({"password": password})
    as_given = url.render_as_string(hide_password=False)
    RunStore.open(as_given).engine.dispose()  # made, at the current schema
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE runs DROP COLUMN error"))
    engine.dispose()
    result = cli("--db", as_given, "runs", "list")
    assert result.code == 2, result
    assert "is not as dlperf made it" in result.err, result.err
    assert f"password={password}" not in result.out + result.err, result.err
    assert "password=***" in result.err, result.err
