"""An nccl-tests-style all-reduce microbenchmark and the α-β ring all-reduce model.

Run under torchrun, one process per worker:

    torchrun --nproc-per-node 2 -m dlperf.distributed.allreduce --sizes 1KB..64MB --out ar.json

Definitions as in nccl-tests (doc/PERFORMANCE.md), for a message of S bytes on n ranks
taking t seconds:  algbw = S / t,  busbw = algbw · 2(n−1)/n. busbw factors out the ring's
2(n−1)/n data movement per rank, so it is comparable with the link bandwidth whatever n is.

Ring all-reduce (reduce-scatter then all-gather, 2(n−1) steps of S/n bytes each), with a
per-step latency α and a per-link bandwidth B:

    T(n, S) = 2(n−1)·α + 2(n−1)/n · S/B        (0 when n = 1)

so busbw → B for large messages. T is linear in (α, 1/B); fit_ring_model finds both,
non-negative, by least squares on relative error. One straight line cannot follow a backend
that changes algorithm with the message size (gloo does), so `interpolate_time` also reads
the measured times themselves, between the two measured sizes around a message.

DDP overlaps its all-reduces with the backward pass. Whether that overlap is free depends on
the host: NCCL runs on its own CUDA stream, but gloo's thread on a CPU worker whose cores are
busy computing takes them from the backward. `measure_overlap` measures that cost the way DDP
incurs it: a compute kernel alone, then the same kernel with an all-reduce launched just
before it (asynchronously, as DDP launches a bucket's), and the all-reduce alone;
cost = (compute time overlapped - compute time alone) / all-reduce time alone, the compute
seconds lost per second of all-reduce in flight (dlperf.distributed.overlap uses it).

An all-reduce timed after a barrier may not be the one DDP pays: DDP launches a bucket as
each rank's backward produces it, right after heavy compute, the ranks arriving at different
times. `measure_after_compute` times that: per repetition, a barrier (a DDP step starts as
the previous one's all-reduce ends, on every rank at once), the same compute burst on every
rank (AFTER_COMPUTE_S, a backward pass's order, with whatever rank-to-rank noise it has), then
at once the all-reduce, timed from each rank's own start. The slowest rank's duration
includes waiting for the others; the fastest's is that of the rank that arrived last, which
waits for no one: the all-reduce once every rank is in. (On the 2-core VM neither came out
systematically longer than after a barrier, so the bucket/overlap model does not read them;
docs/scale.md.)

How far a busy host bent these numbers is measured, not guessed (dlperf.contention): each
size's timed calls are a contention window on every rank, and a row's `cpu_wait_share` is the
largest over the ranks of the share of their runnable thread-time spent waiting for a CPU.
Rank 0 writes, beside the rows, `contention`: the figures of the most contended rank's window
over the whole benchmark (the timed calls, the after-compute and the overlap measurements,
warm-ups left out of the first), which `dlperf scale allreduce` turns into the study's
`cpu_wait_share`, `contention` and mark (`reliable`, `reliability_note`: contended at 10% or
more), and an `unreliable: ...` line on stderr. The mark is the window's alone: a row is the
mean and median of `--iters` calls of one size, not repetitions of a figure to rank.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
import torch.distributed as dist
from scipy.optimize import nnls

from dlperf.blas import address_limit
from dlperf.contention import Contention, Window
from dlperf.distributed.cpu_limit import leave_at_limit
from dlperf.distributed.planning import resolve_backend
from dlperf.errors import MemoryRanOut, UserError, error_text, limit_words, out_of_memory
from dlperf.formatting import binary_size, ran_out
from dlperf.system import machine_memory, set_threads
from dlperf.timing import Spread, Timer, timed

UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?B)?\s*$", re.IGNORECASE)
_SIZES_HINT = "use e.g. 1KB..256MB, 4MB or 1KB,1MB (units B, KB, MB, GB; powers of 1024)"


def _parse_size(text: str) -> int:
    match = _SIZE.match(text)
    if match is None:
        raise UserError(f"bad message size '{text.strip()}'", _SIZES_HINT)
    nbytes = int(match.group(1)) * UNITS[(match.group(2) or "B").upper()]
    if nbytes <= 0:
        raise UserError(f"message size '{text.strip()}' must be positive", _SIZES_HINT)
    return nbytes


def parse_sizes(text: str, dtype: str = "float32") -> list[int]:
    """Message sizes in bytes: "1KB..256MB" doubles from the first to the last (inclusive,
    as nccl-tests' -b 1K -e 256M -f 2), "4MB" is one size, "1KB,1MB" a list. Each a whole
    number of `dtype` elements, each once."""
    if ".." in text:
        first, _, last = text.partition("..")
        start, stop = _parse_size(first), _parse_size(last)
        if start > stop:
            raise UserError(f"size range '{text}' runs backwards", _SIZES_HINT)
        _whole_elements(first, start, dtype)  # then every double of it is too
        sizes = [start]
        while sizes[-1] * 2 <= stop:
            sizes.append(sizes[-1] * 2)
        return sizes
    if not text.strip():
        raise UserError("no message sizes given", _SIZES_HINT)
    sizes = []
    for part in text.split(","):
        sizes.append(_whole_elements(part, _parse_size(part), dtype))
    _once_each(sizes, text)
    return sizes


def _whole_elements(text: str, nbytes: int, dtype: str) -> int:
    """`nbytes`, refused where it is not a whole number of `dtype` elements: the message was
    the elements that fit, rounded down (at least one), and its row said bytes not asked for."""
    itemsize = DTYPES[dtype].itemsize
    if nbytes % itemsize:
        raise UserError(
            f"message size '{text.strip()}' is not a whole number of {dtype} elements "
            f"({itemsize} bytes each)",
            f"give a multiple of {itemsize} bytes, e.g. {itemsize}B or 1KB",
        )
    return nbytes


def _once_each(sizes: list[int], text: str) -> None:
    # A repeat, however spelt (1KB,1024B), is measured twice, stored as two rows and counts
    # twice in the ring model's fit; a list flag's repeat is refused as every command's is.
    for i, size in enumerate(sizes):
        if size in sizes[:i]:
            n = sizes.count(size)
            times = "twice" if n == 2 else f"{n} times"
            raise UserError(
                f"message size {size} bytes is given {times} (got '{text}')",
                "give each size once",
            )


def check_room(sizes: list[int], workers: int, backend: str) -> None:
    """Refuse, before any worker starts, a largest message that the `workers` ranks cannot
    hold: on gloo all of them on this machine, each its own copy, within its memory and the
    address-space limit (`ulimit -v`, which every worker inherits); on nccl each rank on its
    own GPU. Only what cannot fit: what a worker's own start takes beside it is not guessed
    (a worker that runs out all the same says so, `message`)."""
    largest = max(sizes)
    said = f"a message of {binary_size(largest)}"
    if backend == "nccl":
        # fewer GPUs than workers: their worker's own failure says so
        gpus = range(max(1, min(workers, torch.cuda.device_count())))
        gpu = min(torch.cuda.get_device_properties(i).total_memory for i in gpus)
        if largest > gpu:
            raise UserError(
                f"{said} is more than a GPU's {binary_size(gpu)} of memory", "give smaller --sizes"
            )
        return
    memory, total = machine_memory(), workers * largest
    if total > memory:
        takes = f"on each of {workers} workers takes {binary_size(total)}," if workers > 1 else "is"
        raise UserError(
            f"{said} {takes} more than this machine's {binary_size(memory)} of memory",
            "give smaller --sizes" + (" or fewer --workers" if workers > 1 else ""),
        )
    limit = address_limit()
    if limit is not None and largest > limit:
        raise UserError(
            f"{said} is more than the {binary_size(limit)} of address space a worker may map",
            limit_words(),
        )


def message(size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The message of `size` bytes (a whole number of `dtype` elements, `parse_sizes`), zeros.
    Memory that runs out allocating it is one line naming the size (`_ran_out`), not torch's
    traceback under torch elastic's "To enable traceback see"."""
    try:
        return torch.zeros(size // dtype.itemsize, dtype=dtype, device=device)
    except Exception as e:
        if not out_of_memory(e):
            raise
        raise _ran_out(f"allocating a message of {binary_size(size)}", e) from None


def _ran_out(doing: str, e: BaseException) -> MemoryRanOut:
    """A worker's one line for memory that ran out `doing` (formatting.ran_out's words)."""
    first = (error_text(e).strip().splitlines() or [type(e).__name__])[0]
    return ran_out(doing, e, first, "give smaller --sizes")


def ring_time(workers: int, nbytes: float, alpha_s: float, bandwidth_bytes_per_s: float) -> float:
    """Ring all-reduce time T(n, S) = 2(n−1)·α + 2(n−1)/n · S/B; one worker sends nothing."""
    n = workers
    return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * nbytes / bandwidth_bytes_per_s


@dataclass
class RingModel:
    """A fitted ring model: per-step latency α (s), link bandwidth B (bytes/s), and the fit's
    root-mean-square relative error (%) over n_points measurements."""

    alpha_s: float
    bandwidth_bytes_per_s: float
    rmse_pct: float
    n_points: int


def fit_ring_model(rows: list[dict[str, Any]]) -> RingModel:
    """Fit α and B to measured all-reduce times (rows with workers, bytes, time_s)."""
    usable = [
        (int(r["workers"]), float(r["bytes"]), float(r["time_s"]))
        for r in rows
        if int(r["workers"]) >= 2 and float(r["bytes"]) > 0 and float(r["time_s"]) > 0
    ]
    if len({(n, s) for n, s, _ in usable}) < 2:
        raise UserError(
            "the ring model needs at least 2 all-reduce measurements with 2+ workers",
            "measure more message sizes or worker counts",
        )
    n, s, t = (np.array(col) for col in zip(*usable, strict=True))
    design = np.column_stack([2 * (n - 1), 2 * (n - 1) / n * s])
    # Dividing each row by its time fits relative error: otherwise the largest messages'
    # seconds swamp the smallest ones' microseconds and α comes out as noise.
    (alpha, inv_bandwidth), _ = nnls(design / t[:, None], np.ones_like(t))
    if inv_bandwidth <= 0:
        raise UserError(
            "all-reduce times do not grow with message size, so no bandwidth can be fitted",
            "include larger message sizes",
        )
    relative = (design @ [alpha, inv_bandwidth] - t) / t
    return RingModel(
        alpha_s=float(alpha),
        bandwidth_bytes_per_s=float(1 / inv_bandwidth),
        rmse_pct=float(100 * math.sqrt(np.mean(relative**2))),
        n_points=len(usable),
    )


def interpolate_time(rows: list[dict[str, Any]], nbytes: float, key: str = "median_s") -> float:
    """All-reduce time of `nbytes` from measured rows (bytes and `key`; median_s in rows
    stored before `key` was measured, time_s in those stored before medians were) of one
    worker count: linear between the two measured sizes around it; below the smallest, the
    smallest's time (latency-bound); above the largest, the largest's scaled in proportion
    (bandwidth-bound)."""
    points = sorted(
        (float(r["bytes"]), float(r.get(key, r.get("median_s", r["time_s"])))) for r in rows
    )
    if not points:
        raise ValueError("no measured all-reduce times")
    sizes, times = zip(*points, strict=True)
    if nbytes >= sizes[-1]:
        return float(times[-1] * nbytes / sizes[-1])
    return float(np.interp(nbytes, sizes, times))


# Where DDP's buckets fall: its 1 MiB first bucket up to its 25 MiB default cap.
OVERLAP_SIZES = (2**20, 4 * 2**20, 16 * 2**20)
OVERLAP_SPAN = 4  # the compute lasts this many all-reduces, so that one ends inside it


def overlap_sizes(sizes: list[int]) -> list[int]:
    """The sizes at which measure_overlap runs: OVERLAP_SIZES within the measured range, else
    the largest measured size."""
    inside = [s for s in OVERLAP_SIZES if min(sizes) <= s <= max(sizes)]
    return inside or [max(sizes)]


def _matmuls(device: torch.device) -> Callable[[int], None]:
    """The compute kernel of the overlap and after-compute measurements: `repeats` 256x256
    matrix products, queued (a Timer waits for them)."""
    matrix = torch.randn(256, 256, device=device)
    product = torch.empty_like(matrix)

    def compute(repeats: int) -> None:
        for _ in range(repeats):
            torch.mm(matrix, matrix, out=product)

    compute(20)  # the first calls warm the kernel up
    return compute


def _calls_lasting(seconds: float, kernel_s: float, device: torch.device) -> int:
    """How many calls of a kernel of `kernel_s` seconds last `seconds`, the largest count
    over the ranks, so that every rank does the same work."""
    repeats = torch.tensor([seconds / kernel_s], device=device)
    dist.all_reduce(repeats, op=dist.ReduceOp.MAX)
    return max(1, math.ceil(float(repeats.item())))


def measure_overlap(
    sizes: list[int], reps: int, dtype: torch.dtype, device: torch.device
) -> list[dict[str, float]]:
    """The cost of overlapping an all-reduce with compute (see the module's docstring), per
    message size: medians over `reps` interleaved repetitions of the compute alone, the
    compute with the all-reduce in flight, and the all-reduce alone. The compute is a loop of
    256x256 matrix products sized to last OVERLAP_SPAN all-reduces, the same on every rank.
    A synchronous step waits for its slowest rank, so the compute lost is the largest of the
    ranks', the all-reduce time the largest too. Every rank returns the same rows."""
    compute = _matmuls(device)
    timer = Timer(device)
    itemsize = torch.empty((), dtype=dtype).element_size()
    kernel_s = timer.time(lambda: compute(20)) / 20
    rows: list[dict[str, float]] = []
    for size in sizes:
        tensor = message(size, dtype, device)
        dist.barrier()
        typical = statistics.median(timed(functools.partial(dist.all_reduce, tensor), 1, 3, device))
        count = _calls_lasting(OVERLAP_SPAN * typical, kernel_s, device)
        alone, lost, communication = [], [], []
        for _ in range(reps):
            dist.barrier()
            alone.append(timer.time(functools.partial(compute, count)))
            dist.barrier()
            timer.start()
            work = dist.all_reduce(tensor, async_op=True)
            compute(count)
            work.wait()  # as a step waits for its last bucket; normally done by now
            # paired with the compute just before it: a change in the host's load between
            # repetitions hits both alike
            lost.append(timer.stop() - alone[-1])
            dist.barrier()
            communication.append(timer.time(functools.partial(dist.all_reduce, tensor)))
        mine = torch.tensor(
            [
                statistics.median(lost),
                statistics.median(communication),
                statistics.median(alone),
            ],
            device=device,
            dtype=torch.float64,
        )
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        lost_s, seconds, compute_s = (float(v) for v in mine.tolist())
        rows.append(
            {
                "bytes": tensor.numel() * itemsize,
                "allreduce_s": seconds,
                "compute_s": compute_s,
                "compute_lost_s": lost_s,
                "cost": max(0.0, lost_s / seconds),
            }
        )
    return rows


def overlap_cost(rows: list[dict[str, float]]) -> float:
    """One host's overlap cost over the measured message sizes: all the compute lost over all
    the all-reduce time, so that the longer all-reduces, whose loss stands out of the
    timer's noise, weigh more than the short ones."""
    total = sum(r["allreduce_s"] for r in rows)
    return max(0.0, sum(r["compute_lost_s"] for r in rows) / total) if total > 0 else 0.0


# The compute burst before each all-reduce of measure_after_compute: the order of a backward
# pass of the small CIFAR models benchmarks/bench_scale.py runs on a CPU worker (their whole
# steps take 40-75 ms on the 2-core VM), so its rank-to-rank noise is of that order too.
# Chosen from the setting, never fitted to an exposed time.
AFTER_COMPUTE_S = 0.03


def after_compute_times(durations: Sequence[Sequence[float]]) -> tuple[float, float]:
    """From each rank's all-reduce durations (one sequence per rank, one value per
    repetition, each timed from that rank's own start): the median over repetitions of the
    slowest rank's duration (waiting included) and of the fastest's (the rank that arrived
    last, so the all-reduce once every rank is in)."""
    repetitions = list(zip(*durations, strict=True))
    if not repetitions:
        raise ValueError("no all-reduce durations")
    return (
        statistics.median(max(r) for r in repetitions),
        statistics.median(min(r) for r in repetitions),
    )


def measure_after_compute(
    sizes: list[int],
    reps: int,
    dtype: torch.dtype,
    device: torch.device,
    burst_s: float = AFTER_COMPUTE_S,
) -> list[tuple[float, float]]:
    """Per message size, the all-reduce as DDP launches it (see the module's docstring):
    after_compute_times over `reps` repetitions. Every rank returns the same values."""
    compute = _matmuls(device)
    timer = Timer(device)
    count = _calls_lasting(burst_s, timer.time(lambda: compute(20)) / 20, device)
    out = []
    for size in sizes:
        tensor = message(size, dtype, device)
        dist.all_reduce(tensor)  # warm-up
        mine = []
        for _ in range(reps):
            dist.barrier()
            compute(count)
            # The clock starts as the compute ends; no barrier: each rank arrives at the
            # all-reduce when its compute ends.
            mine.append(timer.time(functools.partial(dist.all_reduce, tensor)))
        local = torch.tensor(mine, device=device, dtype=torch.float64)
        every = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(every, local)
        out.append(after_compute_times([t.tolist() for t in every]))
    return out


def measure(
    sizes: list[int],
    iters: int,
    warmup: int,
    dtype: torch.dtype,
    device: torch.device,
    window: Window | None = None,
) -> list[dict[str, float]]:
    """Time all_reduce(SUM) per message size in an initialised process group, each size's
    timed calls a stretch of `window` (a fresh one if None; a row's `cpu_wait_share` is its
    stretch's, the largest over the ranks). Every rank returns the same rows."""
    window = window or Window(family={os.getppid()})  # the launcher's: the ranks are ours
    world = dist.get_world_size()
    itemsize = torch.empty((), dtype=dtype).element_size()
    rows = []
    for size in sizes:
        tensor = message(size, dtype, device)
        for _ in range(warmup):
            dist.all_reduce(tensor)
        dist.barrier()
        window.start()
        calls = Spread.of(timed(functools.partial(dist.all_reduce, tensor), 0, iters, device))
        span = window.stop()
        waited = span.cpu_wait_share if span else 0.0
        # The mean is nccl-tests' figure; the median, robust to a busy host's hiccups, is
        # what the bucket/overlap model reads (the scale study's step times are medians too).
        elapsed = torch.tensor(
            [calls.mean, calls.median, waited], device=device, dtype=torch.float64
        )
        # A collective ends when its slowest rank does, so take the max over ranks
        # (nccl-tests averages by default; its -a 3 is this); one waiting rank slows all.
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        seconds, median, waited = (float(v) for v in elapsed.tolist())
        nbytes = tensor.numel() * itemsize
        algbw = nbytes / seconds / 1e9
        rows.append(
            {
                "bytes": nbytes,
                "time_s": seconds,
                "median_s": median,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * 2 * (world - 1) / world,
                "cpu_wait_share": waited,
            }
        )
    return rows


def most_contended(window: Contention | None) -> dict[str, Any] | None:
    """The figures of the most contended rank's window (Contention.to_dict), on every rank;
    None where no rank measured one."""
    every: list[dict[str, Any] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(every, window.to_dict() if window else None)
    worst = Contention.worst([Contention(**w) for w in every if w is not None])
    return worst.to_dict() if worst else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m dlperf.distributed.allreduce",
        description="All-reduce microbenchmark; run one process per worker under torchrun.",
    )
    parser.add_argument("--sizes", default="1KB..64MB")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per rank")
    parser.add_argument("--out", type=Path, required=True, help="JSON written by rank 0")
    args = parser.parse_args(argv)
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be at least 1 and --warmup at least 0")
    sizes = parse_sizes(args.sizes, args.dtype)
    # its CPU-time limit's SIGXCPU stops dlperf, not a core dump
    leave_at_limit(args.out.parent, os.environ.get("RANK", "0"))

    backend = resolve_backend(args.backend)
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    # Workers share the host's cores: one thread each unless told, never torch's default.
    if device.type == "cpu" or args.threads:
        set_threads(args.threads or 1)

    dist.init_process_group(backend)
    try:
        _benchmark(args, sizes, backend, device)
    except MemoryRanOut as e:
        _fail_in_one_line(args.out.parent, str(e))
    except Exception as e:
        if out_of_memory(e):  # not allocating a message: in a collective's own buffers
            doing = f"all-reducing messages of up to {binary_size(max(sizes))}"
            _fail_in_one_line(args.out.parent, str(_ran_out(doing, e)))
        raise
    finally:
        dist.destroy_process_group()


def _benchmark(
    args: argparse.Namespace, sizes: list[int], backend: str, device: torch.device
) -> None:
    """Measure `sizes` in the process group; rank 0 writes the result to --out."""
    dtype = DTYPES[args.dtype]
    window = Window(family={os.getppid()})  # torchrun's agent: the sibling ranks are ours
    rows = measure(sizes, args.iters, args.warmup, dtype, device, window)
    window.start()
    after = measure_after_compute(sizes, args.iters, dtype, device)
    window.stop()
    for row, (slowest, last) in zip(rows, after, strict=True):
        row["after_compute_s"], row["after_compute_last_s"] = slowest, last
    window.start()
    overlap = measure_overlap(overlap_sizes(sizes), args.iters, dtype, device)
    window.stop()
    waited = most_contended(window.result())
    if dist.get_rank() == 0:
        result = {
            "backend": backend,
            "world_size": dist.get_world_size(),
            "dtype": args.dtype,
            "iters": args.iters,
            "warmup": args.warmup,
            "rows": rows,
            "overlap": overlap,
            "contention": waited,
        }
        args.out.write_text(json.dumps(result, indent=2) + "\n")


def _fail_in_one_line(directory: Path, line: str) -> NoReturn:
    """Leave a rank that ran out of memory with its one line, which the study says as the
    worker count's failure (`rank-R.failure`; `rank-R.error` too, so that the launcher sees
    which rank failed first): torchrun's own account was "To enable traceback see ...".
    Exits at once, as a scale worker's failure does: a peer may wait in a collective, and
    tearing the group down can hang."""
    rank = os.environ.get("RANK", "0")
    (directory / f"rank-{rank}.failure").write_text(line)
    (directory / f"rank-{rank}.error").write_text(line + "\n")
    os._exit(1)


if __name__ == "__main__":
    main()
