"""Break-it round 32 (P1), the Python API's refusals.

C1: `dlperf.analyze(model, x)` with an example input (a tensor, an array: torchinfo's habit) put
the value's whole repr in the error, one line per row, values and all; a list of 2,000 numbers
was one line of 10,973 characters. The other refusals of api.py that named the value with !r
(batch, bias, train, dtype, a run's name, config, device, store, run id, curve form) or with
reprlib's repr (a tensor's still many lines) did the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import dlperf

LINEAR = nn.Linear(8, 2)
X = torch.randn(4, 8)
SHOWN = "a torch.Tensor of shape (4, 8)"


def refused(call: Callable[[], Any]) -> str:
    """The UserError `call` raises, checked to be one short line."""
    with pytest.raises(dlperf.UserError) as raised:
        call()
    text = str(raised.value)
    assert "\n" not in text and len(text) < 200, text
    return text


@pytest.mark.parametrize(
    ("given", "shown"),
    [(X, SHOWN), (np.zeros((4, 8)), "a numpy.ndarray of shape (4, 8)")],
    ids=["tensor", "array"],
)
def test_analyze_of_an_example_input_names_its_shape_and_the_fix(given: Any, shown: str) -> None:
    """Before: "... got tensor([[ 0.7284, -0.4797, ...],\\n [...", one line per row."""
    assert refused(lambda: dlperf.analyze(LINEAR, given)) == (
        f"input_size must be one sample's shape in whole numbers ≥ 1, got {shown} "
        "(give one sample's shape, without the batch: x.shape[1:])"
    )


def test_analyze_of_a_long_list_is_shortened() -> None:
    """Before: one line of 10,973 characters."""
    assert refused(lambda: dlperf.analyze(LINEAR, list(range(2000)))) == (
        "input_size must be one sample's shape in whole numbers ≥ 1, got (0, 1, 2, 3, 4, 5, ...) "
        "(e.g. (3, 32, 32))"
    )


def _fit(form: Any) -> Any:
    return dlperf.fit_curve([1, 2, 3, 4], [1.0, 0.5, 0.4, 0.35], form)


def _log(step: Any, value: Any, db: str) -> None:
    with dlperf.track("x", store=db) as run:
        run.log(step, loss=value)


def _phase(name: Any, db: str) -> None:
    with dlperf.track("x", store=db) as run, run.phase(name):
        pass


# Every refusal of api.py that names the value given, given a tensor.
ELSEWHERE: dict[str, tuple[Callable[[str], Any], str]] = {
    "batch": (
        lambda db: dlperf.analyze(LINEAR, (8,), batch=X),
        f"batch is a whole number ≥ 1, got {SHOWN}",
    ),
    "bias": (
        lambda db: dlperf.analyze(LINEAR, (8,), bias=X),
        f"bias is True or False, got {SHOWN}",
    ),
    "train": (
        lambda db: dlperf.analyze(LINEAR, (8,), train=X),
        f"train is True or False, got {SHOWN}",
    ),
    "dtype": (lambda db: dlperf.analyze(LINEAR, (8,), dtype=X), f"dtype {SHOWN}: use 'fp32'"),
    "run name": (
        lambda db: dlperf.track(X, store=db).__enter__(),
        f"a run's name is printable text, got {SHOWN}",
    ),
    "config": (
        lambda db: dlperf.track("x", X, store=db).__enter__(),
        f"config is a dict of JSON values, got {SHOWN}",
    ),
    "device": (
        lambda db: dlperf.track("x", device=X, store=db).__enter__(),
        f"or a torch.device, got {SHOWN}",
    ),
    "store": (lambda db: dlperf.Store(X), f"a store is a path or a SQLAlchemy URL, got {SHOWN}"),
    "run id": (lambda db: dlperf.Store(db).run(X), f"a run id is a whole number, got {SHOWN}"),
    "run ids": (
        lambda db: dlperf.Store(db).compare(X),
        "a run id is a whole number, got a torch.Tensor of shape (8,)",
    ),
    "study": (
        lambda db: dlperf.Store(db).compare([], study=X),
        f"study is a whole number, got {SHOWN}",
    ),
    "kind": (lambda db: dlperf.Store(db).runs(kind=X), f"kind is text such as 'run', got {SHOWN}"),
    "where": (
        lambda db: dlperf.Store(db).runs(where=X),
        f"where is a list of --where filters, got {SHOWN}",
    ),
    "step": (lambda db: _log(X, 1.0, db), f"a step is a whole number, got {SHOWN}"),
    "metric": (lambda db: _log(1, X, db), f"metric train/loss is a number, got {SHOWN}"),
    "phase": (lambda db: _phase(X, db), f"a phase name is text, got {SHOWN}"),
    "curve form": (lambda db: _fit(X), f"unknown curve form {SHOWN}"),
}


@pytest.mark.parametrize(("call", "said"), ELSEWHERE.values(), ids=ELSEWHERE.keys())
def test_every_refusal_names_a_tensor_by_its_shape(
    db: str, call: Callable[[str], Any], said: str
) -> None:
    """Before: the tensor's repr, one line per row (or reprlib's cut of it, still holding
    newlines, after its type's name: "Tensor tensor([[...")."""
    text = refused(lambda: call(db))
    assert said in text, text
    assert "tensor(" not in text, text


@pytest.mark.parametrize("key", [torch.tensor([1.0]), 5, None, b"loss"], ids=repr)
def test_store_metrics_of_a_key_that_is_not_text_is_one_line(tmp_path: Any, key: object) -> None:
    """Found beside C1: `Store.metrics(1, torch.tensor([1.0]))` was a bare RuntimeError from
    the key's `in` test ("Boolean value of Tensor ..."), 5 a TypeError."""
    db = tmp_path / "s.db"
    with dlperf.track("t", store=db) as run:
        run.log(0, loss=0.5)
    store = dlperf.Store(db)
    assert "a metric key is text" in refused(lambda: store.metrics(1, key))  # type: ignore[arg-type]
    assert "a metric key is text" in refused(lambda: store.frame(1, [key]))  # type: ignore[list-item]
