"""Break-it round 47, T2 C1: `runs delete --force` in a copy of a store stopped the live run
of the original.

A store copied while one of its runs was training (`cp`, a backup, `runs repair`, the tables
copied into another PostgreSQL schema) holds that run as `running`, its process alive. Deleting
it from the copy with `--force` sent SIGTERM to that process, which writes the original: the
original's run was stopped mid-epoch (exit 143, `killed`), and the copy said "pid ... ended
without marking it (it reads as lost)". A run's `process` now records the store it writes
(`RunStore.writes_elsewhere`): the copy deletes its row without a signal and says why; the
process trains on and finishes its run in the original. Both backends alike.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from dlperf.store import RunStore
from tests.conftest import POSTGRES, CliResult, finished, fresh_store_url, python_child
from tests.faults.test_break_it_25_store import _copy_schema

# A dlperf command's process (`run`'s, as a store sees it) writing one run, until a line
# comes on stdin.
WRITER = """
import sys

from dlperf import stopping
from dlperf.store import RunStore
from dlperf.store.query import EXPERIMENT_SECTIONS


def command() -> int:
    store = RunStore.open(sys.argv[1])
    config = {section: {} for section in EXPERIMENT_SECTIONS}  # an experiment's, as `run`'s
    run_id = store.create_run("live", "run", config, system={})
    with store.recording(run_id):
        print(run_id, flush=True)
        sys.stdin.readline()
    return 0


stopping.run(command, process=True)
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def original(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "fx47")


def _copied(url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A copy of the store at `url` as it is now, and what the copy calls the original."""
    if url.startswith("sqlite"):
        source = sqlite3.connect(url.removeprefix("sqlite:///"))
        target = sqlite3.connect(tmp_path / "copy.db")
        with source, target:
            source.backup(target)
        source.close()
        target.close()
        yield f"sqlite:///{tmp_path / 'copy.db'}", url.removeprefix("sqlite:///")
        return
    assert POSTGRES is not None
    schema = make_url(url).query["options"].removeprefix("-csearch_path=")
    copy_schema = f"dlperf_fx47copy_{uuid.uuid4().hex[:8]}"
    admin = create_engine(POSTGRES)
    try:
        with admin.begin() as conn:
            _copy_schema(conn, str(schema), copy_schema)
        copy_url = make_url(POSTGRES).update_query_dict({"options": f"-csearch_path={copy_schema}"})
        database = make_url(POSTGRES).database
        yield (
            copy_url.render_as_string(hide_password=False),
            f"PostgreSQL database {database}, schema {schema}",
        )
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {copy_schema} CASCADE"))
        admin.dispose()


def test_deleting_a_copys_row_of_a_live_run_leaves_the_run_to_its_process(
    cli: Callable[..., CliResult], original: str, tmp_path: Path
) -> None:
    with python_child(WRITER, original) as writer:
        run_id = int(writer.stdout.readline())
        for copy_url, named in _copied(original, tmp_path):
            copy = RunStore.open(copy_url)
            try:
                assert copy.get_run(run_id).status == "running"  # its process is alive
                r = cli("--db", copy_url, "runs", "delete", str(run_id), "--yes", "--force")
            finally:
                copy.engine.dispose()
            # before: SIGTERM to the writer, then "pid ... ended without marking it"
            assert r.code == 0, r.err
            assert (
                f"warning: run {run_id} runs in pid {writer.pid}, which writes {named} (this "
                "store is a copy of it): not stopped, deleted from this store only"
            ) in " ".join(r.err.split()), r.err
            assert f"deleted run {run_id}" in r.out
        finished(writer)
    store = RunStore.open(original)
    try:
        assert store.get_run(run_id).status == "finished"  # before: killed, mid-epoch
    finally:
        store.engine.dispose()
