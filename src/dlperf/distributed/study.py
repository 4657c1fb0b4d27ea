"""Scaling studies: one launch per point (workers x comm x strategy x bucket size), every
point a run of one `scale` study in the store. Planning and the checks of the options are
dlperf.distributed.planning's; a point's figures and their definitions
dlperf.distributed.summary's; the predicted communication dlperf.distributed.predictions';
the records the study, the launchers and the workers exchange dlperf.distributed.contracts'.

A point measures speed, so its workers start from random weights of the experiment's shape:
model.weights only sets the images' resolution and statistics (resolved here, where the store
is, and written into the experiment the workers get and the runs store), and a feature-extract
experiment trains with its backbone frozen, as a run would.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from dlperf import stopping
from dlperf.config import ScaleJob
from dlperf.data.augment import check_augment
from dlperf.distributed.contracts import PointRow, PointSummary, RankResult, WorkerSpec, read_ranks
from dlperf.distributed.hvd_launch import run_horovod
from dlperf.distributed.launch import Rendezvous, ensure_open_files, run_torchrun
from dlperf.distributed.planning import (
    DATA_PARALLEL,
    Point,
    check_names,
    hourly_price,
    plan,
    resolve_backend,
    run_name,
    study_name,
    threads_per_worker,
)
from dlperf.distributed.predictions import (
    CommReference,
    comm_reference,
    overlap_prediction,
    prediction_error,
    ring_basis,
    ring_prediction,
)
from dlperf.distributed.scaling import EFFICIENCY, untrustworthy
from dlperf.distributed.summary import (
    add_relative,
    main_steps,
    median_round,
    summarize,
    with_chunks,
)
from dlperf.distributed.tf_launch import Cluster, run_tf
from dlperf.distributed.tf_worker import ignored_settings
from dlperf.distributed.trace_split import rank_traces, with_trace_split
from dlperf.engine.build import as_run, build_model
from dlperf.engine.checks import DRY_BATCH, check_batch_trains
from dlperf.engine.step import steps_per_epoch
from dlperf.errors import UserError
from dlperf.formatting import few
from dlperf.paths import replaced, writing
from dlperf.progress import NullReporter, Reporter
from dlperf.store import Recording, RunStore
from dlperf.store.deleting import say_deleted
from dlperf.system import system_info, usable_cores

WORKER_MODULE = "dlperf.distributed.worker"


@dataclass(frozen=True)
class StudyResult:
    """A study as it ran: its points' rows (node 0's summarised), the warnings, where it ran
    in words, the ring model its predictions used, and how its points compare. The document
    `dlperf scale --json` prints is dlperf.distributed.study_tables.document."""

    study_id: int | None
    rows: list[PointRow]
    warnings: list[str]
    label: str
    ring: dict[str, Any] | None = None
    max_per_worker_batch: int | None = None
    # mode -> the efficiencies reported for its series (key -> definition in words); empty:
    # points not compared
    efficiency: dict[str, dict[str, str]] = field(default_factory=dict)


class Study:
    """What every point of one study shares, and how one point is run and recorded."""

    def __init__(
        self,
        job: ScaleJob,
        store: RunStore,
        out_dir: Path,
        reporter: Reporter,
        compare: bool = True,
    ) -> None:
        exp, self.opts, self.store = job.experiment, job.scale, store
        self.compare = compare  # speedup and efficiency within each series
        self.out_dir, self.reporter = out_dir, reporter
        self.tensorflow = self.opts.framework == "tensorflow"
        torch_ddp = self.opts.framework == "torch"
        self.backend = resolve_backend(self.opts.backend) if torch_ddp else self.opts.framework
        self.price = hourly_price(self.opts)
        self.cores = usable_cores()
        self.exp, self.data, self.warnings = as_run(exp, store, reporter)
        if not self.tensorflow:
            # The model each torch worker builds, built once here: one that cannot train as a
            # classifier is one line before any point is recorded, not every worker's traceback.
            model = build_model(self.exp, self.data, torch.device("cpu"))
            if torch_ddp:
                check_complex_comm(model, self.opts.comm, self.exp.model.name)
        if self.tensorflow or "tensorflow" in self.opts.strategy:
            self.warnings += ignored_settings(self.exp)
        if self.opts.framework == "horovod" and self.exp.run.channels_last:
            self.warnings.append(
                "Horovod ignores run.channels_last = True: it all-reduces only contiguous "
                "tensors, so its points train in the default memory format"
            )
        self.train_images = len(self.data.train)
        self.writer = self.opts.node_rank == 0
        self.study_id: int | None = None
        self.ring: dict[str, Any] | None = None
        self.reference: CommReference | None = None
        self.cluster: Cluster | None = None  # the nodes of a multi-node TensorFlow study
        self.bases: dict[tuple[object, ...], PointSummary] = {}
        self.rows: list[PointRow] = []
        # The most workers any point of the study runs on one node (`plan_threads`): every
        # point's workers get the threads a worker of that point has, so that a 1-worker
        # point is not handed the threads of two.
        self.most_per_node: int | None = None
        # By the point's index: the ranks of each round measured so far (scale.repeat), and
        # its run, open from its first round to its last; `open_runs` holds them all, so
        # that leaving the study (`with Study(...)`) marks those still open.
        self.measured: dict[int, list[list[RankResult]]] = {}
        self.records: dict[int, tuple[ExitStack, Recording]] = {}
        # By the point's index: its launch of the round now running (directory, row), which
        # a twin of a later series reads rather than launching its own (`run_point`).
        self.launched: dict[int, tuple[Path, PointRow]] = {}
        self.open_runs = ExitStack()

    def __enter__(self) -> Study:
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        if isinstance(exc[1], KeyboardInterrupt):
            # A point stopped by `runs delete --force` says so, as `run` does, read before
            # its run is marked killed (the delete waits for that, then deletes it): the
            # study's stop line alone read as Ctrl-C's.
            ids = [run.id for _, run in self.records.values()]
            say_deleted(self.store, ids, self.reporter.log)
        return self.open_runs.__exit__(*exc)

    def per_node(self, point: Point) -> int:
        """The point's worker processes on each node (one for a one-process strategy)."""
        return point.workers // self.opts.nnodes if point.strategy in DATA_PARALLEL else 1

    def plan_threads(self, points: Sequence[Point]) -> None:
        """Fix the threads per worker of a series of `points` before the first runs."""
        self.most_per_node = max((self.per_node(p) for p in points), default=None)

    def threads(self, per_node: int) -> int:
        """Threads per worker: scale.threads_per_worker if set, else the usable cores split
        between the most workers per node of the study (one on GPUs: the device computes)."""
        if self.backend not in ("gloo", "tensorflow", "horovod"):
            return 1
        if self.opts.threads_per_worker is not None:
            return self.opts.threads_per_worker
        return threads_per_worker(max(per_node, self.most_per_node or 0), self.cores)

    def spec(self, point: Point, threads: int, steps: int) -> WorkerSpec:
        """What the point's workers run."""
        opts = self.opts
        return WorkerSpec(
            experiment=self.exp.to_dict(),
            # dp splits the global batch itself; mirrored replicas take a worker's batch each
            per_worker_batch=point.global_batch
            if point.strategy == "dp"
            else point.per_worker_batch,
            warmup_steps=opts.warmup_steps,
            steps=steps,
            synthetic=opts.synthetic,
            backend=self.backend,
            comm=point.comm,
            bucket_mb=point.bucket_mb,
            strategy=point.strategy,
            gpus=point.workers if point.strategy == "dp" else 0,
            threads=threads,
            compute_split=opts.comm_split and point.workers > 1,
            writer=self.writer,
            replicas=point.workers,
            shape=self.data.shape,
            classes=self.data.num_classes,
        )

    def keras(self, point: Point) -> bool:
        """Whether the point trains a Keras model: tf.distribute, or Horovod's TF binding."""
        return self.tensorflow or point.strategy == "tensorflow"

    def shard_error(self, point: Point) -> UserError | None:
        if self.opts.synthetic or point.strategy == "dp":
            return None
        if self.keras(point) and not self.data.in_memory:
            return UserError(
                f"TensorFlow reads the training images from memory, and {self.data.name} "
                "streams them from files",
                "use --synthetic or an in-memory data set (e.g. digits, mnist5k, cifar10, npz)",
            )
        shard = self.train_images // point.workers
        if point.per_worker_batch <= shard:
            return None
        return UserError(
            f"per-worker batch {point.per_worker_batch} is larger than a worker's share "
            f"({shard} images) of {self.data.name} at {point.workers} workers",
            "use a smaller batch or --synthetic",
        )

    def keras_data(self, where: Path) -> Path:
        """The training split as the TensorFlow workers read it (they must not load torch's
        data sets: TensorFlow and torchvision crash one process), written once per study:
        uint8 images channels-last, labels, the normalisation's mean and std."""
        path = where / "train.npz"
        if not path.exists():
            import numpy as np

            images = self.data.train.images
            assert images is not None  # shard_error refuses streamed data sets first
            with writing(path), replaced(path) as part:
                np.savez(part, images=images.permute(0, 2, 3, 1).numpy(),
                         labels=self.data.train.labels.numpy(), mean=np.array(self.data.mean),
                         std=np.array(self.data.std))  # fmt: skip
        return path

    def open(self) -> None:
        if self.tensorflow and self.opts.nnodes > 1:
            self.reporter.task(f"waiting for {self.opts.nnodes} nodes at {self.opts.rdzv}")
            assert self.opts.rdzv is not None  # plan refuses nnodes > 1 without it
            self.cluster = Cluster.meet(self.opts.nnodes, self.opts.node_rank, self.opts.rdzv)
        if self.writer:
            self.study_id = self.store.create_study(study_name(self.exp), "scale")
            self.reference = comm_reference(self.store, self.backend)
            self.ring = self.reference.ring_model if self.reference else None

    def _workers(self, point: Point, warn: bool) -> tuple[int, int]:
        """The point's workers per node and threads per worker; `warn`: say (once a point)
        when they oversubscribe the cores."""
        per_node = self.per_node(point)
        threads = self.threads(per_node)
        oversubscribed = self.backend == "gloo" and per_node * threads > self.cores
        if oversubscribed and warn:
            self.warnings.append(
                f"{point.label()}: {per_node} workers x {threads} threads > {self.cores} cores: "
                "oversubscribed, timings are pessimistic"
            )
        return per_node, threads

    def _prepare(
        self, index: int, point: Point, steps: int, extra: dict[str, Any], round_: str = ""
    ) -> tuple[Path, int, int]:
        """Write the point's spec.json into its directory (`p{index}`, a round's under it);
        the directory, workers per node and threads per worker."""
        per_node, threads = self._workers(point, not round_)
        spec = replace(self.spec(point, threads, steps), **extra)
        where = f"scale-{self.study_id}" if self.writer else "scale-node"
        directory = self.out_dir / where / f"p{index}" / round_
        directory.mkdir(parents=True, exist_ok=True)
        if self.keras(point) and not self.opts.synthetic:
            spec = replace(spec, data_file=str(self.keras_data(self.out_dir / where)))
        spec.write(directory / "spec.json")
        return directory, per_node, threads

    def _record(self, index: int, point: Point, threads: int) -> Recording:
        """The point's run in the store, opened at its first round and kept open (running)
        until its last (`_close`): a stop in any round marks it killed."""
        if index not in self.records:
            stack = self.open_runs.enter_context(ExitStack())
            run = stack.enter_context(
                self.store.new_run(
                    name=run_name(self.exp, point),
                    kind="scale",
                    config={"experiment": self.exp.to_dict(), "point": asdict(point)},
                    config_hash=self.exp.config_hash(),
                    system={**system_info(None, threads), "backend": self.backend},
                    study_id=self.study_id,
                )
            )
            self.records[index] = (stack, run)
        return self.records[index][1]

    def _close(self, index: int) -> None:
        """Mark the point's run as its Recording says (finished, or failed)."""
        stack, _ = self.records[index]
        stack.close()

    def run_point(
        self,
        index: int,
        total: int,
        point: Point,
        steps: int,
        extra: dict[str, Any],
        round_: int = 0,
        rounds: int = 1,
        twin: int | None = None,
    ) -> PointRow:
        """Launch round `round_` of `rounds` of one point; after its last, store it (node 0)
        with every round and return its row (an earlier round's row has no summary). A
        failed round fails the point: its row is final. With `twin`, the index of a point
        of this round that launched what this one would (`twins`), launch nothing: take that
        launch as this point's, and store and compare it in this point's own series."""
        opts = self.opts
        last = round_ == rounds - 1
        counted = f"round {round_ + 1}/{rounds}, " if rounds > 1 else ""
        said = f"{counted}point {index + 1}/{total}: {point.label()}"
        if twin is None:
            directory, per_node, threads = self._prepare(
                index, point, steps, extra, "" if last else f"round{round_ + 1}"
            )
            self.reporter.task(said)
        else:
            per_node, threads = self._workers(point, last)  # warned as _prepare warns
            directory, launched = self.launched[twin]
            self.reporter.task(f"{said}: measured by point {twin + 1}'s launch")

        def start(run_id: int | None) -> PointRow:
            if twin is None:
                return self._start(point, directory, per_node, threads, run_id, index)
            return replace(launched, run_id=run_id, mode=point.mode)

        if not self.writer:
            row = start(None)
            self.launched[index] = (directory, row)
            if last or row.status == "failed":
                self.rows.append(row)
            return row
        run = self._record(index, point, threads)
        row = start(run.id)
        self.launched[index] = (directory, row)
        if row.status == "failed":
            run.fail(str(row.error), summary=row.to_dict())
            self._close(index)
            self.rows.append(row)
            return row
        measured = self.measured.setdefault(index, [])
        measured.append(read_ranks(directory / "result.json"))
        if not last:
            return row
        per_round = [
            summarize(point, each, opts.nnodes, threads, self.backend, self.train_images,
                      self.price)
            for each in measured
        ]  # fmt: skip
        pick = median_round(per_round)
        ranks = measured[pick]  # the figures, predictions and metrics are the median round's
        summary = replace(
            per_round[pick],
            rounds=len(per_round) if rounds > 1 else None,
            throughput_rounds=tuple(s.throughput for s in per_round) if rounds > 1 else None,
        )
        if self.compare:
            summary = add_relative(summary, self.bases.get(point.group))
            self.bases.setdefault(point.group, summary)
        exposed = summary.comm_exposed_s
        ring = ring_prediction(self.ring, point.workers, summary.grad_bytes, point.bucket_mb)
        overlap, basis = overlap_prediction(self.reference, point.workers, ranks, point.bucket_mb)
        summary = replace(
            summary,
            ring_predicted_s=ring,
            ring_basis=ring_basis(self.reference) if ring is not None else None,
            ring_error=prediction_error(ring, exposed),
            overlap_predicted_s=overlap,
            overlap_basis=basis,
            overlap_error=prediction_error(overlap, exposed),
        )
        traced = rank_traces(directory) if self.exp.run.profile.enabled else []  # last round's
        if traced:
            summary, split = with_trace_split(summary, traced)
            self.store.log_metrics(run.id, split)
            for path in traced:
                self.store.add_artifact(run.id, "trace", path)
        steps_s = main_steps(ranks)
        if opts.synthetic:
            summary = with_chunks(summary, steps_s, opts.chunks)
        base = self.bases.get(point.group)
        base_workers, base_wait = (base.workers, base.cpu_wait_share) if base else (None, None)
        concerns = untrustworthy(
            summary, base_workers, steps_s, base_wait=base_wait,
            base_contended=base.cpu_contended if base else None,
        )  # fmt: skip
        for concern in concerns:
            self.warnings.append(f"{point.label()}: {concern.evidence}; {concern.fix}")
        note = "; ".join(c.evidence for c in concerns) or None
        summary = replace(summary, reliable=not concerns, reliability_note=note)
        self.store.log_metrics(run.id, rank_metrics(ranks))
        run.summary = summary.to_dict()
        self._close(index)
        self.reporter.log(
            f"{point.label()}: {summary.throughput:.1f} samples/s, "
            f"step {summary.step_time_s * 1e3:.1f} ms"
        )
        row = replace(row, summary=summary)
        self.rows.append(row)
        return row

    def _start(
        self,
        point: Point,
        directory: Path,
        per_node: int,
        threads: int,
        run_id: int | None,
        index: int,
    ) -> PointRow:
        """Launch the point's workers on this node and wait for them."""
        opts = self.opts
        if self.tensorflow:
            launch = run_tf(directory, per_node, threads, self.cluster, index)
        elif self.backend == "horovod":
            launch = run_horovod(directory, per_node, threads, point.bucket_mb)
        else:
            launch = run_torchrun(
                directory,
                per_node,
                WORKER_MODULE,
                [str(directory / "spec.json")],
                Rendezvous(opts.nnodes, opts.node_rank, opts.rdzv),
                env={"OMP_NUM_THREADS": str(threads)},
            )
        row = PointRow(run_id, point.workers, opts.nnodes, point.mode, point.per_worker_batch,
                       point.global_batch, point.comm, point.strategy, point.bucket_mb,
                       tuple(launch.pids), "finished")  # fmt: skip
        # Rank 0's word about the model (parameters DDP must look for): said once a study
        warned = directory / "rank-0.warning"
        if warned.is_file() and (line := warned.read_text()) not in self.warnings:
            self.warnings.append(line)
        if launch.returncode != 0:
            oom = sorted(directory.glob("rank-*.oom"))
            # The model's own fault (a worker's fail_in_one_line): its line, not a traceback.
            said = sorted(directory.glob("rank-*.failure"))
            error = oom[0].read_text() if oom else said[0].read_text() if said else launch.error
            row = replace(row, status="failed", error=error, out_of_memory=bool(oom))
            self.reporter.log(f"{point.label()} failed: {str(error).splitlines()[0]}")
        return row

    def check_augment(self, points: Sequence[Point]) -> None:
        """The [augment] the torch points' workers apply to their shards (not to --synthetic's
        random batches, not Keras's) refused as `dlperf run` refuses it, before anything is
        stored: one that blanks every image, or M copies of a per-worker batch beyond memory."""
        batches = [p.per_worker_batch for p in points if not self.keras(p)]
        if batches and not self.opts.synthetic:
            fewer = "--per-worker-batch (weak) or --global-batch (strong)"
            check_augment(self.exp.augment, self.data.shape, max(batches), self.data.name, fewer)

    def check_batches(self, points: Sequence[Point]) -> None:
        """Each per-worker batch below the dry checks' own must train (batch norm refuses one
        image): one line before anything is stored, as a sweep's up-front check says it,
        rather than every worker's traceback and a failed point."""
        small = sorted({p.per_worker_batch for p in points if p.per_worker_batch < DRY_BATCH})
        if self.tensorflow or not small:
            return
        cpu = torch.device("cpu")
        model = build_model(self.exp, self.data, cpu)
        for batch in small:
            try:
                check_batch_trains(model, batch, self.data.shape, f"'{self.exp.model.name}'", cpu)
            except UserError as e:
                raise UserError(
                    e.message.replace(
                        f"train.batch_size {batch}", f"a per-worker batch of {batch}"
                    ),
                    f"use a per-worker batch of {DRY_BATCH} or more, or a model without batch norm",
                ) from None

    def result(self) -> StudyResult:
        label = "single-host emulation" if self.opts.nnodes == 1 else f"{self.opts.nnodes} nodes"
        if any(r.strategy == "mirrored" for r in self.rows) and not torch.cuda.is_available():
            label += "; MirroredStrategy's replicas are logical CPU devices sharing the cores"
        modes = dict.fromkeys(r.mode for r in self.rows) if self.compare else {}
        efficiency = {mode: EFFICIENCY[mode] for mode in modes if mode in EFFICIENCY}
        return StudyResult(
            self.study_id, self.rows, self.warnings, label, self.ring, efficiency=efficiency
        )  # fmt: skip


COMPRESSING_HOOKS = ("powersgd", "fp16", "bf16")
"""DDP hooks that treat a gradient bucket as real: PowerSGD sizes its low-rank all-reduces
from a complex bucket's shape as if real, so the ranks' collectives disagree (a hang, or
gloo's "collective mismatch" abort); fp16 and bf16 cast it to a real dtype, dropping the
imaginary parts."""


def check_complex_comm(model: torch.nn.Module, comms: Sequence[str], name: str) -> None:
    """Refuse a compressing --comm for a model that trains complex parameters."""
    hooks = [c for c in comms if c in COMPRESSING_HOOKS]
    if not hooks:
        return
    complex_ = [
        f"{n} ({str(p.dtype).removeprefix('torch.')})"
        for n, p in model.named_parameters()
        if p.requires_grad and p.is_complex()
    ]
    if complex_:
        raise UserError(
            f"--comm {hooks[0]} cannot compress complex gradients: model {name} trains "
            f"{few(complex_)}",
            "use --comm allreduce for this model",
        )


def run_study(
    job: ScaleJob, store: RunStore, out_dir: Path, reporter: Reporter | None = None
) -> StudyResult:
    """Run every point of the study `job.scale`; only node 0 (of a multi-node study) writes
    the store."""
    study = Study(job, store, out_dir, reporter or NullReporter())
    opts = study.opts
    points = plan(opts, study.backend, study.exp.model.name)
    check_names(study.exp, points)
    for point in points:
        error = study.shard_error(point)
        if error is not None:
            raise error
    study.check_augment(points)
    study.check_batches(points)
    study.plan_threads(points)
    if not study.tensorflow and study.backend != "horovod":  # torchrun's: before it is stored
        most = study.most_per_node or 1
        ensure_open_files(most, most * opts.nnodes)
    study.open()

    def steps(point: Point) -> int:
        if opts.steps is not None:
            return opts.steps
        assert opts.epochs is not None  # plan refuses neither or both
        return opts.epochs * steps_per_epoch(study.train_images, point.global_batch)

    # Rounds interleaved across the points (each point once per round, in the same order),
    # so that a burst of load hits every point alike; a point that failed is not run again.
    # A point that launches what an earlier one does (weak and strong share a few) takes
    # that one's launch of the round.
    failed: set[int] = set()
    twin = twins(points, steps)
    with study:
        for round_, (index, point) in itertools.product(range(opts.repeat), enumerate(points)):
            if index in failed:
                continue
            row = study.run_point(index, len(points), point, steps(point), {}, round_, opts.repeat,
                                  twin.get(index))  # fmt: skip
            if row.status == "failed":
                if opts.on_failure == "stop":
                    break
                failed.add(index)
    result = study.result()
    # Every point is stored: the study's outcome is decided, and one stop from now on (as its
    # figures are drawn, its document printed) does not unsay it, as `dlperf run`'s stored
    # run exits 0; a second one ends what is left, 128 + the first (it exited 143).
    stopping.settle()
    return result


def twins(points: Sequence[Point], steps: Callable[[Point], int]) -> dict[int, int]:
    """index -> the index of the first point whose launch is the same as this later one's:
    the same workers, batches, comm, strategy, bucket size and steps in another mode's series
    (--mode weak,strong: strong's B at N workers is weak's B/N per worker at N). The worker
    spec holds no mode, so one launch measures both."""
    first: dict[tuple[Point, int], int] = {}
    found = {}
    for index, point in enumerate(points):
        key = (replace(point, mode=None), steps(point))
        found[index] = first.setdefault(key, index)
    return {index: twin for index, twin in found.items() if twin != index}


def record_figures(store: RunStore, saved: list[tuple[int, str, Path]]) -> list[str]:
    """Record each figure a study's report saved, (run, kind, path), as an artifact of its run
    (the report only reads the store); their paths, as the output names them."""
    for run_id, kind, path in saved:
        store.add_artifact(run_id, kind, path)
    return [str(path) for _, _, path in saved]


def rank_metrics(ranks: Sequence[RankResult]) -> list[tuple[str, int, float]]:
    """Every rank's step times as metrics: rankR/step_time_s and rankR/compute_step_time_s."""
    metrics = []
    for r in ranks:
        phases = [("step_time_s", r.main.step_times_s)]
        if r.compute is not None:
            phases.append(("compute_step_time_s", r.compute.step_times_s))
        for name, times in phases:
            metrics += [(f"rank{r.rank}/{name}", i, t) for i, t in enumerate(times, 1)]
    return metrics
