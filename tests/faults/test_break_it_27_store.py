"""Break-it round 27, part P3, fix task C: the store's views and the URLs it takes.

C1. `runs compare` of dlperf.track runs and of scale points left out their own results, which
    `runs show` lists: compare gave the training run's keys only (all null for those runs).
    Their own keys now follow the training keys, in the table and in --json, on both backends.
C3. A store URL missing its `//` (`sqlite:x.db`, `sqlite:`, `postgresql+psycopg:/u:p@h/db`)
    was taken as a file path: a store file named `sqlite:x.db` was made without a word, or a
    directory `sqlite:` was blamed. It is refused in one line naming the URL to write, and
    `./sqlite:x.db` as the way to mean a file of that name; through --db, DLPERF_DB,
    dlperf.track(store=...) and dlperf.Store(...) alike.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import dlperf
from dlperf.errors import UserError
from dlperf.store import RunStore
from dlperf.store.query import SUMMARY_KEYS
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]

# C1


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "fx27c")


def _finished(store: RunStore, kind: str, config: dict[str, Any], summary: dict[str, Any]) -> int:
    run_id = store.create_run("r", kind, config)
    store.finish_run(run_id, summary=summary)
    return run_id


def _point(workers: int, throughput: float) -> dict[str, Any]:
    """A scale point's summary as dlperf.distributed stores it (the keys that matter here):
    training keys (throughput, cpu_wait_share) and its own (speedup, a nested dict)."""
    return {
        "workers": workers,
        "step_time_s": 0.5 / workers,
        "throughput": throughput,
        "speedup": throughput / 100.0,
        "efficiency": throughput / 100.0 / workers,
        "cpu_wait_share": 0.1,
        "ddp_logging_s": {"backward_comm_time": 0.01 * workers},
        "phases": None,
    }


def test_compare_gives_tracked_runs_and_scale_points_their_own_results(
    url: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C1: the keys `runs show` lists for a run, after the training keys, in the table and in
    --json alike; a training run's compare is as it was (the training keys alone)."""
    monkeypatch.delenv("COLUMNS", raising=False)  # the table as wide as it needs
    for i in (1, 2):
        with dlperf.track("c", {"i": i}, store=url) as r:
            r.log(0, loss=1.0 / i)
    store = RunStore.open(url)
    scale = [_finished(store, "scale", {"workers": n}, _point(n, 100.0 * n)) for n in (1, 2)]
    experiment = {"model": {"name": "m"}, "data": {}, "train": {"lr": 0.1}, "run": {}}
    trained = [
        _finished(store, "run", experiment, {"test_accuracy": 0.5, "device": "cpu", "extra": 1}),
        _finished(store, "run", {**experiment, "train": {"lr": 0.2}}, {"test_accuracy": 0.6}),
    ]
    store.engine.dispose()

    done = cli("--db", url, "runs", "compare", "1", "2", "--json")
    assert done.code == 0, done.err
    summary = json.loads(done.out)["summary"]
    assert summary["final.train/loss"] == [1.0, 0.5]
    assert list(summary)[: len(SUMMARY_KEYS)] == list(SUMMARY_KEYS)
    shown = cli("--db", url, "runs", "show", "2")
    table = cli("--db", url, "runs", "compare", "1", "2")
    assert "final.train/loss" in shown.out
    assert [line.split()[:3] for line in table.out.splitlines() if "final.train" in line] == [
        ["final.train/loss", "│", "1"]
    ]

    done = cli("--db", url, "runs", "compare", *map(str, scale), "--json")
    assert done.code == 0, done.err
    summary = json.loads(done.out)["summary"]
    own = ["workers", "step_time_s", "speedup", "efficiency", "ddp_logging_s.backward_comm_time"]
    assert list(summary) == [*SUMMARY_KEYS, *own]  # throughput once, among the training keys
    assert summary["speedup"] == [1.0, 2.0]
    assert summary["step_time_s"] == [0.5, 0.25]
    table = cli("--db", url, "runs", "compare", *map(str, scale))
    labels = {line.split()[0] for line in table.out.splitlines() if line.strip()}
    assert {"speedup", "step_time_s", "efficiency", "ddp_logging_s.backward_comm_time"} <= labels
    assert "phases" not in labels

    done = cli("--db", url, "runs", "compare", *map(str, trained), "--json")
    assert done.code == 0, done.err
    assert list(json.loads(done.out)["summary"]) == list(SUMMARY_KEYS)


# C3

# (what is given, the URL the line tells to write): each missing its `//`.
NO_SLASHES = [
    ("sqlite:x.db", "sqlite:///x.db"),
    ("sqlite:", "sqlite:///PATH"),
    ("postgresql:", "postgresql://USER:PASSWORD@HOST/DATABASE"),
    ("sqlite:/x.db", "sqlite:////x.db"),
    ("postgresql+psycopg:/u:secret@127.0.0.1/db", "postgresql+psycopg://u:***@127.0.0.1/db"),
]


def _refusal(text: str, given: str, write: str) -> None:
    line = " ".join(text.split())  # the one line, however the error stream wraps it
    assert "missing its '//'" in line, text
    assert write in line, text
    assert f"./{given.replace('secret', '***')}" in line, text
    assert "secret" not in text
    assert "directory" not in text


def test_a_store_url_missing_its_slashes_is_refused_everywhere(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """C3: --db (a listing's own reader too), DLPERF_DB, dlperf.track and dlperf.Store each
    refuse it in one line, and make nothing; `./sqlite:x.db` and `dir/a:b.db` are files."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for given, write in NO_SLASHES:
        for args in (("--db", given, "runs", "list"), ("--db", given, "runs", "show", "1")):
            done = cli(*args)
            assert done.code == 2, (args, done.out, done.err)
            _refusal(done.err, given, write)
            assert len(done.err.strip().splitlines()) == 1, done.err
        monkeypatch.setenv("DLPERF_DB", given)
        done = cli("runs", "list")
        assert done.code == 2, (given, done.err)
        _refusal(done.err, given, write)
        with pytest.raises(UserError) as e:
            dlperf.Store()  # the store $DLPERF_DB names
        _refusal(str(e.value), given, write)
        monkeypatch.delenv("DLPERF_DB")
        with pytest.raises(UserError) as e, dlperf.track("w", {}, store=given) as r:
            r.log(0, loss=1.0)
        _refusal(str(e.value), given, write)
        with pytest.raises(UserError) as e:
            dlperf.Store(given)
        _refusal(str(e.value), given, write)
    assert os.listdir(work) == []

    # What is not a URL stays a file: a path of that shape written with ./ or given as a Path
    # (which drops the ./), and a colon after a directory.
    (work / "dir").mkdir()
    for path in ("./sqlite:x.db", Path("sqlite:p.db"), "dir/a:b.db"):
        with dlperf.track("w", {}, store=path) as r:
            r.log(0, loss=1.0)
        assert len(dlperf.Store(path).runs()) == 1
    stores = {p.relative_to(work).as_posix() for p in work.rglob("*.db")}
    assert stores == {"sqlite:x.db", "sqlite:p.db", "dir/a:b.db"}
