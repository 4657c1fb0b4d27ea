"""Break-it round 37, outputs written over the run store (docs/faults.md, the thirty-seventh
round, T2 C4).

An output file that was the run store itself was written over it: `dlperf export MODEL --out
dlperf.db` (or `--out` the --db file), `runs plot --out`, `predict --plot` replaced the whole
SQLite store with ONNX or PNG bytes, exit 0, every run lost; `export RUN --out` the run's own
checkpoint replaced the checkpoint. Every option that writes a file is now refused before
anything is written, in one line, exit 2: the store, its -wal, -shm and -journal files, a link
to it, and a path in its runs' folder (dlperf_runs/<store id>/), named for what it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import dlperf
from dlperf.store import RunStore
from tests.conftest import CliResult

Cli = Callable[..., CliResult]

# Every option that writes a file, given the store's file (its name in the test's folder).
WRITERS = {
    "export": ["export", "smallcnn", "--out", "{store}"],
    "detect export": ["detect", "export", "--out", "{store}"],
    "detect finetune": ["detect", "finetune", "--out", "{store}"],
    "runs plot": ["runs", "plot", "1", "--out", "{store}"],
    "predict --plot": ["predict", "smallcnn", "--input", "1,8,8", "--plot", "{store}"],
    "converge --plot": ["converge", "fit", "1", "--plot", "{store}"],
    "converge --to-csv": ["converge", "fit", "1", "--to-csv", "{store}"],
    "scale --emit --out": ["scale", "exp.toml", "--emit", "slurm", "--out", "{store}"],
}


def tracked(store: str) -> bytes:
    """A store at `store` holding one run, its bytes once written."""
    with dlperf.track("r", store=store) as run:
        run.log(1, loss=1.0)
    path = Path(store.removeprefix("sqlite:///"))
    return path.read_bytes()


def option(args: list[str]) -> str:
    return next(word for word in args if word in ("--out", "--plot", "--to-csv"))


@pytest.mark.parametrize("writer", WRITERS)
def test_c4_an_output_that_is_the_store_is_refused(cli: Cli, db: str, writer: str) -> None:
    before = tracked(db)
    args = [word.format(store="dlperf.db") for word in WRITERS[writer]]
    done = cli(*args)
    assert (done.code, done.out) == (2, "")
    said = f"error: {option(args)} dlperf.db is the run store (--db {db}) (give another file)"
    assert done.err.strip() == said
    assert Path("dlperf.db").read_bytes() == before


@pytest.mark.parametrize("name", ["runs.png", "roof.png"])
def test_c4_a_figure_named_as_the_store_is_refused(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The repro: a store named like a figure, and the figure given that name."""
    monkeypatch.delenv("DLPERF_DB")
    before = tracked(name)
    plot = ["runs", "plot", "1", "--out", name] if name == "runs.png" else []
    plot = plot or ["predict", "smallcnn", "--input", "1,8,8", "--device", "P100", "--plot", name]
    done = cli("--db", name, *plot)
    assert done.code == 2
    flag = "--out" if name == "runs.png" else "--plot"
    assert (
        done.err.strip()
        == f"error: {flag} {name} is the run store (--db {name}) (give another file)"
    )
    assert Path(name).read_bytes() == before


def test_c4_the_default_store_its_neighbours_and_a_link_to_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DLPERF_DB")  # ./dlperf.db
    before = tracked("dlperf.db")
    Path("alias.onnx").symlink_to("dlperf.db")
    for out, what in [
        ("dlperf.db", "the run store"),
        ("alias.onnx", "the run store"),
        ("dlperf.db-wal", "the run store's wal file"),
        ("dlperf.db-journal", "the run store's journal file"),
    ]:
        done = cli("export", "smallcnn", "--out", out)
        said = f"error: --out {out} is {what} (the default store ./dlperf.db) (give another file)"
        assert (done.code, done.err.strip()) == (2, said)
    assert Path("dlperf.db").read_bytes() == before
    assert not Path("dlperf.db-journal").exists()


def test_c4_a_store_not_there_is_not_made_to_check(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DLPERF_DB")
    done = cli("--db", "new.db", "export", "smallcnn", "--out", "new.db")
    assert (done.code, done.err.strip()) == (
        2,
        "error: --out new.db is the run store (--db new.db) (give another file)",
    )
    assert not Path("new.db").exists()


def test_c4_a_file_in_the_runs_folder_is_refused_naming_the_run(cli: Cli, db: str) -> None:
    """`export 1 --out` the run's own checkpoint replaced it; a new file in the run's folder
    is refused too, naming the folder."""
    tracked(db)
    store = RunStore.open(db)
    folder = Path("dlperf_runs") / store.id
    checkpoint = folder / "run-1" / "checkpoint.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    store.add_artifact(1, "checkpoint", checkpoint.resolve())
    store.engine.dispose()
    for out, held in [
        (checkpoint, "run 1's checkpoint, recorded by the run store"),
        (checkpoint.parent / "model.onnx", "in run 1's folder of the run store"),
        (folder / "other.onnx", "in the run store's folder of its runs' files"),
    ]:
        done = cli("export", "1", "--out", str(out))
        said = f"error: --out {out} is {held} (--db {db}) (give a path outside {folder.resolve()})"
        assert (done.code, done.err.strip()) == (2, said)
    assert checkpoint.read_bytes() == b"weights"
