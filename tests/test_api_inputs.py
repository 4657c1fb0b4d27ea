"""What the public API's functions take: a store as a path, a URL, a `Store` or a `RunStore`
(anything else is a UserError naming it), and `analyze`'s counting options, which give the
numbers `dlperf analyze` gives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import dlperf
from dlperf.store import RunStore

torch.set_num_threads(1)

TINY_RUN = {
    "model": {"name": "smallcnn"},
    "data": {"name": "synthetic", "shape": [1, 8, 8], "size": 64, "num_classes": 2},
    "train": {"epochs": 1, "batch_size": 32},
    "run": {"threads": 1, "warmup_steps": 1, "checkpoint": False},
}

STORES: dict[str, Callable[[Path], Any]] = {
    "path text": lambda db: str(db),
    "pathlib path": lambda db: db,
    "url": lambda db: f"sqlite:///{db}",
    "Store": lambda db: dlperf.Store(str(db)),
    "RunStore": lambda db: RunStore.open(str(db)),
}


@pytest.mark.parametrize("given", STORES.values(), ids=STORES.keys())
def test_track_keeps_the_run_in_the_store_named(
    tmp_path: Path, db: str, given: Callable[[Path], Any]
) -> None:
    """store="/path.db" raised AttributeError: 'str' object has no attribute '_store'."""
    mine = tmp_path / "mine.db"
    with dlperf.track("x", store=given(mine)) as run:
        run.log(1, loss=0.5)
    assert dlperf.Store(f"sqlite:///{mine}").metrics(run.id, "loss") == [(1, 0.5)]
    assert dlperf.Store(db).runs() == []  # not in the default store ($DLPERF_DB)


@pytest.mark.parametrize("given", [STORES["path text"], STORES["RunStore"]], ids=["path", "rs"])
def test_run_keeps_the_run_in_the_store_named(
    tmp_path: Path, db: str, given: Callable[[Path], Any]
) -> None:
    mine = tmp_path / "mine.db"
    result = dlperf.run(TINY_RUN, store=given(mine))
    assert result["status"] == "finished"
    assert dlperf.Store(str(mine)).run(result["run_id"]).status == "finished"
    assert dlperf.Store(db).runs() == []


BAD_STORES: dict[str, tuple[Any, str]] = {
    "a number": (42, "a store is a path or a SQLAlchemy URL, got int 42"),
    "bytes": (b"x.db", "a store is a path or a SQLAlchemy URL, got bytes b'x.db'"),
    "a list": (["x.db"], "a store is a path or a SQLAlchemy URL, got list ['x.db']"),
}


@pytest.mark.parametrize(("given", "message"), BAD_STORES.values(), ids=BAD_STORES.keys())
def test_a_store_of_another_kind_is_a_user_error(db: str, given: Any, message: str) -> None:
    hint = " (e.g. 'runs.db' or 'sqlite:///runs.db')"
    with pytest.raises(dlperf.UserError) as caught, dlperf.track("x", store=given):
        pass
    assert str(caught.value) == message + hint
    with pytest.raises(dlperf.UserError) as caught:
        dlperf.run(TINY_RUN, store=given)
    assert str(caught.value) == message + hint
    with pytest.raises(dlperf.UserError) as caught:
        dlperf.Store(given)
    assert str(caught.value) == message + hint
    assert dlperf.Store(db).runs() == []  # nothing stored, nothing trained


def test_a_directory_as_store_is_a_user_error(tmp_path: Path, db: str) -> None:
    with (
        pytest.raises(dlperf.UserError, match="cannot open run store"),
        dlperf.track("x", store=tmp_path),
    ):
        pass
