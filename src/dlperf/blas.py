"""The BLAS pools of NumPy and SciPy under an address-space limit: sized to one thread before
they load, and each loaded only where it can start, as torch is. Both are set up as `dlperf`
is imported (the command line, the API, every child)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import mmap
import os
import resource
import sys
from collections.abc import Sequence
from types import ModuleType

# OpenBLAS's own variables (it reads OPENBLAS_NUM_THREADS, then GOTO_NUM_THREADS): a user's is
# kept. OMP_NUM_THREADS is not read here: it is torch's pool's too, which run.threads sets.
_OPENBLAS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS")
# The address space each library's import needs beyond what is mapped when it starts, for a
# pool of one thread: its shared objects (its OpenBLAS among them) and the 33 MiB buffer
# OpenBLAS allocates as it loads, with room to spare; each further thread, its buffer and
# stack. Measured under ulimit -v: SciPy hung at 64-96 MiB above the process, not at 128;
# NumPy's OpenBLAS exited the process at 60 MiB, failed in a MemoryError at 80, loaded at 100
# (one thread; two: at 140). Beside it, the library's name and what its OpenBLAS does short
# of room for its buffer.
_NEEDS = {
    "scipy": (256, "SciPy", "retries its allocation forever"),
    "numpy": (112, "NumPy", "ends the process with its own line"),
}
_THREAD_MIB = 48
# The address space torch's import needs beyond what is mapped when it starts (NumPy's with
# it, which it imports), by the build: with CUDA's (or ROCm's) libraries, or without. Short of
# it, the CUDA build's import died where no Python code can catch it: libtorch's shared objects
# mapped, then a C++ static initialiser's allocation failed ("terminate called after throwing
# an instance of 'std::bad_alloc'", exit 134; glibc's "cannot allocate memory for thread-local
# data: ABORT", exit 127), with no dlperf line. Measured (torch 2.14.1+cu130, Linux x86-64,
# one OpenBLAS thread): VmPeak of `import dlperf, torch` 3,222,400 KiB from 18,500 before
# torch, 3,129 MiB; it loaded under ulimit -v 3250000, not 3200000, and aborted from 2980000
# to 3020000. Kept: 3,200 MiB. The build without CUDA was not measured: this one maps 736 MiB
# outside CUDA's libraries (2.3 GiB of them), taken low, at 640, so as never to refuse a build
# that would load (below it, libtorch_cpu.so alone fails to map, in one line).
_TORCH_MIB = {True: 3200, False: 640}
_TORCH_GPU_LIBS = ("libtorch_cuda.so", "libtorch_hip.so")
NO_ROOM = "of address space is left"  # the words of the refusal, for the command line's hint


def address_limit() -> int | None:
    """The address-space limit in bytes (`ulimit -v`, RLIMIT_AS's soft one), None without one."""
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def size_pools() -> None:
    """Under an address-space limit, OpenBLAS (and BLIS, Apple's vecLib) to 1 thread, unless
    the user set them: OpenBLAS allocates a buffer per thread as it loads, and short of room
    for it SciPy's retried for ever (`_RoomForBlas`); dlperf's work in these pools (curve
    fits, NNLS on a few dozen points, loading digits) gains nothing from a second thread
    (measured: a fit 4.0 ms on 1 thread, 4.3 ms on 2). Without a limit they are left as they
    are: where torch's own BLAS is OpenBLAS (Linux on ARM), OPENBLAS_NUM_THREADS=1 would hold
    every training matmul to one thread whatever run.threads says."""
    if address_limit() is None:
        return
    if not any(os.environ.get(name) for name in _OPENBLAS):
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    for name in ("BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
        os.environ.setdefault(name, "1")


def _threads() -> int:
    for name in _OPENBLAS:
        if (value := os.environ.get(name, "")).isdigit() and int(value) > 0:
            return min(int(value), os.cpu_count() or 1)
    return os.cpu_count() or 1


def room(size: int) -> bool:
    """Whether `size` more bytes of address space can be mapped (read-only, private and never
    touched: it takes no memory)."""
    try:
        with mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ):
            return True
    except OSError:
        return False


def _torch_needs() -> int | None:
    """The MiB of address space torch's import needs (`_TORCH_MIB`), by whether the torch
    installed has CUDA's or ROCm's library; None where no torch is installed (its import then
    fails as it would). One look-up and a stat or two: no import."""
    spec = importlib.machinery.PathFinder.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    libs = [os.path.join(where, "lib") for where in spec.submodule_search_locations]
    gpu = any(os.path.exists(os.path.join(lib, name)) for lib in libs for name in _TORCH_GPU_LIBS)
    return _TORCH_MIB[gpu]


def _short_of(fullname: str) -> str | None:
    """Why `fullname` cannot be imported in the address space left: the words of its
    ImportError, or None where it can (or is none of the libraries watched)."""
    if fullname == "torch":
        if (need := _torch_needs()) is None:
            return None
        if "numpy" not in sys.modules:  # torch imports it: its further threads' buffers too
            need += _THREAD_MIB * (_threads() - 1)
        what = "which torch needs to load (short of it, its C++ start-up ends the process)"
    else:
        mib, name, short = _NEEDS[fullname]
        need = mib + _THREAD_MIB * (_threads() - 1)
        what = f"which {name}'s OpenBLAS needs to start (short of it, OpenBLAS {short})"
    return None if room(need * 2**20) else f"less than {need} MiB {NO_ROOM}, {what}"


class _RoomForBlas(importlib.abc.MetaPathFinder):
    """Refuses SciPy's, NumPy's or torch's import when too little of a set address space is
    left for it. Short of the buffer it allocates as it loads, SciPy's OpenBLAS retried the
    failing mmap forever inside dlopen, where no stop signal reaches Python (`dlperf run` of
    digits under ulimit -v spun at 100% CPU until SIGKILL), NumPy's called exit() ("OpenBLAS
    error: Memory allocation still failed", `dlperf infer` under ulimit -v 100000), and torch's
    C++ start-up called abort() (`_TORCH_MIB`); refused, the import fails as any other that ran
    out."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if (fullname in _NEEDS or fullname == "torch") and address_limit() is not None:
            size_pools()  # a limit set since dlperf was imported: before OpenBLAS loads
            if (short := _short_of(fullname)) is not None:
                raise ImportError(short, name=fullname)
        return None


def guard_blas() -> None:
    """Put the guard of SciPy's, NumPy's and torch's imports first on sys.meta_path, once,
    before they load (it asks for the limit as each is imported: a process may set one after
    importing dlperf)."""
    if any(isinstance(f, _RoomForBlas) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _RoomForBlas())
