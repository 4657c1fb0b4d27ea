"""dlperf.analytic.measure: the calibration kernels and their sizes, a model's measured step,
and the per-layer profile. Clocks are faked where sizes follow from timings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, NamedTuple

import pytest
import torch
from torch import nn
from torch.autograd import DeviceType  # type: ignore[attr-defined]

from dlperf.analytic import measure
from dlperf.analytic.devices import KINDS
from dlperf.analytic.measure import (
    KERNELS,
    large_copy,
    make_step,
    profile_leaves,
    square_matmul,
)
from dlperf.errors import UserError

CPU = torch.device("cpu")


def fake_clock(readings: list[float]) -> Iterator[float]:
    yield from readings


def test_square_matmul_doubles_until_a_call_takes_20_ms() -> None:
    # one timed call per size, two readings each: 256 takes 10 ms (doubled), 512 takes 50 ms
    ticks = fake_clock([0.0, 0.010, 1.0, 1.050])
    flops, fn = square_matmul(torch.float32, CPU, clock=lambda: next(ticks))
    assert flops == 2 * 512**3
    out = fn()
    assert out.shape == (512, 512) and out.dtype is torch.float32
    assert next(ticks, None) is None  # every reading was used: sized in exactly two steps


def test_square_matmul_stops_at_its_size_limit_and_keeps_the_dtype() -> None:
    sizes: list[int] = []
    real_randn = torch.randn

    def small_randn(n: int, m: int, device: torch.device) -> torch.Tensor:
        sizes.append(n)
        return real_randn(2, 2, device=device)  # stands in for n x n: the test times nothing

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "randn", small_randn)
        flops, fn = square_matmul(torch.bfloat16, CPU, clock=lambda: 0.0)  # every call: 0 s
    assert sizes == [256, 256, 512, 512, 1024, 1024, 2048, 2048]  # a and b per size, CPU: 2048
    assert flops == 2 * 2048**3
    assert fn().dtype is torch.bfloat16


def test_large_copy_counts_bytes_read_and_written() -> None:
    nbytes, fn = large_copy(CPU)
    assert nbytes == 2 * 64 * 2**20  # 64 MiB read and 64 MiB written on a CPU
    dst = fn()
    assert dst.numel() * 4 * 2 == nbytes


def test_kernels_cover_every_kind_once_after_overhead_and_memory() -> None:
    unknowns = [k.unknown for k in KERNELS]
    assert unknowns[:2] == ["overhead", "ppp_mem"]  # solved first: the others use them
    assert sorted(unknowns[2:]) == sorted(k for k in KINDS if k != "other")
    backward = {k.unknown for k in KERNELS if k.train}
    assert backward == {"conv_backward", "depthwise_conv_backward", "norm"}


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.unknown)
def test_each_kernel_runs_on_its_shape(kernel: measure.Kernel) -> None:
    with torch.no_grad():
        out = kernel.make()(torch.zeros(2, *kernel.shape))
    assert out.shape[0] == 2


def test_make_step_forward_only_leaves_no_gradients() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    step = make_step(model, [4], batch=2, train=False, precision="fp32", device=CPU)
    step()
    assert not model.training
    assert all(p.grad is None for p in model.parameters())


def test_make_step_train_computes_the_sum_losss_gradient_each_time() -> None:
    model = nn.Linear(4, 1, bias=True)
    step = make_step(model, [4], batch=3, train=True, precision="fp32", device=CPU)
    step()
    assert model.training
    assert model.bias.grad is not None
    assert model.bias.grad.item() == pytest.approx(3.0)  # d(sum of 3 outputs)/d bias
    step()  # gradients are zeroed, not accumulated
    assert model.bias.grad.item() == pytest.approx(3.0)


def test_make_step_casts_to_the_precision_and_materializes_lazy_layers() -> None:
    model = nn.Sequential(nn.Flatten(), nn.LazyLinear(2))
    make_step(model, [2, 3], batch=1, train=False, precision="bf16", device=CPU)()
    assert model[1].weight.dtype is torch.bfloat16
    assert tuple(model[1].weight.shape) == (2, 6)


def test_make_step_a_batch_that_cannot_be_allocated_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_memory(*args: object, **kwargs: object) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(torch, "randn", no_memory)
    with pytest.raises(UserError) as e:
        make_step(nn.ReLU(), [3, 1024, 1024], 1024, False, "fp32", CPU)
    # by hand: 1024 x 3 x 1024 x 1024 x 4 bytes = 12 GiB
    assert str(e.value) == (
        "an input batch of 1024x3x1024x1024 (12.0 GiB) does not fit in cpu memory "
        "(lower analyze.input or analyze.batch)"
    )


class Event(NamedTuple):
    key: str
    device_type: DeviceType
    cpu_time_total: float
    device_time_total: float


class FakeProfile:
    """torch.profiler.profile as profile_leaves uses it, its averages given (the real one is
    run by tests/analytic/test_paleo.py's predict --measure)."""

    events: ClassVar[list[Event]] = []
    activities: ClassVar[list[Any]] = []

    def __init__(self, activities: list[Any]) -> None:
        FakeProfile.activities = activities
        self.running = False

    def __enter__(self) -> FakeProfile:
        self.running = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.running = False

    def key_averages(self) -> list[Event]:
        return self.events


class Ranges:
    """torch.profiler.record_function, keeping the names of the ranges opened and closed."""

    opened: ClassVar[list[str]] = []
    closed: ClassVar[list[str]] = []

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.opened.append(self.name)

    def __exit__(self, *exc: object) -> None:
        self.closed.append(self.name)


@pytest.fixture
def fake_profiler(monkeypatch: pytest.MonkeyPatch) -> type[FakeProfile]:
    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    monkeypatch.setattr(torch.profiler, "record_function", Ranges)
    Ranges.opened, Ranges.closed = [], []
    return FakeProfile


def test_profile_leaves_ranges_each_leafs_forward_and_reads_their_cpu_time(
    fake_profiler: type[FakeProfile],
) -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.ReLU(), nn.Linear(8, 2)))
    x = torch.randn(4, 8)
    fake_profiler.events = [
        Event("dlperf::0", DeviceType.CPU, 300.0, 0.0),  # microseconds over all reps
        Event("dlperf::1.1", DeviceType.CPU, 60.0, 0.0),
        Event("dlperf::1.1", DeviceType.CUDA, 999.0, 999.0),  # a GPU-side copy: ignored
        Event("aten::addmm", DeviceType.CPU, 50.0, 0.0),  # not a range of ours
    ]
    layers = profile_leaves(model, lambda: model(x), CPU, reps=3)
    assert fake_profiler.activities == [torch.profiler.ProfilerActivity.CPU]
    # leaves only, by their dotted names, each opened and closed around its forward, 3 reps
    assert Ranges.opened == ["dlperf::0", "dlperf::1.0", "dlperf::1.1"] * 3
    assert Ranges.closed == Ranges.opened
    assert layers == {"0": pytest.approx(100e-6), "1.1": pytest.approx(20e-6)}
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


def test_profile_leaves_removes_its_hooks_when_the_step_raises(
    fake_profiler: type[FakeProfile],
) -> None:
    model = nn.Sequential(nn.Linear(2, 2))

    def failing() -> None:
        raise RuntimeError("step failed")

    with pytest.raises(RuntimeError, match="step failed"):
        profile_leaves(model, failing, CPU, reps=1)
    assert not model[0]._forward_pre_hooks and not model[0]._forward_hooks
