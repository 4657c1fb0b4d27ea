"""A store URL as dlperf prints it: every password in it, wherever it is written, as `***`.

A password reaches a driver two ways: in the URL's `user:password@`, and as a query option
(libpq's `?password=` and `?sslpassword=`, MySQL's `?passwd=`). Both are masked, in a URL
SQLAlchemy reads and in one it cannot (which may still carry a password). Kept apart from
`runstore` so that `integrity`, which `runstore` imports, names a store the same way.
"""

from __future__ import annotations

import contextlib
import re
from urllib.parse import unquote_plus

from sqlalchemy import make_url
from sqlalchemy.exc import ArgumentError

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
    # A string SQLAlchemy cannot read as a URL may still carry a password: the patterns mask
    # it, and an unescaped @ in a password that SQLAlchemy took for part of the host.
    with contextlib.suppress(ArgumentError, ValueError):  # ValueError: a port not a number
        url = make_url(url).render_as_string(hide_password=True)
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
