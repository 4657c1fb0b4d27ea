"""Break-it round 31, part P3, fixer F: the store's URL, `--where` keys, and the TensorBoard
export beside a delete.

C7. A server URL with white space at an edge (DLPERF_DB=" postgresql://...", an env file's
    newline) was blamed on SQLAlchemy's parser or on the database name ("database
    "db; " does not exist"): one line says the URL starts or ends with white space.
C9. A config key with white space at an edge (`train.lr `) was stored, but `--where` stripped
    the key: `train.lr =0.3` selected by `train.lr`, or nothing. A key held as typed is
    matched as typed.
C10. `runs export --to tensorboard` beside a `runs delete` exported the deleted runs as empty,
    exit 0, over their earlier good event files: a run gone as it is read is left out and
    said, its earlier events kept (the MLflow export too).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dlperf
from dlperf import exporters
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# Port 1 on loopback: nothing answers, so a URL the line does not refuse fails on connecting.
SERVER = "postgresql+psycopg://dlperf:secret@127.0.0.1:1/db"
SHOWN = "postgresql+psycopg://dlperf:***@127.0.0.1:1/db"


def one_line(result: CliResult, code: int, line: str) -> None:
    assert result.code == code, (result.out, result.err)
    assert result.err == f"error: {line}\n", result.err


# C7

FIX = "write the URL without it, in --db, DLPERF_DB or the store argument"


@pytest.mark.parametrize(
    ("given", "shown", "edge"),
    [
        (f" {SERVER}", f"' {SHOWN}'", "starts with a space"),
        (f"{SERVER}\n", f"'{SHOWN}\\n'", "ends with white space (\\n)"),
        (f"{SERVER} ", f"'{SHOWN} '", "ends with a space"),
        (f"\t{SERVER}", f"'\\t{SHOWN}'", "starts with white space (\\t)"),
        (" sqlite:///x.db", "' sqlite:///x.db'", "starts with a space"),
    ],
)
def test_a_url_with_white_space_at_an_edge_is_named(
    given: str, shown: str, edge: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was "Could not parse SQLAlchemy URL from given URL string", or the server's
    `database "db; " does not exist`: no word of the white space."""
    line = f"run store URL {shown} {edge} ({FIX})"
    one_line(cli("--db", given, "runs", "list"), 2, line)
    monkeypatch.setenv("DLPERF_DB", given)
    one_line(cli("runs", "show", "1"), 2, line)


def test_a_sqlite_url_ending_in_a_space_is_still_a_path(tmp_path: Path, cli: Cli) -> None:
    """A file's name may end with a space (round 30 says it where no such file is there)."""
    with dlperf.track("p", store=str(tmp_path / "x.db ")) as run:
        run.log(1, loss=1.0)
    result = cli("--db", f"sqlite:///{tmp_path}/x.db ", "runs", "list", "--json")
    assert result.code == 0, result.err
    assert [r["name"] for r in json.loads(result.out)] == ["p"]


# C9


def stored(db: str, name: str, config: dict[str, Any]) -> None:
    """A finished run of `config` (as dlperf.track stores one; written here at the store, so
    that these tests hold whatever `track` comes to accept)."""
    store = RunStore.open(db)
    store.finish_run(store.create_run(name, "run", config), "finished")


def test_a_config_key_with_a_space_at_an_end_is_matched_as_typed(tmp_path: Path, cli: Cli) -> None:
    """Was `[]` for train.lr =0.3, where the runs hold `train.lr `."""
    db = str(tmp_path / "c9.db")
    stored(db, "spaced", {"train": {"lr ": 0.3}})
    stored(db, "spaced too", {"train": {"lr ": 0.1}})
    store = dlperf.Store(db)
    assert [r.id for r in store.runs(where=["train.lr =0.3"])] == [1]
    assert [r.id for r in store.runs(where=["train.lr = 0.1"])] == [2]  # the key as typed
    result = cli("--db", db, "runs", "list", "--where", "train.lr =0.3", "--json")
    assert result.code == 0, result.err
    assert [r["id"] for r in json.loads(result.out)] == [1]
    # Where a run holds train.lr itself, spaces around = are spacing, as documented (review:
    # the typed key first left that run out without a word).
    stored(db, "plain", {"train": {"lr": 0.1}})
    assert [r.id for r in store.runs(where=["train.lr = 0.1"])] == [3]
    assert [r.id for r in store.runs(where=["train.lr=0.1"])] == [3]


def test_spaces_around_the_equals_sign_still_read_the_key(tmp_path: Path) -> None:
    """No run holds `train.lr ` here: the key is read without the spaces, as before."""
    db = str(tmp_path / "c9.db")
    stored(db, "plain", {"train": {"lr": 0.1}})
    assert [r.id for r in dlperf.Store(db).runs(where=["train.lr = 0.1", " name=plain"])] == [1]


def test_a_key_held_only_with_white_space_at_an_edge_is_said(tmp_path: Path, cli: Cli) -> None:
    """Was an empty listing, exit 0: `train.lr` is a key of every experiment, so not unknown."""
    db = str(tmp_path / "c9.db")
    stored(db, "spaced", {"train": {"lr ": 0.3}})
    one_line(
        cli("--db", db, "runs", "list", "--where", "train.lr=0.3"),
        2,
        "--where train.lr=0.3: no listed run holds the key train.lr; 'train.lr ' differs from "
        "it only by white space (to select by that key, write it as stored: "
        "--where 'train.lr =0.3')",
    )


# C10


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _two_runs(db: str) -> list[int]:
    ids = []
    for name in ("a", "b"):
        with dlperf.track(name, store=db) as run:
            run.log(1, loss=1.0)
            run.log(2, loss=0.5)
        ids.append(run.id)
    return ids


def _deleted_as_read(
    monkeypatch: pytest.MonkeyPatch, db: str, run_id: int, after: bool = False
) -> None:
    """Another process's `runs delete` of `run_id`, landing as the export reads its metrics:
    before the read, or (`after`) once the read is done."""
    series = exporters.metric_series

    def deleted(store: RunStore, read_id: int) -> Any:
        if read_id == run_id and not after:
            RunStore.open(db).delete_runs([run_id])
        found = series(store, read_id)
        if read_id == run_id and after:
            RunStore.open(db).delete_runs([run_id])
        return found

    monkeypatch.setattr(exporters, "metric_series", deleted)


@pytest.mark.parametrize("after", [False, True])
def test_a_run_deleted_during_a_tensorboard_export_keeps_its_events(
    after: bool, db: str, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was `│ 2 │ ... │ 0 │ 0`, exit 0, and run 2's event file replaced by an empty one."""
    pytest.importorskip("tensorboard", reason="the tensorboard extra")
    ids = _two_runs(db)
    out = tmp_path / "tb"
    args = ("runs", "export", *map(str, ids), "--to", "tensorboard", "--out", str(out), "--json")
    assert cli(*args).code == 0
    before = _files(out)
    _deleted_as_read(monkeypatch, db, ids[1], after)
    again = cli(*args)
    assert again.code == 0, again.err
    said = f"note: run {ids[1]} was deleted while runs export read the store; left out\n"
    assert again.err == said
    assert list(json.loads(again.out)["runs"]) == [str(ids[0])]
    after_files = _files(out)
    second = [name for name in before if name.startswith(f"run-{ids[1]}-")]
    assert second and all(after_files[name] == before[name] for name in second)
    assert after_files.keys() - before.keys()  # the first run's events were written again


def test_a_run_deleted_during_an_mlflow_export_is_left_out(
    db: str, cli: Cli, mlflow_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was an MLflow run with no metrics for the deleted run, exit 0."""
    ids = _two_runs(db)
    _deleted_as_read(monkeypatch, db, ids[0])
    result = cli("runs", "export", *map(str, ids), "--to", "mlflow", "--uri", mlflow_uri, "--json")
    assert result.code == 0, result.err
    assert (
        result.err == f"note: run {ids[0]} was deleted while runs export read the store; left out\n"
    )
    assert list(json.loads(result.out)["runs"]) == [str(ids[1])]
