"""Break-it round 32, fixer H: what `dlperf.analyze` copies and which activations it counts.

C4 (P1). `dlperf.analyze(module)` of a model holding a lock, a logging handler, an open file
or a generator failed with deepcopy's bare TypeError ("cannot pickle '_thread.lock'"), and a
tensor or NumPy table kept as a plain attribute was copied byte by byte.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import dlperf
from dlperf.api import _meta_copy
from dlperf.errors import UserError

# --- C4: what the copy cannot or need not copy ------------------------------------------------


class _Guarded(nn.Module):
    """A model keeping things deepcopy refuses beside its layer, one in a dict with a cache."""

    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(8, 2)
        self.cache_lock = threading.Lock()
        self.handler = logging.StreamHandler()
        self.seeds = (n for n in range(3))
        self.state: dict[str, Any] = {"lock": threading.RLock(), "cache": []}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.cache_lock:
            self.state["cache"].append(1)
            return self.l(x)


def test_c4_a_model_holding_a_lock_a_handler_or_a_generator_is_counted() -> None:
    """Before: TypeError cannot pickle '_thread.lock' object. What cannot be copied is shared;
    what can (the cache beside the RLock) is still copied, so the count leaves it alone."""
    model = _Guarded()
    result = dlperf.analyze(model, (8,))
    assert result.totals["params"] == 18
    assert model.state["cache"] == []  # the copy's forward wrote into the copy's list


class _Table(nn.Module):
    def __init__(self, table: Any) -> None:
        super().__init__()
        self.l = nn.Linear(8, 2)
        self.table = table
        self.tables = [table]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l(x)


@pytest.mark.parametrize("table", [torch.ones(4), np.ones(4, dtype=np.float32)])
def test_c4_a_table_kept_as_a_plain_attribute_is_not_copied(table: Any) -> None:
    """Before: a 400 MB table raised analyze's peak memory by 545 MB. A tensor comes back as
    a copy-on-write clone (its data the caller's until written), an array as the caller's."""
    model = _Table(table)
    copied, _ = _meta_copy(model)
    assert copied.tables[0] is copied.table  # one object, as deepcopy keeps it
    if isinstance(table, np.ndarray):
        assert copied.table is table
    else:
        assert copied.table is not table and torch.equal(copied.table, table)
        copied.table.add_(1)  # written: now a copy of its own
        assert torch.equal(table, torch.ones(4))


class _NoCopy:
    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise TypeError("no copies")


class _Uncopyable(nn.Module):
    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise TypeError("no copies of me")


def test_c4_an_attribute_refusing_copies_is_shared_and_a_module_refusing_one_is_named() -> None:
    model = nn.Sequential(nn.Linear(8, 4), nn.Sequential(_Uncopyable()), nn.Linear(4, 2))
    model[0].helper = _NoCopy()  # type: ignore[assignment]
    copied, _ = _meta_copy(nn.Sequential(model[0]))
    assert copied[0].helper is model[0].helper
    with pytest.raises(UserError) as raised:
        dlperf.analyze(model, (8,))
    said = str(raised.value)
    assert "\n" not in said
    assert "1.0 (_Uncopyable)" in said and "TypeError: no copies of me" in said
    assert copy.deepcopy(nn.Linear(2, 2)) is not None  # deepcopy itself left as it was


def test_c4_a_model_nested_too_deep_for_the_copy_is_told() -> None:
    """Before: deepcopy's RecursionError, raw (the copy is made before the count's own check)."""
    model: nn.Module = nn.Linear(4, 4)
    for _ in range(200):
        model = nn.Sequential(model)
    with pytest.raises(UserError, match="nests its modules 201 deep"):
        dlperf.analyze(model, (4,))
