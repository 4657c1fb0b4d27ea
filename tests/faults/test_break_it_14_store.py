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


# --- C5: an export to a blank --out or --uri -----------------------------------------------------


def a_stored_run(store: RunStore) -> int:
    run_id = store.create_run("a", "run", {"train": {"lr": 0.1}})
    store.log_metrics(run_id, [("loss", 1, 1.0)])
    store.finish_run(run_id, summary={"test_accuracy": 0.5})
    return run_id


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current directory, to see that a refused export wrote nothing there."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.mark.parametrize("blank", ["", "  "])
def test_tensorboard_to_a_blank_out_is_refused_and_writes_nothing(
    cli: Cli, store: RunStore, workdir: Path, blank: str
) -> None:
    """It was exit 0, the event directory written into the current directory ("tensorboard
    --logdir ."), or, for blanks, into a directory named by them; `report --out ''` refuses."""
    run_id = a_stored_run(store)
    result = cli("runs", "export", str(run_id), "--to", "tensorboard", "--out", blank)
    one_line(result, 2, f"not {blank!r}", "--out")
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("blank", ["", "  "])
def test_mlflow_to_a_blank_uri_is_refused_and_writes_nothing(
    cli: Cli, store: RunStore, workdir: Path, blank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blank URI is no tracking store: not MLflow's own words on a directory named '  '."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # a directory would be written
    run_id = a_stored_run(store)
    result = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", blank)
    one_line(result, 2, "--uri", "sqlite:///mlflow.db")
    assert "MLflow at" not in result.err
    assert list(workdir.iterdir()) == []


# --- C6: an MLflow SQLite database under a regular file ------------------------------------------


@pytest.mark.parametrize("under", ["afile/ml.db", "afile/sub/ml.db"])
def test_an_mlflow_database_under_a_file_is_refused_up_front(
    cli: Cli, store: RunStore, tmp_path: Path, under: str
) -> None:
    """It was MLflow's own makedirs: "error: cannot use DIR: File exists", exit 1, once
    MLflow had been imported; a directory URI (file:) under a file was refused up front."""
    (tmp_path / "afile").write_text("not a directory")
    run_id = a_stored_run(store)
    uri = f"sqlite:///{tmp_path / under}"
    result = cli("runs", "export", str(run_id), "--to", "mlflow", "--uri", uri)
    one_line(result, 2, f"{tmp_path / 'afile'} is a file", str(tmp_path / under))
    assert (tmp_path / "afile").read_text() == "not a directory"


def test_an_mlflow_database_in_directories_yet_to_make_passes_the_check_and_leaves_none(
    tmp_path: Path,
) -> None:
    """The check makes the missing directories to see that it can, and removes them again:
    MLflow makes them for the export itself."""
    from dlperf import exporters

    exporters._check_reachable(f"sqlite:///{tmp_path / 'new' / 'sub' / 'ml.db'}")
    assert list(tmp_path.iterdir()) == []
