"""Break-it round 69, fixer F9 (U2's C2): `TrackedRun.log`'s one-element steps and complex values.

Before, a one-element tensor or array was judged by three rules. As a step, `torch.tensor([7])`
and `torch.tensor([[8]])` were taken, while `np.array([8])` was refused as "a step is a whole
number, got a numpy.ndarray holding [8]" (8 is one) and `torch.tensor([9.0])` by its shape,
though a 0-d `torch.tensor(4.0)` is taken as the docs say, and `torch.tensor([True])` was taken
as step 1, where `True` and `torch.tensor(True)` are refused. As a value, `torch.tensor(1+0j)` was
stored as 1.0 (its imaginary part dropped), while `np.complex64(1+0j)` and `1+0j` were refused,
and `torch.tensor([3+4j])` was refused as "got a torch.Tensor of shape (1,)", the very shape
taken for a real value.

Now a tensor or NumPy array of one element, whatever its shape, torch's or NumPy's, is the
number it holds, as docs/api.md says, for a step as for a value: `np.array([8])` is step 8 and
`torch.tensor([9.0])` step 9, as `torch.tensor(4.0)` is step 4; `[9.5]` and `[True]` are refused
as 9.5 and True are.
A complex value is refused whatever its type (Python's, NumPy's, a tensor's of any shape), even
one of no imaginary part, in one line that says it is complex.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import dlperf
from dlperf.errors import UserError


@pytest.mark.parametrize(
    ("step", "kept"),
    [
        (torch.tensor([7]), 7),
        (torch.tensor([[8]]), 8),
        (torch.tensor([9.0]), 9),  # before: "got a torch.Tensor of shape (1,)"
        (torch.tensor([[10.0]], requires_grad=True), 10),
        (np.array([8]), 8),  # before: "a step is a whole number, got ... holding [8]"
        (np.array([[11]], dtype=np.uint8), 11),
        (np.array([12.0], dtype=np.float32), 12),
        (torch.tensor(4.0), 4),
        (np.float64(3.0), 3),
    ],
    ids=["t[7]", "t[[8]]", "t[9.0]", "t[[10]] g", "a[8]", "a[[11]]", "a[12.0]", "t4.0", "3.0"],
)
def test_a_one_element_step_is_the_number_it_holds(db: str, step: Any, kept: int) -> None:
    with dlperf.track("s", store=db) as run:
        run.log(step, loss=1.0)
    stored = dlperf.Store(db).metrics(run.id, "loss")
    assert stored == [(kept, 1.0)]
    assert type(stored[0][0]) is int


@pytest.mark.parametrize(
    ("step", "said"),
    [
        (torch.tensor([9.5]), "a torch.Tensor of shape (1,)"),
        (np.array([8.5]), "a numpy.ndarray of shape (1,)"),
        (torch.tensor([True]), "a torch.Tensor of shape (1,)"),
        (np.array([7, 8]), "a numpy.ndarray holding [7, 8]"),
        (torch.tensor([], dtype=torch.int64), "a torch.Tensor holding []"),
    ],
    ids=["t[9.5]", "a[8.5]", "t[True]", "a[7, 8]", "t[]"],
)
def test_a_one_element_step_that_is_no_whole_number_is_refused(
    db: str, step: Any, said: str
) -> None:
    with dlperf.track("r", store=db) as run, pytest.raises(UserError) as e:
        run.log(step, loss=1.0)
    assert str(e.value) == f"a step is a whole number, got {said}"
    assert dlperf.Store(db).metric_keys(run.id) == []


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (torch.tensor(1 + 0j), "Tensor tensor(1.+0.j)"),  # before: stored as 1.0
        (torch.tensor([3 + 4j]), "a torch.Tensor of shape (1,)"),  # before: named by shape
        (torch.tensor([[1 + 0j]], dtype=torch.complex128), "a torch.Tensor of shape (1, 1)"),
        (torch.tensor([1 + 0j, 2j]), "a torch.Tensor of shape (2,)"),
        (np.complex64(1 + 0j), "complex64 np.complex64(1+0j)"),
        (np.array([3 + 4j]), "a numpy.ndarray of shape (1,)"),
        (np.array(1 + 2j), "ndarray array(1.+2.j)"),
        (1 + 0j, "complex (1+0j)"),
    ],
    ids=["t(1+0j)", "t[3+4j]", "t[[1+0j]] c128", "t[2]", "np.c64", "a[3+4j]", "a(1+2j)", "1+0j"],
)
def test_a_complex_value_is_refused_as_complex_whatever_its_type(
    db: str, value: Any, said: str
) -> None:
    with dlperf.track("c", store=db) as run, pytest.raises(UserError) as e:
        run.log(1, loss=0.5, acc=value)
    assert str(e.value) == f"metric train/acc is a real number, not a complex one, got {said}"
    assert dlperf.Store(db).metric_keys(run.id) == []  # nor loss: the call kept nothing
    assert dlperf.Store(db).run(run.id).summary["final"] == {}


def test_a_real_one_element_value_is_still_that_number(db: str) -> None:
    with dlperf.track("v", store=db) as run:
        run.log(1, a=torch.tensor([[0.5]]), b=np.array([0.25]), c=torch.tensor(2, dtype=torch.int8))
    store = dlperf.Store(db)
    got = {key: store.metrics(run.id, key) for key in ("train/a", "train/b", "train/c")}
    assert got == {"train/a": [(1, 0.5)], "train/b": [(1, 0.25)], "train/c": [(1, 2.0)]}
