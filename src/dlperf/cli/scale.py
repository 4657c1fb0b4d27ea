"""`dlperf scale`: scaling studies over workers and nodes on torch.distributed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from dlperf.cli import console, outputs
from dlperf.cli.app import Json, app, default_command_group, open_store, set_option
from dlperf.cli.shortcuts import Flag, with_flags
from dlperf.errors import UserError
from dlperf.study_stop import StudyStop

if TYPE_CHECKING:  # dlperf.config loads pydantic: only when a command runs
    from dlperf.config import ScaleJob
    from dlperf.distributed.allreduce_study import AllreduceStudy
    from dlperf.distributed.study import StudyResult
    from dlperf.store import RunStore


# The keys of [scale] that have a flag (dlperf.cli.shortcuts), in the order --help lists them.
FLAGS = {
    "workers": Flag(str, "Worker counts, e.g. 1,2,4 (total)."),
    "mode": Flag(str, "strong (fixed global batch) | weak | weak,strong (both)."),
    "global_batch": Flag(str, "Strong scaling batch(es), e.g. 256 or 128,256."),
    "per_worker_batch": Flag(str, "Weak scaling batch(es), e.g. 32 or 32,128,512."),
    "steps": Flag(int, "Timed steps per point."),
    "epochs": Flag(int, "Timed epochs per point (or --steps)."),
    "warmup_steps": Flag(int, "Untimed steps first."),
    "repeat": Flag(int, "Rounds: measure every point R times, interleaved (default 3)."),
    "threads_per_worker": Flag(
        int, "CPU threads of every worker (default: cores / the most workers per node)."
    ),
    "synthetic": Flag(bool, "Random data of the model's input shape (system throughput)."),
    "backend": Flag(str, "auto | gloo | nccl."),
    "comm": Flag(str, "allreduce | fp16 | bf16 | powersgd | noop (comma list)."),
    "framework": Flag(str, "torch | tensorflow | horovod."),
    "strategy": Flag(
        str,
        "torch: ddp | dp (GPUs); tensorflow: mirrored | multiworker; horovod: torch | tensorflow.",
    ),
    "allreduce": Flag(
        str, "tensorflow: nccl | hierarchical | one-device (mirrored), auto | ring | nccl."
    ),
    "bucket_mb": Flag(str, "DDP bucket size(s) in MB (horovod: fusion threshold)."),
    "comm_split": Flag(bool, "Re-run under the no-op hook (compute only).", negatable=True),
    "price_per_hour": Flag(float, "Price per worker-hour."),
    "device": Flag(str, "Catalog device whose price to use."),
    "on_failure": Flag(str, "continue | stop."),
    "allow_oversubscribe": Flag(bool, "Allow more workers per node than cores."),
    "nnodes": Flag(int, "Nodes taking part."),
    "node_rank": Flag(int, "This node's rank (0 stores)."),
    "rdzv": Flag(str, "HOST:PORT of the c10d rendezvous."),
    "plots": Flag(bool, "Save figures as artifacts.", negatable=True),
    "memory_cap_gb": Flag(float, "On CPU: a worker's peak memory that fails a batch."),
}
# Each command's flags, from FLAGS.
RUN = [key for key in FLAGS if key != "memory_cap_gb"]
MAX_BATCH = ["workers", "memory_cap_gb", "warmup_steps", "synthetic", "backend",
             "allow_oversubscribe", "plots"]  # fmt: skip
ALLREDUCE = ["workers", "backend", "allow_oversubscribe"]

Found = TypeVar("Found")


def _emit(kind: str, out: Path | None, text: str) -> None:
    """Print the job file `text` of `kind`, or write it to `out`."""
    from dlperf.distributed.cloudjobs import described
    from dlperf.paths import atomic_write  # a stop leaves the earlier file whole, not cut

    if out is None:  # soft_wrap: a line wrapped at the console's width splits a command
        console.out.print(text, end="", soft_wrap=True)
        return
    atomic_write(out, text)
    console.err.print(f"wrote {out}")
    if line := described(kind, text):  # what the platforms share, as this one says it
        console.err.print(line)


def _print_table(result: StudyResult) -> None:
    if result.study_id is None:
        console.err.print(
            f"this node ran its workers of {len(result.rows)} point(s); node 0 stores the results"
        )
        return
    from dlperf.distributed.study_tables import every_table, notes, problems

    console.print_tables(every_table(result))
    for line in notes(result):
        console.out.print(line, soft_wrap=True)
    for line in problems(result):
        console.err.print(line)


def _print_allreduce(result: AllreduceStudy, as_json: bool) -> None:
    from dlperf.distributed.allreduce_study import lines, table
    from dlperf.distributed.scaling import workers_said
    from dlperf.distributed.study_tables import failed

    if not console.printed_json(as_json, result.to_dict()):
        console.print_tables([table(result)])
        for line in lines(result):
            console.out.print(line)
        if result.ring_model is None:
            console.warn(f"no ring model fitted: {result.fit_error}")
    for failure in result.failures:
        console.err_line(failed(workers_said(failure.workers), failure.error))
    if result.failures:
        raise typer.Exit(1)


scale_app = typer.Typer(
    cls=default_command_group("run"),
    help="Scaling studies over workers and nodes on torch.distributed: `dlperf scale FILE` is "
    "short for `dlperf scale run FILE`.\n\n"
    "Example: dlperf scale examples/scale_digits_weak.toml --workers 1,2 --steps 50",
    no_args_is_help=True,
)
app.add_typer(scale_app, name="scale")

EXPERIMENT = typer.Argument(
    None, help="Experiment TOML file (its [scale] section: the study).", show_default=False
)
SCALE_SET = set_option("scale.steps=50")


def _need(experiment: Path | None) -> Path:
    if experiment is None:
        raise UserError("give an experiment file", "e.g. examples/scale_digits_weak.toml")
    return experiment


@scale_app.command("run")
@with_flags(FLAGS, RUN)
def run(
    experiment: Path = EXPERIMENT,
    set_: list[str] = SCALE_SET,
    profile: bool = typer.Option(
        False,
        "--profile",
        help="Trace each rank's steps with torch.profiler after the warm-up (run.profile): the "
        "measured compute/communication split; dlperf runs trace RUN.",
    ),
    emit: str = typer.Option(
        None, "--emit", help="Write a job file instead: slurm|kubernetes|sagemaker|vertex|azureml."
    ),
    out: Path = outputs.out_file(None, "--emit: file to write (default stdout)."),
    image: str = typer.Option(
        None, "--image", help="--emit but slurm: container image [default: dlperf:latest]."
    ),
    gpus_per_node: int = typer.Option(None, "--gpus-per-node", help="--emit: GPUs per node."),
    instance_type: str = typer.Option(
        None, "--instance-type", help="--emit sagemaker|vertex|azureml: machine type."
    ),
    output_uri: str = typer.Option(
        None, "--output-uri", help="--emit sagemaker|vertex|azureml: s3://, gs://, azureml://."
    ),
    role: str = typer.Option(None, "--role", help="--emit sagemaker: IAM role ARN."),
    as_json: Json = False,
    as_csv: bool = typer.Option(
        False, "--csv", help="Print the course's tables as CSV: workers x batch sizes."
    ),
    **flags: Any,
) -> None:
    """Scale an experiment over 1..N DDP workers launched with torchrun, point by point:
    throughput, speedup, efficiency, compute vs exposed communication, cost.

    The study is the file's [scale] section. The options from --workers to --no-plots are
    short for --set scale.KEY=VALUE (KEY: the option's name with _ for -; comma lists become
    lists); `dlperf config keys` explains every key, `dlperf config show` shows the defaults.
    --emit writes the study as a job file (its nodes run this command line) instead.

    Example: dlperf scale examples/scale_digits_weak.toml --workers 1,2 --steps 50
    """
    from dlperf.distributed.jobfiles import check_job_options, study_job
    from dlperf.distributed.planning import load_study

    if as_csv and as_json:
        raise UserError("--csv prints a scaling study's tables", "not with --json")
    cloud = {"instance_type": instance_type, "output_uri": output_uri, "role": role}
    check_job_options(emit, out, image, gpus_per_node, cloud)  # before the study's own checks
    # Flags after --set: the --nnodes/--node-rank/--rdzv a job file appends win on every node.
    sets = [*set_, "run.profile.enabled=true"] if profile else set_
    job = load_study(_need(experiment), sets, flags)
    if emit is not None:
        _emit(emit, out, study_job(emit, sys.argv[1:], job, gpus_per_node, image, cloud))
        return
    result = _study(job, as_json, as_csv)
    if any(r.status == "failed" for r in result.rows):
        raise typer.Exit(1)


@scale_app.command("max-batch")
@with_flags(FLAGS, MAX_BATCH)
def max_batch(
    experiment: Path = EXPERIMENT,
    set_: list[str] = SCALE_SET,
    as_json: Json = False,
    **flags: Any,
) -> None:
    """The largest per-worker batch that fits: grow it x4 from 32 at one worker count until
    a size runs out of memory (CUDA, or --memory-cap-gb on CPU) or is more than a worker's
    share of the training images; each size trains two epochs and times the second. The
    last line says which of them stopped it; the figures draw time per step and throughput
    against the batch.

    Example: dlperf scale max-batch examples/scale_digits_weak.toml --workers 1 --memory-cap-gb 4
    """
    from dlperf.config import ScaleJob, load_job
    from dlperf.distributed.max_batch import find_max_batch
    from dlperf.distributed.study import record_figures
    from dlperf.distributed.study_tables import document
    from dlperf.report.max_batch import save_max_batch_figures

    job = load_job(ScaleJob, _need(experiment), set_, scale=flags)
    # Not _study: the search's figures are against the batch, and its stop is in --json.
    search, store, where = _measure(job, find_max_batch)
    result = search.study
    console.tell(result.warnings)
    artifacts = []
    if result.study_id is not None and job.scale.plots:  # only node 0 stores and draws
        saved = save_max_batch_figures(store, result.study_id, result.rows, where, search.answer())
        artifacts = record_figures(store, saved)
    doc = document(result, artifacts) | {"stopped": search.stopped()}
    if not console.printed_json(as_json, doc):
        _print_table(result)
        console.tell([], *artifacts)
        console.out.print(search.answer(), soft_wrap=True)
    # Out of memory is the answer; any other failure leaves the search unfinished.
    failed = any(r.status == "failed" and not r.out_of_memory for r in result.rows)
    if result.max_per_worker_batch is None or failed:
        raise typer.Exit(1)


@scale_app.command("allreduce")
@with_flags(FLAGS, ALLREDUCE)
def allreduce(
    sizes: str = typer.Option("1KB..64MB", "--sizes", help="Message sizes, e.g. 1KB..64MB."),
    iters: int = typer.Option(20, "--iters", help="Timed iterations per size."),
    as_json: Json = False,
    **flags: Any,
) -> None:
    """The all-reduce microbenchmark: time per message size over each worker count, the
    alpha-beta ring model fitted to it, and the compute lost to an all-reduce in flight.
    Studies on this backend then draw the ring model beside their exposed communication.

    Example: dlperf scale allreduce --workers 2 --sizes 1KB..64MB
    """
    from dlperf.config import ScaleJob, load_job
    from dlperf.distributed.allreduce_study import check_study, run_allreduce_study

    opts = load_job(ScaleJob, None, [], scale=flags).scale
    check_study(opts.workers, sizes, opts.backend, iters, opts.allow_oversubscribe)  # no store yet
    store = open_store()
    where = store.artifact_dir("dlperf_runs")  # study ids repeat across stores
    with StudyStop("allreduce", None, True, console.err_line) as said, console.reporter() as rep:
        said.watch(store, "allreduce")  # a stop names the study made here, as `scale run`'s
        result = run_allreduce_study(store, opts.workers, sizes, opts.backend, where, iters, 5,
                                     opts.allow_oversubscribe, rep)  # fmt: skip
    _print_allreduce(result, as_json)


def _study(job: ScaleJob, as_json: bool, as_csv: bool) -> StudyResult:
    """Run the study `job`, draw its figures, print it (the JSON document, the course's tables
    as one CSV, or the tables; on a node but the first: that node 0 stores them), tell them."""
    from dlperf.distributed.study import record_figures, run_study
    from dlperf.distributed.study_tables import course_csv, document

    result, store, where = _measure(job, run_study)
    console.tell(result.warnings)
    artifacts = []
    if result.study_id is not None and job.scale.plots:  # only node 0 stores and draws
        from dlperf.report.scaling import save_study_figures

        saved = save_study_figures(store, result.study_id, result.rows, where)
        artifacts = record_figures(store, saved)
    if console.printed_json(as_json, document(result, artifacts)):
        return result
    if as_csv and result.study_id is not None:
        columns, rows = course_csv(result)
        console.print_csv([columns, *rows], lineterminator="\n")
    else:
        _print_table(result)
    console.tell([], *artifacts)
    return result


def _measure(job: ScaleJob, run: Callable[..., Found]) -> tuple[Found, RunStore, Path]:
    """What `run` (a study or the batch search) finds for `job`, its store and files' home."""
    from dlperf.distributed.planning import study_name

    store = open_store()
    where = store.artifact_dir(job.experiment.run.out_dir)  # study ids repeat across stores
    with StudyStop("scale", None, True, console.err_line) as said, console.reporter() as rep:
        said.watch(store, study_name(job.experiment) if job.scale.node_rank == 0 else None)
        return run(job, store, where, rep), store, where
