"""dlperf.engine.async_sgd's parts: the versions the gradients read in the simulator's
order (checked by hand for one learner, two alike, and a fast one beside a slow one), and
the stale forward pass: the value of old weights, the gradient on the live ones, the old
running statistics copied in."""

from __future__ import annotations

import copy

import torch
from torch import nn

from dlperf.engine.async_sgd import StaleForward, read_versions


def test_one_learner_is_never_stale() -> None:
    assert read_versions({"a": 1.0}, 5) == [0, 1, 2, 3, 4]


def test_two_learners_alike_read_one_version_behind_after_the_first() -> None:
    reads = read_versions({"a": 1.0, "b": 1.0}, 6)
    # Both start on version 0 and finish together: the second applied is one behind, and so
    # on, each re-reading right after its own update.
    assert [i - v for i, v in enumerate(reads)] == [0, 1, 1, 1, 1, 1]


def test_a_slow_learners_gradient_is_as_stale_as_the_updates_made_meanwhile() -> None:
    # b is 3x a: b lands at t = 1/3 (read 0) and 2/3 (read 1); at t = 1 a lands its
    # gradient of version 0, two updates late, and b its third, read at version 2.
    reads = read_versions({"a": 1.0, "b": 3.0}, 8)
    assert reads[:4] == [0, 1, 0, 2]
    assert len(reads) == 8 and all(v <= i for i, v in enumerate(reads))


def test_the_stale_forward_gives_old_weights_values_and_live_weights_gradients() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    old = copy.deepcopy(model.state_dict())
    reference = copy.deepcopy(model)
    with torch.no_grad():
        model.weight.add_(1.0)  # the server moved on
    forward = StaleForward(model)
    forward.read(old)
    x = torch.randn(4, 3)
    out = forward(x)
    assert torch.allclose(out, reference(x))
    out.sum().backward()
    reference(x).sum().backward()
    assert model.weight.grad is not None and reference.weight.grad is not None
    assert torch.allclose(model.weight.grad, reference.weight.grad)
    assert not torch.equal(model.weight, reference.weight)  # the live weights untouched


def test_reading_none_runs_on_the_live_weights() -> None:
    model = nn.Linear(3, 2)
    forward = StaleForward(model)
    forward.read(copy.deepcopy(model.state_dict()))
    with torch.no_grad():
        model.bias.add_(5.0)
    forward.read(None)
    x = torch.ones(1, 3)
    assert torch.allclose(forward(x), model(x))


def test_the_read_versions_running_statistics_are_copied_into_the_server() -> None:
    model = nn.Sequential(nn.BatchNorm1d(2))
    old = copy.deepcopy(model.state_dict())
    model(torch.randn(8, 2) + 10)  # the live statistics moved
    assert not torch.equal(model[0].running_mean, old["0.running_mean"])
    StaleForward(model).read(old)
    assert torch.equal(model[0].running_mean, old["0.running_mean"])
    assert old["0.running_mean"] is not model[0].running_mean  # copied, not shared
