"""A store URL as dlperf prints it: every password in it, wherever it is written, as `***`.

A password reaches a driver two ways: in the URL's `user:password@`, and as a query option
(libpq's `?password=` and `?sslpassword=`, MySQL's `?passwd=`). Both are masked, in a URL
SQLAlchemy reads and in one it cannot (which may still carry a password). Kept apart from
`runstore` so that `integrity`, which `runstore` imports, names a store the same way.

Also a URL missing its `//` (`sqlite:x.db`), which is refused rather than taken as a path.
`dlperf runs list`'s own reader (`reading`) asks that too, before SQLAlchemy is imported:
SQLAlchemy is imported here only where a URL is masked.
"""

from __future__ import annotations

import contextlib
import re
from urllib.parse import unquote_plus

from dlperf.errors import UserError

MASK = "***"
# user:password@, up to the last @ before the path: an unescaped @ in a password is masked
# with it, where SQLAlchemy takes the password's tail for part of the host.
PASSWORD = re.compile(r"(://[^:/@?#]*:)[^/?#]*@")
# Query options whose value is a secret, by a part of their name (case aside, as written or
# %-escaped): libpq's password and sslpassword, MySQL drivers' passwd, a token or secret.
SECRET_OPTION = re.compile(r"password|passwd|secret|token", re.IGNORECASE)


def secret_option(key: str) -> bool:
    """Whether the query option `key` holds a secret, whose value is never printed."""
    return SECRET_OPTION.search(unquote_plus(key)) is not None


def masked_url(url: str) -> str:
    """`url` as dlperf prints or records it anywhere: with its passwords, if any, as ***."""
    from sqlalchemy import make_url  # here: `reading` imports this module, never SQLAlchemy
    from sqlalchemy.exc import ArgumentError

    # A string SQLAlchemy cannot read as a URL may still carry a password: the patterns mask
    # it, and an unescaped @ in a password that SQLAlchemy took for part of the host.
    with contextlib.suppress(ArgumentError, ValueError):  # ValueError: a port not a number
        parsed = make_url(url)
        # The password masked in the URL as typed: a rendering escapes the rest too, and named
        # sqlite:///:memory: as sqlite:///%3Amemory%3A, a database bk_%C3%BC%20x as
        # bk_%C3%BC x. All up to the host's @ is the user and password (one may hold an @).
        if parsed.password is not None:
            scheme, _, rest = url.partition("://")
            netloc, slash, tail = rest.partition("/")
            userinfo, _, host = netloc.rpartition("@")
            url = f"{scheme}://{userinfo.partition(':')[0]}:{MASK}@{host}{slash}{tail}"
    return _masked_query(PASSWORD.sub(rf"\1{MASK}@", url))


def _masked_query(url: str) -> str:
    """`url` with the values of its secret query options as ***: only in its query, between
    the first ? and a #, so that a path or a host is never touched."""
    head, mark, rest = url.partition("?")
    if not mark:
        return url
    query, hash_, fragment = rest.partition("#")
    options = []
    for option in query.split("&"):
        key, equals, _value = option.partition("=")
        options.append(f"{key}={MASK}" if equals and secret_option(key) else option)
    return f"{head}?{'&'.join(options)}{hash_}{fragment}"


# The dialects SQLAlchemy itself names (and libpq's `postgres`), and any `dialect+driver`: a
# store name that starts with one of them and a colon is a URL missing its `//`. It was taken
# as a file path: `sqlite:x.db` made a store file of that name, `sqlite:/x.db` blamed a
# directory `sqlite:`. Any other name stays a path (`run:1.db`, `dir/a:b.db`, SQLite's
# `file:` URI filenames).
DIALECTS = ("sqlite", "postgresql", "postgres", "mysql", "mariadb", "oracle", "mssql")
SLASHLESS = re.compile(r"([A-Za-z][A-Za-z0-9]*)(\+[A-Za-z0-9_]+)?:(.*)", re.DOTALL)
# What a URL of each kind holds after its `//`, where the name gives nothing after its colon.
SQLITE_REST, SERVER_REST = "PATH", "USER:PASSWORD@HOST/DATABASE"
# user:password@ in a name missing its `//` (`postgresql:/u:pw@h/db`), which PASSWORD misses.
SLASHLESS_PASSWORD = re.compile(r"^([^:/]+:/*[^:/@?#]*:)[^/?#]*@")


def missing_slashes(db: str) -> str | None:
    """The URL `db` means when it is one missing its `//` (`sqlite:x.db`: sqlite:///x.db,
    `postgresql:/u@h/db`: postgresql://u@h/db; `sqlite:` alone: sqlite:///PATH); None when
    `db` is not one (a URL, a path)."""
    match = SLASHLESS.fullmatch(db)
    if match is None or "://" in db:
        return None
    dialect, driver, rest = match.group(1), match.group(2), match.group(3)
    if dialect.lower() not in DIALECTS and driver is None:
        return None
    scheme = dialect + (driver or "")
    if dialect.lower() == "sqlite":  # sqlite:/x.db meant the absolute /x.db: sqlite:////x.db
        return f"{scheme}:///{rest or SQLITE_REST}"
    return f"{scheme}://{rest.lstrip('/') or SERVER_REST}"


def masked_slashless(db: str) -> str:
    """`db`, a URL missing its `//`, as a message may show it: its password as ***."""
    return _masked_query(SLASHLESS_PASSWORD.sub(rf"\1{MASK}@", db))


def refuse_missing_slashes(db: str) -> None:
    """Refuse, in one line, a store name that is a URL missing its `//`: it names the URL to
    write (its password as ***), and `./NAME` for a file of that very name."""
    meant = missing_slashes(db)
    if meant is None:
        return
    placeholder = meant.endswith(f"//{SERVER_REST}")  # no password to hide: keep PASSWORD
    write = meant if placeholder else masked_url(meant)
    given = masked_slashless(db)
    raise UserError(
        f"run store {given!r} looks like a URL missing its '//'",
        f"write {write}, or ./{given} for a file of that name",
    )
