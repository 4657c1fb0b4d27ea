"""What the fourteenth break-it round found in reading the run store and exporting from it,
reproduced first: a run whose config a hand edit set to JSON `null` crashed `runs compare`
and `runs list --where` with an AttributeError traceback, exit 1, on SQLite and PostgreSQL,
and a PostgreSQL run whose config or summary was set to JSON that is no object (a list, a
number) crashed every reader so (C1); `runs export --to tensorboard --out ''` wrote into the
current directory (C5); an MLflow URI sqlite:///DIR/ml.db whose DIR lies under a regular
file said MLflow's own "cannot use DIR: File exists", exit 1 (C6)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from dlperf.store import RunStore
from tests.conftest import CliResult, fresh_store_url
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "bi14")


def two_runs(url: str) -> tuple[int, int]:
    """Two finished runs of config {"a": 1}, the second tagged, each with a summary."""
    store = RunStore.open(url)
    ids = []
    for name in ("x", "y"):
        run_id = store.create_run(name, "run", {"a": 1})
        store.finish_run(run_id, summary={"test_accuracy": 0.5})
        ids.append(run_id)
    store.set_tags(ids[1], {"k": "v"})
    store.engine.dispose()
    return ids[0], ids[1]


def set_by_hand(url: str, run_id: int, column: str, json_text: str) -> None:
    """`UPDATE runs SET column = 'json_text'` as a user's sqlite3 or psql does it (a literal:
    PostgreSQL takes it as the column's json)."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE runs SET {column} = '{json_text}' WHERE id = {run_id}"))
    engine.dispose()


# --- C1: a run's config stored as JSON null ------------------------------------------------------


def test_compare_reads_a_config_stored_as_null_as_no_keys(cli: Cli, store_url: str) -> None:
    """It was "AttributeError: 'NoneType' object has no attribute 'items'", exit 1."""
    first, second = two_runs(store_url)
    set_by_hand(store_url, second, "config", "null")
    result = cli("--db", store_url, "runs", "compare", str(first), str(second), "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["config_diff"] == {"a": [1, None]}
    table = cli("--db", store_url, "runs", "compare", str(first), str(second))
    assert table.code == 0 and "Traceback" not in table.err, table.err
    assert "tag k" in table.out, table.out


def test_where_reads_a_config_stored_as_null_as_no_keys(cli: Cli, store_url: str) -> None:
    first, second = two_runs(store_url)
    set_by_hand(store_url, second, "config", "null")
    for where, listed in (
        ("a=1", [first]),
        ("test_accuracy=0.5", [second, first]),
        ("tag.k=v", [second]),
    ):
        result = cli("--db", store_url, "runs", "list", "--where", where, "--json")
        assert result.code == 0, (where, result.err)
        assert [r["id"] for r in json.loads(result.out)] == listed, where


def test_show_and_the_api_agree_a_config_stored_as_null_has_no_keys(
    cli: Cli, store_url: str
) -> None:
    """Every reader sees the same record: `{}`, as the readers that coped (show, doctor,
    report) took it, and as a summary stored as null already read."""
    _, second = two_runs(store_url)
    set_by_hand(store_url, second, "config", "null")
    result = cli("--db", store_url, "runs", "show", str(second), "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["config"] == {}
    store = RunStore.open(store_url)
    assert store.get_run(second).config == {}
    assert [r.config for r in store.list_runs()] == [{}, {"a": 1}]
    store.engine.dispose()


def test_a_summary_stored_as_null_is_compared_and_selected_as_no_keys(
    cli: Cli, store_url: str
) -> None:
    first, second = two_runs(store_url)
    set_by_hand(store_url, second, "summary", "null")
    result = cli("--db", store_url, "runs", "compare", str(first), str(second), "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["summary"]["test_accuracy"] == [0.5, None]
    result = cli("--db", store_url, "runs", "list", "--where", "test_accuracy=0.5", "--json")
    assert result.code == 0, result.err
    assert [r["id"] for r in json.loads(result.out)] == [first]


@pytest.mark.parametrize(
    ("column", "json_text", "command"),
    [
        ("config", "[1]", ("runs", "compare", "1", "2")),
        ("config", '"x"', ("runs", "list", "--where", "a=1")),
        ("summary", "7", ("runs", "list", "--where", "test_accuracy=0.5")),
        ("summary", "[1]", ("runs", "list")),
        ("system", "[1]", ("runs", "show", "2")),
    ],
)
def test_a_json_column_that_is_no_object_names_the_run_in_one_line(
    cli: Cli, store_url: str, column: str, json_text: str, command: tuple[str, ...]
) -> None:
    """SQLite said so already; PostgreSQL, whose driver hands the list, number or string
    over as it is, crashed compare, --where, list and show with an AttributeError or
    TypeError traceback, exit 1."""
    first, second = two_runs(store_url)
    assert (first, second) == (1, 2)
    set_by_hand(store_url, second, column, json_text)
    one_line(cli("--db", store_url, *command), 2, f"run 2's {column}", "is not a JSON object")
