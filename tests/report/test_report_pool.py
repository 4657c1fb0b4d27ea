"""`dlperf report` starts its pool of drawing processes only where it wins: a small report's
run pages are drawn in this process (each fresh worker imports matplotlib and dlperf again,
seconds a small report never won back), a big one's in the pool, and a caller's `jobs` is
obeyed as before. Whether the pool starts is read at its first step (the spawn context), which
these tests replace: no worker process is started by them."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from dlperf.report import site
from dlperf.store import RunStore


class PoolStarted(Exception):
    """Raised where the report would start its pool."""


def _no_pool(*args: Any, **kwargs: Any) -> Any:
    raise PoolStarted


def _store(tmp_path: Path, runs: int) -> RunStore:
    # A file store: a store in memory is drawn in this process whatever the size, as other
    # processes cannot open it.
    store = RunStore.open(f"sqlite:///{tmp_path / 'dlperf.db'}")
    for i in range(runs):
        run_id = store.create_run(f"r{i}", "run", {})
        store.log_metrics(run_id, [("train/loss", step, 1 / step) for step in range(1, 6)])
        store.finish_run(run_id, "finished")
    return store


def test_a_small_report_is_drawn_in_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: two run pages started a pool of two fresh interpreters (18-22 s of a 2-run
    report on a busy 2-core machine, against 1.6-2.5 s drawn here)."""
    store = _store(tmp_path, 2)
    monkeypatch.setattr(multiprocessing, "get_context", _no_pool)
    done = site.build_report(store, tmp_path / "site", last=2)
    assert sorted(done.pages) == ["index.html", "run-1.html", "run-2.html"]
    assert "against epoch" in (tmp_path / "site" / "run-1.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("runs", "jobs"), [(site.POOL_FROM, None), (2, 2)], ids=["big-report", "jobs-set"]
)
def test_a_big_report_or_a_callers_jobs_still_starts_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: int, jobs: int | None
) -> None:
    monkeypatch.setattr("dlperf.system.usable_cores", lambda: 2)  # a 1-core machine's too
    store = _store(tmp_path, runs)
    monkeypatch.setattr(multiprocessing, "get_context", _no_pool)
    with pytest.raises(PoolStarted):
        site.build_report(store, tmp_path / "site", last=runs, jobs=jobs)
    assert not (tmp_path / "site").exists()  # nothing drawn is left, as on any failure
