"""Break-it round 66, Z2 cause B: `--where KEY=...` where KEY is a table of a run's config.

Before: `runs list --where k=1` (or `--where 'k={b = 1, a = 2}'`), where a tracked run's config
holds the table `k = {b = 1, a = 2}`, said `unknown key 'k'` and listed generic keys
(model.name, train.lr) that no listed run has, on SQLite and PostgreSQL alike; a table of the
engine's config (`train.schedule`) got `did you mean 'train.schedule.kind'?`, one of its keys.
Now any table of the config, a run's own or the engine's, with or without `config.`, is said to
be a table, with its keys to name (`'k.a', 'k.b'`), exit 2.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import dlperf
from tests.conftest import CliResult, fresh_store_url

Cli = Callable[..., CliResult]

K_TABLE = "error: --where: 'k' is a table of the config, not a value (name one of its keys: "


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    for url in fresh_store_url(request.param, tmp_path, "bk66_where"):  # its schema dropped after
        with dlperf.track("z2big", config={"z": 1, "k": {"b": 1, "a": 2}}, store=url) as run:
            run.log(1, loss=0.3)
        yield url


@pytest.mark.parametrize("where", ["k=1", "k={b = 1, a = 2}"])
def test_a_table_of_a_tracked_runs_config_is_said_with_its_keys(
    store_url: str, cli: Cli, where: str
) -> None:
    """Was `unknown key 'k' (keys: config keys (model.name, train.lr), ...)`."""
    result = cli("--db", store_url, "runs", "list", "--where", where)
    assert (result.code, result.out) == (2, ""), result.err
    assert result.err == f"{K_TABLE}'k.a', 'k.b')\n"


def test_a_config_table_named_with_config_prefix_is_said_with_its_keys(
    store_url: str, cli: Cli
) -> None:
    """Was `unknown key 'config.k' (did you mean 'config.k.b'?)`: one key of two."""
    result = cli("--db", store_url, "runs", "list", "--where", "config.k=1")
    assert (result.code, result.out) == (2, ""), result.err
    assert result.err == (
        "error: --where: 'config.k' is a table of the config, not a value (name one of its "
        "keys: 'config.k.a', 'config.k.b')\n"
    )


def test_an_engine_table_is_said_as_a_runs_table_is(store_url: str, cli: Cli) -> None:
    """Was `unknown key 'train.schedule' (did you mean 'train.schedule.kind'?)`; its keys in
    the order the config documents them, and `train`'s first five with how many more."""
    result = cli("--db", store_url, "runs", "list", "--where", 'train.schedule={kind = "step"}')
    assert (result.code, result.out) == (2, ""), result.err
    assert result.err == (
        "error: --where: 'train.schedule' is a table of the config, not a value (name one of "
        "its keys: 'train.schedule.kind', 'train.schedule.milestones', 'train.schedule.gamma', "
        "'train.schedule.warmup_epochs', 'train.schedule.min_lr')\n"
    )
    result = cli("--db", store_url, "runs", "list", "--where", "train=1")
    assert result.code == 2, result.err
    assert result.err.startswith(
        "error: --where: 'train' is a table of the config, not a value (name one of its keys: "
        "'train.epochs', 'train.batch_size', 'train.optimizer', 'train.lr', 'train.momentum' "
        "and "
    ), result.err


def test_a_misspelt_key_of_a_table_still_gets_the_closest_key(store_url: str, cli: Cli) -> None:
    result = cli("--db", store_url, "runs", "list", "--where", "k.c=1")
    assert result.err == "error: --where: unknown key 'k.c' (did you mean 'k.b'?)\n"
