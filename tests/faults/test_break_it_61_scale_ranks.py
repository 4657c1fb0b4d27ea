"""Break-it round 61, fixer H2 (U1 cause 2): `dlperf scale` with a model file whose factory
builds a different network on each rank (a width read from RANK).

Before: the point failed in DDP's own check, `worker rank 1 failed: RuntimeError: [1]:
params[0] in this process with sizes [9, 1, 3, 3] appears not to match sizes of the same param
in process 0.`, with dlperf's and torch's traceback frames below and no word of the model.
Now: every rank compares the shapes of its network's parameters and buffers with the others'
(one all_gather_object) before wrapping it in DDP, and the point fails in one line that names
the model, the rank and the first tensor that differs, and blames the factory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from torch import nn

from dlperf.distributed import worker
from dlperf.errors import UserError
from dlperf.store import RunStore
from tests.faults.test_break_it_6_scale import _args, _experiment, _no_traceback

PER_RANK = """
import os
import torch
from torch import nn


class Wide(nn.Module):
    def __init__(self, num_classes=10, in_channels=1, width=8):
        super().__init__()
        self.c = nn.Conv2d(in_channels, width, 3, padding=1)
        self.f = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.f(torch.relu(self.c(x)).mean((2, 3)))


def Net(num_classes=10, in_channels=1):
    return Wide(num_classes, in_channels, width=8 + int(os.environ.get("RANK", "0")))
"""
WHY = (
    "its factory builds a different network on each call (nondeterministic: a size drawn at "
    "random or read from the environment, such as RANK, the clock or the process id) (make "
    "the factory build the same network in every process (pass such a size in [model] kwargs))"
)


def _said(model: Path) -> str:
    return (
        f"model '{model}:Net' builds a different network on rank 1 than on rank 0 "
        f"(c.weight [9, 1, 3, 3] vs [8, 1, 3, 3]): {WHY}"
    )


@pytest.mark.faults  # a torchrun start: over 10 s under load (make test-faults)
@pytest.mark.timeout(300)
def test_a_factory_that_builds_another_network_on_rank_1_fails_in_one_line(
    cli: Callable[..., Any], db: str, tmp_path: Path
) -> None:
    r = cli(*_args(_experiment(tmp_path, PER_RANK), 8))
    assert r.code == 1, r.err
    _no_traceback(r.err)
    said = _said(tmp_path / "usermodel.py")
    assert f"2 workers ddp/allreduce, weak, 8 per worker failed: {said}\n" in r.err, r.err
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert run.status == "failed"
    assert run.error == said


def test_the_first_tensor_that_differs_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 2 of three lacks a buffer rank 0 holds: the ranks alike pass, rank 2 is named."""
    everyone = [
        [("c.weight", [8, 1, 3, 3]), ("bn.running_mean", [8])],
        [("c.weight", [8, 1, 3, 3]), ("bn.running_mean", [8])],
        [("c.weight", [8, 1, 3, 3])],
    ]
    monkeypatch.setattr(worker, "gathered", lambda mine: everyone)
    with pytest.raises(UserError) as caught:
        worker.same_network_on_every_rank(nn.Linear(2, 2), "'m.py:Net'")
    assert caught.value.message.startswith(
        "model 'm.py:Net' builds a different network on rank 2 than on rank 0 "
        "(bn.running_mean none vs [8]): its factory builds"
    ), caught.value.message
    monkeypatch.setattr(worker, "gathered", lambda mine: everyone[:2])
    worker.same_network_on_every_rank(nn.Linear(2, 2), "'m.py:Net'")  # alike: no error
    extra = [("c.weight", [8, 1, 3, 3]), ("x", [2])]
    assert worker.network_difference(extra, everyone[2]) == "x [2] vs none"
    swapped = [everyone[0][1], everyone[0][0]]
    assert worker.network_difference(swapped, everyone[0]) == "the same tensors in another order"


def test_the_shapes_are_the_parameters_then_the_buffers() -> None:
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    assert worker.network_shapes(model) == [
        ("0.weight", [2, 3]), ("0.bias", [2]), ("1.weight", [2]), ("1.bias", [2]),
        ("1.running_mean", [2]), ("1.running_var", [2]), ("1.num_batches_tracked", []),
    ]  # fmt: skip
