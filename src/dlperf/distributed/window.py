"""The timed window of every scale worker (DDP, Horovod, TensorFlow): warm-up, then chunks of
the point's timed steps alternating with chunks of its compute-only copy's, so that a change
in the host's load hits both alike; and what the window gives a rank's result. No torch here
(the clock loads it only for a device): the TensorFlow worker imports this module.

The workers do not run engine.loop.fit's epochs: they measure throughput, and an epoch loop
(evaluation, checkpoints, per-epoch rows) would change what they measure.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from dlperf import contention
from dlperf.contention import Contention
from dlperf.distributed.contracts import ComputePhase, MainPhase, RankResult, WorkerSpec
from dlperf.distributed.crash import Crash
from dlperf.timing import Timer

if TYPE_CHECKING:
    import torch

Weights = tuple[int, Sequence[float]]  # the trained gradients' bytes, a fingerprint of the values
CHUNKS = 5  # timed steps alternate between the point and its compute-only copy in chunks


def chunk_sizes(steps: int) -> list[int]:
    """The timed steps cut into CHUNKS consecutive chunks (fewer with fewer steps), the first
    ones a step longer when they do not divide evenly: how every framework's worker alternates
    a point's steps with its compute-only copy's, and how the study reads them back."""
    chunks = max(1, min(CHUNKS, steps))
    return [steps // chunks + (i < steps % chunks) for i in range(chunks)]


def fail(directory: Path, rank: int) -> NoReturn:
    """Leave a failed rank: its traceback in `rank-R.error` and on stderr, then exit at once
    with the ordinary failure code, without tearing anything down (its peers may be gone
    already, and waiting for them, or freeing what they shared, can hang or abort)."""
    (directory / f"rank-{rank}.error").write_text(traceback.format_exc())
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)


def crashing(step: Callable[[], None], rank: int) -> Callable[[], None]:
    """`step`, then the crash hook of rank `rank` (dlperf.distributed.crash), counting the
    point's steps, warm-up included, as every worker counts them."""
    crash, count = Crash.from_env(rank), itertools.count(1)

    def counted() -> None:
        step()
        crash.at(next(count))

    return counted


@dataclass(frozen=True)
class Timings:
    """What `measure` timed, in seconds: every timed step, their wall time, the
    compute-only steps (None without the split), and how long this process's threads
    waited for a CPU over the timed steps (dlperf.contention)."""

    step_times_s: tuple[float, ...]
    wall_s: float
    compute: ComputePhase | None
    contention: Contention | None = None

    def result(
        self, rank: int, world: int, samples_per_step: int, spread: float, weights: Weights
    ) -> RankResult:
        """A TensorFlow or Horovod process's record: `spread`, the largest difference between
        its own replicas; the launcher compares those of other processes by the
        fingerprints of `weights` (the trained bytes, the fingerprint)."""
        grad_bytes, fingerprint = weights
        samples = samples_per_step * len(self.step_times_s)
        waited = self.contention.to_dict() if self.contention else None
        main = MainPhase(
            self.step_times_s, self.wall_s, samples, spread, grad_bytes, None, None,
            (*fingerprint,), waited,
        )  # fmt: skip
        return RankResult(rank, socket.gethostname(), os.getpid(), world, main, self.compute)


def measure(
    spec: WorkerSpec,
    step: Callable[[], None],
    compute_only: Callable[[], None] | None,
    device: torch.device | None = None,
    barrier: Callable[[], None] = lambda: None,
    compute_warmup: int = 1,
    after_warmup: Callable[[], None] = lambda: None,
) -> Timings:
    """Warm up (`spec.warmup_steps` steps, then `compute_warmup` compute-only steps), call
    `after_warmup`, then time chunks of steps alternating with chunks of compute-only steps
    (None: no split). Each call returns once its step is done on `device` (None: the host
    clock, and torch stays unloaded); `barrier` starts and ends every stretch of steps (the
    DDP ranks', so that the wall time spans every rank's steps)."""
    # The launcher's family (torchrun's agent, horovodrun, dlperf): the sibling workers and
    # their communication threads are the point's own load, not a neighbour's.
    waited = contention.Window(family={os.getppid()})
    timer, chunk = Timer(device), Timer(device)
    times: list[float] = []
    compute: list[float] = []
    wall = 0.0

    def run(fn: Callable[[], None], steps: int, into: list[float]) -> float:
        barrier()
        chunk.start()
        into += (timer.time(fn) for _ in range(steps))
        barrier()
        return chunk.stop()

    run(step, spec.warmup_steps, [])
    if compute_only is not None:
        run(compute_only, compute_warmup, [])  # traced and warm before the timing starts
    after_warmup()
    for size in chunk_sizes(spec.steps):
        waited.start()
        wall += run(step, size, times)
        waited.stop()
        if compute_only is not None:
            run(compute_only, size, compute)
    split = ComputePhase(tuple(compute)) if compute_only is not None else None
    return Timings(tuple(times), wall, split, waited.result())
