"""Break-it round 32, fixer H: what `dlperf.analyze` copies and which activations it counts.

C4 (P1). `dlperf.analyze(module)` of a model holding a lock, a logging handler, an open file
or a generator failed with deepcopy's bare TypeError ("cannot pickle '_thread.lock'"), and a
tensor or NumPy table kept as a plain attribute was copied byte by byte.
C5 (P1). `--activations conv-pool-fc` of a model written with F.conv2d / F.max_pool2d /
F.linear counted 0 activations without a word (`all`: the model's output alone).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import dlperf
from dlperf.api import _held, _meta_copy, _share_attributes
from dlperf.errors import UserError
from tests.conftest import CliResult

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
        self.tables = [table, self.l.weight * 2]  # the second no graph leaf: made on meta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l(x)


@pytest.mark.parametrize("table", [torch.ones(4), np.ones(4, dtype=np.float32)])
def test_c4_a_table_kept_as_a_plain_attribute_is_not_copied(table: Any) -> None:
    """Review F3: in a SimpleNamespace or a plain object too (it was cloned byte by byte)."""
    memo: dict[int, Any] = {}
    _share_attributes(_Table(types.SimpleNamespace(table=table)), memo)
    assert id(table) in memo  # shared (a copy-on-write clone), not copied
    """Before: a 400 MB table raised analyze's peak memory by 545 MB. A tensor comes back as
    a copy-on-write clone (its data the caller's until written), an array as the caller's."""
    model = _Table(table)
    copied, _ = _meta_copy(model)
    assert copied.tables[0] is copied.table  # one object, as deepcopy keeps it
    assert copied.tables[1].is_meta
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


class _Helper:
    """A helper calling a layer of the model, and holding a lock deepcopy refuses."""

    def __init__(self, layer: nn.Module) -> None:
        self.layer = layer
        self.lock = threading.Lock()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class _PickledHelper(_Helper):
    def __getstate__(self) -> dict[str, Any]:  # copied by its own rules: refused whole
        return dict(vars(self))


class _Helped(nn.Module):
    def __init__(self, helper: type[_Helper]) -> None:
        super().__init__()
        self.l = nn.Linear(8, 2)
        self.h = helper(self.l)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.h(x)


def test_c4_a_refused_object_reaching_the_models_layers_is_not_shared() -> None:
    """Review F1. Before: the helper was shared as it was, so the copy's forward ran the
    caller's own Linear: params 0, params_not_run 18, no word. A plain helper is copied with
    its lock alone shared (review F3); one copied by its own rules is a one-line error."""
    plain = _Helped(_Helper)
    assert dlperf.analyze(plain, (8,)).totals["params"] == 18
    copied, _ = _meta_copy(plain)
    assert copied.h is not plain.h and copied.h.lock is plain.h.lock and copied.h.layer is copied.l
    model = _Helped(_PickledHelper)
    with pytest.raises(UserError) as raised:
        dlperf.analyze(model, (8,))
    said = str(raised.value)
    assert "\n" not in said and "h (_PickledHelper)" in said and "holds a layer" in said
    model.h.layer = math  # type: ignore[assignment]  # a lock and a Python module: shared
    copied, _ = _meta_copy(model)
    assert copied.h is model.h


class _SetStateFails(nn.Linear):
    def __setstate__(self, state: dict[str, Any]) -> None:
        raise RuntimeError("no setstate")


def test_c4_a_module_whose_setstate_fails_is_named() -> None:
    """Review F2. Before: the failed deepcopy left half-built copies in the memo, so the
    search found none failing and the line named no module."""
    with pytest.raises(UserError, match=r"1 \(_SetStateFails\).*no setstate"):
        dlperf.analyze(nn.Sequential(nn.Linear(8, 8), _SetStateFails(8, 2)), (8,))


def test_c4_a_container_of_numbers_is_not_walked_item_by_item() -> None:
    """Review F4. Before: each item of a 10M-item list was pushed, yielded and tried: analyze
    took 100 s where it took 13. Plain numbers and strings are left to deepcopy."""
    model = nn.Linear(2, 2)
    model.table = list(range(1000))  # type: ignore[assignment]
    model.vocab = {f"w{i}": i for i in range(1000)}  # type: ignore[assignment]
    model.mixed = [1, "a", threading.Lock()]  # type: ignore[assignment]
    held = [value for _, value in _held(model, set())]
    assert not any(type(v) in (int, str, bool) for v in held)  # none yielded, item or attribute
    assert len(held) < 30  # the three containers, the lock and the module's own dicts
    assert any(type(v) is type(threading.Lock()) for v in held)
    copied, _ = _meta_copy(model)
    assert copied.table == model.table and copied.table is not model.table


def test_c4_a_model_nested_too_deep_for_the_copy_is_told() -> None:
    """Before: deepcopy's RecursionError, raw (the copy is made before the count's own check)."""
    model: nn.Module = nn.Linear(4, 4)
    for _ in range(200):
        model = nn.Sequential(model)
    with pytest.raises(UserError, match="nests its modules 201 deep"):
        dlperf.analyze(model, (4,))


# --- C5: functional layers and the activation totals ------------------------------------------

FUNCTIONAL = """
import torch, torch.nn as nn, torch.nn.functional as F
class Fn(nn.Module):
    def __init__(s):
        super().__init__()
        s.w = nn.Parameter(torch.randn(4, 3, 3, 3)); s.fw = nn.Parameter(torch.randn(10, 36))
    def forward(s, x):
        return F.linear(F.max_pool2d(F.relu(F.conv2d(x, s.w)), 2).flatten(1), s.fw)
class Head(nn.Module):  # one functional layer in a module: its output stands for it
    def __init__(s):
        super().__init__(); s.w = nn.Parameter(torch.randn(10, 36))
    def forward(s, x): return F.linear(x.flatten(1), s.w)
def fn(num_classes=10): return Fn()
def modules(num_classes=10):
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), Head())
"""

UNCOUNTED = "F.conv2d x1, F.linear x1, F.max_pool2d x1 in (model)"


def test_c5_functional_layers_left_out_of_the_activations_are_said(
    cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    """Before: conv-pool-fc 0, all 10, exit 0, no word (the nn form: 190 and 370)."""
    (tmp_path / "fnm.py").write_text(FUNCTIONAL)
    for flag in ((), ("--activations", "conv-pool-fc")):
        done = cli("analyze", "fnm.py:fn", "--input", "3,8,8", *flag)
        assert done.code == 0, done.err
        assert "warning: activations count" in done.err
        assert f"the outputs of {UNCOUNTED} are not counted" in " ".join(done.err.split())
        assert "not counted" in done.out  # the totals table says it too
        shown = cli("analyze", "fnm.py:fn", "--input", "3,8,8", "--json", *flag)
        conventions = json.loads(shown.out)["conventions"]
        assert UNCOUNTED in conventions["activations_not_counted"]
    made: dict[str, Any] = {}
    exec(FUNCTIONAL, made)
    result = dlperf.analyze(made["fn"](), (3, 8, 8), activations="conv-pool-fc")
    assert result.to_dict()["conventions"]["activations_not_counted"] == UNCOUNTED
    assert "not counted" in str(result)
    # One functional layer in a module counts as that module's output under `all` (no word),
    # not under conv-pool-fc, the module being no conv, pool or linear layer.
    mixed = made["modules"]()
    assert (
        "activations_not_counted" not in dlperf.analyze(mixed, (3, 8, 8)).to_dict()["conventions"]
    )
    counted = dlperf.analyze(mixed, (3, 8, 8), activations="conv-pool-fc").to_dict()
    assert counted["totals"]["activations"] == 144 + 36
    assert counted["conventions"]["activations_not_counted"] == "F.linear x1 in 3"


class _MatmulHead(nn.Module):
    """A conv and pool as nn modules, the fc written as a matrix product with a weight."""

    def __init__(self, product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, bias=False)
        self.p = nn.MaxPool2d(2)
        self.w = nn.Parameter(torch.randn(36, 10))
        self.product = product

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.p(torch.relu(self.c(x))).flatten(1)
        return torch.relu(self.product(h, self.w)) @ torch.ones(10, 2, device=x.device)


@pytest.mark.parametrize(
    ("product", "named"), [(torch.matmul, "x @ w x1"), (torch.mm, "torch.mm x1")]
)
def test_c5_an_fc_written_as_a_matrix_product_is_said(
    product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], named: str
) -> None:
    """Review F5. Before: conv-pool-fc counted 180 activations, the fc's 10 outputs left out
    with no note. A product with no weight of the model (the last one) is no fc layer."""
    result = dlperf.analyze(_MatmulHead(product), (3, 8, 8), activations="conv-pool-fc")
    assert result.to_dict()["conventions"]["activations_not_counted"] == f"{named} in (model)"
