"""`dlperf scale`: scaling studies over workers and nodes on torch.distributed."""

from __future__ import annotations

import csv
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dlperf.cli import console
from dlperf.cli.app import Json, app, default_command_group, open_store, set_option
from dlperf.errors import UserError

if TYPE_CHECKING:  # dlperf.config loads pydantic: only when a command runs
    from dlperf.config import ScaleConfig, ScaleJob
    from dlperf.distributed.study import StudyResult


def _emit(
    kind: str,
    out: Path | None,
    opts: ScaleConfig,
    gpus_per_node: int | None,
    image: str,
    job_name: str,
    cloud: dict[str, str | None],
) -> None:
    """Write the job file that runs this command once on each of `opts.nnodes` nodes."""
    import json

    import yaml

    from dlperf.distributed.cloudjobs import CLOUD, shared
    from dlperf.distributed.jobfiles import job_file

    text = job_file(kind, sys.argv[1:], opts, gpus_per_node, image, job_name, cloud)
    if out is None:
        # soft_wrap: a line wrapped at the console's width would split a command in two
        console.out.print(text, end="", soft_wrap=True)
        return
    out.write_text(text)
    console.err.print(f"wrote {out}")
    if kind in CLOUD:  # what the platforms share, as this one says it
        job = json.loads(text) if kind != "azureml" else yaml.safe_load(text)
        fields = shared(kind, job)
        console.err.print(
            f"{fields['instance count']} x {fields['instance type']} running {fields['image']}; "
            f"output: {fields['output location'] or 'the job default'}"
        )


def _print_table(result: StudyResult) -> None:
    if result.study_id is None:
        console.err.print(
            f"this node ran its workers of {len(result.rows)} point(s); node 0 stores the results"
        )
        return
    from dlperf.distributed import study_tables, trace_split

    traced = trace_split.table(result.rows)
    tables = study_tables.course_tables(result) + study_tables.tables(result)
    console.print_tables([*tables, *([traced] if traced else [])])
    console.out.print(
        "ms per step, median (min-max) of the slowest rank; comm = exposed communication, "
        "ring = ring-model all-reduce, overlap = the exposed part the bucket/overlap model "
        "predicts; busbw GB/s"
    )
    for line in study_tables.definitions(result):
        console.out.print(line, soft_wrap=True)
    for line in study_tables.findings(result):
        console.out.print(line)
    if study_tables.missing_ring(result):
        console.err.print(
            "hint: no stored all-reduce benchmark for this backend, so no ring-model column; "
            "run `dlperf scale allreduce --workers 2`"
        )
    for failure in study_tables.failures(result):
        console.err.print(failure)


def _print_allreduce(result: dict[str, Any], as_json: bool) -> None:
    if not console.printed_json(as_json, result):
        console.print_table(
            f"all-reduce study {result['study_id']} ({result['backend']})",
            ["workers", "bytes", "time (us)", "algbw GB/s", "busbw GB/s", "CPU wait"],
            [
                [
                    r["workers"],
                    r["bytes"],
                    r["time_s"] * 1e6,
                    r["algbw_gbps"],
                    r["busbw_gbps"],
                    None if (w := r.get("cpu_wait_share")) is None else f"{w:.0%}",
                ]
                for r in result["rows"]
            ],
        )  # a marked study's "unreliable: N workers: NOTE" was said as it ran
        ring = result["ring_model"]
        if ring:
            console.out.print(
                f"ring model T = 2(n-1)a + 2(n-1)/n S/B: a = {ring['alpha_s'] * 1e6:.1f} us, "
                f"B = {ring['bandwidth_bytes_per_s'] / 1e9:.3g} GB/s, "
                f"rms error {ring['rmse_pct']:.1f}% over {ring['n_points']} points"
            )
        else:
            console.warn(f"no ring model fitted: {result['fit_error']}")
        for n, cost in result["overlap_cost"].items():
            sizes = ", ".join(
                f"{r['bytes'] / 2**20:g} MiB" for r in result["overlap"] if r["workers"] == n
            )
            console.out.print(
                f"overlap cost at {n} workers: {cost:.2f} s of compute lost per s of all-reduce "
                f"in flight (measured at {sizes})"
            )
    for failure in result["failures"]:
        console.err.print(f"{failure['workers']} workers failed:\n{failure['error']}")
    if result["failures"]:
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
# Shortcuts for keys of [scale] that more than one subcommand takes.
WORKERS = typer.Option(None, "--workers", help="Worker counts, e.g. 1,2,4 (total).")
BACKEND = typer.Option(None, "--backend", help="auto | gloo | nccl.")
SYNTHETIC = typer.Option(
    None, "--synthetic", help="Random data of the model's input shape (system throughput)."
)
WARMUP_STEPS = typer.Option(None, "--warmup-steps", help="Untimed steps first.")
OVERSUBSCRIBE = typer.Option(
    None, "--allow-oversubscribe", help="Allow more workers per node than cores."
)
PLOTS = typer.Option(None, "--plots/--no-plots", help="Save figures as artifacts.")


def _need(experiment: Path | None) -> Path:
    if experiment is None:
        raise UserError("give an experiment file", "e.g. examples/scale_digits_weak.toml")
    return experiment


@scale_app.command("run")
def run(
    experiment: Path = EXPERIMENT,
    set_: list[str] = SCALE_SET,
    workers: str = WORKERS,
    mode: str = typer.Option(
        None, "--mode", help="strong (fixed global batch) | weak | weak,strong (both)."
    ),
    global_batch: str = typer.Option(
        None, "--global-batch", help="Strong scaling batch(es), e.g. 256 or 128,256."
    ),
    per_worker_batch: str = typer.Option(
        None, "--per-worker-batch", help="Weak scaling batch(es), e.g. 32 or 32,128,512."
    ),
    steps: int = typer.Option(None, "--steps", help="Timed steps per point."),
    epochs: int = typer.Option(None, "--epochs", help="Timed epochs per point (or --steps)."),
    warmup_steps: int = WARMUP_STEPS,
    repeat: int = typer.Option(
        None, "--repeat", help="Rounds: measure every point R times, interleaved (default 3)."
    ),
    threads_per_worker: int = typer.Option(
        None,
        "--threads-per-worker",
        help="CPU threads of every worker (default: cores / the most workers per node).",
    ),
    synthetic: bool = SYNTHETIC,
    backend: str = BACKEND,
    comm: str = typer.Option(
        None, "--comm", help="allreduce | fp16 | bf16 | powersgd | noop (comma list)."
    ),
    framework: str = typer.Option(None, "--framework", help="torch | tensorflow | horovod."),
    strategy: str = typer.Option(
        None,
        "--strategy",
        help="torch: ddp | dp (GPUs); tensorflow: mirrored | multiworker; horovod: torch | "
        "tensorflow.",
    ),
    allreduce: str = typer.Option(
        None,
        "--allreduce",
        help="tensorflow: nccl | hierarchical | one-device (mirrored), auto | ring | nccl.",
    ),
    bucket_mb: str = typer.Option(
        None, "--bucket-mb", help="DDP bucket size(s) in MB (horovod: fusion threshold)."
    ),
    comm_split: bool = typer.Option(
        None, "--comm-split/--no-comm-split", help="Re-run under the no-op hook (compute only)."
    ),
    price_per_hour: float = typer.Option(None, "--price-per-hour", help="Price per worker-hour."),
    device: str = typer.Option(None, "--device", help="Catalog device whose price to use."),
    on_failure: str = typer.Option(None, "--on-failure", help="continue | stop."),
    allow_oversubscribe: bool = OVERSUBSCRIBE,
    nnodes: int = typer.Option(None, "--nnodes", help="Nodes taking part."),
    node_rank: int = typer.Option(None, "--node-rank", help="This node's rank (0 stores)."),
    rdzv: str = typer.Option(None, "--rdzv", help="HOST:PORT of the c10d rendezvous."),
    plots: bool = PLOTS,
    profile: bool = typer.Option(
        False,
        "--profile",
        help="Trace each rank's steps with torch.profiler after the warm-up (run.profile): the "
        "measured compute/communication split; dlperf runs trace RUN.",
    ),
    emit: str = typer.Option(
        None,
        "--emit",
        help="Write the job that runs this study on --nnodes nodes instead: slurm | kubernetes "
        "| sagemaker | vertex | azureml.",
    ),
    out: Path = typer.Option(None, "--out", help="--emit: file to write (default stdout)."),
    image: str = typer.Option("dlperf:latest", "--image", help="--emit: container image."),
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
) -> None:
    """Scale an experiment over 1..N DDP workers launched with torchrun, point by point:
    throughput, speedup, efficiency, compute vs exposed communication, cost.

    The study is the file's [scale] section. The options from --workers to --no-plots are
    short for --set scale.KEY=VALUE (KEY: the option's name with _ for -; comma lists become
    lists); `dlperf config keys` explains every key, `dlperf config show` shows the defaults.
    --emit writes the study as a job file (its nodes run this command line) instead of
    running it: a job file is the study, run elsewhere, so it takes the study's options.

    Example: dlperf scale examples/scale_digits_weak.toml --workers 1,2 --steps 50
    """
    from dlperf.config import ScaleJob, load_job
    from dlperf.distributed.planning import check_options
    from dlperf.distributed.study import run_study

    if as_csv and as_json:
        raise UserError("--csv prints a scaling study's tables", "not with --json")
    # Flags after --set: the --nnodes/--node-rank/--rdzv a job file appends win on every node.
    sets = [*set_, "run.profile.enabled=true"] if profile else set_
    flags = {
        "workers": workers, "mode": mode, "global_batch": global_batch,
        "per_worker_batch": per_worker_batch, "steps": steps, "epochs": epochs,
        "warmup_steps": warmup_steps, "repeat": repeat, "threads_per_worker": threads_per_worker,
        "synthetic": synthetic, "backend": backend, "comm": comm, "framework": framework,
        "strategy": strategy, "allreduce": allreduce,
        "bucket_mb": bucket_mb, "comm_split": comm_split, "price_per_hour": price_per_hour,
        "device": device, "on_failure": on_failure, "allow_oversubscribe": allow_oversubscribe,
        "nnodes": nnodes, "node_rank": node_rank, "rdzv": rdzv, "plots": plots,
    }  # fmt: skip
    job = load_job(ScaleJob, _need(experiment), sets, scale=flags)
    if emit is not None:
        check_options(job.scale)  # a job file must not carry options its nodes would refuse
        cloud: dict[str, str | None] = {
            "instance_type": instance_type,
            "output_uri": output_uri,
            "role": role,
        }
        name = job.experiment.run.name or "dlperf"
        _emit(emit, out, job.scale, gpus_per_node, image, name, cloud)
        return
    result = _study(job, run_study, as_json, as_csv)
    if any(r.status == "failed" for r in result.rows):
        raise typer.Exit(1)


@scale_app.command("max-batch")
def max_batch(
    experiment: Path = EXPERIMENT,
    set_: list[str] = SCALE_SET,
    workers: str = WORKERS,
    memory_cap_gb: float = typer.Option(
        None, "--memory-cap-gb", help="On CPU: a worker's peak memory that fails a batch."
    ),
    warmup_steps: int = WARMUP_STEPS,
    synthetic: bool = SYNTHETIC,
    backend: str = BACKEND,
    allow_oversubscribe: bool = OVERSUBSCRIBE,
    plots: bool = PLOTS,
    as_json: Json = False,
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
    from dlperf.distributed.study_tables import document
    from dlperf.report.max_batch import save_max_batch_figures

    flags = {
        "workers": workers, "memory_cap_gb": memory_cap_gb, "warmup_steps": warmup_steps,
        "synthetic": synthetic, "backend": backend, "allow_oversubscribe": allow_oversubscribe,
        "plots": plots,
    }  # fmt: skip
    job = load_job(ScaleJob, _need(experiment), set_, scale=flags)
    # Not _study: the search's figures are against the batch, and its stop is in --json.
    store = open_store()
    where = store.artifact_dir(job.experiment.run.out_dir)  # study ids repeat across stores
    with console.reporter() as rep:
        search = find_max_batch(job, store, where, rep)
    result = search.study
    for warning in result.warnings:
        console.warn(warning)
    artifacts = []
    if result.study_id is not None and job.scale.plots:  # only node 0 stores and draws
        artifacts = save_max_batch_figures(
            store, result.study_id, result.rows, where, search.answer()
        )
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
def allreduce(
    workers: str = WORKERS,
    backend: str = BACKEND,
    sizes: str = typer.Option("1KB..64MB", "--sizes", help="Message sizes, e.g. 1KB..64MB."),
    iters: int = typer.Option(20, "--iters", help="Timed iterations per size."),
    allow_oversubscribe: bool = OVERSUBSCRIBE,
    as_json: Json = False,
) -> None:
    """The all-reduce microbenchmark: time per message size over each worker count, the
    alpha-beta ring model fitted to it, and the compute lost to an all-reduce in flight.
    Studies on this backend then draw the ring model beside their exposed communication.

    Example: dlperf scale allreduce --workers 2 --sizes 1KB..64MB
    """
    from dlperf.config import ScaleJob, load_job
    from dlperf.distributed.allreduce_study import run_allreduce_study

    if iters < 1:  # before torchrun starts, not after
        raise UserError(f"--iters must be at least 1, got {iters}")
    flags = {"workers": workers, "backend": backend, "allow_oversubscribe": allow_oversubscribe}
    opts = load_job(ScaleJob, None, [], scale=flags).scale
    with console.reporter() as rep:
        store = open_store()
        where = store.artifact_dir("dlperf_runs")  # study ids repeat across stores
        allow = opts.allow_oversubscribe
        result = run_allreduce_study(
            store, opts.workers, sizes, opts.backend, where, iters, 5, allow, rep
        )
    _print_allreduce(result, as_json)


def _study(
    job: ScaleJob, run: Callable[..., StudyResult], as_json: bool, as_csv: bool = False
) -> StudyResult:
    """Run `job` with `run` (a study or the batch search), draw its figures, and print it:
    the JSON document, the course's tables as one CSV, or the tables (on a node but the
    first: that node 0 stores the results), then the figures saved."""
    store = open_store()
    where = store.artifact_dir(job.experiment.run.out_dir)  # study ids repeat across stores
    with console.reporter() as rep:
        result = run(job, store, where, rep)
    for warning in result.warnings:
        console.warn(warning)
    artifacts = []
    if result.study_id is not None and job.scale.plots:  # only node 0 stores and draws
        from dlperf.report.scaling import save_study_figures

        artifacts = save_study_figures(store, result.study_id, result.rows, where)
    from dlperf.distributed.study_tables import course_csv, document

    if console.printed_json(as_json, document(result, artifacts)):
        return result
    if as_csv and result.study_id is not None:
        columns, rows = course_csv(result)
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        _print_table(result)
    console.tell([], *artifacts)
    return result
