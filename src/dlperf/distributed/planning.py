"""Planning a scaling study: its points (workers x comm x strategy x bucket size, series by
series), each point's batches, the names of its runs, and every check of the options that can
be made before a worker starts: the framework's strategies and communication, the batches,
the devices and cores of this host, and the extras (TensorFlow, Horovod) the study needs.
Those that need neither this host nor the node's place in the study (`check_portable`) are
also what a job file (--emit) is checked against before it is written (`check_job`).

Batch arithmetic: strong scaling keeps the global batch B and gives each of N workers B/N;
weak scaling keeps the per-worker batch b, so the global batch is N*b. A study may hold both
modes and several batches of each: every (mode, batch) is a series of points over the worker
counts (see dlperf.distributed.scaling).
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dlperf.analytic.devices import get_device
from dlperf.config import Experiment, ScaleConfig, ScaleJob, ScaleMode, load_job
from dlperf.distributed.launch import check_endpoint
from dlperf.distributed.scaling import point_name, series
from dlperf.errors import UserError
from dlperf.parsing import refuse_given
from dlperf.store.names import Made, at_most, check_made_names, given
from dlperf.system import usable_cores

BACKENDS = ("auto", "gloo", "nccl")
# One process per worker: DDP, MultiWorker and Horovod's bindings; dp and mirrored: one in all.
DATA_PARALLEL = ("ddp", "multiworker", "torch", "tensorflow")


@dataclass(frozen=True)
class Point:
    workers: int
    per_worker_batch: int
    global_batch: int
    comm: str
    strategy: str
    bucket_mb: float | None
    mode: ScaleMode | None = None  # None: a point of no series (scale max-batch's)

    @property
    def group(self) -> tuple[object, ...]:
        """The series whose base the point's speedup and efficiency are measured against."""
        return series(asdict(self))

    def label(self) -> str:
        return point_name(asdict(self))


def batch_split(mode: str, workers: int, batch: int | None) -> tuple[int, int]:
    """(per-worker batch, global batch) of one point; `batch` is the mode's (strong: global,
    weak: per worker)."""
    if mode == "strong":
        if batch is None:
            raise UserError("--mode strong needs --global-batch N", "or use --mode weak")
        if batch % workers:
            raise UserError(
                f"--global-batch {batch} does not split evenly over {workers} workers",
                "give a global batch divisible by every worker count",
            )
        return batch // workers, batch
    if batch is None:
        raise UserError("--mode weak needs --per-worker-batch N", "or use --mode strong")
    return batch, batch * workers


def resolve_backend(name: str) -> str:
    import torch  # here, as in tf_allreduce and plan: --emit checks the options without it

    if name not in BACKENDS:
        raise UserError(f"unknown backend '{name}'", f"use {', '.join(BACKENDS)}")
    if name == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if name == "nccl" and not torch.cuda.is_available():
        raise UserError("backend nccl needs CUDA GPUs, and none are available here", "use gloo")
    return name


def threads_per_worker(workers_per_node: int, cores: int) -> int:
    return max(1, cores // workers_per_node)


def check_threads(opts: ScaleConfig, per_node: int) -> None:
    """Refuse scale.threads_per_worker past this host's usable cores: one worker's threads
    as run.threads is refused (no way around it: 1,000 threads on 2 cores did not finish 3
    steps in 90 s), and threads x `per_node` workers unless --allow-oversubscribe."""
    threads, cores = opts.threads_per_worker, usable_cores()
    if threads is None:
        return
    if threads > cores:
        raise UserError(
            f"--threads-per-worker {threads}: {threads} threads asked for, but this host has "
            f"{cores} usable cores",
            f"ask for at most {cores}, or leave --threads-per-worker unset to split the cores "
            "between the workers",
        )
    if threads * per_node > cores and not opts.allow_oversubscribe:
        raise UserError(
            f"--threads-per-worker {threads} x {per_node} workers per node: "
            f"{threads * per_node} threads asked for, but this host has {cores} usable cores",
            f"ask for at most {max(1, cores // per_node)} threads per worker, leave "
            "--threads-per-worker unset, or use --allow-oversubscribe",
        )


def hourly_price(opts: ScaleConfig) -> float | None:
    """The price per worker-hour: price_per_hour, else the catalog price of the device."""
    if opts.device is None:
        return opts.price_per_hour
    entry = get_device(opts.device)  # a misspelt device fails even when a price is given
    if opts.price_per_hour is not None:
        return opts.price_per_hour
    if entry.price_per_hour_usd is None:
        raise UserError(f"device {entry.name} has no price", "give --price-per-hour")
    return entry.price_per_hour_usd


def check_options(opts: ScaleConfig) -> None:
    """What the config's own ranges cannot say and does not depend on this host or node (an
    emitted job file sets each node's rank and rendezvous from the job's environment)."""
    if (opts.steps is None) == (opts.epochs is None):
        raise UserError("give one of scale.steps and scale.epochs", "e.g. --steps 50")
    if opts.nnodes > 1 and "mirrored" in opts.strategy:  # before --emit writes a job
        raise UserError("--strategy mirrored runs in one process on one node", "use multiworker")
    if opts.nnodes > 1 and opts.framework == "horovod":
        raise UserError("--framework horovod runs on one node here (horovodrun starts remote "
                        "workers itself, over ssh)", "use --nnodes 1")  # fmt: skip
    hourly_price(opts)


def load_study(experiment: Path, sets: list[str], flags: dict[str, Any]) -> ScaleJob:
    """The study `dlperf scale` runs: the file at `experiment`, --set's `sets` and the scale
    options (`flags`, None where not given). A batch given on the command line for a mode
    the study does not run is refused: `--mode weak --per-worker-batch 16 --global-batch 64`
    ran the weak series alone and dropped the 64 without a word, exit 0. One the file gives
    stays a default (a file may hold both and the command line pick the mode)."""
    job = load_job(ScaleJob, experiment, sets, scale=flags)
    typed = {key for key, value in flags.items() if value is not None}
    typed |= {s.partition("=")[0].strip().removeprefix("scale.") for s in sets}
    modes = job.scale.modes()
    for mode, key in (("strong", "global_batch"), ("weak", "per_worker_batch")):
        if key in typed and mode not in modes:
            flag = "--" + key.replace("_", "-")
            raise UserError(
                f"{flag} goes with --mode {mode}, and the study's mode is {','.join(modes)}",
                "--mode weak,strong runs both series",
            )
    return job


TF_ALLREDUCE = {"mirrored": ("nccl", "hierarchical", "one-device"),
                "multiworker": ("auto", "ring", "nccl")}  # fmt: skip
TF_MODELS = ("resnet50", "smallcnn")


STRATEGIES = {"torch": ("ddp", "dp"), "tensorflow": ("mirrored", "multiworker"),
              "horovod": ("torch", "tensorflow")}  # fmt: skip
HOROVOD_COMM = ("allreduce", "fp16")


def strategies(opts: ScaleConfig) -> list[str]:
    """The strategies of the study (Horovod's: its bindings), each checked against its
    framework."""
    allowed = STRATEGIES[opts.framework]
    chosen: list[str] = [*opts.strategy] if opts.strategy else [allowed[0]]
    for name in chosen:
        if name not in allowed:
            raise UserError(
                f"--strategy {name} is not a {opts.framework} strategy",
                f"use {' | '.join(allowed)}",
            )
    return chosen


def tf_comms(opts: ScaleConfig, strategy: str, gpus: bool) -> list[str]:
    """The TensorFlow all-reduces of one strategy's points on workers with or without `gpus`
    (the strategy's default when none is given)."""
    valid = TF_ALLREDUCE[strategy]
    default = "auto" if strategy == "multiworker" else "nccl" if gpus else "one-device"
    return [a for a in opts.allreduce if a in valid] or [default]


def tf_allreduce(opts: ScaleConfig, strategy: str) -> list[str]:
    """The TensorFlow all-reduces of one strategy's points on this host."""
    import torch

    gpus = torch.cuda.is_available()
    mine = tf_comms(opts, strategy, gpus)
    if "nccl" in mine and not gpus:
        rest = [a for a in TF_ALLREDUCE[strategy] if a != "nccl"]
        raise UserError("--allreduce nccl needs GPUs, and none are available here",
                        f"use {' or '.join(rest)}")  # fmt: skip
    return mine


def check_tensorflow(model: str) -> None:
    """What a TensorFlow point needs of the experiment: one of its models."""
    if model not in TF_MODELS:
        raise UserError(f"model {model!r} has no TensorFlow version here",
                        f"use model.name = {' or '.join(TF_MODELS)}")  # fmt: skip


def check_horovod(opts: ScaleConfig, model: str, chosen: list[str]) -> None:
    """What the Horovod path needs of the options: its communication options, and a model
    of TensorFlow's for the TensorFlow binding (horovodrun: `plan`, on the host)."""
    for name in opts.comm:
        if name not in HOROVOD_COMM:
            raise UserError(f"--comm {name} is DDP's", f"horovod takes {' | '.join(HOROVOD_COMM)}")
    if "tensorflow" in chosen:
        check_tensorflow(model)


def check_tf_options(opts: ScaleConfig, model: str, chosen: list[str]) -> None:
    """What the TensorFlow path needs of the options: one of its models, no DDP options, and
    all-reduces of the strategies chosen."""
    check_tensorflow(model)
    if opts.bucket_mb or opts.comm != ["allreduce"]:
        raise UserError("--bucket-mb and --comm are DDP's; TensorFlow takes --allreduce")
    for name in opts.allreduce:
        if not any(name in TF_ALLREDUCE[s] for s in chosen):
            takes = "; ".join(f"{s} takes {' | '.join(TF_ALLREDUCE[s])}" for s in chosen)
            raise UserError(f"--allreduce {name} is not an all-reduce of --strategy "
                            f"{','.join(chosen)}", takes)  # fmt: skip


def check_portable(opts: ScaleConfig, model: str) -> list[str]:
    """The checks of a study's plan that need neither this host (its cores, GPUs, extras)
    nor this node's place in it (--node-rank, --rdzv: a job file gives each node its own),
    so that --emit makes them before it writes a job whose every node would refuse it: the
    options, each framework's, every worker count over the nodes and every point's batch
    split. The strategies chosen."""
    check_options(opts)
    chosen = strategies(opts)
    if opts.framework != "tensorflow":  # the torch and Horovod paths read no scale.allreduce
        hint = f"{opts.framework} takes --comm and --bucket-mb"
        refuse_given({"--allreduce": opts.allreduce}, "--framework tensorflow", hint)
    if opts.framework == "horovod":
        check_horovod(opts, model, chosen)
    if opts.framework == "tensorflow":
        check_tf_options(opts, model, chosen)
    if "dp" in chosen:
        if opts.nnodes > 1:
            raise UserError("--strategy dp runs in one process on one node", "use ddp")
        if opts.backend == "gloo":  # `plan` also refuses the gloo that auto is on a CPU host
            raise UserError("--strategy dp trains on the GPUs, not with --backend gloo",
                            "leave out --backend, or use ddp")  # fmt: skip
    for workers in opts.workers:
        if workers % opts.nnodes:
            raise UserError(f"{workers} workers do not split evenly over {opts.nnodes} nodes")
    for (mode, batch), workers in itertools.product(by_batch(opts), sorted(set(opts.workers))):
        batch_split(mode, workers, batch)
    return chosen


def by_batch(opts: ScaleConfig) -> list[tuple[ScaleMode, int | None]]:
    """The study's series: the modes in the order given, each mode's batches smallest first."""
    return [(mode, batch) for mode in opts.modes() for batch in opts.batches(mode) or (None,)]


def points_of(
    opts: ScaleConfig, chosen: list[str], comms: Callable[[str], Sequence[str]]
) -> list[Point]:
    """The points of the study, series by series, fewest workers first in each; `comms`: the
    communication of a strategy's points."""
    points = []
    for (mode, batch), workers, strategy in itertools.product(
        by_batch(opts), sorted(set(opts.workers)), chosen
    ):
        per_worker, global_batch = batch_split(mode, workers, batch)
        for comm, bucket in itertools.product(comms(strategy), opts.bucket_mb or (None,)):
            points.append(Point(workers, per_worker, global_batch, comm, strategy, bucket, mode))
    return points


def plan(opts: ScaleConfig, backend: str, model: str = "") -> list[Point]:
    """Every point of the study after checking this node's place in it, the options
    (`check_portable`) and this host: series by series (the modes in the order given,
    each mode's batches smallest first), fewest workers first in each."""
    import torch

    if opts.node_rank >= opts.nnodes:
        raise UserError(f"--node-rank {opts.node_rank} is not in 0..{opts.nnodes - 1}")
    if opts.nnodes > 1 and not opts.rdzv:
        raise UserError("--nnodes > 1 needs --rdzv HOST:PORT", "the address of node 0")
    chosen = check_portable(opts, model)
    if opts.framework == "horovod":
        from dlperf.distributed.hvd_launch import horovodrun

        if horovodrun() is None:
            raise UserError("--framework horovod needs Horovod, which is not installed",
                            "build it with `make horovod` (docs/scale.md#horovod)")  # fmt: skip
    if "dp" in chosen:
        if not torch.cuda.is_available():
            raise UserError("--strategy dp (DataParallel) needs GPUs; none here", "use ddp")
        if backend != "nccl":
            raise UserError(f"--strategy dp trains on the GPUs, not with --backend {backend}",
                            "leave out --backend, or use ddp")  # fmt: skip
        if max(opts.workers) > torch.cuda.device_count():
            raise UserError(f"--strategy dp: only {torch.cuda.device_count()} GPUs here")
    # A process per worker, each taking cores (MirroredStrategy's replicas share one).
    processes = any(s in DATA_PARALLEL for s in chosen)
    on_cpu = backend == "gloo" or (processes and not torch.cuda.is_available())
    for workers in opts.workers:
        per_node = workers // opts.nnodes  # even: check_portable
        if on_cpu and per_node > usable_cores() and not opts.allow_oversubscribe:
            raise UserError(
                f"{per_node} workers per node but this host has {usable_cores()} usable cores",
                "use fewer workers, more nodes, or --allow-oversubscribe",
            )
        # NCCL, and TensorFlow's MultiWorker processes on GPUs, take one GPU per worker.
        one_gpu_each = backend == "nccl" or ("multiworker" in chosen and torch.cuda.is_available())
        if one_gpu_each and per_node > torch.cuda.device_count():
            raise UserError(f"{per_node} workers per node but {torch.cuda.device_count()} GPUs")
        if backend != "nccl":  # the workers' threads (Study.threads): on GPUs, one each
            check_threads(opts, per_node if processes else 1)
    tensorflow = opts.framework == "tensorflow"
    points = points_of(opts, chosen, lambda s: tf_allreduce(opts, s) if tensorflow else opts.comm)
    # The extra itself, checked after every option so that a wrong option gets its own
    # message whether or not TensorFlow is installed.
    if (tensorflow or "tensorflow" in chosen) and importlib.util.find_spec("tensorflow") is None:
        asked = (
            "--framework tensorflow" if tensorflow else "--framework horovod --strategy tensorflow"
        )
        raise UserError(f"{asked} needs TensorFlow, which is not installed",
                        "pip install -e '.[tensorflow]'")  # fmt: skip
    # Last, once every option is right: a host's port, not an option.
    if opts.rdzv and opts.nnodes == 1 and backend in ("gloo", "nccl"):
        # torchrun's rendezvous store, which this study starts: whatever listens on its port
        # is another process's (of several nodes it may be another node's torchrun).
        check_endpoint(opts.rdzv)
    return points


def given_name(exp: Experiment) -> str:
    """The name a study's own are made from: run.name, else the model's."""
    return given(exp.run.name, exp.model.name)[0]


def study_name(exp: Experiment) -> str:
    return f"scale {given_name(exp)}"


def run_name(exp: Experiment, point: Point) -> str:
    return f"{given_name(exp)} {point.label()}"


def check_names(exp: Experiment, points: Sequence[Point]) -> None:
    """The study's name and every point's run name fit the store, checked before the study
    is recorded: the store checks a run's name only as it is written, after the point's first
    round, and a study of no runs was left behind. On every node, so that none waits on
    node 0 to fail."""
    name, source = given(exp.run.name, exp.model.name)
    made = [
        Made("study", study_name(exp), "the prefix 'scale '"),
        *(Made("run", run_name(exp, p), f"point label {p.label()!r}") for p in points),
    ]
    check_made_names(name, source, made, at_most("run.name"))


def check_job(job: ScaleJob, gpus: bool) -> None:
    """Refuse a study that a job file's nodes would, as far as can be told here: the checks
    of `check_portable` and the names of its runs (`gpus`: whether the job's nodes have GPUs,
    which a TensorFlow point's default all-reduce, and so its name, depends on)."""
    opts = job.scale
    chosen = check_portable(opts, job.experiment.model.name)
    tensorflow = opts.framework == "tensorflow"
    points = points_of(opts, chosen, lambda s: tf_comms(opts, s, gpus) if tensorflow else opts.comm)
    check_names(job.experiment, points)
