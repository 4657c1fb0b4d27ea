"""Break-it round 31, fixer I: review R1's findings on fixer B's commits.

F4. `RunStore.create_run` stored a config key holding a tab, and `RunStore.set_tags` a tag
key holding U+200B: only `log_metrics` checked keys at the store (the API's store object,
docs/export.md's `RunStore.open`, went around dlperf.track's check).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dlperf.errors import UserError
from tests.conftest import fresh_store_url

# --- F4: the store's own check of config and tag keys -----------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store nobody opened: a SQLite file, or a PostgreSQL schema of this test's own."""
    yield from fresh_store_url(request.param, tmp_path, "fx31i")


def test_f4_the_store_refuses_such_config_and_tag_keys(backend: str) -> None:
    """The review's repro. Before: `{'train': {'lr\\t': 0.1}}` and the tag `t\\u200bag`
    were stored; now refused in the words dlperf.track uses, nothing written."""
    from dlperf.store import RunStore

    store = RunStore.open(backend)
    config = r"key config\['train'\]\['lr\\t'\] holds U\+0009, a control character"
    with pytest.raises(UserError, match=config):
        store.create_run("r", "run", {"train": {"lr\t": 0.1}})
    assert store.list_runs() == []
    with store.new_run("r", "run", {"train": {"lr": 0.1}}) as record:
        tag = r"tag key 't\\u200bag' holds U\+200B, a format character"
        with pytest.raises(UserError, match=tag):
            store.set_tags(record.id, {"ok": "x", "t\u200bag": "x"})
    assert store.get_run(record.id).tags == {}
