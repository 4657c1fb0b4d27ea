"""`dlperf converge speed fit` and `dlperf converge plan`: how fast a job runs where, and
what to give it."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer

from dlperf.cli import console, outputs
from dlperf.cli.app import Json
from dlperf.cli.converge import converge_app, reader, show, speed_app
from dlperf.errors import UserError
from dlperf.parsing import parse_numbers, parse_pairs, parse_range, refuse_given

# plan's grid unless --ps and --workers say otherwise.
PS, WORKERS = "1,2,4", "1-16"
# What --cluster takes the place of a single job's options with, said where one is given.
CLUSTER_GIVES = (
    "jobs.toml gives each job's curve, speed, target and batch, the allocator its devices"
)


@speed_app.command("fit")
def speed_fit(
    study_id: int = typer.Argument(
        None, help="A `dlperf scale` study (or use --csv).", show_default=False
    ),
    csv: Path = typer.Option(None, "--csv", help="A speed table or a Pollux trace CSV."),
    model: str = typer.Option(..., "--model", help="optimus-sync | optimus-async | pollux | ring."),
    where: list[str] = typer.Option(
        [],
        "--where",
        help="With STUDY_ID: keep runs whose summary has KEY=VALUE, e.g. comm=fp16 (repeatable).",
    ),
    predict_at: list[str] = typer.Option(
        [],
        "--predict",
        help="Predict a configuration, e.g. workers=32,nodes=8,batch=2048 or "
        "workers=8,ps=2 (repeatable; batch is global, default the most common one).",
    ),
    fix: list[str] = typer.Option(
        [],
        "--fix",
        help="Hold coefficients at given values instead of fitting them, e.g. a paper's or "
        "what other runs measured: beta_intra=0.004,gamma=2 (repeatable).",
    ),
    as_json: Json = False,
) -> None:
    """Fit a speed model to measured step times: Optimus's parameter-server models (θ ≥ 0 by
    NNLS), Pollux's (T_grad^γ + T_sync^γ)^(1/γ) with its sync time α + β·(K − 2), or the
    same with a ring all-reduce's sync time b·2(K − 1)/K + h·2(K − 1) (ring), which levels off
    as the workers grow, as measured sync times do.

    A table has one row per configuration: workers, ps, nodes, global_batch, step_time_s,
    sync_time_s (Pollux's trace columns are read as they are). A study's finished runs give
    the same keys in their summaries; failed points are left out. The JSON output is what
    `converge plan --speed` reads.

    Each coefficient gets a 90% interval, or the runs it would need when these points cannot
    determine it (e.g. 1 and 2 workers say nothing of the sync time per worker beyond 2). A
    --predict that rests on such a coefficient is refused unless --fix gives it; one outside
    the measured workers, nodes, servers or batches says how far, and what it assumes.

    Example: dlperf converge speed fit --csv examples/pollux/cifar10_placements.csv
    --model pollux --predict workers=32,nodes=8,batch=2048
    """
    from dlperf.converge import speed, speed_views

    selected: dict[str, str] = {}
    for text in where:
        selected |= parse_pairs(text, "--where", "--where comm=allreduce")
    fixed: dict[str, float] = {}
    for text in fix:
        fixed |= parse_numbers(text, "--fix", "--fix beta_intra=0.004")
    done = speed.fit_measured(model, reader, csv, study_id, selected, predict_at, fixed)
    console.tell(done.warnings)
    if as_json:
        console.print_json(done.to_dict())
    else:
        show(speed_views.speed_fit_blocks(done))


@converge_app.command("plan")
def plan(
    curve_path: Path = typer.Option(
        None,
        "--curve",
        help="Optimus curve JSON: `converge fit --json`, `converge regress --predict --json`, "
        'or {"metric", "beta0", "beta1", "beta2"} (docs/converge.md).',
    ),
    speed_path: Path = typer.Option(
        None,
        "--speed",
        help='Speed model JSON: `converge speed fit --json`, or {"model", "params"}.',
    ),
    speed_params: str = typer.Option(
        None,
        "--speed-params",
        help="Or the speed model's coefficients, e.g. a paper's: theta0=...,theta1=...,... "
        "(optimus-sync; model=optimus-async,... for the other).",
    ),
    target: float = typer.Option(None, "--target", help="Value to reach, in the curve's metric."),
    # None by default, so that one given with --cluster (which plans no grid) is refused.
    ps: str = typer.Option(
        None, "--ps", help=f"Parameter-server counts, e.g. 2,4 (default: {PS}).", show_default=False
    ),
    workers: str = typer.Option(
        None, "--workers", help=f"Worker counts, e.g. 1-8 (default: {WORKERS}).", show_default=False
    ),
    batch: float = typer.Option(
        None, "--batch", help="Global batch (default: the speed data's most common)."
    ),
    price: float = typer.Option(None, "--price-per-hour", help="Price of one device-hour."),
    cluster: Path = typer.Option(
        None, "--cluster", help="jobs.toml: several jobs to share --gpus devices."
    ),
    gpus: int = typer.Option(None, "--gpus", help="Devices to share among the --cluster jobs."),
    plot: Path = outputs.PLOT,
    as_json: Json = False,
) -> None:
    """Predicted time (and cost) to reach a target against workers, one curve per
    parameter-server count; the fastest and the cheapest allocation marked. With --cluster,
    Optimus's greedy allocator shares --gpus devices among several jobs.

    Steps to go are counted from the end of the curve's fit window (from 0 for a curve
    `regress` predicted); a curve already at the target says so. Each worker and server
    takes one device. jobs.toml holds [[job]] tables with name, curve, speed, target and
    optionally batch.

    An allocation that rests on a coefficient the speed fit leaves undetermined is refused
    (fix it with `speed fit --fix`, or give --speed-params); one beyond the measured
    workers, servers or batch is marked with how far.

    Example: dlperf converge plan --curve curve.json --speed-params
    theta0=0.01,theta1=0.1,theta2=0.2,theta3=0.01,theta4=0.01 --batch 256 --target 0.9
    --ps 1,2,4 --workers 1-16 --price-per-hour 0.9
    """
    from dlperf.converge import plan as planner
    from dlperf.converge import speed_views

    if cluster is None:
        refuse_given({"--gpus": gpus}, "--cluster jobs.toml")
    else:
        one_job = {"--curve": curve_path, "--speed": speed_path, "--speed-params": speed_params}
        one_job |= {"--target": target, "--ps": ps, "--workers": workers, "--batch": batch}
        one_job |= {"--price-per-hour": price}
        refuse_given(one_job, "one job's plan, not --cluster", CLUSTER_GIVES)
        if gpus is None:
            raise UserError("--cluster needs --gpus N")
        if plot is not None:
            console.warn(f"--plot {plot}: nothing drawn, --cluster has no figure")
        jobs = planner.allocate(planner.read_jobs(cluster), gpus)
        if not console.printed_json(as_json, {"gpus": gpus, "jobs": [asdict(a) for a in jobs]}):
            show([speed_views.allocation_table(gpus, jobs)])
        return
    if curve_path is None or target is None or (speed_path is None and speed_params is None):
        raise UserError(
            "plan needs --curve, --speed and --target (or --cluster and --gpus)",
            "--speed-params theta0=...,... may stand for --speed",
        )
    if speed_path is not None and speed_params is not None:
        raise UserError("give --speed FILE or --speed-params theta0=...,..., not both")
    counts = (
        parse_range(PS if ps is None else ps, "ps"),
        parse_range(WORKERS if workers is None else workers, "workers"),
    )
    if speed_path is not None:
        speed_model = planner.read_speed_fit(speed_path)
    else:
        speed_model = planner.speed_from_params(speed_params)
    done = planner.plan_files(curve_path, speed_model, target, *counts, batch, price)
    if done.reached_at_step is not None:
        if plot is not None:
            console.warn(f"--plot {plot}: nothing drawn, there is nothing to plan")
        if not console.printed_json(as_json, asdict(done)):
            show([speed_views.reached_line(done, target)])
        return
    if plot is not None:
        from dlperf.report.curves import plot_plan

        plot_plan(plot, done.allocations)
    console.tell([], plot)
    if not console.printed_json(as_json, asdict(done)):
        show(speed_views.plan_blocks(done, target, speed_model))
