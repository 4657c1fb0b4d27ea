"""The timed window of every scale worker (DDP, Horovod, TensorFlow), a component of the one
training loop (dlperf.engine.train_loop): warm-up, then chunks of the point's timed steps
alternating with chunks of its compute-only copy's (that copy's own loop, timed by `Laps`),
so that a change in the host's load hits both alike; and what the window gives a rank's
result. No torch here (the clock loads it only for a device): the TensorFlow worker imports
this module.

The workers run the loop over endless batches, without fit's epochs: they measure
throughput, and an epoch's evaluation, checkpoints and rows would change what they measure.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from dlperf import contention
from dlperf.contention import Contention
from dlperf.distributed.contracts import ComputePhase, MainPhase, RankResult, WorkerSpec
from dlperf.distributed.crash import Crash
from dlperf.engine.hooks import StepEnd
from dlperf.engine.train_loop import Batch, Component, Progress, train_loop
from dlperf.paths import atomic_write
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


def write_pid(directory: Path, rank: int) -> None:
    """`rank-R.pid` in `directory`, whole or not at all: the launcher stops workers by pid,
    and a half-written one would name another process."""
    atomic_write(directory / f"rank-{rank}.pid", str(os.getpid()))


class Crashing(Component):
    """The crash hook of rank `rank` (dlperf.distributed.crash) at the loop's step count, the
    point's steps, warm-up included, as every worker counts them."""

    def __init__(self, rank: int) -> None:
        self.crash = Crash.from_env(rank)

    def on_step_end(self, done: StepEnd) -> None:
        self.crash.at(done.step)


@dataclass(frozen=True)
class Timings:
    """What the window timed, in seconds: every timed step, their wall time, the
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
            self.step_times_s,
            self.wall_s,
            samples,
            spread,
            grad_bytes,
            None,
            None,
            (*fingerprint,),
            waited,
        )
        return RankResult(rank, socket.gethostname(), os.getpid(), world, main, self.compute)


class Laps(Component):
    """The time of each step of a stretch, from the stretch's start or the last step's end to
    the step's end on `device` (None: the host clock, and torch stays unloaded), and the
    stretch's wall time, `barrier` (the DDP ranks') starting and ending it, so that it spans
    every rank's steps. A component of the compute-only copy's loop, one stretch a call;
    the window drives the point's own."""

    def __init__(self, device: torch.device | None, barrier: Callable[[], None]) -> None:
        self.barrier, self.step, self.stretch = barrier, Timer(device), Timer(device)
        self.times: list[float] = []
        self.wall = 0.0

    def on_epoch_start(self, epoch: int, batches: Iterable[Batch]) -> None:
        self.barrier()
        self.stretch.start()
        self.step.start()

    def on_step_end(self, done: StepEnd) -> None:
        self.times.append(self.step.stop())
        self.step.start()

    def on_epoch_end(self, epoch: int) -> None:
        self.barrier()
        self.wall += self.stretch.stop()


class ScaleWindow(Component):
    """The timing component of a scaling point's loop: its first `warmup` steps untimed
    (spec.warmup_steps, and a profiled window's steps), then `compute(spec.warmup_steps)`
    (the compute-only copy's warm-up, None: no split) and `after_warmup`, then the point's
    steps in chunks (`chunk_sizes`), each followed by `compute(size)`, which returns the
    copy's step times. `steps` is how many steps the loop must take."""

    def __init__(
        self,
        spec: WorkerSpec,
        warmup: int,
        device: torch.device | None = None,
        barrier: Callable[[], None] = lambda: None,
        compute: Callable[[int], list[float]] | None = None,
        after_warmup: Callable[[], None] = lambda: None,
    ) -> None:
        self.warmup, self.steps = warmup, warmup + spec.steps
        self.compute_warmup = spec.warmup_steps  # the compute-only copy has no profiled steps
        self.compute, self.after_warmup = compute, after_warmup
        self.laps = Laps(device, barrier)
        sizes = chunk_sizes(spec.steps)
        # (the loop's step before it, its size) of each chunk still to time; the starts run
        # one past the last chunk
        starts = itertools.accumulate(sizes, initial=warmup)
        self.chunks = list(zip(starts, sizes, strict=False))
        self.taken = 0
        self.compute_times: list[float] = []
        # The launcher's family (torchrun's agent, horovodrun, dlperf): the sibling workers
        # and their communication threads are the point's own load, not a neighbour's.
        self.waited = contention.Window(family={os.getppid()})

    def on_epoch_start(self, epoch: int, batches: Iterable[Batch]) -> None:
        self.laps.on_epoch_start(epoch, batches)
        if self.warmup == 0:
            self._warmed()

    def on_step_end(self, done: StepEnd) -> None:
        self.taken += 1
        if self.taken < self.warmup:
            return
        if self.taken == self.warmup:
            self._warmed()
            return
        self.laps.on_step_end(done)
        start, size = self.chunks[0]
        if self.taken == start + size:
            self.chunks.pop(0)
            self.laps.on_epoch_end(0)
            self.waited.stop()
            if self.compute is not None:
                self.compute_times += self.compute(size)
            if self.chunks:
                self._chunk()

    def _warmed(self) -> None:
        self.laps.on_epoch_end(0)
        if self.compute is not None:
            self.compute(self.compute_warmup)  # traced and warm before the timing starts
        self.after_warmup()
        self.laps.wall = 0.0
        self._chunk()

    def _chunk(self) -> None:
        self.waited.start()
        self.laps.on_epoch_start(0, ())

    def timings(self) -> Timings:
        split = ComputePhase(tuple(self.compute_times)) if self.compute is not None else None
        return Timings(tuple(self.laps.times), self.laps.wall, split, self.waited.result())


def measure_host_steps(
    spec: WorkerSpec,
    rank: int,
    step: Callable[[], object],
    compute_only: Callable[[], object] | None,
) -> Timings:
    """A Keras worker's own `step` (it draws its batch and returns once the host has its
    loss) through the one loop, with the crash hook and the timing window, `compute_only`'s
    steps timed in loops of their own (None: no split)."""

    def looped(fn: Callable[[], object], components: list[Component], steps: int) -> None:
        batches = [(1, itertools.repeat((None, None)))]  # the step draws its own
        train_loop(
            lambda x, y: fn(),
            batches,
            components,
            Progress(),
            trainer="tensorflow",
            model=None,
            steps=steps,
            rank=rank,
        )

    def timed(fn: Callable[[], object]) -> Callable[[int], list[float]]:
        def compute(steps: int) -> list[float]:
            laps = Laps(None, lambda: None)
            looped(fn, [laps], steps)
            return laps.times

        return compute

    split = timed(compute_only) if compute_only is not None else None
    window = ScaleWindow(spec, spec.warmup_steps, compute=split)
    looped(step, [Crashing(rank), window], window.steps)
    return window.timings()
