"""dlperf.engine.checks on tiny models: each check's one line of bad input (shape, scores,
gradients, batch size), the fixes it names, and what it leaves as it was (buffers,
gradients, mode)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from dlperf.engine.checks import (
    DRY_BATCH,
    check_batch_fits,
    check_batch_trains,
    check_classifier,
    check_dense_gradients,
    check_finite,
    dry_backward,
    dry_forward,
    misfit,
)
from dlperf.errors import UserError, out_of_memory

SHAPE = (1, 4, 4)


def linear(classes: int = 3) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(16, classes))


def test_dry_forward_returns_the_output_in_eval_mode() -> None:
    model = linear()
    model.train()
    out = dry_forward(model, SHAPE, "rejects")
    assert isinstance(out, torch.Tensor) and out.shape == (DRY_BATCH, 3)
    assert not model.training and not out.requires_grad


def test_a_shape_torch_refuses_is_the_callers_line_with_the_first_line_of_the_cause() -> None:
    with pytest.raises(UserError) as e:
        dry_forward(linear(), (1, 5, 5), "the model rejects digits images")
    assert e.value.message.startswith("the model rejects digits images: mat1 and mat2 shapes")
    assert "\n" not in e.value.message


def test_a_training_dry_forward_puts_the_batch_norm_statistics_back() -> None:
    model = nn.Sequential(nn.BatchNorm2d(1), nn.Flatten(), nn.Linear(16, 2))
    before = [b.clone() for b in model.buffers()]
    dry_forward(model, SHAPE, "", training=True)
    assert all(torch.equal(a, b) for a, b in zip(before, model.buffers(), strict=True))
    assert not model.training


def test_check_classifier_refuses_each_wrong_output() -> None:
    model = linear()
    ok = torch.zeros(DRY_BATCH, 3)
    assert check_classifier(model, ok, 3, "'m'") is ok
    with pytest.raises(UserError, match=r"model 'm' returns a tuple, not a tensor"):
        check_classifier(model, (ok,), 3, "'m'")
    with pytest.raises(UserError, match=r"returns in training mode shape \[2, 4\]; expected"):
        check_classifier(model, torch.zeros(2, 4), 3, "'m'", "in training mode")
    with pytest.raises(UserError, match=r"returns torch\.int64 values; expected float scores"):
        check_classifier(model, torch.zeros(2, 3, dtype=torch.long), 3, "'m'")
    with pytest.raises(UserError, match="returns its scores on meta; expected them on cpu"):
        check_classifier(model, torch.zeros(2, 3, device="meta"), 3, "'m'")
    frozen = linear().requires_grad_(False)
    with pytest.raises(UserError, match="model 'm' has 51 parameters, all frozen"):
        check_classifier(frozen, ok, 3, "'m'")


class Detached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1)).detach()


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x.flatten(1)).sigmoid()
        y.add_(1)  # sigmoid saved its output for the backward
        return y


def test_dry_backward_refuses_scores_without_gradient_and_a_failing_backward() -> None:
    with pytest.raises(UserError, match="cannot be trained: it returns scores that carry no"):
        dry_backward(Detached(), SHAPE, "'d'")
    with pytest.raises(UserError) as e:
        dry_backward(InPlace(), SHAPE, "'i'")
    assert e.value.message.startswith("model 'i' cannot be trained: its backward fails:")
    assert e.value.hint is not None and "out-of-place" in e.value.hint


def test_dry_backward_leaves_gradients_as_they_were() -> None:
    model = linear()
    dry_backward(model, SHAPE, "'m'")
    assert all(p.grad is None for p in model.parameters())
    assert torch.is_grad_enabled()


def test_a_sparse_gradient_is_refused_naming_the_parameter() -> None:
    model = nn.Embedding(4, 2, sparse=True)
    model(torch.tensor([1])).sum().backward()
    with pytest.raises(UserError, match=r"its parameter weight gets a sparse gradient \(Embedding"):
        check_dense_gradients(model, "model 'e' cannot be trained")


def test_out_of_memory_is_told_by_type_or_by_torchs_words() -> None:
    assert out_of_memory(MemoryError())
    assert out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"))
    assert out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate"))
    assert not out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not out_of_memory(ValueError("out of memory"))  # not torch's


class OutOfMemory(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise MemoryError("no room")


@pytest.mark.parametrize(
    ("batch", "images"),
    [(1, "one (1, 4, 4) image"), (DRY_BATCH, "two (1, 4, 4) images"), (5, "5 (1, 4, 4) images")],
)
def test_out_of_memory_in_a_dry_forward_says_how_many_images(batch: int, images: str) -> None:
    with pytest.raises(UserError) as e:
        dry_forward(OutOfMemory(), SHAPE, "rejects", batch=batch)
    assert e.value.message == f"out of memory in a forward of {images} on cpu: MemoryError: no room"


def test_a_batch_larger_than_the_training_split_is_refused() -> None:
    data = SimpleNamespace(train=[0] * 10, name="digits")
    check_batch_fits(10, data)  # type: ignore[arg-type]
    with pytest.raises(UserError) as e:
        check_batch_fits(11, data)  # type: ignore[arg-type]
    assert str(e.value) == (
        "train.batch_size 11 is larger than the 10 training images of digits "
        "(use train.batch_size <= 10)"
    )


def test_a_batch_of_one_is_refused_for_batch_norm_only() -> None:
    bn = nn.Sequential(nn.Flatten(), nn.Linear(16, 3), nn.BatchNorm1d(3))
    check_batch_trains(linear(), 1, SHAPE, "'m'")
    check_batch_trains(bn, DRY_BATCH, SHAPE, "'bn'")  # the dry checks already cover it
    with pytest.raises(UserError) as e:
        check_batch_trains(bn, 1, SHAPE, "'bn'")
    assert e.value.message.startswith("model 'bn' cannot train at train.batch_size 1: ")
    assert e.value.hint == "use train.batch_size 2 or more, or a model without batch norm"


class DividesByNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        return self.fc(x / x.norm(dim=1, keepdim=True))


def test_nan_from_zero_images_alone_passes_but_nan_weights_do_not() -> None:
    model = DividesByNorm()
    out = model(torch.zeros(DRY_BATCH, *SHAPE))
    check_finite(model, out, SHAPE, "'n'")  # random images give finite scores
    broken = linear()
    with torch.no_grad():
        broken[1].weight[0, 0] = float("nan")
    out = broken(torch.ones(DRY_BATCH, *SHAPE))
    with pytest.raises(UserError, match="gives NaN or inf scores for finite images"):
        check_finite(broken, out, SHAPE, "'b'")


def test_misfit_tells_channels_last_and_images_too_small() -> None:
    error = misfit(linear(), (8, 8, 3), "mine")
    assert error is not None and "look channels-last (N, H, W, C)" in error.message
    needs_5 = nn.Sequential(nn.Conv2d(1, 1, 5), nn.Flatten(), nn.LazyLinear(2))
    error = misfit(needs_5, (1, 4, 4), "digits")
    assert error is not None and error.message == (
        "digits images of 4x4 are too small for the model: the smallest it takes is 5x5"
    )
    assert misfit(linear(), (1, 4, 4), "d") is None  # takes no larger square either
