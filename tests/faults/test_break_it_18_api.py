"""Break-it round 18, part I2: the Python API's argument checks. docs/api.md promises that a
value of the wrong type raises dlperf's UserError, one line; these raised TypeError,
ValueError, AttributeError or LinAlgError from deep inside, or were taken silently:

- F4: `Store.runs`'s limit, study and kind and `Store.compare`'s run ids and study;
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dlperf


def _refused(call: Callable[[], Any], *said: str) -> str:
    """The one-line UserError `call` raises, holding each of `said`."""
    with pytest.raises(dlperf.UserError) as raised:
        call()
    text = str(raised.value)
    assert "\n" not in text, text
    for part in said:
        assert part in text, text
    return text


# --- F4: Store ----------------------------------------------------------------------------


STORE_CALLS: dict[str, tuple[Callable[[dlperf.Store], Any], str]] = {
    "limit text": (lambda s: s.runs(limit="2"), "limit"),
    "limit bool": (lambda s: s.runs(limit=True), "limit"),
    "limit float": (lambda s: s.runs(limit=1.5), "limit"),
    "study text": (lambda s: s.runs(study="x"), "study"),
    "study bool": (lambda s: s.runs(study=True), "study"),
    "kind number": (lambda s: s.runs(kind=5), "kind"),
    "ids text": (lambda s: s.compare("1,2"), "run ids"),
    "ids bytes": (lambda s: s.compare(b"12"), "run ids"),
    "ids int": (lambda s: s.compare(1), "run ids"),
    "an id text": (lambda s: s.compare([1, "2"]), "run id"),
    "compare study text": (lambda s: s.compare(study="x"), "study"),
}


@pytest.mark.parametrize("name", list(STORE_CALLS))
def test_store_refuses_arguments_of_the_wrong_type(db: str, name: str) -> None:
    call, said = STORE_CALLS[name]
    _refused(lambda: call(dlperf.Store(db)), said)


def test_store_still_takes_numpy_whole_numbers_and_an_unknown_kind(db: str) -> None:
    """NumPy's integers are whole numbers; an unknown kind lists no runs, as `dlperf runs list
    --kind nope` does (exit 0, an empty table)."""
    store = dlperf.Store(db)
    with dlperf.track("a", store=store), dlperf.track("b", store=store):
        pass
    assert [r.name for r in store.runs(limit=np.int64(1))] == ["b"]
    assert store.runs(kind="nope") == []
    first, second = (r.id for r in store.runs()[::-1])
    assert store.compare((np.int64(first), second)).run_ids == [first, second]
