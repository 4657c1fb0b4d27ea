"""Break-it round 29: the lead's causes (and items round 28 left).

C1. A PostgreSQL read that waited out its lock said "waited 30 s" whatever lock_timeout the
    URL, the role or the database had set (here 2 s): it says the session's own.
C2. (Round 28's Left.) `run --resume 1`, `runs show 1` and the other readers of a run at a
    mistyped --db said "no run 1 in the store", as if the store were there and empty: they
    say the store does not exist, and to check the path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

import dlperf
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_break_it_28_store import one_line

Cli = Callable[..., CliResult]


@pytest.fixture
def pg_store(tmp_path: Path) -> Iterator[str]:
    """A new PostgreSQL store's URL (a schema of its own); skips without a server."""
    yield from fresh_store_url("postgresql", tmp_path, "lead29")


# C1


def test_a_locked_read_names_the_lock_timeout_the_url_set(pg_store: str, cli: Cli) -> None:
    with dlperf.track("x", config={}, store=pg_store) as r:
        r.log(1, loss=1.0)
    url = make_url(pg_store)
    options = f"{url.query['options']} -clock_timeout=2s"
    reader = url.update_query_dict({"options": options}).render_as_string(hide_password=False)
    holder = create_engine(pg_store)
    try:
        with holder.connect() as conn:
            conn.execute(text("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"))
            start = time.monotonic()
            done = cli("--db", reader, "runs", "list")
            took = time.monotonic() - start
            conn.rollback()
    finally:
        holder.dispose()
    one_line(done, 1, "is locked by another process: waited 2 s for a lock")
    assert took < 20, took


# C2


@pytest.mark.parametrize("args", [["run", "--resume", "1"], ["runs", "show", "1"]])
def test_a_run_asked_of_a_store_that_is_not_there_says_the_store_is_missing(
    cli: Cli, tmp_path: Path, args: list[str]
) -> None:
    typo = tmp_path / "typo.db"
    line = one_line(cli("--db", str(typo), *args), 2, f"no run 1: run store {typo} does not exist")
    assert line.endswith("(give the store with --db or DLPERF_DB (by default: ./dlperf.db, in the "
                         "current directory))")  # fmt: skip
    assert not list(tmp_path.glob("typo.db*"))
