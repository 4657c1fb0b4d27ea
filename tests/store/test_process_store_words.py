"""A run's `system.process.store` (the store its process writes, by which a copy tells the
original's runs from its own) was a PostgreSQL store's place as JSON, and `runs show` and the
report's run page printed it so: `{"postgresql": {"database": [16384, "dlperf_test"], ...}}`.
Both now name it as every line does: its database and schema, and its server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlperf.store import RunStore
from dlperf.store.query import system_rows
from dlperf.store.record import place_words
from tests.conftest import CliResult, fresh_store_url

PLACE = '{"postgresql": {"database": [16384, "lab"], "schema": [2200, "public"], "server": "73"}}'


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "words")


def test_a_place_reads_as_its_database_and_schema() -> None:
    assert place_words(PLACE) == "PostgreSQL database lab, schema public (server 73)"
    assert place_words("/data/lab.db") == "/data/lab.db"  # a SQLite file's path as it is
    assert place_words('{"postgresql": {"database": "set by hand"}}').startswith("{")
    rows = system_rows({"process": {"pid": 7, "store": PLACE}, "device": "cpu"})
    assert rows == {
        "process.pid": 7,
        "process.store": "PostgreSQL database lab, schema public (server 73)",
        "device": "cpu",
    }


def test_runs_show_names_the_store_a_runs_process_writes(
    cli: Callable[..., CliResult], url: str
) -> None:
    store = RunStore.open(url)
    try:
        run_id = store.create_run("r", "train", {}, system={"device": "cpu"})
        recorded = store.get_run(run_id).process["store"]
    finally:
        store.engine.dispose()
    r = cli("--db", url, "runs", "show", str(run_id))
    assert r.code == 0, r.err
    said = "".join(r.out.replace("│", "").split())  # however the table wraps its cells
    assert '{"postgresql"' not in said, r.out
    if url.startswith("postgresql"):
        words = "process.store PostgreSQL database dlperf_test, schema dlperf_words_"
    else:
        words = f"process.store {recorded}"  # the file's path
    assert "".join(words.split()) in said, r.out
