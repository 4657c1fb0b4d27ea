"""dlperf.store.integrity: how a damaged or hand-edited SQLite store is found and named in one
line, and what `copy_readable` keeps of it, on small files made here."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from dlperf.errors import UserError
from dlperf.store import RunStore, integrity
from dlperf.store.integrity import (
    NOT_INTEGER,
    NOT_JSON,
    NOT_NUMBER,
    NOT_OBJECT,
    NOT_TIME,
    copy_readable,
    unreadable,
)
from dlperf.store.migrations import SCHEMA_VERSION
from dlperf.store.schema import Metric, Run


@pytest.fixture(autouse=True)
def _own_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """What this process found damaged or checked stays with each test."""
    monkeypatch.setattr(integrity, "_damaged", {})
    monkeypatch.setattr(integrity, "_passed", set())


@pytest.fixture
def source(tmp_path: Path) -> Iterator[tuple[Path, RunStore]]:
    """A store with two finished runs, each with train/loss at steps 0 and 1."""
    path = tmp_path / "old.db"
    store = RunStore.open(str(path))
    for name in ("a", "b"):
        run_id = store.create_run(name, "train", {"train": {"lr": 0.1}})
        store.log_metrics(run_id, [("train/loss", 0, 2.0), ("train/loss", 1, 1.0)])
        store.finish_run(run_id, summary={"test_accuracy": 0.5})
    store.engine.dispose()
    yield path, store


def _sql(path: Path, statement: str, *args: Any) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(statement, args)
        conn.commit()


def test_shown_escapes_what_would_break_the_line_or_act_on_a_terminal() -> None:
    assert integrity.shown("a\nb\tc\x1bd.db") == "a\\nb\\tc\\x1bd.db"
    assert integrity.shown(Path("plain.db")) == "plain.db"


def test_store_file_is_none_in_memory_and_the_resolved_path_otherwise(tmp_path: Path) -> None:
    assert integrity.store_file(create_engine("sqlite://")) is None
    assert integrity.store_file(create_engine("sqlite:///:memory:")) is None
    engine = create_engine(f"sqlite:///{tmp_path / 'x' / '..' / 's.db'}")
    assert integrity.store_file(engine) == (tmp_path / "s.db").resolve()


C = Run.__table__.c
M = Metric.__table__.c


@pytest.mark.parametrize(
    ("column", "value", "why"),
    [
        (C.config, None, None),
        (C.config, '{"a": 1}', None),
        (C.config, {"a": 1}, None),
        (C.config, "null", None),
        (C.config, "{not json", NOT_JSON),
        (C.config, "[1, 2]", NOT_OBJECT),
        (C.config, 7, NOT_OBJECT),  # `SET config = 7`: JSON's number
        (C.started, "2026-11-26 12:00:00.000000", None),
        (C.started, "yesterday", NOT_TIME),
        (C.started, 5, NOT_TIME),
        (M.step, 3, None),
        (M.step, 1.5, NOT_INTEGER),  # a step of 1.5 is no step
        (M.step, "abc", NOT_INTEGER),
        (M.value, "2.5", None),
        (M.value, "abc", NOT_NUMBER),
        (C.name, 12, None),  # text columns take what SQLite keeps
    ],
)
def test_unreadable_says_why_a_value_cannot_be_read(column: Any, value: Any, why: str) -> None:
    assert unreadable(column, value) == why


def test_damaged_is_one_line_and_refuses_every_later_write(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 's.db'}")
    integrity.refuse_writes(engine)  # nothing found yet
    error = integrity.damaged((tmp_path / "s.db").resolve(), "quick_check: page 6")
    assert "\n" not in str(error)
    assert str(error).startswith(f"run store {tmp_path / 's.db'} is damaged (quick_check: page 6)")
    assert error.hint is not None and "runs repair NEW.db" in error.hint
    with pytest.raises(UserError, match="is damaged"):
        integrity.refuse_writes(engine)


def test_check_passes_a_sound_file_and_refuses_one_with_a_damaged_page(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT)")
        conn.executemany("INSERT INTO t (s) VALUES (?)", [("x" * 200,) for _ in range(200)])
        conn.commit()
    engine = create_engine(f"sqlite:///{path}")
    integrity.check(engine)
    assert len(integrity._passed) == 1  # remembered: the same file is not checked again
    engine.dispose()  # a connection kept open would read its cached pages
    with path.open("r+b") as f:  # page 6 of 13 overwritten
        f.seek(4096 * 5)
        f.write(b"\x07" * 4096)
    # SQLite's words for the damage vary by version; the page and the check do not.
    with pytest.raises(UserError, match=r"is damaged \(quick_check: .*Page 6"):
        integrity.check(engine)
    engine.dispose()
    with pytest.raises(UserError, match="is damaged"):  # and from now on never written
        integrity.refuse_writes(engine)
    integrity.check(create_engine(f"sqlite:///{tmp_path / 'new.db'}"))  # no file yet: nothing


def test_garbled_run_names_the_first_run_and_column_that_cannot_be_read(
    source: tuple[Path, RunStore],
) -> None:
    path, _ = source
    assert integrity.garbled_run(path) is None
    _sql(path, "UPDATE runs SET summary = '[1]' WHERE id = 2")
    error = integrity.garbled_run(path)
    assert error is not None
    assert error.message == (
        f"run 2's summary in run store {path} is not a JSON object; dlperf cannot read that run"
    )
    assert error.hint is not None and "all but such runs" in error.hint


def test_held_is_a_lock_past_the_timeout_not_damage() -> None:
    busy, corrupt = sqlite3.OperationalError("locked"), sqlite3.DatabaseError("malformed")
    busy.sqlite_errorcode = 5  # type: ignore[attr-defined]  # SQLITE_BUSY
    corrupt.sqlite_errorcode = 11  # type: ignore[attr-defined]  # SQLITE_CORRUPT
    assert integrity.held(busy) and not integrity.held(corrupt)
    locked = sqlite3.OperationalError("locked")
    locked.sqlite_errorcode = 6 | (1 << 8)  # type: ignore[attr-defined]  # an extended code
    assert integrity.held(locked)


def _new(tmp_path: Path) -> RunStore:
    return RunStore.open(str(tmp_path / "new.db"))


def test_copy_readable_keeps_sound_rows_and_the_store_id(
    source: tuple[Path, RunStore], tmp_path: Path
) -> None:
    path, old = source
    _sql(path, "UPDATE metrics SET step = 'abc' WHERE run_id = 2 AND step = 1")
    new = _new(tmp_path)
    done = copy_readable(path, new._writer, tmp_path / "new.db", 1.0)
    assert done.store_id == old.id and done.runs == 2
    assert done.tables["metrics"].copied == 3 and done.tables["metrics"].left_out == 1
    assert new.metrics(2, "train/loss") == [(0, 2.0)]
    assert new.get_run(1).summary == {"test_accuracy": 0.5}


def test_copy_readable_leaves_out_a_garbled_run_and_its_rows_but_never_reuses_its_id(
    source: tuple[Path, RunStore], tmp_path: Path
) -> None:
    path, _ = source
    _sql(path, "UPDATE runs SET config = '{oops' WHERE id = 2")
    new = _new(tmp_path)
    done = copy_readable(path, new._writer, tmp_path / "new.db", 1.0)
    assert done.runs == 1 and done.tables["runs"].left_out == 1
    assert done.tables["metrics"].left_out == 2  # run 2's, orphaned
    assert new.create_run("next", "train", {}) == 3  # 2 was a run: never handed out again


def test_copy_readable_refuses_a_newer_store_and_a_file_without_runs(
    source: tuple[Path, RunStore], tmp_path: Path
) -> None:
    path, _ = source
    _sql(path, "UPDATE meta SET value = ? WHERE key = 'schema_version'", str(SCHEMA_VERSION + 1))
    new = _new(tmp_path)
    with pytest.raises(UserError, match="upgrade dlperf to repair it"):
        copy_readable(path, new._writer, tmp_path / "new.db", 1.0)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(UserError, match="holds no runs table"):
        copy_readable(empty, new._writer, tmp_path / "new.db", 1.0)
