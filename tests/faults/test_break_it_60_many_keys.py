"""Break-it round 60, T3 cause 2: an error naming a run's metric keys listed every one of
them: for a run of 10,000 keys `dlperf runs plot 1 --key nosuch` (and the run's default
metrics missing) and `Store.metrics(1, "nosuch")` were "one line" errors of 129,000
characters. They now name the first KEYS_LISTED keys (sorted, as before) and how many more.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import dlperf
from dlperf.errors import UserError
from dlperf.formatting import KEYS_LISTED
from dlperf.store import RunStore
from tests.conftest import CliResult
from tests.faults.test_store_faults import one_line

Cli = Callable[..., CliResult]

KEYS = [f"k{i:03d}" for i in range(KEYS_LISTED + 30)]


@pytest.fixture
def many_keys(store: RunStore) -> int:
    run_id = store.create_run("many", "track", {})
    store.log_metrics(run_id, [(key, 1, 1.0) for key in KEYS])
    store.finish_run(run_id, summary={})
    return run_id


def test_runs_plot_names_a_few_keys_and_how_many_more(cli: Cli, many_keys: int) -> None:
    done = cli("runs", "plot", str(many_keys), "--key", "nosuch")
    listed = ", ".join(KEYS[:KEYS_LISTED])
    one_line(done, 2, f"no metric 'nosuch' in run(s) {many_keys}", f"{listed} and 30 more")
    assert KEYS[KEYS_LISTED] not in done.err


def test_store_metrics_names_a_few_keys_and_how_many_more(store: RunStore, many_keys: int) -> None:
    with pytest.raises(UserError) as caught:
        dlperf.Store(store).metrics(many_keys, "nosuch")
    assert caught.value.hint == f"its metrics: {', '.join(KEYS[:KEYS_LISTED])} and 30 more"
