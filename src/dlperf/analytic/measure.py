"""What the hardware actually does: calibration kernels and a model's measured time.

Every timing (dlperf.timing) warms up first, waits for the device before reading the clock
and keeps all repetitions, so that their spread can be reported.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.autograd import DeviceType  # type: ignore[attr-defined]

from dlperf.analytic.counting import (
    Analysis,
    materialize_lazy,
    nesting_told,
    run_backward,
    run_forward,
    switch_mode,
    to_precision,
)
from dlperf.analytic.devices import Device
from dlperf.errors import UserError
from dlperf.formatting import binary_size
from dlperf.precision import DTYPES
from dlperf.system import profiler_quiet, synchronize
from dlperf.timing import Clock, timed

LABEL = "dlperf::"
"""Prefix of the profiler ranges that mark each leaf module's forward."""


# --- calibration ------------------------------------------------------------------------------


def square_matmul(
    dtype: torch.dtype, device: torch.device, clock: Clock = time.perf_counter
) -> tuple[float, Callable[[], Any]]:
    """A square matmul sized up until one takes 20 ms, and its FLOPs: the device's peak."""

    def make(n: int) -> Callable[[], Any]:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        return lambda: a @ b

    # Doubled until one call takes 20 ms (slow dtypes stay small).
    limit = 8192 if device.type == "cuda" else 2048
    n, fn = 256, make(256)
    while n < limit and timed(fn, 1, 1, device, clock)[0] < 0.02:
        n *= 2
        fn = make(n)
    return 2 * n**3, fn


def large_copy(device: torch.device) -> tuple[float, Callable[[], Any]]:
    """A copy far larger than the caches, and the bytes it reads and writes."""
    n = (256 if device.type == "cuda" else 64) * 2**20 // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    return 2 * n * 4, lambda: dst.copy_(src)


class Kernel(NamedTuple):
    """A small network whose measured time fixes one unknown of the time model."""

    unknown: str
    """'overhead', 'ppp_mem' or an operator kind (devices.KINDS)."""
    make: Callable[[], nn.Module]
    shape: list[int]
    batch: int
    """On a CPU; GPUs run 16 times larger batches."""
    train: bool = False
    """Time a training step (forward and backward) instead of a forward pass."""


def _convs() -> nn.Module:
    """Typical shapes of convolution layers: a strided stem on 3 channels, 1x1 and 3x3
    ones, and wide ones on small maps, as a ResNet or MobileNet goes deeper."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, 1),
        nn.Conv2d(32, 64, 1),
        nn.Conv2d(64, 64, 3, 1, 1),
        nn.Conv2d(64, 128, 3, 2, 1),
        nn.Conv2d(128, 128, 1),
        nn.Conv2d(128, 256, 3, 2, 1),
        nn.Conv2d(256, 512, 3, 2, 1),
    )


def _depthwise() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(96, 96, 3, 1, 1, groups=96),
        nn.Conv2d(96, 96, 3, 2, 1, groups=96),
        nn.Conv2d(96, 96, 5, 1, 2, groups=96),
    )


KERNELS = [
    # An operator call's fixed cost: ReLUs of a single number.
    Kernel("overhead", lambda: nn.Sequential(*[nn.ReLU() for _ in range(64)]), [1], 1),
    # Memory-bound element-wise work at the size of a ResNet stage's activations.
    Kernel("ppp_mem", lambda: nn.Sequential(nn.ReLU(), nn.SiLU()), [64, 56, 56], 4),
    Kernel("conv", _convs, [3, 112, 112], 4),
    Kernel("conv_backward", _convs, [3, 112, 112], 4, train=True),
    Kernel("depthwise_conv", _depthwise, [96, 56, 56], 4),
    Kernel("depthwise_conv_backward", _depthwise, [96, 56, 56], 4, train=True),
    Kernel("matmul", lambda: nn.Linear(1024, 1024, bias=False), [1024], 256),
    Kernel("pool", lambda: nn.MaxPool2d(3, 2, 1), [64, 56, 56], 4),
    # Batch norm in training: statistics, normalisation and its backward.
    Kernel("norm", lambda: nn.BatchNorm2d(64), [64, 56, 56], 4, train=True),
]
"""In the order they are solved: each one's prediction uses the unknowns before it."""


def solve(kernel: Kernel, device: Device, measured_s: float, analysis: Analysis) -> Device | None:
    """The device with `kernel.unknown` set so that the time model predicts `measured_s`
    for the kernel; None when the other terms alone already take longer (nothing is left
    for the unknown to explain: it cannot be measured from this time)."""
    from dlperf.analytic.paleo import predict

    neutral: dict[str, Any] = {"overhead": {"op_overhead_us": 0.0}, "ppp_mem": {"ppp_mem": 1.0}}
    kinds = device.kind_ppp()
    kinds_at_1 = {**kinds, kernel.unknown: 1.0}
    t = predict(
        analysis,
        device.model_copy(update=neutral.get(kernel.unknown, {"ppp_by_kind": kinds_at_1})),
    ).totals
    if kernel.unknown == "overhead":
        left = measured_s - t.compute_s - t.memory_s
        update = {"op_overhead_us": left / t.calls * 1e6}
        return device.model_copy(update=update) if left > 0 else None
    if kernel.unknown == "ppp_mem":
        left = measured_s - t.compute_s - t.overhead_s
        return device.model_copy(update={"ppp_mem": t.memory_s / left}) if left > 0 else None
    own = t.flops_by_kind[kernel.unknown] / device.peak_flops(analysis.precision)
    left = measured_s - (t.time_s - own)
    if left <= 0:
        return None
    return device.model_copy(update={"ppp_by_kind": {**kinds, kernel.unknown: own / left}})


# --- measuring a model ------------------------------------------------------------------------


def _label_leaves(model: nn.Module) -> list[Any]:
    """Open a profiler range around every leaf module's forward."""
    open_ranges: list[Any] = []

    def enter(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            rng = torch.profiler.record_function(LABEL + name)
            rng.__enter__()  # type: ignore[no-untyped-call]
            open_ranges.append(rng)

        return hook

    def leave(module: nn.Module, args: Any, out: Any) -> None:
        open_ranges.pop().__exit__(None, None, None)

    handles = []
    for name, module in model.named_modules():
        if next(module.children(), None) is None:
            handles.append(module.register_forward_pre_hook(enter(name)))
            handles.append(module.register_forward_hook(leave))
    return handles


def make_step(
    model: nn.Module,
    input_shape: Sequence[int],
    batch: int,
    train: bool,
    precision: str,
    device: torch.device,
    command: str = "analyze",
) -> Callable[[], None]:
    """One forward pass (no_grad) or training step (forward, `sum()` loss, backward) of
    `model` on a random batch, what the time model predicts: the model cast to the
    precision's dtype, or as built where a run trains it so (counting.kept_as_built). A model
    that cannot switch mode, or nests too deep for Python's recursion limit, is one line, as
    counting says it (`command` names the command)."""
    dtype = DTYPES[precision]
    with nesting_told(model):  # .to() walks its modules
        model = to_precision(model, precision, device)
    try:
        x = torch.randn(batch, *input_shape, device=device, dtype=dtype)
    except RuntimeError:  # the allocator's failure (torch.OutOfMemoryError is one)
        shape = "x".join(str(n) for n in (batch, *input_shape))
        size = binary_size(batch * math.prod(input_shape) * dtype.itemsize)
        raise UserError(
            f"an input batch of {shape} ({size}) does not fit in {device} memory",
            "lower analyze.input or analyze.batch",
        ) from None
    with nesting_told(model):
        materialize_lazy(model, x, command)
    switch_mode(model, train, command)

    def step() -> None:
        if train:
            model.zero_grad(set_to_none=True)
            run_backward(run_forward(model, x, command), "measured")
        else:
            with torch.no_grad():
                run_forward(model, x, command)

    return step


@contextlib.contextmanager
def quietly(prof: torch.profiler.profile) -> Iterator[torch.profiler.profile]:
    """`with prof:`, its start and stop in `profiler_quiet` (the block's own output is not)."""
    with profiler_quiet():
        prof.__enter__()  # type: ignore[no-untyped-call]
    try:
        yield prof
    finally:
        with profiler_quiet():
            prof.__exit__(None, None, None)  # type: ignore[no-untyped-call]


def profile_leaves(
    model: nn.Module, step: Callable[[], None], device: torch.device, reps: int = 3
) -> dict[str, float]:
    """Seconds of each leaf module's forward per call of `step` (which runs `model`), from
    torch.profiler over `reps` calls: CPU time of its range, on a GPU its kernels' time."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    handles = _label_leaves(model)
    try:
        with quietly(torch.profiler.profile(activities=activities)) as prof:
            for _ in range(reps):
                step()
            synchronize(device)
    finally:
        for handle in handles:
            handle.remove()
    layers = {}
    for event in prof.key_averages():
        # With CUDA activity a range also appears as a GPU-side annotation under the same
        # name; the CPU-side range's device time already sums the kernels it launched.
        if event.key.startswith(LABEL) and event.device_type == DeviceType.CPU:
            micros = event.device_time_total if device.type == "cuda" else event.cpu_time_total
            layers[event.key.removeprefix(LABEL)] = micros / 1e6 / reps
    return layers
