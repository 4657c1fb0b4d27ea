"""What the hardware actually does: calibration kernels and a model's measured time.

Every timing warms up first, synchronises the device before reading the clock and keeps
all repetitions, so min / median / max can be reported.
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import torch
from torch import nn

from dlperf.analytic.counting import DTYPES, materialize_lazy, run_forward
from dlperf.analytic.devices import Device
from dlperf.progress import NullReporter, Reporter
from dlperf.system import synchronize

LABEL = "dlperf::"
"""Prefix of the profiler ranges that mark each leaf module's forward."""


def timings(fn: Callable[[], Any], device: torch.device, warmup: int, reps: int) -> list[float]:
    """Seconds of each of `reps` calls of `fn`, after `warmup` uncounted calls."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def spread(times: Sequence[float]) -> dict[str, float]:
    return {"min": min(times), "median": statistics.median(times), "max": max(times)}


# --- calibration ------------------------------------------------------------------------------


def _sized_to_take(
    seconds: float,
    make: Callable[[int], Callable[[], Any]],
    device: torch.device,
    start: int,
    limit: int,
) -> tuple[int, Callable[[], Any]]:
    """Double the problem size until one call takes `seconds` (slow dtypes stay small)."""
    n = start
    fn = make(n)
    while n < limit and min(timings(fn, device, 1, 1)) < seconds:
        n *= 2
        fn = make(n)
    return n, fn


def matmul_flops(dtype: torch.dtype, device: torch.device, reps: int = 5) -> float:
    def make(n: int) -> Callable[[], Any]:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        return lambda: a @ b

    limit = 8192 if device.type == "cuda" else 2048
    n, fn = _sized_to_take(0.02, make, device, 256, limit)
    return 2 * n**3 / statistics.median(timings(fn, device, 2, reps))


def conv_flops(device: torch.device, reps: int = 5) -> float:
    """A ResNet-style 3x3, 64 -> 64 channel convolution on 56x56 maps (fp32)."""
    conv = nn.Conv2d(64, 64, 3, padding=1, bias=False).to(device)

    def make(batch: int) -> Callable[[], Any]:
        x = torch.randn(batch, 64, 56, 56, device=device)
        return lambda: conv(x)

    with torch.no_grad():
        batch, fn = _sized_to_take(0.02, make, device, 1, 64)
        seconds = statistics.median(timings(fn, device, 2, reps))
    return 2 * batch * 56 * 56 * 64 * 64 * 9 / seconds


def memory_bandwidth(device: torch.device, reps: int = 5) -> float:
    """Bytes read and written per second by a copy far larger than the caches."""
    n = (256 if device.type == "cuda" else 64) * 2**20 // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    return 2 * n * 4 / statistics.median(timings(lambda: dst.copy_(src), device, 2, reps))


def calibrate(
    device: torch.device, name: str | None = None, reporter: Reporter | None = None
) -> Device:
    """Measure achievable matmul FLOP/s per dtype, convolution FLOP/s and bandwidth."""
    from dlperf.system import system_info

    reporter = reporter or NullReporter()
    reporter.task("calibrating", total=len(DTYPES) + 2)
    peaks: dict[str, float] = {}
    for precision, dtype in DTYPES.items():
        with contextlib.suppress(RuntimeError):  # no kernel for this dtype here
            peaks[precision] = matmul_flops(dtype, device) / 1e12
        reporter.advance(status=f"matmul {precision}")
    conv = conv_flops(device) / 1e12
    reporter.advance(status="convolution")
    bandwidth = memory_bandwidth(device) / 1e9
    reporter.advance(status="memory bandwidth")
    info = system_info(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        what, memory_gb = props.name, props.total_memory / 1e9
    else:
        what = f"{info['cpu']} ({device.type}), {info['threads']} threads"
        memory_gb = info["memory_gb"]
    return Device(
        name=name or socket.gethostname(),
        description=f"{what}, torch {torch.__version__}",
        kind="cpu" if device.type == "cpu" else "gpu",
        peak_tflops=peaks,
        memory_bandwidth_gbs=bandwidth,
        memory_gb=memory_gb,
        conv_tflops=conv,
        # The convolution's share of the fp32 matmul rate is this platform's PPP.
        ppp=conv / peaks["fp32"],
        ppp_mem=1.0,
        source="dlperf calibrate: medians of 5 matmuls per dtype, 3x3 convolutions, copies",
        date=datetime.now(UTC).date().isoformat(),
    )


# --- measuring a model ------------------------------------------------------------------------


def _label_leaves(model: nn.Module) -> list[Any]:
    """Open a profiler range around every leaf module's forward."""
    open_ranges: list[Any] = []

    def enter(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            rng = torch.profiler.record_function(LABEL + name)
            rng.__enter__()
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


def measure_model(
    model: nn.Module,
    input_shape: Sequence[int],
    batch: int,
    train: bool,
    precision: str,
    device: torch.device,
    warmup: int = 3,
    reps: int = 10,
    reporter: Reporter | None = None,
    profile_layers: bool = True,
) -> dict[str, Any]:
    """Time forward passes (or forward + backward steps); profile each leaf's forward."""
    reporter = reporter or NullReporter()
    dtype = DTYPES[precision]
    model = model.to(device=device, dtype=dtype)
    x = torch.randn(batch, *input_shape, device=device, dtype=dtype)
    materialize_lazy(model, x)
    model.train(train)

    def step() -> None:
        if train:
            model.zero_grad(set_to_none=True)
            sum(t.sum() for t in _outputs(run_forward(model, x))).backward()
        else:
            with torch.no_grad():
                run_forward(model, x)

    reporter.task(f"timing {warmup} + {reps} {'steps' if train else 'forwards'}")
    times = timings(step, device, warmup, reps)
    if not profile_layers:
        return {"times_s": times, "spread_s": spread(times), "layers_s": {}}
    reporter.task("profiling layers")
    profiled = min(reps, 3)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    handles = _label_leaves(model)
    try:
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(profiled):
                step()
            synchronize(device)
    finally:
        for handle in handles:
            handle.remove()
    layers = {}
    for event in prof.key_averages():
        if event.key.startswith(LABEL):
            micros = event.device_time_total if device.type == "cuda" else event.cpu_time_total
            layers[event.key.removeprefix(LABEL)] = micros / 1e6 / profiled
    return {"times_s": times, "spread_s": spread(times), "layers_s": layers}


def _outputs(out: Any) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
