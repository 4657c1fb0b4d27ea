"""Break-it round 56, fixer G9: a memory limit at a run's start, and an empty SQLite file's name.

- T3 C1: under `ulimit -v 3500000` (just above dlperf's own check before torch loads) the
  import of torch._dynamo (with sympy) that the first optimizer build makes ran out after the
  run was recorded: `run` said "cannot load sympy ... ulimit -v 3500000 may be too low", exit 1,
  but the store kept the run `failed` with the error "MemoryError: " (no limit named), and a
  `run --resume` of a killed run turned it `failed` the same way though nothing was lost. The
  import is made before the run is recorded (or taken over) now: one line naming the limit,
  exit 1, nothing stored, a killed run left `killed` and resumable; and a MemoryError under a
  limit that still ends a recording is stored as the command's out-of-memory line, the limit
  named. Simulated in process (the import made to raise MemoryError, the limit read as set):
  the real limit's band depends on torch's build.
- T3 C2: a SQLite file without tables was named by its URL, `run store sqlite:///nt.db holds
  no store yet`; it is named by its absolute path now, as `is an empty file` is.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import dlperf.errors
from dlperf.engine import optim
from dlperf.store.runstore import RunStore

_LIMIT_KIB = 3_500_000
_WORDS = f"a memory limit, ulimit -v {_LIMIT_KIB} may be too low"
_TOML = """
[model]
name = "smallcnn"
[data]
name = "digits"
limit = 128
[train]
epochs = 1
batch_size = 32
[run]
threads = 1
"""


def _starved(monkeypatch: pytest.MonkeyPatch) -> None:
    """A set address-space limit, and torch._dynamo's import running out of it."""

    def import_module(name: str, package: str | None = None) -> Any:
        raise MemoryError

    monkeypatch.setattr(dlperf.errors, "address_limit", lambda: _LIMIT_KIB * 1024)
    monkeypatch.setattr(optim, "importlib", SimpleNamespace(import_module=import_module))


def _runs(tmp_path: Path) -> list[tuple[int, str, str | None]]:
    with sqlite3.connect(tmp_path / "dlperf.db") as c:
        return list(c.execute("select id, status, error from runs order by id"))


def test_a_run_short_of_memory_for_the_optimizers_is_one_line_and_stores_nothing(
    cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "e.toml").write_text(_TOML)
    assert cli("run", "e.toml").code == 0  # the store made, one run in it
    _starved(monkeypatch)
    r = cli("run", "e.toml")
    assert r.code == 1, r.err
    assert r.err.strip().splitlines()[-1].endswith(f"MemoryError ({_WORDS})"), r.err
    assert "cannot load torch._dynamo" in r.err, r.err
    assert [status for _, status, _ in _runs(tmp_path)] == ["finished"]


def test_a_killed_run_resumed_short_of_memory_stays_killed(
    cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "e.toml").write_text(_TOML)
    assert cli("run", "e.toml").code == 0
    # As a run killed after its first epoch of two leaves it: its checkpoint, `killed`.
    with sqlite3.connect(tmp_path / "dlperf.db") as c:
        (config,) = c.execute("select config from runs where id = 1").fetchone()
        config = json.loads(config)
        config["train"]["epochs"] = 2
        c.execute(
            "update runs set status = 'killed', error = 'SIGTERM', config = ? where id = 1",
            (json.dumps(config),),
        )
    _starved(monkeypatch)
    r = cli("run", "--resume", "1")
    assert r.code == 1, r.err
    assert _WORDS in r.err, r.err
    assert _runs(tmp_path) == [(1, "killed", "SIGTERM")]
    monkeypatch.undo()  # the limit gone: the resume finishes it
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DLPERF_DB", f"sqlite:///{tmp_path / 'dlperf.db'}")
    assert cli("run", "--resume", "1").code == 0
    assert _runs(tmp_path)[0][1] == "finished"


def test_a_memory_error_under_a_limit_is_stored_naming_it(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dlperf.errors, "address_limit", lambda: _LIMIT_KIB * 1024)
    with pytest.raises(MemoryError), store.new_run("m", "run", {}) as record:
        raise MemoryError
    assert store.get_run(record.id).error == f"out of memory: MemoryError ({_WORDS})"


def test_a_sqlite_file_without_tables_is_named_by_its_path(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    with sqlite3.connect(tmp_path / "nt.db") as c:
        c.execute("pragma journal_mode=wal")
    for args in (("runs", "show", "1"), ("run", "--resume", "1"), ("runs", "tag", "1", "a=b")):
        r = cli("--db", "nt.db", *args)
        assert r.code == 2, r.err
        assert f"no run 1: run store {tmp_path / 'nt.db'} holds no store yet" in r.err, r.err
