"""Break-it round 12 (part C), `dlperf scale` under DDP (C3): a model with a parameter its
forward never uses (an nn.Linear left aside, a 0-size nn.Parameter) trains under `dlperf run`
but failed every scaling point with DDP's multi-line "Expected to have finished reduction in
the prior iteration ... find_unused_parameters=True". The worker now finds, before wrapping,
the trained parameters the model's backward gives no gradient (dlperf.engine.checks'
dry_backward returns them), passes find_unused_parameters=True to DDP for them alone, and says
so in one warning line; the compute-only replica counts such a gradient ready when the
forward ends, as DDP marks it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from dlperf.distributed import worker
from dlperf.distributed.worker import Phase, unused_warning
from dlperf.engine.checks import dry_backward
from dlperf.store import RunStore
from tests.faults.test_break_it_6_scale import _args, _experiment, _no_traceback

# The tester's model (/tmp/bk12/C/m/unused.py): aux is never called in forward.
UNUSED = """
from torch import nn


class Net_(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.fc = nn.Linear(64 * in_channels, num_classes)
        self.aux = nn.Linear(4, 4)  # never used in forward

    def forward(self, x):
        return self.fc(x.flatten(1))


def Net(num_classes=10, in_channels=1):
    return Net_(num_classes, in_channels)
"""
# The same with a 0-size parameter the forward never uses too: one torchrun start for both.
UNUSED_AND_EMPTY = """
import torch
from torch import nn


class Net_(nn.Module):
    def __init__(self, num_classes=10, in_channels=1):
        super().__init__()
        self.e = nn.Parameter(torch.zeros(0, 3))
        self.fc = nn.Linear(64 * in_channels, num_classes)
        self.aux = nn.Linear(4, 4)  # never used in forward

    def forward(self, x):
        return self.fc(x.flatten(1))


def Net(num_classes=10, in_channels=1):
    return Net_(num_classes, in_channels)
"""
SHAPE = (1, 8, 8)


class Aside(nn.Module):
    """An nn.Linear used, one left aside, a 0-size parameter never used, and a frozen one."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 3)
        self.aux = nn.Linear(4, 4)
        self.e = nn.Parameter(torch.zeros(0, 3))
        self.frozen = nn.Parameter(torch.zeros(2), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


# --- the decision ---------------------------------------------------------------------------


def test_the_dry_backward_names_the_trained_parameters_that_get_no_gradient() -> None:
    model = Aside()
    before = model.fc.weight.detach().clone()
    # in named_parameters' order: a module's own parameters before its children's
    assert dry_backward(model, SHAPE, "'aside'") == ["e", "aux.weight", "aux.bias"]
    assert all(p.grad is None for p in model.parameters())  # its gradients put back
    assert torch.equal(model.fc.weight, before)
    used = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    assert dry_backward(used, SHAPE, "'used'") == []


def test_the_warning_is_one_line_naming_the_parameters_and_the_cost() -> None:
    line = unused_warning("'m.py:Net'", ["aux.weight", "aux.bias", "e"])
    assert "\n" not in line
    assert line == (
        "model 'm.py:Net' has trained parameters its backward gives no gradient for two zero "
        "images (aux.weight, aux.bias, e): DDP runs with find_unused_parameters=True, which "
        "traverses the autograd graph every step; use them in the forward, or freeze them "
        "(requires_grad = False), to train without it"
    )
    many = unused_warning("'m'", [f"p{i}" for i in range(9)])
    assert "(p0, p1, p2, p3, p4 and 4 more)" in many


def _phase(unused: list[str]) -> Phase:
    phase = object.__new__(Phase)  # its loop parts are not needed to wrap
    phase.spec = SimpleNamespace(strategy="ddp", bucket_mb=None)  # type: ignore[assignment]
    phase.device, phase.comm, phase.unused = torch.device("cpu"), "allreduce", unused
    return phase


class Wrapped:
    """DistributedDataParallel as the worker builds it: the keywords (a real one costs seconds
    of imports the first time; the points through the CLI below train under the real one)."""

    def __init__(self, model: nn.Module, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def _set_ddp_runtime_logging_sample_rate(self, rate: int) -> None:
        pass


def test_ddp_finds_unused_parameters_only_where_some_get_no_gradient(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker, "DistributedDataParallel", Wrapped)
    told: Any = _phase(["e", "aux.weight", "aux.bias"])._wrap(Aside())
    assert told.kwargs == {"find_unused_parameters": True}  # before: {}
    plain: Any = _phase([])._wrap(nn.Sequential(nn.Flatten(), nn.Linear(64, 3)))
    assert plain.kwargs == {}  # its cost only where it is needed


def test_a_gradient_never_computed_is_ready_when_the_forward_ends() -> None:
    phase = object.__new__(Phase)
    phase.model, phase.device = Aside(), torch.device("cpu")
    phase.watch_gradients()
    for _ in range(2):
        phase.model(torch.rand(2, *SHAPE)).sum().backward()
        end, marks = phase._forward_end, phase._marks
        # trained, in order: e, fc.weight, fc.bias, aux.weight, aux.bias
        assert isinstance(end, float) and end > 0.0
        unused = [marks[0], *marks[3:]]
        assert unused == [end, end, end], (end, marks)  # before: 0.0, the clock's zero
        assert all(m >= end for m in marks[1:3])


# --- through the CLI ------------------------------------------------------------------------


def _trained(r: Any, db: str, tmp_path: Path, names: str) -> None:
    assert r.code == 0, r.err
    _no_traceback(r.err)
    assert "finished reduction" not in r.err, r.err
    (run,) = RunStore.open(db).list_runs(kind="scale")
    assert run.status == "finished", run.error
    # the point's warning, one line, beside its spec (rank 0's; the study's to say)
    [said] = [p.read_text() for p in tmp_path.rglob("rank-*.warning")]
    assert said.startswith("model '") and "\n" not in said, said
    assert f"({names}): DDP runs with find_unused_parameters=True" in said, said
    # the study says it once, whatever the rounds (the console wraps its line, where the
    # test's path makes it fall: its words are counted joined again)
    joined = " ".join(r.err.split())
    assert joined.count("has trained parameters its backward gives no gradient") == 1, r.err


@pytest.mark.faults  # a torchrun start: over 10 s under load (make test-faults)
def test_parameters_never_used_train_at_a_two_worker_point(
    cli: Callable[..., Any], db: str, tmp_path: Path
) -> None:
    """An nn.Linear left aside and a 0-size parameter, in one model at one 2-worker point
    (before: exit 1, "worker rank 0 failed: RuntimeError: Expected to have finished reduction
    in the prior iteration ..." and DDP's frames, 25 lines of stderr). A 1-worker point of its
    own took the same path (the worker finds the parameters before wrapping, whatever the
    world size) at a second torchrun start."""
    r = cli(*_args(_experiment(tmp_path, UNUSED_AND_EMPTY), 8))
    _trained(r, db, tmp_path, "e, aux.weight, aux.bias")
