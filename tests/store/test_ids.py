"""dlperf.store.ids: which store ids are dlperf's own (they name a directory of run files)."""

from __future__ import annotations

import uuid

import pytest

from dlperf.store.ids import made_store_id


def test_an_id_as_migrate_makes_it_is_accepted() -> None:
    for _ in range(20):
        assert made_store_id(uuid.uuid4().hex[:12])
    assert made_store_id("0123456789ab")


@pytest.mark.parametrize(
    "value",
    [
        "../../etc",
        "0123456789AB",  # uuid's hex is lower case
        "0123456789a",  # 11 digits
        "0123456789abc",  # 13
        "0123456789ab\n",  # a trailing newline: fullmatch, not match with $
        "0123456789a/",
        "",
        None,
        123456789012,
        b"0123456789ab",
    ],
)
def test_anything_else_is_refused(value: object) -> None:
    assert not made_store_id(value)
