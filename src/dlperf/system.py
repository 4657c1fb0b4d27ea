"""The machine a run executes on: device choice, threads, clocks and a system record.

torch is imported inside the functions that use it, so that importing this module (for
`usable_cores`, say) does not cost a command torch's seconds of start-up.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import resource
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dlperf import contention
from dlperf.errors import UserError
from dlperf.version import dlperf_version

if TYPE_CHECKING:
    import torch


def usable_cores() -> int:
    """Cores this process may run on (respects affinity masks and container cpusets)."""
    return len(contention.usable_cpus())


def machine_memory() -> int:
    """Bytes of physical memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def pick_device(spec: str = "auto") -> torch.device:
    """auto: CUDA, then MPS, then CPU. An explicit device that is absent is bad input."""
    import torch

    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise UserError(f"unknown device '{spec}'", "use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "meta":  # its tensors hold no values: a model check or a step fails
        raise UserError(
            f"device '{spec}' holds no values: a run cannot train on it",
            "use auto, cpu, cuda, cuda:N or mps",
        )
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device '{spec}' asked for, but {_no_cuda()}", _fix_device())
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            shown = _visible()
            raise UserError(
                f"device '{spec}': only {count} GPU(s) here"
                + (f" (CUDA_VISIBLE_DEVICES={shown!r} shows {count})" if shown is not None else ""),
                f"use cuda:0 to cuda:{count - 1}, or set run.device = auto",
            )
        if device.index is None:  # the current GPU, named so that the run records which
            device = torch.device("cuda", torch.cuda.current_device())
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError("device 'mps' asked for, but MPS is not available here", _fix_device())
    return device


def _visible() -> str | None:
    """CUDA_VISIBLE_DEVICES, where it is set: the GPUs CUDA shows this process."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def _no_cuda() -> str:
    """Why CUDA is not available, where it can be told: a GPU machine's CUDA_VISIBLE_DEVICES
    of "" or -1 hides every GPU, and "not available here" blamed the machine."""
    import torch

    if torch.version.cuda is None:
        return "this PyTorch is built without CUDA"
    shown = _visible()
    if shown is None:
        return "CUDA is not available here (no GPU or no driver found)"
    # CUDA reads the list up to its first entry that is not an index or a UUID: one that
    # starts with such an entry shows some GPU, on a machine that has it.
    if re.match(r"\s*(\d|GPU-|MIG-)", shown) is None:
        return f"CUDA_VISIBLE_DEVICES={shown!r} hides every GPU"
    return f"CUDA is not available here (no GPU that CUDA_VISIBLE_DEVICES={shown!r} names)"


def _fix_device() -> str:
    hidden = "unset CUDA_VISIBLE_DEVICES or name a GPU in it, or " if _visible() is not None else ""
    return f"{hidden}set run.device = auto or cpu"


def check_threads(threads: int | None) -> None:
    """Refuse a thread count this host cannot run (None: every usable core), for torch and
    ONNX Runtime alike: 1,000 threads on 2 cores ran 1,000x slower, 64 ORT threads on one
    allowed core answered 50x slower than one."""
    if threads is not None and threads < 1:
        raise UserError(f"--threads must be at least 1, got {threads}")
    if threads is not None and threads > usable_cores():
        raise UserError(
            f"{threads} threads asked for, but this host has {usable_cores()} usable cores",
            f"ask for at most {usable_cores()}, or leave threads unset to use them all",
        )


def set_threads(threads: int | Literal["auto"] | None) -> int:
    """Set intra-op threads explicitly: the default oversubscribes small hosts badly.
    None: every usable core; "auto": the cores other processes leave free (`auto_threads`)."""
    import torch

    if threads == "auto":
        threads = auto_threads()
    check_threads(threads)
    n = threads or usable_cores()
    torch.set_num_threads(n)
    return n


def auto_threads(free: float | None = None) -> int:
    """The threads a run should take on this host now: the usable cores other processes
    leave free (`free`, else measured), rounded, at least 1. Two OpenMP threads sharing one
    free core wait on each other at every parallel region (measured here: 3.5-50x slower),
    so a thread too few costs far less than a thread too many."""
    if free is None:
        free = contention.free_cores()
    return max(1, min(usable_cores(), round(free)))


def crowding(threads: int, free: float | None) -> str | None:
    """The warning for `threads` intra-op threads on a host with `free` cores free (None:
    not measured): None unless fewer cores are free than threads asked for."""
    fit = auto_threads(free) if free is not None else threads
    if threads <= fit:  # one thread on a full host: fewer cannot help (its CPU wait says it)
        return None
    return (
        f"only {free:.1f} of {usable_cores()} usable cores are free (other processes hold the "
        f"rest) and this run takes {threads} threads: threads sharing a core wait on each "
        f'other at every step; set run.threads = {fit} (or "auto") or stop the other work'
    )


def synchronize(device: torch.device) -> None:
    """Wait for queued kernels, so a host clock read after it measures finished work."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def peak_memory_bytes(device: torch.device) -> int:
    """CUDA: max allocated by tensors. Elsewhere: the process's peak resident set size."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def reset_peak_memory(device: torch.device) -> None:
    """Start CUDA's peak-memory counts afresh, so that a run's peak is its own and not that of
    an earlier run in the same process (a sweep). A process's peak RSS cannot be reset."""
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def gpu_memory(device: torch.device) -> dict[str, int] | None:
    """CUDA: the peak bytes held by tensors and the peak reserved by the caching allocator
    (what nvidia-smi sees of it) since `reset_peak_memory`; None on other devices."""
    import torch

    if device.type != "cuda":
        return None
    return {
        "max_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
        "max_reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
    }


def gpu_utilization(device: torch.device) -> float | None:
    """CUDA with the `gpu` extra (nvidia-ml-py): the percent of NVML's last sample period
    (1/6 s to 1 s) in which a kernel ran on `device`. None on other devices, without the
    extra, or where NVML cannot answer (a container without the driver's library): a gauge
    never fails a run."""
    import torch

    if device.type != "cuda":
        return None
    try:
        import pynvml

        # torch maps the device through CUDA_VISIBLE_DEVICES to NVML's index.
        return float(torch.cuda.utilization(device))
    except ModuleNotFoundError:  # the extra is not installed (torch raises it too)
        return None
    except (RuntimeError, ValueError, pynvml.NVMLError):
        return None


def host_gpus() -> list[str] | None:
    """The GPUs the host's driver shows, through NVML (the `gpu` extra), whether or not this
    torch build can use them; None without the extra or a driver."""
    try:
        import pynvml
    except ModuleNotFoundError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        return [
            pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)
        ]
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def system_info(device: torch.device | None = None, threads: int | None = None) -> dict[str, Any]:
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    cuda = torch.cuda.is_available()
    cudnn = torch.backends.cudnn.version() if cuda else None  # type: ignore[no-untyped-call]
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "threads": threads or torch.get_num_threads(),
        "memory_gb": round(machine_memory() / 2**30, 1),
        "gpus": gpus,
        "visible_gpus": host_gpus(),
        "device": str(device) if device is not None else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "dlperf": dlperf_version(),
        "git_commit": _git_commit(),
    }


# A line of Kineto's own log (`USDT:2026-11-26 12:19:21 25184:25184 File.cpp:39] text`).
_KINETO_LINE = re.compile(rb"[A-Z]+:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ [\w.]+\.cpp:\d+\] ")
# A warning of c10's own log, torch's C++ (`[W1130 04:56:42.779567260 file.cpp:1994] Warning:
# ...`, a thread id before the file in some builds).
_TORCH_CPP_WARNING = re.compile(rb"\[W\d{4} \d\d:\d\d:\d\d\.\d+ (?:\d+ )?[\w.]+:\d+\] ")


def profiler_quiet() -> contextlib.AbstractContextManager[None]:
    """Keep Kineto's own log lines off dlperf's stderr while torch.profiler starts, steps or
    stops: `USDT: ... profiler_start` and `profiler_stop`, which no setting silences, and on a
    machine with no GPU `ERROR: ... gpuGetDeviceCount failed`. (KINETO_LOG_LEVEL would drop
    the ERROR line only, and a user's Kineto errors elsewhere.)"""
    return _fd2_without(_KINETO_LINE)


def torch_cpp_warnings_quiet() -> contextlib.AbstractContextManager[None]:
    """Keep the warnings torch's C++ writes to its own log off dlperf's stderr for the block:
    torch.onnx's TorchScript exporter wrote `[W... shape_type_inference.cpp:1994] Warning: The
    shape inference of prim::PackPadded type is missing ...` for a packed sequence, about its
    own graph (which the parity check proves or refuses). TORCH_CPP_LOG_LEVEL is read once, as
    torch starts; nothing in Python turns them off after."""
    return _fd2_without(_TORCH_CPP_WARNING)


@contextlib.contextmanager
def _fd2_without(dropped: re.Pattern[bytes]) -> Iterator[None]:
    """Lines matching `dropped` kept off fd 2 for the block. C++ writes them to fd 2 itself,
    past Python's warnings filter and sys.stderr, so fd 2 is caught into a file meanwhile, and
    every other line written there (Python's warnings, torch's) is written on to fd 2
    afterwards, even when the block raises."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as caught:
        try:
            saved = os.dup(2)
        except OSError:  # no fd 2 at all: nothing reaches a stderr
            yield
            return
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            # Passed on to fd 2, where they were written (dlperf itself prints nothing here).
            lines = caught.read().splitlines(keepends=True)
            kept = b"".join(line for line in lines if not dropped.match(line))
            while kept:
                kept = kept[os.write(2, kept) :]
