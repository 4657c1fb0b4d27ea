"""Break-it round 29: the lead's causes (and items round 28 left).

C1. A PostgreSQL read that waited out its lock said "waited 30 s" whatever lock_timeout the
    URL, the role or the database had set (here 2 s): it says the session's own.
C2. (Round 28's Left.) `run --resume 1`, `runs show 1` and the other readers of a run at a
    mistyped --db said "no run 1 in the store", as if the store were there and empty: they
    say the store does not exist, and how to give it; `runs delete` too (reviewer 1).
C3. (Round 28's Left.) The doctor's fix for a stopped run, `dlperf run --resume N`, left out
    the `--db` the doctor was given: run as written, it opened ./dlperf.db and said there is
    no run N. It carries the store's words now (password as ***), as `run`'s own hint does; in
    a report's pages too (reviewer 1).
C4. (Fixer C2's note.) A weights file holding a sparse tensor printed torch's two-line
    "Validating sparse tensor invariants" warning above dlperf's one line refusing it.
C5. (Fixer B2's note.) `analyze --csv` wrote a module named "=HYPERLINK(...)" (a name
    registered by add_module) raw into a cell a spreadsheet runs as a formula, as
    `converge fit --to-csv` did.
C6. (The final run's property test.) A `model.weights` the OS cannot take as a path (a NUL in
    it, a name over 255 bytes) raised ValueError or ENAMETOOLONG from the config's own check
    for a file, where it is a name of no file, refused where the weights are read.
"""

from __future__ import annotations

import html
import json
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


@pytest.mark.parametrize(
    "args", [["run", "--resume", "1"], ["runs", "show", "1"], ["runs", "delete", "1", "--yes"]]
)
def test_a_run_asked_of_a_store_that_is_not_there_says_the_store_is_missing(
    cli: Cli, tmp_path: Path, args: list[str]
) -> None:
    typo = tmp_path / "typo.db"
    line = one_line(cli("--db", str(typo), *args), 2, f"no run 1: run store {typo} does not exist")
    assert line.endswith("(give the store with --db or DLPERF_DB (by default: ./dlperf.db, in the "
                         "current directory))")  # fmt: skip
    assert not list(tmp_path.glob("typo.db*"))


# C3


def test_the_doctors_resume_fix_names_the_store_it_was_given(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlperf.store import RunStore

    monkeypatch.delenv("DLPERF_DB")
    where = tmp_path / "other place.db"
    store = RunStore.open(str(where))
    config = {"model": {}, "data": {}, "run": {}, "train": {"epochs": 4}}  # a dlperf run's
    run = store.create_run("stopped", "run", config)
    store.log_metrics(run, [("epoch/train_loss", 1, 2.0)])
    store.finish_run(run, "killed", error="interrupted")
    done = cli("--db", str(where), "doctor", str(run), "--json")
    (fix,) = [f["fix"] for f in json.loads(done.out)["findings"] if f["rule"] == "unfinished"]
    assert fix == f"continue it from its last checkpoint: dlperf --db '{where}' run --resume {run}"
    site = tmp_path / "site"
    assert cli("--db", str(where), "report", str(run), "--out", str(site)).code == 0
    page = html.unescape((site / f"run-{run}.html").read_text())
    assert f"dlperf --db '{where}' run --resume {run}" in page


# C4


def test_a_sparse_weights_file_loads_without_torchs_warning(tmp_path: Path) -> None:
    import warnings

    import torch

    from dlperf.engine.pretrained import _from_file

    path = tmp_path / "w.pt"
    torch.save({"w": torch.eye(3).to_sparse()}, path)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        state = _from_file(str(path)).fetch()
    assert state["w"].is_sparse
    assert [str(w.message) for w in said] == []


# C5

FORMULA_MODEL = """
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.add_module("=HYPERLINK(1)", nn.Flatten())
        self.fc = nn.Linear(in_channels * 64, num_classes)

    def forward(self, x):
        return self.fc(getattr(self, "=HYPERLINK(1)")(x))
"""


def test_analyze_csv_keeps_a_formula_like_module_name_as_text(cli: Cli, tmp_path: Path) -> None:
    import csv
    import io

    (tmp_path / "net.py").write_text(FORMULA_MODEL)
    done = cli("analyze", f"{tmp_path / 'net.py'}:Net", "--input", "1,8,8", "--csv")
    assert done.code == 0, done.err
    names = [row["name"] for row in csv.DictReader(io.StringIO(done.out))]
    assert "'=HYPERLINK(1)" in names, names


# C6


@pytest.mark.parametrize("weights", ["a\x00b.pt", "w" * 300, "x" * 300 + ".pt"])
def test_a_weights_name_no_file_may_have_is_kept_as_typed(weights: str) -> None:
    from dlperf.config import Experiment

    exp = Experiment.model_validate({"model": {"weights": weights}})
    assert exp.model.weights == weights
    assert isinstance(exp.config_hash(), str)
