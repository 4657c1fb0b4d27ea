"""Break-it round 65, Y3 cause 6: oneDNN's failure under an address-space limit.

Before: a sweep under `ulimit -v 3500000` stored both points failed with "the model rejects
digits images of shape (1, 8, 8): could not create a primitive": oneDNN says that of any
failure, its allocations' included, and the dry checks blamed the images they fed. Now, under
an address-space limit, that failure is out of memory (`errors.out_of_memory`), told as the
dry checks tell memory that ran out; with no limit set it stays as it was (oneDNN says it too
of a layer configuration it does not support).

The limit is read as set (`errors.address_limit`, stood in for here): where oneDNN's
allocations fail under a real `ulimit -v` moves with the machine's load.
"""

from __future__ import annotations

import pytest

from dlperf import errors

REFUSED = RuntimeError("could not create a primitive")


def test_onednns_failure_is_memory_under_an_address_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(errors, "address_limit", lambda: 3_500_000 * 1024)
    assert errors.out_of_memory(REFUSED)


def test_onednns_failure_is_not_memory_without_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(errors, "address_limit", lambda: None)
    assert not errors.out_of_memory(REFUSED)
