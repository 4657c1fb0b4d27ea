"""Break-it round 37, the Python API (fixer F1).

C1. `run.log` kept a NumPy complex number (np.complex64(1+2j), a complex 0-d array) as its real
    part, with NumPy's ComplexWarning, where Python's complex and a complex tensor are refused:
    float() takes NumPy's. A complex value is refused as Python's is.
C2. `run.log` of a nested tensor ended in torch's "Internal error: NestedTensorImpl doesn't
    support sizes", raised while the refusal's text read its shape; it is the one line.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch

import dlperf
from dlperf.errors import UserError
from dlperf.store.record import RunRecord


def _run(db: str) -> RunRecord:
    (run,) = dlperf.Store(db).runs()
    return run


# --- C1: a NumPy complex number ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (1 + 2j, "complex (1+2j)"),
        (np.complex64(1 + 2j), "complex64 np.complex64(1+2j)"),
        (np.complex128(3 + 0j), "complex128 np.complex128(3+0j)"),
        (np.array(1 + 2j), "ndarray array(1.+2.j)"),
    ],
    ids=["python", "complex64", "complex128 of no imaginary part", "0-d array"],
)
def test_log_refuses_a_numpy_complex_number_as_a_python_one(db: str, value: Any, said: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: NumPy's ComplexWarning, from api.py
        with dlperf.track("c", store=db) as run, pytest.raises(UserError) as e:
            run.log(1, c=value)
    # before: stored as its real part, [(1, 1.0)], and kept as the run's final train/c
    assert str(e.value) == f"metric train/c is a number, got {said}"
    assert _run(db).summary["final"] == {}


# --- C2: a nested tensor ----------------------------------------------------------------------


def test_log_refuses_a_nested_tensor_in_one_line(db: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's: nested tensors are a prototype
        nested = torch.nested.nested_tensor([torch.tensor([1.0]), torch.tensor([1.0, 2.0])])
    # before: RuntimeError: Internal error: NestedTensorImpl doesn't support sizes
    with dlperf.track("n", store=db) as run, pytest.raises(UserError) as e:
        run.log(1, n=nested)
    assert str(e.value) == (
        "metric train/n is a number, got Tensor nested_tensor([ tensor([1.]), tensor([1., 2.]) ])"
    )
