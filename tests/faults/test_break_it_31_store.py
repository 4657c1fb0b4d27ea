"""Break-it round 31, part P3, fixer C: the run store's URL, `--kind`, and the MLflow export.

C1. A password holding an unescaped `/` was printed in clear in every line naming the store
    (`postgresql://:***@dlperf:se/cr/et@h/db`): the userinfo is found as SQLAlchemy finds it,
    the password being all up to its first @.
C3. A misspelt kind (`--kind scael`, `--where kind=Run`) selected nothing without a word, where
    a misspelt status is refused: a kind no listed run has and dlperf does not write is too.
C5. `runs export --to mlflow` of a run stored as started before 1970 failed half-way, blaming
    a summary metric's timestamp, a FAILED MLflow run left: refused before anything is written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing

import pytest

import dlperf
from dlperf.store import RunStore
from dlperf.store.urls import masked_url
from tests.conftest import CliResult

Cli = Callable[..., CliResult]


# C1


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("postgresql+psycopg://dlperf:se/cr/et@h/db", "postgresql+psycopg://dlperf:***@h/db"),
        ("postgresql://u:x/y@/db?host=/tmp", "postgresql://u:***@/db?host=/tmp"),
        ("postgresql://u:p?w#x:y@h:5/db", "postgresql://u:***@h:5/db"),
        ("postgresql://u:p/w@ss@h/db", "postgresql://u:***@h/db"),  # an unescaped @ too
        ("postgresql://u:p/w@h:port/db", "postgresql://u:***@h:port/db"),  # SQLAlchemy refuses
        ("postgresql://u:pw@h/d@b", "postgresql://u:***@b"),  # the password may be pw@h/d
    ],
)
def test_a_password_holding_a_slash_is_masked(url: str, masked: str) -> None:
    assert masked_url(url) == masked


def test_the_store_line_masks_a_password_holding_a_slash(cli: Cli) -> None:
    """The driver's own error names the store: port 1 on loopback refuses the connection."""
    result = cli("--db", "postgresql+psycopg://dlperf:se/cr/et@127.0.0.1:1/db", "runs", "list")
    assert result.code == 2, (result.out, result.err)
    assert "se/cr" not in result.err
    assert "postgresql+psycopg://dlperf:***@127.0.0.1:1/db" in result.err


# C3

KINDS = "kinds: run, scale, allreduce, detect, calibrate, predict, staleness, select"


def test_a_misspelt_kind_is_refused(cli: Cli, db: str) -> None:
    with dlperf.track("r", store=db):
        pass
    result = cli("runs", "list", "--kind", "scael")
    assert (result.code, result.err) == (2, f"error: unknown kind 'scael' ({KINDS})\n")
    result = cli("runs", "list", "--where", "kind=Run", "--json")
    assert (result.code, result.err) == (2, f"error: --where: unknown kind 'Run' ({KINDS})\n")
    with pytest.raises(dlperf.UserError, match=r"^unknown kind 'scael'"):
        dlperf.Store(db).runs(kind="scael")


def test_a_kind_the_store_holds_or_dlperf_writes_still_selects(cli: Cli, db: str) -> None:
    """A kind dlperf does not write, held by a run (by hand, an older dlperf), selects it and
    is listed in the hint; one dlperf writes selects nothing where no run has it."""
    store = dlperf.Store(db)
    with dlperf.track("r", store=db):
        pass
    with RunStore.open(db).new_run("t", "train", {}):
        pass
    assert [r.name for r in store.runs(kind="train")] == ["t"]
    assert [r.name for r in store.runs(where=["kind=train"])] == ["t"]
    assert store.runs(kind="scale") == store.runs(where=["kind=scale"]) == []
    result = cli("runs", "list", "--kind", "nope")
    assert (result.code, result.err) == (2, f"error: unknown kind 'nope' ({KINDS}, train)\n")


# C5


@pytest.mark.parametrize(
    ("started", "ended", "said"),
    [
        ("1960-01-01 00:00:00", "1960-01-01 00:00:05", "started 1960-01-01 00:00:00 UTC"),
        ("0001-01-01 00:00:00", None, "started 0001-01-01 00:00:00 UTC"),
        ("2026-01-01 00:00:00", "1969-12-31 23:59:59", "ended 1969-12-31 23:59:59 UTC"),
    ],
)
def test_an_mlflow_export_refuses_a_run_stored_before_1970(
    cli: Cli, db: str, mlflow_uri: str, started: str, ended: str | None, said: str
) -> None:
    with dlperf.track("old", store=db) as run:
        run.log(1, loss=1.0)
    with closing(sqlite3.connect(db.removeprefix("sqlite:///"))) as con, con:
        con.execute("UPDATE runs SET started = ?, ended = ?", (f"{started}.000000", ended))
    result = cli("runs", "export", str(run.id), "--to", "mlflow", "--uri", mlflow_uri)
    assert (result.code, result.err) == (
        2,
        f"error: run {run.id} ('old'): {said} as stored, before 1970, which MLflow does not "
        "take; nothing was exported (export another run, or this one --to tensorboard)\n",
    )
    with closing(sqlite3.connect(mlflow_uri.removeprefix("sqlite:///"))) as mlflow:
        assert mlflow.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_an_mlflow_export_refuses_a_metric_logged_before_1970(
    cli: Cli, db: str, mlflow_uri: str
) -> None:
    """Of two runs, the second's metric point: the first is not exported either."""
    for name in ("new", "old"):
        with dlperf.track(name, store=db) as run:
            run.log(1, loss=1.0)
    with closing(sqlite3.connect(db.removeprefix("sqlite:///"))) as con, con:
        con.execute("UPDATE metrics SET wall_time = -5 WHERE run_id = ?", (run.id,))
    result = cli(
        "runs", "export", str(run.id - 1), str(run.id), "--to", "mlflow", "--uri", mlflow_uri
    )
    assert (result.code, result.err) == (
        2,
        f"error: run {run.id} ('old'): logged a metric 1969-12-31 23:59:55 UTC as stored, before "
        f"1970, which MLflow does not take; nothing was exported (leave run {run.id} out of the "
        "export, or this one --to tensorboard)\n",
    )
    with closing(sqlite3.connect(mlflow_uri.removeprefix("sqlite:///"))) as mlflow:
        assert mlflow.execute("SELECT count(*) FROM runs").fetchone() == (0,)
