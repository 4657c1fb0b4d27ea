"""One rank of a scaling point, run under torchrun: `python -m dlperf.distributed.worker SPEC.json`.

The spec (a WorkerSpec, written by dlperf.distributed.study) names the experiment, the
per-worker batch, the steps, the backend and the communication options. The worker trains the
experiment's model wrapped in DistributedDataParallel with the training step of
`dlperf.engine.step.prepare`, so the experiment's optimizer, schedule, gradient clipping,
precision, memory format and compilation apply as in a plain run at the point's global batch.
The model starts from random weights (speed does not depend on their values; the parent has
written the resolution and statistics of model.weights into the experiment); a feature-extract
experiment freezes its backbone, so the backward pass stops at the head, DDP reduces only the
head's gradients and the backbone's batch norms stay in eval mode. It trains in the one
training loop (dlperf.engine.train_loop), whose components are the hooks, the replica's
memory-cap check, the profiled window (run.profile, after the warm-up, untimed), the crash
hook, the timing window (dlperf.distributed.window) and, once the steps are timed, a plain
run's checks that the loss stayed finite (`Divergence`) and that the model did not grow
(`GrowthCheck`): every step after the warm-up is timed, and (unless the point's hook already
is the no-op) a second replica under DDP's no-op communication hook, warmed up alike, in
alternating chunks of steps: the compute-only time the parent subtracts to get the exposed
communication. Every rank's figures are gathered to the launch's node and written as
`result.json` next to the spec by local rank 0 of the writing node, so the parent of a
multi-node run reads them without a shared file system. Beside it each rank writes
`rank-R.pid` as it starts (whole: the launcher stops workers by pid), `rank-R.training` once
past the warm-up (and the profiled window), `rank-R.error` (its traceback) if it fails, and
`rank-R.cpu` (the CPU seconds it used) where its CPU-time limit ran out (cpu_limit);
rank 0 writes `rank-0.warning`, one line, where the point trains other than asked (DDP told of
parameters without gradients: `unused_warning`).

The spec and the result are the records of dlperf.distributed.contracts; the crash hook
(DLPERF_SCALE_CRASH) is dlperf.distributed.crash's. The measured replica calls the hooks of
dlperf.engine.hooks (trainer "ddp") at the loop's step count. The Horovod worker's torch path
runs the same `Replica`s through the same `measure`.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from dlperf.config import Experiment
from dlperf.data import ImageData, load_data, make_loader
from dlperf.distributed.contracts import (
    ComputePhase,
    DdpStats,
    MainPhase,
    RankResult,
    WorkerSpec,
    write_ranks,
)
from dlperf.distributed.cpu_limit import leave_at_limit
from dlperf.distributed.window import Crashing, Laps, ScaleWindow, Timings, fail, write_pid
from dlperf.engine.build import build_model, start_weights
from dlperf.engine.checks import dry_backward, no_gradient
from dlperf.engine.hooks import Hooks, StepEnd
from dlperf.engine.loop import Diverged
from dlperf.engine.profiler import ProfileWindow, trace_name
from dlperf.engine.step import ModelGrew, TrainStep, WrongOutput, prepare, steps_per_epoch
from dlperf.engine.timers import PhaseTimer
from dlperf.engine.train_loop import Component, Progress, TimedBatches, train_loop
from dlperf.errors import (
    UserError,
    error_said,
    memory_limit,
    model_exited,
    model_frames,
    out_of_memory,
)
from dlperf.models.transfer import set_train_mode
from dlperf.parsing import one_line
from dlperf.paths import atomic_write
from dlperf.procs import restore_safepath
from dlperf.system import peak_memory_bytes, synchronize
from dlperf.timing import mark, seconds_from

# DDP logging data: sampled per-iteration times, in ns.
DDP_TIMES = (
    "avg_forward_compute_time",
    "avg_backward_compute_time",
    "avg_backward_comm_time",
    "avg_backward_compute_comm_overlap_time",
)
Mark = float | torch.cuda.Event  # a moment of the device's work (dlperf.timing.mark)
Found = tuple[int, int, float, float]  # a loss that is not finite: step, epoch, value, lr
# Whether this rank began to draw its batches (`batches`): memory that ran out before then,
# under a memory limit, was no batch's (see memory_failure).
_drawn = False


def comm_hook(name: str, model: DistributedDataParallel) -> None:
    """Register the named DDP communication hook (`allreduce` keeps DDP's built-in one)."""
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    if name == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif name == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif name == "noop":
        model.register_comm_hook(None, debugging_hooks.noop_hook)
    elif name == "powersgd":
        state = powersgd.PowerSGDState(
            process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2
        )
        model.register_comm_hook(state, powersgd.powerSGD_hook)


def batches(
    spec: WorkerSpec,
    exp: Experiment,
    data: ImageData,
    device: torch.device,
    rank: int,
    world: int,
) -> Any:
    """Endless (x, y) batches of rank `rank` of `world`: its shard of the training split
    (every world-th image from its rank), or random data of the model's input shape."""
    global _drawn
    _drawn = True
    batch = spec.per_worker_batch
    if spec.synthetic:
        g = torch.Generator().manual_seed(exp.run.seed * 1000 + rank)
        x = torch.randn(batch, *data.shape, generator=g).to(device)
        y = torch.randint(data.num_classes, (batch,), generator=g).to(device)
        while True:
            yield x, y
    shard = data.train.subset(torch.arange(rank, len(data.train), world))
    loader = make_loader(data, shard, exp.data, batch, device, exp.augment, exp.run.seed)
    if len(loader) == 0:
        raise ValueError(f"rank {rank}: per-worker batch {batch} exceeds its shard")
    epoch = 0
    while True:
        epoch += 1
        loader.set_epoch(epoch)
        yield from loader


class OverCap(MemoryError):
    """A replica's peak memory above the spec's memory cap: the batch's, never a limit's."""


def _in_import(e: BaseException) -> bool:
    """Whether `e` was raised while a module's body ran (a lazy import: DDP's of
    torch._dynamo), not in the training step's own code."""
    return any(
        frame.f_code.co_name == "<module>" for frame, _ in traceback.walk_tb(e.__traceback__)
    )


def memory_failure(e: BaseException, batch: int) -> tuple[str, bool]:
    """The one line of a rank that ran out of memory, and whether the batch is to blame. A
    MemoryError under a set address-space limit (`ulimit -v`, which every worker inherits)
    names the limit and its fix; raised before the rank drew a batch, or in an import, it is
    the limit's, not the batch's: under `ulimit -v 3400000` DDP's lazy import of
    torch._dynamo ran out in every worker, and max-batch took it for batch 32 not fitting."""
    said = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    limit = memory_limit() if isinstance(e, MemoryError) and not isinstance(e, OverCap) else ""
    if limit and (not _drawn or _in_import(e)):
        return (
            f"a worker ran out of memory before per-worker batch {batch} trained: {said}{limit}",
            False,
        )
    return f"out of memory at per-worker batch {batch}: {said}{limit}", True


class Replica(Component):
    """A model's training step and its batches (`source`'s, in the step's memory format,
    their wait marked on the step's timer), and, as a component of its loop, the checks
    after each step: past the spec's memory cap, a MemoryError. The DDP and Horovod workers'
    replicas alike."""

    def __init__(
        self, spec: WorkerSpec, model: nn.Module, step: TrainStep, source: Any, device: torch.device
    ) -> None:
        self.spec, self.model, self.train_step, self.device = spec, model, step, device
        self.batches = TimedBatches(source, self._collate, step.timer.mark)
        self.lr: float | None = None  # of the last step

    def _collate(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.to(memory_format=self.train_step.memory_format), y

    def on_step_end(self, done: StepEnd) -> None:
        self.lr = done.stepped.lr
        cap = self.spec.memory_cap_bytes
        # A CPU step is done here, and CUDA's allocator counts memory as the work is queued.
        if cap and peak_memory_bytes(self.device) > cap:
            raise OverCap(
                f"peak memory {peak_memory_bytes(self.device) / 2**30:.2f} GiB is above the "
                f"cap of {cap / 2**30:.2f} GiB"
            )

    def timed(self, steps: int, barrier: Callable[[], None]) -> list[float]:
        """The times of `steps` steps of this replica (the compute-only copy's), in a loop
        of their own timed by the window's `Laps`."""
        laps = Laps(self.device, barrier)
        train_loop(
            self.train_step,
            [(1, self.batches)],
            [self, laps],
            Progress(),
            trainer="compute-only",
            model=self.model,
            steps=steps,
        )
        return laps.times


class Phase(Replica):
    """One replica of the experiment's model under DDP with `comm` (or DataParallel), its
    training step and batches."""

    def __init__(
        self,
        spec: WorkerSpec,
        exp: Experiment,
        data: ImageData,
        device: torch.device,
        comm: str,
        timer: PhaseTimer | None = None,
    ) -> None:
        self.spec, self.device, self.comm = spec, device, comm
        model = build_model(exp, data, device)
        if spec.strategy == "ddp":  # before DDP, whose own check says nothing of the model
            same_network_on_every_rank(model, f"'{exp.model.name}'")
        start_weights(model, exp.model, exp.model.weights or "", None)  # freezes, if asked
        # The trained parameters (once frozen) the backward gives no gradient, which DDP
        # must be told of: a plain run trains such a model. The RNG stream left as it was.
        self.unused: list[str] = []
        if spec.strategy == "ddp":
            with torch.random.fork_rng([device] if device.type == "cuda" else []):
                mine = dry_backward(model, data.shape, f"'{exp.model.name}'", device)
            self.unused = unused_on_any_rank(mine)
        set_train_mode(model)  # a frozen backbone's batch norms stay in eval mode
        # At the point's global batch: the schedule runs as in a plain run of that batch.
        epoch = steps_per_epoch(len(data.train), spec.per_worker_batch * dist.get_world_size())
        step = prepare(
            model, exp.train, exp.run, device, epoch, wrap=self._wrap, timer=timer,
            classes=data.num_classes,
        )  # fmt: skip
        source = batches(spec, exp, data, device, dist.get_rank(), dist.get_world_size())
        super().__init__(spec, model, step, source, device)
        # per step, the forward's end and each gradient's ready mark: see watch_gradients
        self.ready: list[tuple[Mark, list[Mark]]] | None = None
        self._marks: list[Mark] = []
        self._forward_end: Mark = 0.0

    def _wrap(self, model: nn.Module) -> nn.Module:
        """`model` under DDP with the phase's communication hook, or DataParallel."""
        spec = self.spec
        if spec.strategy == "dp":
            self.wrapped: nn.Module = nn.DataParallel(model, device_ids=list(range(spec.gpus)))
            return self.wrapped
        kwargs: dict[str, Any] = {}
        if spec.bucket_mb:
            kwargs["bucket_cap_mb"] = spec.bucket_mb
        if self.device.type == "cuda":
            kwargs["device_ids"] = [self.device.index]
        if self.unused:  # else DDP waits for their gradients, failing the second step
            kwargs["find_unused_parameters"] = True
        ddp = DistributedDataParallel(model, **kwargs)
        ddp._set_ddp_runtime_logging_sample_rate(1)  # type: ignore[no-untyped-call]
        comm_hook(self.comm, ddp)
        self.wrapped = ddp
        return ddp

    def watch_gradients(self) -> None:
        """Mark, in every step, when each trained parameter's gradient is ready and when the
        model's forward returned (the backward starts right after the loss): what
        dlperf.distributed.overlap needs to place DDP's bucket all-reduces."""
        trained = [p for p in self.model.parameters() if p.requires_grad]
        self._marks = [0.0] * len(trained)
        self.ready = []

        # Marks of the device's work (CUDA events on a GPU, where a hook runs when the work
        # is queued, not done), read once the steps have been waited for. A gradient the
        # backward does not compute (a parameter the forward left unused) is ready when the
        # forward ends, as DDP marks it; the others' marks are set again in the backward.
        def forward_done(*_: Any) -> None:
            self._forward_end = mark(self.device)
            self._marks = [self._forward_end] * len(trained)

        def ready(index: int) -> Any:
            return lambda _: self._marks.__setitem__(index, mark(self.device))

        self.model.register_forward_hook(forward_done)
        for index, param in enumerate(trained):
            param.register_post_accumulate_grad_hook(ready(index))  # type: ignore[no-untyped-call]

    def on_step_end(self, done: StepEnd) -> None:
        if self.ready is not None:
            self.ready.append((self._forward_end, [*self._marks]))
        super().on_step_end(done)

    def measured(self, times: Timings) -> MainPhase:
        """The main replica's figures; every rank calls it (it broadcasts rank 0's weights)."""
        flat = torch.cat([p.detach().flatten() for p in self.model.parameters()])
        reference = flat.clone()
        dist.broadcast(reference, 0)
        return MainPhase(
            step_times_s=times.step_times_s,
            wall_s=times.wall_s,
            samples=len(times.step_times_s) * self.spec.per_worker_batch,
            replica_max_diff=float((flat - reference).abs().max()),
            grad_bytes=sum(
                p.numel() * p.element_size() for p in self.model.parameters() if p.requires_grad
            ),
            lr=self.lr,
            ddp=self._ddp(),
            contention=times.contention.to_dict() if times.contention else None,
        )

    def _ddp(self) -> DdpStats | None:
        if not isinstance(self.wrapped, DistributedDataParallel):
            return None
        logging = self.wrapped._get_ddp_logging_data()  # type: ignore[no-untyped-call]
        return DdpStats(
            {k: logging[k] for k in DDP_TIMES if k in logging},
            # what DDP itself registered for all-reduce (frozen parameters are not)
            logging.get("total_parameter_size_bytes"),
        )

    def compute_only(self, times: ComputePhase) -> ComputePhase:
        """The compute-only replica's step times and, per trained parameter, the median time
        over the timed steps its gradient was ready after the forward returned, and its
        bytes."""
        ready = self.ready or []
        timed = ready[len(ready) - len(times.step_times_s) :]
        if not timed:
            return times
        trained = [p for p in self.model.parameters() if p.requires_grad]
        seconds = [[seconds_from(end, m) for m in marks] for end, marks in timed]
        return ComputePhase(
            times.step_times_s,
            tuple(statistics.median(step) for step in zip(*seconds, strict=True)),
            tuple(p.numel() * p.element_size() for p in trained),
        )


Shapes = list[tuple[str, list[int]]]  # a network's parameters and buffers, named, in order


def network_shapes(model: nn.Module) -> Shapes:
    """`model`'s parameters, then its buffers, each named with its shape: what DDP needs to be
    alike on every rank (it matches parameters by position, then broadcasts rank 0's states)."""
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return [(name, list(t.shape)) for name, t in tensors]


def network_difference(mine: Shapes, theirs: Shapes) -> str:
    """Where network `mine` differs from `theirs` (its peer's), as `c.weight [9, 1, 3, 3] vs
    [8, 1, 3, 3]`: the first tensor of `mine` its peer lacks or holds at another shape, else
    the first of its peer's that `mine` lacks, else their order."""

    def shown(shape: list[int] | None) -> str:
        return "none" if shape is None else str(shape)

    them, me = dict(theirs), dict(mine)
    for name, shape in mine:
        if them.get(name) != shape:
            return f"{name} {shown(shape)} vs {shown(them.get(name))}"
    for name, shape in theirs:
        if name not in me:
            return f"{name} none vs {shape}"
    return "the same tensors in another order"


def same_network_on_every_rank(model: nn.Module, what: str) -> None:
    """Raise the one line that says model `what`'s factory built a different network on a
    rank than on rank 0, on every rank alike (each then leaves, none waiting on a peer):
    DDP's own check failed the point in torch's "appears not to match" traceback, its
    frames dlperf's and torch's, with no word of the model (a factory that reads RANK)."""
    everyone: list[Shapes] = gathered(network_shapes(model))
    first = everyone[0]
    rank = next((r for r, theirs in enumerate(everyone) if theirs != first), None)
    if rank is None:
        return
    raise UserError(
        f"model {what} builds a different network on rank {rank} than on rank 0 "
        f"({network_difference(everyone[rank], first)}): its factory builds a different "
        "network on each call (nondeterministic: a size drawn at random or read from the "
        "environment, such as RANK, the clock or the process id)",
        "make the factory build the same network in every process (pass such a size in "
        "[model] kwargs)",
    )


def unused_on_any_rank(unused: list[str]) -> list[str]:
    """The trained parameters some rank's backward gives no gradient, of this rank's `unused`
    and every other's, each where not every rank leaves it so named with the ranks that do:
    DDP is told to find them on every rank or on none. A forward that differs by rank (one
    that reads RANK) had it told on one rank alone, whose reducer skipped the bucket that its
    peer waited on in backward: no word until gloo's 30-minute timeout."""
    everyone: list[list[str]] = gathered(unused)

    def named(name: str) -> str:
        ranks = [str(rank) for rank, theirs in enumerate(everyone) if name in theirs]
        if len(ranks) == len(everyone):
            return name
        return f"{name} on rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}"

    return [named(name) for name in dict.fromkeys(n for theirs in everyone for n in theirs)]


def unused_warning(what: str, unused: list[str]) -> str:
    """The one line that says model `what` trains under DDP with unused-parameter detection,
    for the trained parameters `unused` its backward gives no gradient (five named): a
    study's warning, which the CLI prints after "warning: "."""
    return (
        f"{no_gradient(what, unused, 5)}: DDP runs with find_unused_parameters=True, which "
        "traverses the autograd graph every step; use them in the forward, or freeze them "
        "(requires_grad = False), to train without it"
    )


class Divergence(Component):
    """A plain run's loss check (dlperf.engine.loop.Diverged) in a scaling point's loop. Each
    step's loss stays on the device, since reading it would make the host wait inside the
    timed steps, and is read once the loop has ended. `gather` (every rank's finding, in
    rank order) makes every rank raise the same Diverged, the earliest step any rank's loss
    was not finite at: whichever rank's line the study reads names where it began, and no
    rank is left waiting in a collective for a peer that left. Its line advises by the run's
    `grad_clip` and `precision`, naming the train.lr set (`lr`), as a plain run's does."""

    def __init__(
        self,
        gather: Callable[[Found | None], list[Found | None]],
        grad_clip: float | None = None,
        precision: str | None = None,
        lr: float | None = None,
    ) -> None:
        self.gather = gather
        self.grad_clip, self.precision, self.lr = grad_clip, precision, lr
        # about half a KiB of device memory a step on a GPU (a caching allocator's block)
        self.losses: list[tuple[int, torch.Tensor, float]] = []

    def on_step_end(self, done: StepEnd) -> None:
        self.losses.append((done.step, done.stepped.loss, done.stepped.lr))

    def on_epoch_end(self, epoch: int) -> None:
        values = torch.stack([loss for _, loss, _ in self.losses]).float().tolist()
        kept = zip(self.losses, values, strict=True)
        mine = next(
            ((step, epoch, v, lr) for (step, _, lr), v in kept if not math.isfinite(v)), None
        )
        self.losses.clear()
        found = [f for f in self.gather(mine) if f is not None]
        if found:
            step, epoch, value, lr = min(found, key=lambda f: f[0])
            said = lr if self.lr is None else self.lr
            raise Diverged(
                step, epoch, value, said, grad_clip=self.grad_clip, precision=self.precision
            )


class GrowthCheck(Component):
    """A plain run's epoch-end check that the model holds what the optimizer was built from
    (TrainStep.check_not_grown) in a scaling point's loop, once its steps are done: a layer
    its forward made past the worker's dry checks never trained, and the point finished
    without a word. `steps`: the main replica's and the compute-only copy's. `gather` (every
    rank's finding, in rank order) makes every rank raise the same ModelGrew, as Divergence
    does, so that no rank waits in a collective for a peer that left; growth on some ranks
    alone (a forward that reads RANK) names them."""

    def __init__(
        self, steps: Sequence[TrainStep], gather: Callable[[str | None], list[str | None]]
    ) -> None:
        self.steps, self.gather = steps, gather

    def on_epoch_end(self, epoch: int) -> None:
        changes = (step.held.changed(step.model) for step in self.steps)
        found = self.gather(next((c for c in changes if c is not None), None))
        ranks = [rank for rank, changed in enumerate(found) if changed is not None]
        if not ranks:
            return
        said = str(found[ranks[0]])
        if len(ranks) < len(found):
            said += f" on rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}"
        raise ModelGrew(self.steps[0].model, said)


def alone(mine: Found | None) -> list[Found | None]:
    """A rank's finding among its peers' where they cannot be gathered (Horovod's)."""
    return [mine]


@dataclass(frozen=True)
class Launch:
    """Where a scaling point's replicas train: `trainer` (the hooks' name for it), this
    process's rank of `world`, the barrier that starts and ends every timed stretch, and
    how a rank's object is gathered from every rank, in rank order."""

    trainer: str
    rank: int
    world: int
    barrier: Callable[[], None]
    gather: Callable[[Any], list[Any]] = alone


def measure(
    spec: WorkerSpec,
    exp: Experiment,
    launch: Launch,
    main: Replica,
    hooks: Hooks,
    profile: ProfileWindow,
    compute: Replica | None = None,
    after_warmup: Callable[[], None] = lambda: None,
) -> Timings:
    """A scaling point's steps: the one training loop over `main`, with its `hooks`, the
    `profile` window after the warm-up, the crash hook, the timing window alternating
    with `compute`'s steps (dlperf.distributed.window) and, once the steps are timed, the
    loss check and the growth check (of both replicas)."""
    rank, world, barrier = launch.rank, launch.world, launch.barrier
    split = (lambda steps: compute.timed(steps, barrier)) if compute else None
    divergence = Divergence(
        launch.gather, main.train_step.grad_clip, exp.run.precision, exp.train.lr
    )
    warmup = spec.warmup_steps + exp.run.profile.steps  # the profiled steps are not timed
    window = ScaleWindow(spec, warmup, main.device, barrier, split, after_warmup)
    replicas = [main] if compute is None else [main, compute]
    growth = GrowthCheck([r.train_step for r in replicas], launch.gather)
    with profile:
        train_loop(
            main.train_step,
            [(1, main.batches)],
            [hooks, main, profile, Crashing(rank), window, divergence, growth],
            Progress(),
            trainer=launch.trainer,
            model=main.model,
            steps=window.steps,
            rank=rank,
            world=world,
        )
    return window.timings()


def run(spec: WorkerSpec, directory: Path) -> RankResult:
    """Warm up, then alternate chunks of timed steps of the point and of its compute-only
    copy (dlperf.distributed.window)."""
    exp = Experiment.model_validate(spec.experiment)
    rank, local_rank = dist.get_rank(), int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if spec.backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    data = load_data(exp.data)
    path = directory / trace_name(f"rank{rank}")
    profile = ProfileWindow(exp.run.profile, device, spec.warmup_steps, path)
    timer = PhaseTimer(device, enabled=False, labels=profile.labels)  # labels, times nothing
    hooks = Hooks.from_env()
    main = Phase(spec, exp, data, device, spec.comm, timer)
    if main.unused and rank == 0:  # the point's warning, for the study to say
        said = unused_warning(f"'{exp.model.name}'", main.unused)
        atomic_write(directory / "rank-0.warning", said)
    hooks.start("ddp", main.model)
    compute = None
    if spec.compute_split and spec.comm != "noop" and spec.strategy == "ddp":
        compute = Phase(spec, exp, data, device, "noop")
        compute.watch_gradients()

    def barrier() -> None:
        synchronize(device)
        dist.barrier()

    def started() -> None:
        # Past warm-up, every rank has been through DDP's collectives: the launch is up.
        atomic_write(directory / f"rank-{rank}.training", "")

    launch = Launch("ddp", rank, dist.get_world_size(), barrier, gathered)
    times = measure(spec, exp, launch, main, hooks, profile, compute, started)
    return RankResult(
        rank=rank,
        host=os.uname().nodename,
        pid=os.getpid(),
        world_size=dist.get_world_size(),
        main=main.measured(times),
        compute=compute.compute_only(times.compute) if compute and times.compute else None,
    )


def gathered(mine: Any) -> list[Any]:
    """Every rank's `mine`, in rank order."""
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def fail_in_one_line(directory: Path, rank: int, line: str) -> NoReturn:
    """Leave a rank that failed through the model's own fault: `line` says it all, so the
    study stores and says it (`rank-R.failure`) rather than a traceback into dlperf's code;
    `rank-R.error` too, so that the launcher still sees which rank failed first. Exits at
    once, as `fail` does, for the same reasons; the study, not the worker, says the line."""
    (directory / f"rank-{rank}.failure").write_text(line)
    (directory / f"rank-{rank}.error").write_text(line + "\n")
    os._exit(1)


def model_raised(e: BaseException, rank: int) -> str | None:
    """The point's error where `e` came out of the user's model file (its forward raised, on
    this rank alone or on every rank): "worker rank R failed: the model raised ...", then the
    frames from the model file's first on, as `dlperf run` says a model's error; None where
    no frame is the model file's. The error's last traceback lines were DDP's and torch's
    Module frames above the model's, read as a fault of torch's or dlperf's."""
    if not (walked := model_frames(e)):
        return None
    said = error_said(e)  # a model's exception whose own __str__ raises is told too
    frames = traceback.format_list(walked)
    head = f"worker rank {rank} failed: the model raised {one_line(said)}"
    return "\n".join([head, *(frame.rstrip("\n") for frame in frames)])


@record
def main(argv: list[str] | None = None) -> None:
    restore_safepath()
    spec_path = Path((argv or sys.argv[1:])[0])
    spec = WorkerSpec.read(spec_path)
    directory = spec_path.parent
    rank = int(os.environ["RANK"])
    write_pid(directory, rank)
    leave_at_limit(directory, rank)  # its CPU-time limit's SIGXCPU stops dlperf, not a core dump
    torch.set_num_threads(spec.threads)
    try:
        dist.init_process_group(spec.backend)
        everyone = gathered(run(spec, directory))
        if spec.writer and int(os.environ.get("LOCAL_RANK", "0")) == 0:
            write_ranks(directory / "result.json", everyone)
        # Tear down together, and free the DDP replicas (their reducers sit in reference
        # cycles) while the process group still exists: otherwise a rank can abort at exit
        # with "terminate called without an active exception" (seen with gloo in CI).
        dist.barrier()
        gc.collect()
        dist.destroy_process_group()
        # Even so, a rank whose results are written could still abort in the interpreter's
        # own teardown (a C++ thread destroyed while joinable, no Python frame left: seen
        # under stress-ng), and torchrun then fails the point. Nothing is left to do, so
        # leave without that teardown, as the failure path below does.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    except (Diverged, WrongOutput, UserError) as e:
        # The model's fault, or the user's (a factory that fails in the workers alone): one
        # line, as a plain run says it (a UserError with its hint, as the CLI prints it).
        fail_in_one_line(directory, rank, str(e))
    except SystemExit as e:
        # Not an Exception: without this the worker leaves with the model's own exit code and
        # torchrun's account, which never says that the model ended it (as a plain run does).
        fail_in_one_line(directory, rank, model_exited(e.code, "during training"))
    except Exception as e:
        if out_of_memory(e):
            line, its_batch = memory_failure(e, spec.per_worker_batch)
            if not its_batch:  # the limit's: the point failed, not for its batch's memory
                fail_in_one_line(directory, rank, line)
            (directory / f"rank-{rank}.oom").write_text(line)
        elif (raised := model_raised(e, rank)) is not None:
            traceback.print_exc()  # the whole of it stays in the launch's log
            fail_in_one_line(directory, rank, raised)
        # Tearing down the process group, or freeing DDP's reducer at exit, can abort this
        # process (SIGABRT, seen on a busy host), and a rank killed by a signal is blamed
        # before the rank that failed first.
        fail(directory, rank)


if __name__ == "__main__":
    main()
