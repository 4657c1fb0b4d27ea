"""The twenty-second break-it round (P3, the store tester: causes 5, 8, 9, 10 and 11): what the
commands and the API that read and write the run store's views accept.

5: `runs tag` and `runs delete` on a mistyped --db made a new store (a 48 KB file, or seven
tables in an empty PostgreSQL schema) only to say "no run N". They now open it as the readers
do: a store that is missing or empty is not made, and holds no run.

8: the tag-key line listed "1 to 100 ASCII letters, digits, _ . -", yet a key starting with
`.` or `-` was refused: it now says the key starts with a letter, digit or _.

9: `runs export --to mlflow --uri` naming the run store itself (its file by any path, or its
PostgreSQL database and schema) wrote MLflow's tables into the store, then failed: it is
refused before anything is written.

10: `dlperf.track(config={'a.b': 1, 'a': {'b': 2}})` was stored, but the MLflow export,
`runs list --where` and `runs compare` name keys dotted and kept one of the two values. Such a
config (and such an experiment for `dlperf.run`) is refused in one line naming both keys, as
round 21 refused {1: .., '1': ..}.

11: `log(1, loss=1.0, **{'train/loss': 2.0})` stored two rows of one metric at one step: a
UserError naming both names, before anything of the call is kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, make_url

import dlperf
from dlperf.errors import UserError
from tests.conftest import CliResult, fresh_store_url
from tests.store.test_store import inspect_tables

Cli = Callable[..., CliResult]


def one_line(result: CliResult, *parts: str) -> str:
    """Exit 2 and one error line, the last on stderr, holding each of `parts`; that line."""
    assert result.code == 2, (result.out, result.err)
    lines = result.err.splitlines()
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], result.err
    assert "Traceback" not in result.err
    for part in parts:
        assert part in lines[-1], result.err
    return lines[-1]


# --- 5: runs tag / runs delete do not make a store ----------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def unopened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store nobody has opened: a missing SQLite file, or an empty PostgreSQL schema."""
    yield from fresh_store_url(request.param, tmp_path, "bk22v")


def _tables(url: str) -> list[str]:
    """The tables at `url`, or ["(file)"] for a SQLite file that exists at all."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        assert parsed.database
        return ["(file)"] if os.path.lexists(parsed.database) else []
    return inspect_tables(url)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["tag", "1", "a=b"], "no run 1: run store "),
        (["delete", "1", "--yes"], "no run 1: run store "),
        (["delete", "1", "2", "--yes", "--force"], "no run 1, 2: run store "),
    ],
    ids=["tag", "delete", "delete force"],
)
def test_tag_and_delete_make_no_store_of_a_mistyped_db(
    cli: Cli, unopened: str, args: list[str], said: str
) -> None:
    # before: "no run 1", and a new store file (or 7 tables in the schema) left behind
    one_line(cli("--db", unopened, "runs", *args), said)
    assert _tables(unopened) == []


def test_tag_and_delete_still_write_a_store_that_exists(cli: Cli, db: str) -> None:
    with dlperf.track("kept", store=db) as run:
        run.log(1, loss=1.0)
    with dlperf.track("gone", store=db):
        pass
    assert cli("runs", "tag", "1", "a=b").code == 0
    assert dlperf.Store(db).run(1).tags == {"a": "b"}
    assert cli("runs", "delete", "2", "--yes").code == 0
    assert [r.id for r in dlperf.Store(db).runs()] == [1]
    one_line(cli("runs", "tag", "2", "a=b"), "no run 2")


# --- 8: the tag key's first character -------------------------------------------------------


@pytest.mark.parametrize("pair", [".=1", ".a=1", "-a=1", "é=1"])
def test_tag_key_line_says_what_it_may_start_with(cli: Cli, db: str, pair: str) -> None:
    with dlperf.track("r", store=db):
        pass
    # before: "KEY of 1 to 100 ASCII letters, digits, _ . -", which `.` is one of
    one_line(
        cli("runs", "tag", "1", "--", pair),
        "KEY of 1 to 100 ASCII letters, digits, _ . -, starting with a letter, digit or _",
    )
    assert dlperf.Store(db).run(1).tags == {}


def test_tag_keys_the_line_allows_are_taken(cli: Cli, db: str) -> None:
    with dlperf.track("r", store=db):
        pass
    assert cli("runs", "tag", "1", "_.-=1", "a.b-c=2", "9=3").code == 0
    assert dlperf.Store(db).run(1).tags == {"_.-": "1", "a.b-c": "2", "9": "3"}


# --- 11: two names of one metric in one log() call ------------------------------------------


@pytest.mark.parametrize(
    "metrics",
    [{"loss": 1.0, "train/loss": 2.0}, {"train/acc": 1.0, "acc": 2.0}],
    ids=["loss first", "train/ first"],
)
def test_log_refuses_two_names_of_one_metric(db: str, metrics: dict[str, float]) -> None:
    first, second = metrics
    stored = first if "/" in first else second
    with dlperf.track("r", store=db) as run:
        run.log(1, other=0.5)
        # before: two rows of train/loss at step 1 (1.0 and 2.0), the summary keeping the last
        with pytest.raises(UserError) as caught:
            run.log(2, **metrics)
        run.log(3, **{first: 3.0})
    assert str(caught.value) == (
        f"log: {first!r} and {second!r} name one metric, {stored} (give it once)"
    )
    store = dlperf.Store(db)
    assert store.metrics(1, stored) == [(3, 3.0)]  # nothing of the refused call is kept
    assert store.metrics(1, "other") == [(1, 0.5)]


# --- 10: a dotted config key beside the nested path it spells -------------------------------

CLASH = "one value would be lost (rename one of them)"


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"a.b": 1, "a": {"b": 2}}, "config['a.b'] and config['a']['b'] are one key, a.b"),
        ({"a": {"b": 2}, "a.b": 1}, "config['a']['b'] and config['a.b'] are one key, a.b"),
        (
            {"m": {"x": {"y.z": []}, "x.y": {"z": None}}},
            "config['m']['x']['y.z'] and config['m']['x.y']['z'] are one key, m.x.y.z",
        ),
        ({"a.b": {}, "a": {"b": "t"}}, "config['a.b'] and config['a']['b'] are one key, a.b"),
    ],
    ids=["dotted first", "nested first", "deeper, two dots", "empty table"],
)
def test_track_refuses_a_config_whose_keys_clash_once_dotted(
    db: str, config: dict[str, Any], said: str
) -> None:
    # before: stored; `runs list --where a.b=1` found nothing and the MLflow export kept a.b=2
    with pytest.raises(UserError) as caught, dlperf.track("x", config=config, store=db):
        pass
    assert str(caught.value) == (
        f"{said}, as runs list --where, runs compare and the MLflow export name keys: {CLASH}"
    )
    assert dlperf.Store(db).runs() == []


def test_run_refuses_an_experiment_whose_keys_clash_once_dotted(db: str) -> None:
    kwargs = {"a.b": 1, "a": {"b": 2}}
    experiment = {"model": {"name": "smallcnn", "kwargs": kwargs}, "data": {"name": "digits"}}
    with pytest.raises(UserError) as caught:
        dlperf.run(experiment, store=db)
    assert str(caught.value).startswith(
        "experiment['model']['kwargs']['a.b'] and experiment['model']['kwargs']['a']['b'] are "
        "one key, model.kwargs.a.b,"
    )
    assert dlperf.Store(db).runs() == []


def test_dotted_keys_that_do_not_clash_are_kept_and_selected(db: str) -> None:
    config = {"a.b": 1, "a": {"c": 2}, "x": {"y.z": 3}}
    with dlperf.track("x", config=config, store=db):
        pass
    store = dlperf.Store(db)
    assert store.run(1).config == config
    for where in ("a.b=1", "a.c=2", "x.y.z=3"):
        assert [r.id for r in store.runs(where=[where])] == [1], where


# --- 9: an MLflow export into the run store itself -----------------------------------------

SAME = "--uri names the run store itself"


@pytest.fixture(params=["sqlite", "postgresql"])
def tracked(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store of its own (a SQLite file, or a PostgreSQL schema) holding one tracked run."""
    for url in fresh_store_url(request.param, tmp_path, "bk22x"):
        with dlperf.track("x", config={"lr": 0.1}, store=url) as run:
            run.log(1, loss=1.0)
        yield url


def _spellings(url: str, tmp_path: Path) -> list[str]:
    """`url` as MLflow might be given it: as it is, and (a SQLite file) by a relative path and
    through a symbolic link; (a server) with the driver left out and the port said."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        assert parsed.database
        link = tmp_path / "link.db"
        link.symlink_to(parsed.database)
        return [url, f"sqlite:///{os.path.relpath(parsed.database)}", f"sqlite:///{link}"]
    plain = parsed.set(drivername="postgresql", port=parsed.port or 5432)
    return [url, plain.render_as_string(hide_password=False)]


def test_mlflow_export_into_the_run_store_itself_is_refused(
    cli: Cli, tracked: str, tmp_path: Path
) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
    tables = _all_tables(tracked)
    for uri in _spellings(tracked, tmp_path):
        # before: MLflow's alembic_version, experiments and params made inside the dlperf
        # store, then "duplicate column name: step" (PostgreSQL: a foreign-key message)
        result = cli("--db", tracked, "runs", "export", "1", "--to", "mlflow", "--uri", uri)
        one_line(result, SAME, "give MLflow a database of its own")
        assert _all_tables(tracked) == tables, uri
    assert [r.id for r in dlperf.Store(tracked).runs()] == [1]


@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning")
def test_mlflow_export_beside_the_run_store_still_works(
    cli: Cli, db: str, tmp_path: Path, mlflow_uri: str
) -> None:
    """An MLflow store in the run store's directory is not the run store: exported into.
    (A copy of a made MLflow store, tmp_path/mlflow.db: a new one's migrations are tested by
    tests/test_exporters.py and break-it rounds 11 and 22.)"""
    pytest.importorskip("mlflow", reason="the mlflow extra (pip install 'dlperf[mlflow]')")
    assert Path(mlflow_uri.removeprefix("sqlite:///")).parent == tmp_path  # beside the store
    with dlperf.track("x", config={"lr": 0.1}, store=db) as run:
        run.log(1, loss=1.0)
    result = cli("runs", "export", "1", "--to", "mlflow", "--uri", mlflow_uri)
    assert result.code == 0, result.err


def _all_tables(url: str) -> list[str]:
    """The tables at `url`, the store's own and any other."""
    engine = create_engine(url)
    try:
        return sorted(inspect(engine).get_table_names())
    finally:
        engine.dispose()
