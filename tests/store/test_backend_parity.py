"""The run store keeps the same text on every backend: what PostgreSQL would refuse mid-run
(a run name or a metric key longer than its column, a NUL character), SQLite refuses too,
before anything is written, in one line. Each test runs on SQLite and on PostgreSQL (the
latter skips without a server: DLPERF_TEST_POSTGRES_URL)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.cli.test_app import one_line_error
from tests.conftest import CliResult, fresh_store_url


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from fresh_store_url(request.param, tmp_path, "parity")


def test_a_run_name_longer_than_its_column_is_refused_before_writing(url: str) -> None:
    store = RunStore.open(url)
    with pytest.raises(UserError, match="300 characters long; the run store keeps at most 200"):
        store.create_run("r" * 300, "run", {})
    assert store.list_runs() == []
    longest = store.create_run("r" * 200, "run", {})
    assert store.get_run(longest).name == "r" * 200


def test_a_study_name_longer_than_its_column_is_refused_before_writing(url: str) -> None:
    store = RunStore.open(url)
    with pytest.raises(UserError, match="201 characters long; the run store keeps at most 200"):
        store.create_study("s" * 201, "sweep")
    assert store.find_study("s" * 201, "sweep") is None


def test_a_metric_key_longer_than_its_column_fails_its_run_in_one_line(url: str) -> None:
    """The whole batch is refused before it is written (no half of it stored), and the run
    ends `failed` with the same reason on either backend, not with a driver's error."""
    store = RunStore.open(url)
    with (
        pytest.raises(UserError, match="150 characters long; the run store keeps at most 100"),
        store.new_run("keys", "run", {}) as record,
    ):
        store.log_metrics(record.id, [("k" * 100, 1, 1.0)])
        store.log_metrics(record.id, [("train/loss", 2, 0.5), ("k" * 150, 2, 2.0)])
    assert store.metric_keys(record.id) == ["k" * 100]
    run = store.get_run(record.id)
    assert run.status == "failed"
    assert run.error is not None and run.error.startswith("UserError: metric key 'kkkkk")


def test_a_nul_character_is_refused_on_every_backend(url: str) -> None:
    store = RunStore.open(url)
    with pytest.raises(UserError, match="holds a NUL character"):
        store.create_run("a\x00b", "run", {})
    run = store.create_run("nul", "run", {})
    with pytest.raises(UserError, match="metric key 'val/\\\\x00acc' holds a NUL character"):
        store.log_metrics(run, [("val/\x00acc", 1, 1.0)])
    assert store.metric_keys(run) == []


def test_dlperf_run_refuses_a_long_run_name_in_one_line_and_stores_nothing(
    url: str, cli: Callable[..., CliResult], tiny_exp: Callable[..., Path]
) -> None:
    """Before the fix PostgreSQL answered with 103 lines (StringDataRightTruncation) and
    SQLite stored the name: now both refuse it before the run starts."""
    exp = tiny_exp(epochs=1)
    result = cli("--db", url, "run", str(exp), "--set", f"run.name={'n' * 300}")
    one_line_error(result, "run name 'nnnnnnnnnnnnnnnnnnnn'... is 300 characters long")
    assert "give a shorter run.name" in result.err
    assert RunStore.open(url).list_runs() == []
