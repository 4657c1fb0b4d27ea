"""Break-it round 60, T3 cause 3: `runs list --where` flattened every run's config and summary
again for each clause at each of its passes (the key check, the typed key, the selection): on
a store of 100,000 runs one clause took 23 s, each more about 15 s, and 100 clauses (the same
one) did not end within 250 s. A record's flattened config and summary are now worked out once
(`RunRecord.flat_config`, `flat_summary`), and a clause given twice is checked once: measured
on that store, 1 clause 10.2 s of selection, 4 different clauses 11.3 s. Counted here, not
timed: the flattening calls per run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dlperf.parsing import flatten
from dlperf.store import query, record
from dlperf.store.record import RunRecord


def _run(i: int) -> RunRecord:
    return RunRecord(
        id=i,
        study_id=None,
        name=f"r{i}",
        kind="run",
        status="finished",
        config={"model": {"name": "smallcnn"}, "train": {"lr": 0.05 * i}},
        config_hash=None,
        system=None,
        summary={"test_accuracy": 0.5, "final": {"train/loss": 1.0}},
    )


def test_each_runs_config_and_summary_are_flattened_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def counted(value: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return flatten(value, *args, **kwargs)

    patch: Callable[..., None] = monkeypatch.setattr
    patch(query, "flatten", counted)
    patch(record, "flatten", counted, raising=False)
    runs = [_run(i) for i in range(1, 6)]
    where = ["train.lr=0.05", "model.name=smallcnn", "final.train/loss=1.0", "test_accuracy=0.5"]
    chosen = query.select(runs, where * 3)  # each clause given three times: checked once
    assert [r.id for r in chosen] == [1]
    assert len(calls) == 2 * len(runs)  # a config and a summary each
