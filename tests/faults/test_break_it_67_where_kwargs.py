"""Break-it round 67, W2 cause 1: `--where KEY=...` where KEY is a documented key of the
experiment (`model.kwargs`) that the listed runs hold as a table.

Before: `runs list --where model.kwargs=1` (or `config.model.kwargs=1`), where a run's
model.kwargs is the table `{a = {b = {c = 1}}, empty = {}}`, listed an empty table, exit 0, on
SQLite and PostgreSQL alike: the key was taken as known because the experiment documents it,
and never reached round 66's refusal of a table, which the deeper `model.kwargs.a=1` got.
Now a documented key that no listed run holds as a value, only as a table, is refused as any
table of the config is, naming its keys, exit 2; a run that holds it as a value (an empty
table, `{}`) is still selected by it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import dlperf
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]

KWARGS = {"a": {"b": {"c": 1}}, "empty": {}}


def _track(url: str, name: str, kwargs: dict[str, object]) -> None:
    config = {"model": {"name": "m.py:make", "kwargs": kwargs}, "train": {"lr": 0.05}}
    with dlperf.track(name, config=config, store=url) as run:
        run.log(1, loss=0.3)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    for url in fresh_store_url(request.param, tmp_path, "bk67_kwargs"):  # its schema dropped after
        _track(url, "w2-t", KWARGS)
        yield url


@pytest.mark.parametrize("prefix", ["", "config."])
@pytest.mark.parametrize("value", ["1", "{a = {b = {c = 1}}}"])
def test_a_documented_key_held_as_a_table_is_said_with_its_keys(
    store_url: str, cli: Cli, prefix: str, value: str
) -> None:
    """Was an empty table, exit 0: `model.kwargs` is documented, so it was a known key."""
    result = cli("--db", store_url, "runs", "list", "--where", f"{prefix}model.kwargs={value}")
    assert (result.code, result.out) == (2, ""), result.err
    assert result.err == (
        f"error: --where: '{prefix}model.kwargs' is a table of the config, not a value (name "
        f"one of its keys: '{prefix}model.kwargs.a.b.c', '{prefix}model.kwargs.empty')\n"
    )


def test_the_deeper_table_is_refused_as_before(store_url: str, cli: Cli) -> None:
    result = cli("--db", store_url, "runs", "list", "--where", "model.kwargs.a=1")
    assert (result.code, result.out) == (2, ""), result.err
    assert result.err == (
        "error: --where: 'model.kwargs.a' is a table of the config, not a value (name one of "
        "its keys: 'model.kwargs.a.b.c')\n"
    )


def test_a_run_holding_the_key_as_a_value_is_still_selected(store_url: str, cli: Cli) -> None:
    """A run whose model.kwargs is empty holds it as a value ({}): the key is not refused."""
    _track(store_url, "plain", {})
    result = cli("--db", store_url, "runs", "list", "--where", "model.kwargs={}", "--json")
    assert result.code == 0, result.err
    assert [run["name"] for run in json.loads(result.out)] == ["plain"]
    result = cli("--db", store_url, "runs", "list", "--where", "config.model.kwargs=1", "--json")
    assert (result.code, result.err, json.loads(result.out)) == (0, "", [])


def test_a_documented_key_no_run_has_is_still_known(tmp_path: Path, cli: Cli) -> None:
    """A store of runs without model.kwargs at all: the documented key selects nothing."""
    url = f"sqlite:///{tmp_path / 'bare.db'}"
    with dlperf.track("bare", config={"z": 1}, store=url) as run:
        run.log(1, loss=0.3)
    result = cli("--db", url, "runs", "list", "--where", "model.kwargs=1", "--json")
    assert (result.code, result.err, json.loads(result.out)) == (0, "", [])
