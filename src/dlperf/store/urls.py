"""A store URL as dlperf prints it: every password in it, wherever it is written, as `***`.

A password reaches a driver two ways: in the URL's `user:password@`, and as a query option
(libpq's `?password=` and `?sslpassword=`, MySQL's `?passwd=`). Both are masked, in a URL
SQLAlchemy reads and in one it cannot (which may still carry a password). Kept apart from
`runstore` so that `integrity`, which `runstore` imports, names a store the same way.

Also a URL missing its `//` (`sqlite:x.db`), which is refused rather than taken as a path.
`dlperf runs list`'s own reader (`reading`) asks that too, before SQLAlchemy is imported:
nothing here imports it (a password is found as SQLAlchemy's URL pattern finds it).

And a store path as a line shows it (`shown`), saying where a name in it starts or ends with
white space (`absent`), for `reading` too; a URL with such an edge is refused (`refuse_edged`).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

from dlperf.errors import UserError
from dlperf.parsing import edged, name_text, one_line

MASK = "***"
# user:password@ as SQLAlchemy's URL pattern reads it: a user name up to a : or / (it may
# hold an @), a password up to its first @ (it may hold / ? # : &). Searched for anywhere, so
# that a string SQLAlchemy cannot read as a URL (a scheme with a space) is masked too.
PASSWORD = re.compile(r"://[^:/]*:([^@]*)@")
# user[:password]@ then host[:port], as SQLAlchemy's URL pattern reads them: a password runs
# to its first @ and may hold / and , (a split at the first / cut inside it).
HOST_PART = re.compile(r"(?:[^:/]*(?::[^@]*)?@)?([^/?]*)")
# Query options whose value is a secret, by a part of their name (case aside, as written or
# %-escaped): libpq's password and sslpassword, MySQL drivers' passwd, a token or secret.
SECRET_OPTION = re.compile(r"password|passwd|secret|token", re.IGNORECASE)


def secret_option(key: str) -> bool:
    """Whether the query option `key` holds a secret, whose value is never printed."""
    return SECRET_OPTION.search(unquote_plus(key)) is not None


def host_part(url: str) -> str:
    """The host[:port] part of `url` (libpq's host list, h1:5432,h2:5433, in it), found as
    PASSWORD finds the user and password before it."""
    match = HOST_PART.match(url.partition("://")[2])
    return match.group(1) if match else ""


def password_span(url: str) -> tuple[int, int] | None:
    """Where the password of `url`'s user:password@ starts and ends (the index of the @ that
    ends it); None for a URL without one. SQLAlchemy ends it at its first @; where another @
    follows outside a query option's value (`stray_at`), the password held an unescaped @,
    and it runs to the last such @: the mask ended at its first, and `u:se@cr/et@host/db`
    was shown as `u:***@cr/et@host/db`."""
    found = PASSWORD.search(url)
    if found is None:
        return None
    return found.start(1), max(found.end(1), stray_at(url, found.end()))


def unescaped_at(url: str) -> bool:
    """Whether the password in `url` holds an unescaped @: another @ follows the one that
    SQLAlchemy ends it at, outside a query option's value. SQLAlchemy took the password's tail
    for the host (`u:se@cret@h`, refused by its @), the database (`u:se@cr/et@h/db`: the host
    was `cr`, looked up before any line said so), the query (`u:se@cr?et@h`) or the port
    (`u:p@ss:w@h`, "not a number"). One in the database's name is refused too (`u:pw@h/d@b`
    reads either way): written %40 as in a password, SQLAlchemy decodes it."""
    found = PASSWORD.search(url)
    return found is not None and stray_at(url, found.end()) >= 0


def stray_at(url: str, after: int) -> int:
    """The index of the last @ in `url` from `after` on that no query option's value holds:
    in the host, the port or the database's name (up to the first ?), or in an option's name;
    -1 where there is none. A value may hold one (`?application_name=me@box`)."""
    query = url.find("?", after)
    if query < 0:
        return url.rfind("@", after)
    last, start = url.rfind("@", after, query), query + 1
    for option in url[start:].split("&"):
        name = option.partition("=")[0]
        if "@" in name:
            last = start + name.rindex("@")
        start += len(option) + 1
    return last


def masked_url(url: str) -> str:
    """`url` as dlperf prints or records it anywhere: with its passwords, if any, as ***. The
    password is masked in the URL as typed: a rendering escapes the rest too, and named
    sqlite:///:memory: as sqlite:///%3Amemory%3A, a database bk_%C3%BC%20x as bk_%C3%BC x."""
    span = password_span(url)
    if span is not None:
        url = url[: span[0]] + MASK + url[span[1] :]
    return _masked_query(url)


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
    """`db`, a URL missing its `//`, as a message may show it: its password as ***, masked as
    in the URL with its `//` (a pattern of its own showed a password holding a /)."""
    scheme, _, rest = db.partition(":")
    after = rest.lstrip("/")
    masked = masked_url(f"{scheme}://{after}").partition("://")[2]
    return f"{scheme}:{rest[: len(rest) - len(after)]}{masked}"


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


# A URL's scheme, after any white space: `dialect://` or `dialect+driver://`.
SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9]*)(\+[A-Za-z0-9_]+)?://")


def refuse_edged(db: str | None) -> None:
    """Refuse, in one line, a store URL that white space starts, or ends where it is a
    server's (pasted with a space, an env file's newline): SQLAlchemy could not parse the
    one, and the other reached the server as part of the database's name (libpq shows a
    newline as "; "), neither line naming the white space. A SQLite URL may end with it, as
    a file's name may (`absent` says so where that file is not there); a path is no URL."""
    scheme = SCHEME.match(db or "")
    if db is None or scheme is None:
        return
    start = db[:1].isspace()
    if not start and (scheme.group(1).lower() == "sqlite" or not db[-1:].isspace()):
        return
    side, c = ("starts", db[0]) if start else ("ends", db[-1])
    white = "a space" if c == " " else f"white space ({c.encode('unicode_escape').decode()})"
    raise UserError(
        f"run store URL {shown(masked_url(db))} {side} with {white}",
        "write the URL without it, in --db, DLPERF_DB or the store argument",
    )


def shown(name: object) -> str:
    """A store's path or URL as a line names it: on one line, its control characters, newline
    and tab written as Python escapes (`parsing.one_line`), so that no terminal acts on an ESC
    in a directory's name; in quotes where a name in it starts or ends with white space, which
    was not seen ("run store directory   does not exist")."""
    text = one_line(str(name))
    return f"'{text}'" if _edged_names(str(name)) else text


def _edged_names(path: str) -> list[str]:
    """The names of `path` that white space starts or ends, as written (`parsing.edged`)."""
    return [name for name in path.split("/") if edged(name)]


def _edge(name: str) -> str:
    """Where white space edges `name`: "starts with a space", "ends with white space" (a tab,
    a no-break space)."""
    start = name[:1].isspace()
    side, c = ("starts", name[0]) if start else ("ends", name[-1])
    return f"{side} with {'a space' if c == ' ' else 'white space'}"


def spaces_said(path: str, whose: str = "its path") -> str:
    """What a line that says the store `path` is not there adds where a name in it starts or
    ends with white space, most likely pasted into DLPERF_DB or --db with it: ": its path ends
    with a space" (`whose`: how the line names `path`); '' for a path without such a name. Not
    stripped: a file's name may start with a space, and a store read or made at another path
    than the one given would be worse than this line."""
    names = _edged_names(path)
    if not names:
        return ""
    if edged(path):
        return f": {whose} {_edge(path)}"
    return f": {whose} has a name that {_edge(names[0])}, {name_text(names[0])}"


def absent(path: str, what: str = "does not exist", directory: str | None = None) -> str:
    """The line saying the store `path` is not there (`what` says how), or its `directory`,
    and where a name in `path` starts or ends with white space (`spaces_said`)."""
    if directory is None:
        return f"run store {shown(path)} {what}{spaces_said(path)}"
    why = spaces_said(path, f"the store path {shown(path)}")
    return f"run store directory {shown(directory)} {what}{why}"


def absent_note(path: str) -> str | None:
    """The warning for a command that lists the runs of the store `path`, which is not there,
    where a name in it starts or ends with white space: its empty listing (exit 0) or "the run
    store holds no runs" did not say that the path is most likely mistyped. None for a path
    without such a name: the usual store not made yet, nothing to say."""
    return absent(path) if _edged_names(path) else None


def masked_words(words: list[str]) -> list[str]:
    """`words` with the --db URL's password as *** (`--db URL` and `--db=URL`): no URL's
    password is printed (the stop line echoed it). A URL without one is kept as given, so
    that the line's command runs as it is. A DLPERF_DB URL is not among the words."""

    def hidden(url: str) -> str:
        masked = masked_url(url)
        return masked if masked.count(MASK) > url.count(MASK) else url

    shown = list(words)
    for i, word in enumerate(words):
        if word == "--db" and i + 1 < len(words):
            shown[i + 1] = hidden(words[i + 1])
        elif word.startswith("--db="):
            shown[i] = "--db=" + hidden(word.removeprefix("--db="))
    return shown
