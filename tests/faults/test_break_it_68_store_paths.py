"""Break-it round 68, fixer F2: a store URL's password in a refusal, and a store's file at exit.

V2 C1: dlperf.Store(url) and dlperf.track(store=url), given a PostgreSQL URL holding a NUL
character, refused it in one line that quoted the whole URL with its password (and the value
of a `?password=` option) in clear, where docs/run.md says every message shows it as `***`;
its words ("which no file's path can") spoke of a file's path. A URL given as bytes was
refused ("a store is a path or a SQLAlchemy URL") with its password in clear too. Now both
quote it through urls.masked_url, as every other store message does, and the NUL's line says
that no path or URL can hold one.

V3 C1: a SQLite store's file was remembered per engine pool, and `Engine.dispose` makes a
new pool: after the store object was dropped (its finalizer disposes the engine) the file of
a store opened by a relative path was resolved again, at exit by the store's close
(`runstore._close_open`), against a working directory deleted meanwhile: "Exception ignored
in atexit callback" and a FileNotFoundError traceback after the command's own line (`report`
with a relative --db, its directory removed while it drew pages). Now the file is noted as
the store opens and kept for the engine across a dispose: nothing later resolves it again.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore, integrity

URL = "postgresql+psycopg://dlperf:s3cretPW@127.0.0.1:5432/v2_d"
MASKED = "postgresql+psycopg://dlperf:***@127.0.0.1:5432/v2_d"
NUL = "holds a NUL character (\\x00), which no path or URL can hold"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (lambda: dlperf.Store(URL + "\x00"), f"url {NUL}: '{MASKED}\\x00'"),
        (
            lambda: dlperf.track("x", store=URL + "\x00").__enter__(),
            f"store {NUL}: '{MASKED}\\x00'",
        ),
        (
            lambda: dlperf.Store(URL + "?password=abc\x00"),
            f"url {NUL}: '{MASKED}?password=***'",  # the NUL in the value masked with it
        ),
        (lambda: dlperf.Store("a\x00b.db"), f"url {NUL}: 'a\\x00b.db'"),
    ],
    ids=["Store", "track", "password option", "file path"],
)
def test_a_nul_in_a_store_url_is_refused_with_its_password_masked(
    given: Callable[[], object], said: str
) -> None:
    with pytest.raises(UserError) as refused:
        given()
    assert str(refused.value) == said


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_a_store_url_given_as_bytes_is_refused_with_its_password_masked(kind: type) -> None:
    with pytest.raises(UserError) as refused:
        dlperf.Store(kind(URL.encode()))
    shown = repr(kind(MASKED.encode()))
    assert str(refused.value) == (
        f"a store is a path or a SQLAlchemy URL, got {kind.__name__} {shown} "
        "(e.g. 'runs.db' or 'sqlite:///runs.db')"
    )


def test_a_store_opened_by_a_relative_path_keeps_its_file_across_a_dispose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    store = RunStore.open("s.db")
    engine = store.engine
    engine.dispose()  # a new pool, as the store's finalizer makes
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert integrity.store_file(engine) == tmp_path / "work" / "s.db"
    assert integrity.store_file(engine.execution_options(x=1)) == tmp_path / "work" / "s.db"
    store.release()


def test_a_stores_close_at_exit_says_nothing_when_the_working_directory_was_deleted(
    tmp_path: Path,
) -> None:
    (tmp_path / "keep").mkdir()
    (tmp_path / "work").mkdir()
    script = textwrap.dedent(
        """
        import gc, os
        from dlperf.store import RunStore

        with RunStore.open("../keep/s.db").new_run("kept", "run", {}):
            pass
        store = RunStore.open("../keep/s.db", create=False)  # as `report` reads it
        engine = store.engine  # kept, as a command's objects keep it
        del store
        gc.collect()  # the store's finalizer disposes its engine: a new pool
        os.rmdir(os.getcwd())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path / "work",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert not (tmp_path / "work").exists()
    # Closed: no -wal left beside the file, and the file alone holds the run.
    assert sorted(p.name for p in (tmp_path / "keep").iterdir()) == ["s.db"]
    with sqlite3.connect(tmp_path / "keep" / "s.db") as conn:
        assert conn.execute("SELECT name FROM runs").fetchall() == [("kept",)]
