"""Break-it round 18, task I1: dlperf called from a process whose torch modes the caller set.

`dlperf.analyze` counted with the caller's grad and inference mode (a training step inside
torch.no_grad() had no backward FLOPs; inside torch.inference_mode() every convolution was
unsupported and the MACs 0); the caller's torch.set_default_dtype(torch.float64) trained a run
stored as fp32 in float64 and failed analyze with a message blaming the model; the caller's
torch.autocast reached a run's backward, optimizer step and dry checks. Counting now runs with
gradients on and inference mode off, a default dtype other than float32 is refused in one line,
and a run runs with autocast off but for its own precision's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import dlperf
from dlperf.errors import UserError

EXPERIMENT: dict[str, Any] = {
    "model": {"name": "smallcnn"},
    "data": {"name": "digits", "limit": 256},
    "train": {"epochs": 1, "batch_size": 64},
    "run": {"threads": 1, "checkpoint": False},
}


@contextlib.contextmanager
def grad_disabled() -> Iterator[None]:
    """torch.set_grad_enabled(False) for the process's thread, put back after."""
    before = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    try:
        yield
    finally:
        torch.set_grad_enabled(before)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


CALLERS_MODES: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "set_grad_enabled(False)": grad_disabled,
}


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(self.conv(x)).mean((2, 3)))


def _counts(model: str | nn.Module, train: bool) -> dict[str, Any]:
    a = dlperf.analyze(model, (3, 32, 32), batch=2, train=train)
    return {"totals": a.totals, "unsupported": a.unsupported_ops}


@pytest.mark.parametrize("mode", list(CALLERS_MODES))
@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_analyze_by_name_counts_the_same_inside_the_callers_grad_modes(
    mode: str, train: bool
) -> None:
    alone = _counts("resnet20", train)
    with CALLERS_MODES[mode]():
        inside = _counts("resnet20", train)
    assert inside == alone
    assert alone["totals"]["macs"] > 0 and alone["unsupported"] == {}
    if train:
        assert alone["totals"]["backward_flops"] > 0


@pytest.mark.parametrize("mode", list(CALLERS_MODES))
@pytest.mark.parametrize("train", [False, True], ids=["forward", "train"])
def test_analyze_of_a_users_module_counts_the_same_inside_the_callers_grad_modes(
    mode: str, train: bool
) -> None:
    alone = _counts(Tiny(), train)
    with CALLERS_MODES[mode]():
        built_inside = Tiny()  # a module built in the mode holds inference tensors there
        inside = _counts(built_inside, train)
    assert inside == alone
    assert alone["totals"]["macs"] > 0


def test_analyze_by_name_refuses_a_float64_default_dtype_naming_it() -> None:
    with default_dtype(torch.float64), pytest.raises(UserError) as caught:
        dlperf.analyze("resnet20", (3, 32, 32))
    said = str(caught.value)
    assert "\n" not in said
    assert "torch.set_default_dtype(torch.float32)" in said and "torch.float64" in said
    assert "mat1" not in said


def test_run_refuses_a_float64_default_dtype_and_stores_nothing(tmp_path: Path) -> None:
    store = dlperf.Store(tmp_path / "runs.db")
    with default_dtype(torch.float64), pytest.raises(UserError) as caught:
        dlperf.run(EXPERIMENT, store=store)
    said = str(caught.value)
    assert "\n" not in said
    assert "torch.set_default_dtype(torch.float32)" in said and "torch.float64" in said
    assert store.runs() == []


def _trained(store: dlperf.Store, precision: str) -> tuple[Any, ...]:
    exp = EXPERIMENT | {"run": EXPERIMENT["run"] | {"precision": precision}}
    result = dlperf.run(exp, store=store)
    assert result.summary is not None, result.error
    losses = store.metrics(result.run_id, "train/loss")
    return result.status, losses, result.summary.test_loss, result.summary.test_accuracy


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_run_inside_the_callers_autocast_trains_as_one_outside_it(
    tmp_path: Path, precision: str
) -> None:
    """bf16: the run's own autocast nested in the caller's must not reuse the casts of its
    weights from before an optimizer step (torch's autocast cache)."""
    store = dlperf.Store(tmp_path / "runs.db")
    alone = _trained(store, precision)
    with torch.autocast("cpu", dtype=torch.float16):
        inside = _trained(store, precision)
        assert torch.is_autocast_enabled("cpu")  # the caller's, as it was
        assert torch.get_autocast_dtype("cpu") == torch.float16
    assert inside == alone
    assert alone[0] == "finished"
