"""Break-it round 27, the run store tester (P3), causes C2 and C4.

- C2: an error a `sweep --jobs N` worker met outside its point's run (the store refusing it:
  too many connections; the store gone) was printed at the end as 12 lines of the worker's
  Python traceback, and that text stored as the point's error. Now it is the point's one
  line, printed and stored as `--jobs 1` says the same error.
- C4: the stop line of `sweep` and `distill` echoed the command line with the --db URL's
  password in clear. Now the password is shown as *** (and the line says to put it back);
  a DLPERF_DB URL is never printed.
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import DatabaseError

from dlperf.store import RunStore
from tests.conftest import POSTGRES, CliResult, fresh_store_url
from tests.faults.test_break_it_26_stops import BASE, SWEEP, _stop
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


def _sweep_files(root: Path) -> None:
    (root / "base.toml").write_text(BASE)
    (root / "sw.toml").write_text(SWEEP)  # two points


# --- C2: a worker's UserError is its point's one line -------------------------------------


@pytest.fixture
def one_connection_db() -> Iterator[str]:
    """The URL of a database of its own that takes one connection at a time (CONNECTION
    LIMIT 1), dropped after; skips without a server or where the role may not make one."""
    if not POSTGRES:
        pytest.skip("PostgreSQL store tests need a server: set DLPERF_TEST_POSTGRES_URL")
    admin = create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    name = f"fx27_d_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        try:
            conn.execute(text(f"CREATE DATABASE {name} CONNECTION LIMIT 1"))
        except DatabaseError as e:
            admin.dispose()
            pytest.skip(f"the test role may not create a database: {e.orig}")
    try:
        yield make_url(POSTGRES).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.mark.faults  # about 10 s under load (real workers): make test-faults
def test_a_store_that_refuses_a_sweep_worker_fails_its_point_in_one_line(
    cli: Cli, one_connection_db: str, tmp_path: Path
) -> None:
    """Before: `point 1/2 failed: sweep worker ended with code 1`, then 12 lines of traceback
    per point at the end, stored as each run's error."""
    url = one_connection_db
    _sweep_files(tmp_path)
    # --jobs 1 meeting the same refusal (the one connection taken): one line, exit 2
    engine = create_engine(url)
    try:
        with engine.connect():
            alone = cli("--db", url, "sweep", "sw.toml", "--jobs", "1")
    finally:
        engine.dispose()
    one_line(alone, 2, "too many connections")
    said = alone.err.splitlines()[-1].removeprefix("error: ")

    # --jobs 2: dlperf holds the one connection, so each worker is refused by the store
    result = cli("--db", url, "sweep", "sw.toml", "--jobs", "2")
    assert result.code == 1, (result.out, result.err)  # a point failed (docs/sweep.md)
    assert "Traceback" not in result.err and "worker.py" not in result.err, result.err
    lines = result.err.splitlines()
    # The progress log wraps at the terminal's width: read with any white space as one space.
    flat, one = " ".join(result.err.split()), " ".join(said.split())
    for k in (1, 2):  # the line and nothing more: the next point's line, or the summary's
        assert re.search(rf"point {k}/2 failed: {re.escape(one)} (point|run) ", flat), result.err
    admin = create_engine(POSTGRES or "", isolation_level="AUTOCOMMIT")
    try:  # more connections now, to read the store
        with admin.connect() as conn:
            conn.execute(text(f"ALTER DATABASE {make_url(url).database} CONNECTION LIMIT -1"))
    finally:
        admin.dispose()
    store = RunStore.open(url, create=False)
    try:
        runs = store.list_runs()
        assert [(r.status, r.error) for r in runs] == [("failed", said)] * 2
        # in the points' order; a point's run id is in the order its worker ended
        assert sorted(line for line in lines if line.startswith("run ")) == sorted(
            f"run {r.id} failed: {said}" for r in runs
        ), result.err
    finally:
        store.engine.dispose()


# --- C4: the stop line hides the --db password ---------------------------------------------


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url("postgresql", tmp_path, "fx27d")


@pytest.mark.parametrize("given", ["--db URL", "--db=URL", "DLPERF_DB"])
def test_a_stopped_sweeps_line_hides_the_store_password_and_still_continues_it(
    cli: Cli, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """Before: `... continue it (...): dlperf --db postgresql+psycopg://dlperf:dlperf@... sweep
    sw.toml --resume 1`. `distill` says its line through the same code (study_stop.StudyStop)."""
    _sweep_files(tmp_path)
    password = make_url(pg_url).password
    assert password
    studies: list[int] = []

    def stopped(self: Any, *rest: Any, **kwargs: Any) -> Any:
        studies.append(self.study_id)
        _stop()

    monkeypatch.setattr("dlperf.sweep.runner.SweepRun.run_here", stopped)
    if given == "DLPERF_DB":
        monkeypatch.setenv("DLPERF_DB", pg_url)
        db: list[str] = []
    else:
        db = ["--db", pg_url] if given == "--db URL" else [f"--db={pg_url}"]
    result = cli(*db, "sweep", "sw.toml")
    assert result.code == 130, (result.out, result.err)
    (study,) = studies
    line = result.err.splitlines()[-1]
    assert line.startswith(f"sweep study {study} stopped"), result.err
    assert f":{password}@" not in result.err and pg_url not in result.err, result.err
    words = shlex.split(line.split("continue it", 1)[1].split(": ", 1)[1])
    assert words[-2:] == ["--resume", str(study)], line
    if given == "DLPERF_DB":  # nothing to say of the store: the same environment reaches it
        assert "--db" not in line and "***" not in line, line
    else:
        assert "password" in line and "***" in line, line
        # the password put back where the line says: the very study continues
        words = [w.replace("***", password) for w in words]
    resumed = cli(*words[1:])
    assert resumed.code == 130, resumed.err
    assert studies == [study, study]
    assert resumed.err.splitlines()[-1] == line
