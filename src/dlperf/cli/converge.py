"""`dlperf converge fit | predict | regress | speed fit | plan` and `dlperf staleness`."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import typer

from dlperf.cli import console
from dlperf.cli.app import app, open_store
from dlperf.converge.options import CurveOptions
from dlperf.errors import UserError
from dlperf.parsing import parse_list, parse_names, parse_numbers, parse_pairs, parse_range

converge_app = typer.Typer(
    help="Loss-curve and speed models (Optimus, Pollux): when a job converges, how fast it "
    "runs, what to give it.\n\nExample: dlperf converge fit --csv "
    "../shared/data/pollux/cifar10_validation-128.csv --y metric --metric accuracy --upto 0.3",
    no_args_is_help=True,
)
speed_app = typer.Typer(
    help="Resource-speed models (Optimus, Pollux).\n\nExample: dlperf converge speed fit "
    "--csv ../shared/data/pollux/cifar10_placements.csv --model pollux",
    no_args_is_help=True,
)
app.add_typer(converge_app, name="converge")
converge_app.add_typer(speed_app, name="speed")

RUN_IDS = typer.Argument(None, help="Stored run IDs (or use --csv).", show_default=False)
CSV = typer.Option(None, "--csv", help="A CSV file with the curve.")
JSON = typer.Option(False, "--json", help="Print one JSON document.")


def _plot_path(path: Path | None) -> Path | None:
    """--plot is checked as it is parsed, so that a figure that cannot be saved costs no fit."""
    if path is not None:
        from dlperf.converge.plots import check_path

        check_path(path)
    return path


PLOT = typer.Option(
    None, "--plot", help="Save a figure to this file (PNG, PDF, SVG).", callback=_plot_path
)

_CURVE_OPTIONS = {
    "x": typer.Option(
        None, "--x", help="CSV column of the step (default: the row number, 1, 2, ...)."
    ),
    "y": typer.Option(None, "--y", help="CSV column of the metric."),
    "metric": typer.Option(
        "loss", "--metric", help="loss | accuracy | error (accuracy is fitted as 1 − accuracy)."
    ),
    "key": typer.Option(
        None, "--key", help="Stored metric key (default val/loss, val/acc1; error: 1 − val/acc1)."
    ),
    "upto": typer.Option(None, "--upto", help="Fit the first FRACTION of the points, e.g. 0.3."),
    "upto_step": typer.Option(None, "--upto-step", help="Fit the points up to step K."),
}


def curve_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command the options of `CurveOptions` (--x, --y, --metric, --key, --upto,
    --upto-step), passed to it as one argument `opts`, so that each command declares only
    its own options."""
    own = [p for p in inspect.signature(command).parameters.values() if p.name != "opts"]
    shared = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=_CURVE_OPTIONS[f.name],
                          annotation=f.type)
        for f in fields(CurveOptions)
    ]  # fmt: skip

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        opts = CurveOptions(**{f.name: kwargs.pop(f.name) for f in fields(CurveOptions)})
        command(opts=opts, **kwargs)

    # Typer reads the options from the signature and resolves its annotations.
    wrapper.__signature__ = inspect.Signature([*own, *shared])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in [*own, *shared]}
    return wrapper


def _tell(warnings: list[str], saved: Path | str | None = None) -> None:
    """What the library left to say, on stderr: its warnings, then the figure it saved."""
    for warning in warnings:
        console.warn(warning)
    if saved is not None:
        console.err.print(f"saved {saved}", markup=False)


def _one_or_list(documents: list[dict[str, Any]]) -> Any:
    return documents[0] if len(documents) == 1 else documents


@converge_app.command("fit")
@curve_options
def fit(
    opts: CurveOptions,
    run_ids: list[int] = RUN_IDS,
    csv: Path = CSV,
    plot: Path = PLOT,
    as_json: bool = JSON,
) -> None:
    """Fit l(k) = 1/(β0·k + β1) + β2 (Optimus) and a·k^−b + c to a loss or accuracy curve,
    with bootstrap 90% intervals; say which form predicts later points better.

    The JSON output is what `dlperf converge plan --curve` reads.

    Example: dlperf converge fit --csv ../shared/data/pollux/cifar10_validation-128.csv
    --y metric --metric accuracy --upto 0.3
    """
    from dlperf.converge import fitting

    with console.reporter() as rep:
        done = fitting.fit(run_ids or [], csv, opts, open_store, plot, rep)
    _tell(done.warnings, plot)
    if as_json:
        console.print_json(_one_or_list([fitting.fit_document(r) for r in done.reports]))
        return
    for r in done.reports:
        console.print_table(
            f"{r.curve.label}: {r.n_fit} points to step {r.fits['optimus'].last_step:g}, "
            f"{r.metric}",
            ["form", "coefficient", "value", "5%", "95%"],
            [[form, name, value, *r.ci[form][name]]
             for form, f in r.fits.items() for name, value in f.params.items()],
        )  # fmt: skip
        h = r.heldout
        console.print_table(
            f"fit error (held out: {h['n_points']} later points)",
            ["form", "rmse fit", "rmse held out"],
            [[form, f.rmse, h.get(f"{form}_rmse")] for form, f in r.fits.items()],
        )
        if "better" in h:
            console.out.print(f"{h['better']} predicts the held-out points better", markup=False)


@converge_app.command("predict")
@curve_options
def predict(
    opts: CurveOptions,
    run_ids: list[int] = RUN_IDS,
    target: float = typer.Option(..., "--target", help="Value to reach, in the metric's units."),
    csv: Path = CSV,
    form: str = typer.Option("optimus", "--form", help="optimus | power."),
    plot: Path = PLOT,
    as_json: bool = JSON,
) -> None:
    """The step at which the fitted curve reaches a target, with a 90% interval, and the
    error against the measured curve when it goes on beyond the fit window.

    Example: dlperf converge predict --csv ../shared/data/pollux/cifar10_validation-128.csv
    --y metric --metric accuracy --upto 0.3 --target 0.94 --form power
    """
    from dlperf.converge import fitting

    with console.reporter() as rep:
        done = fitting.predict(run_ids or [], csv, opts, open_store, target, form, plot, rep)
    _tell(done.warnings, plot)
    if as_json:
        console.print_json(_one_or_list(done.predictions))
        return
    asymptote = "β2" if form == "optimus" else "c"
    console.print_table(
        f"{form} model: step reaching {opts.metric} {target:g}",
        ["source", "predicted step", "5%", "95%", "epoch", "actual step", "error %",
         f"asymptote ({asymptote})", "plateau"],
        [
            [d["source"], d["predicted_step"] if d["reachable"] else "unreachable",
             *(d["interval"] or (None, None)), d["predicted_epoch"], d["actual_step"],
             d["error_pct"], d["asymptote"], d["plateau"]]
            for d in done.predictions
        ],
    )  # fmt: skip
    for d in done.predictions:
        if not d["reachable"]:
            console.warn(
                f"{d['source']}: unreachable, the fitted curve levels off at "
                f"{d['plateau']:.4g} {opts.metric} ({asymptote} = {d['asymptote']:.4g})"
            )


@converge_app.command("regress")
@curve_options
def regress(
    opts: CurveOptions,
    sources: list[str] = typer.Argument(
        ..., help="Run IDs, or CSV files given as PATH:feature=value,...", show_default=False
    ),
    features: str = typer.Option(..., "--features", help="Comma-separated, e.g. depth,gpu."),
    predict_at: str = typer.Option(
        None, "--predict", help="A configuration to predict, e.g. depth=50,gpu=T4."
    ),
    target: float = typer.Option(None, "--target", help="With --predict: the step reaching it."),
    plot: Path = PLOT,
    as_json: bool = JSON,
) -> None:
    """Fit β0, β1, β2 of each run, regress log β on run features, and predict the curve of an
    unseen configuration (and the step, and epoch, reaching --target).

    Features are run summary, system or config keys; depth reads resnet56's 56, gpu the
    first GPU's name.

    Example: dlperf converge regress 1 2 3 4 --features depth --metric accuracy
    --predict depth=50 --target 0.9
    """
    from dlperf.converge import fitting
    from dlperf.converge.regress import BETAS

    at = parse_pairs(predict_at, "--predict", "--predict depth=50") if predict_at else None
    done = fitting.regress(sources, parse_names(features), opts, open_store, at, target, plot)
    _tell(done.warnings, plot)
    doc = done.document
    if as_json:
        console.print_json(doc)
        return
    coef, rmse = doc["coef"], doc["rmse_log"]
    console.print_table(
        f"log β regressed on {', '.join(doc['features'])} over {len(doc['runs'])} runs",
        ["column", *BETAS],
        [[col, *(coef[b][i] for b in BETAS)] for i, col in enumerate(doc["columns"])]
        + [["rmse (log)", *(rmse[b] for b in BETAS)]],
    )
    if "prediction" in doc:
        pred = doc["prediction"]
        rows = [[b, pred[b]] for b in BETAS]
        if target is not None:
            rows.append([f"step reaching {target:g}", pred["predicted_step"] or "unreachable"])
            if pred["predicted_epoch"] is not None:
                rows.append([f"epoch reaching {target:g}", pred["predicted_epoch"]])
        console.print_table(f"prediction for {predict_at}", ["", "value"], rows)


@speed_app.command("fit")
def speed_fit(
    study_id: int = typer.Argument(
        None, help="A `dlperf scale` study (or use --csv).", show_default=False
    ),
    csv: Path = typer.Option(None, "--csv", help="A speed table or a Pollux trace CSV."),
    model: str = typer.Option(..., "--model", help="optimus-sync | optimus-async | pollux."),
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
    as_json: bool = JSON,
) -> None:
    """Fit a speed model to measured step times: Optimus's parameter-server models (θ ≥ 0 by
    NNLS) or Pollux's (T_grad^γ + T_sync^γ)^(1/γ).

    A table has one row per configuration: workers, ps, nodes, global_batch, step_time_s,
    sync_time_s (Pollux's trace columns are read as they are). A study's finished runs give
    the same keys in their summaries; failed points are left out. The JSON output is what
    `converge plan --speed` reads.

    Example: dlperf converge speed fit --csv ../shared/data/pollux/cifar10_placements.csv
    --model pollux --predict workers=32,nodes=8,batch=2048
    """
    from dlperf.converge import speed

    selected: dict[str, str] = {}
    for text in where:
        selected |= parse_pairs(text, "--where", "--where comm=allreduce")
    done = speed.fit_measured(model, open_store, csv, study_id, selected, predict_at)
    _tell(done.warnings)
    result = done.fit
    if as_json:
        console.print_json(done.to_dict())
        return
    console.print_table(
        f"{model}: {result.n_points} measurements, step-time error {result.error_pct:.2f}% "
        f"mean, {result.max_error_pct:.1f}% max",
        ["coefficient", "value", "meaning"],
        [[k, v, speed.MEANINGS[model][k]] for k, v in result.params.items()],
    )
    if done.predictions:
        keys = speed.config_keys(model)
        console.print_table(
            "predictions",
            [*keys[:2], "global batch", "step time (s)", "samples/s"],
            [
                [*(p[k] for k in keys), p["step_time_s"], p["samples_per_s"]]
                for p in done.predictions
            ],
        )


@converge_app.command("plan")
def plan(
    curve_path: Path = typer.Option(
        None, "--curve", help="Curve fit JSON (`converge fit --json`)."
    ),
    speed_path: Path = typer.Option(
        None, "--speed", help="Speed fit JSON (`converge speed fit --json`)."
    ),
    target: float = typer.Option(None, "--target", help="Value to reach, in the curve's metric."),
    ps: str = typer.Option("1,2,4", "--ps", help="Parameter-server counts, e.g. 2,4."),
    workers: str = typer.Option("1-16", "--workers", help="Worker counts, e.g. 1-16."),
    batch: float = typer.Option(
        None, "--batch", help="Global batch (default: the speed data's most common)."
    ),
    price: float = typer.Option(None, "--price-per-hour", help="Price of one device-hour."),
    cluster: Path = typer.Option(
        None, "--cluster", help="jobs.toml: several jobs to share --gpus devices."
    ),
    gpus: int = typer.Option(None, "--gpus", help="Devices to share among the --cluster jobs."),
    plot: Path = PLOT,
    as_json: bool = JSON,
) -> None:
    """Predicted time (and cost) to reach a target against workers, one curve per
    parameter-server count; the fastest and the cheapest allocation marked. With --cluster,
    Optimus's greedy allocator shares --gpus devices among several jobs.

    Steps to go are counted from the end of the curve's fit window. Each worker and server
    takes one device. jobs.toml holds [[job]] tables with name, curve, speed, target and
    optionally batch.

    Example: dlperf converge plan --curve curve.json --speed speed.json --target 0.9
    --ps 1,2,4 --workers 1-16 --price-per-hour 0.9
    """
    from dlperf.converge import plan as planner

    if cluster is not None:
        if gpus is None:
            raise UserError("--cluster needs --gpus N")
        jobs = planner.allocate(planner.read_jobs(cluster), gpus)
        if as_json:
            console.print_json({"gpus": gpus, "jobs": [asdict(a) for a in jobs]})
            return
        console.print_table(
            f"{gpus} devices, Optimus greedy allocation",
            ["job", "workers", "ps", "hours to target"],
            [[a.name, a.workers, a.ps, a.time_s / 3600] for a in jobs],
        )
        return
    if curve_path is None or speed_path is None or target is None:
        raise UserError("plan needs --curve, --speed and --target (or --cluster and --gpus)")
    counts = parse_range(ps, "ps"), parse_range(workers, "workers")
    done = planner.plan_files(curve_path, speed_path, target, *counts, batch, price, plot)
    _tell([], plot)
    if as_json:
        console.print_json(asdict(done))
        return
    console.print_table(
        f"{done.steps:.0f} steps to {target:g}",
        ["ps", "workers", "hours", done.cost_unit, "best"],
        [
            [r.ps, r.workers, r.time_s / 3600, r.cost,
             ", ".join(n for n, on in (("fastest", r.fastest), ("cheapest", r.cheapest)) if on)]
            for r in done.allocations
        ],
    )  # fmt: skip


def _learners(specs: list[str]) -> dict[str, list[float]]:
    """['L1=1,2,3', 'L2=2.5'] as {'L1': [1, 2, 3], 'L2': [2.5]}, in the order given."""
    learners: dict[str, list[float]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UserError(f"--learner takes NAME=times, got {spec!r}", "e.g. --learner L1=1,2,3")
        if name in learners:
            raise UserError(f"learner {name} is given twice")
        bad = UserError(f"--learner {spec!r}: times must be numbers")
        learners[name] = parse_list(values, float, bad)
    return learners


def _rates(text: str) -> dict[str, float]:
    return parse_numbers(text, "--speeds", "--speeds L1=1.0,L2=0.4")


@app.command()
def staleness(
    learner: list[str] = typer.Option(
        [], "--learner", help="NAME=t1,t2,...: gradient completion times (repeatable)."
    ),
    speeds: str = typer.Option(None, "--speeds", help="NAME=rate,...: gradients per unit time."),
    horizon: float = typer.Option(None, "--horizon", help="Simulated time, with --speeds."),
    push_latency: float = typer.Option(
        0.0, "--push-latency", help="Time for a push to reach the server."
    ),
    pull_latency: float = typer.Option(
        0.0, "--pull-latency", help="Time for new weights to reach a learner."
    ),
    train_exp: Path = typer.Option(
        None, "--train", help="Train this experiment with emulated asynchronous SGD and sync SGD."
    ),
    learners: int = typer.Option(None, "--learners", help="With --train: N equally fast learners."),
    set_: list[str] = typer.Option([], "--set", help="With --train: override a config key."),
    as_json: bool = JSON,
) -> None:
    """Simulate a parameter server with asynchronous learners and report each gradient's
    staleness: how many updates were applied between reading the weights and applying it.

    A learner computes, pushes, waits for the new weights, computes again. Completion times
    are those with no latency; latencies stretch them. Gradients arriving at the same
    instant are applied in the order the learners are given. With --train, the experiment
    is trained twice from the same weights, synchronously and with the staleness of
    --learners (or --speeds) learners, and both runs are stored as one study.

    Example: dlperf staleness --learner L1=1,2,3,4 --learner L2=2.5,5 --push-latency 0.1
    """
    from dlperf.converge import staleness as sim

    if train_exp is not None:
        _train_staleness(train_exp, learners, speeds, list(set_), as_json)
        return
    if learners is not None or set_:
        raise UserError("--learners and --set go with --train EXP.toml")
    if bool(learner) == (speeds is not None):
        raise UserError("give --learner NAME=times ... or --speeds NAME=rate,... (not both)")
    if speeds is not None:
        if horizon is None:
            raise UserError("--speeds needs --horizon")
        times = sim.from_speeds(_rates(speeds), horizon)
    else:
        times = _learners(learner)
    gradients = sim.simulate(times, push_latency, pull_latency)
    if as_json:
        console.print_json(sim.to_json(gradients))
        return
    console.print_table(
        None,
        ["learner", "index", "time", "read version", "applied to", "staleness"],
        [[g.learner, g.index, g.time, g.read_version, g.applied_version, g.staleness]
         for g in gradients],
    )  # fmt: skip
    s = sim.summary(gradients)
    histogram = ", ".join(f"{k}: {v}" for k, v in s["histogram"].items())
    console.out.print(
        f"{s['gradients']} gradients, staleness mean {s['mean_staleness']:.3g}, "
        f"max {s['max_staleness']}; histogram {histogram}",
        markup=False,
    )


def _train_staleness(
    path: Path, learners: int | None, speeds: str | None, overrides: list[str], as_json: bool
) -> None:
    from dlperf.config import load_experiment
    from dlperf.converge import async_sgd

    if (learners is None) == (speeds is None):
        raise UserError("--train needs --learners N or --speeds NAME=rate,... (one of them)")
    if learners is not None and learners < 1:
        raise UserError(f"--learners must be ≥ 1, got {learners}")
    rates = _rates(speeds) if speeds else {f"L{i + 1}": 1.0 for i in range(learners or 0)}
    if any(not math.isfinite(r) or r <= 0 for r in rates.values()):
        raise UserError(f"learner speeds must be positive, got {speeds}")
    exp = load_experiment(path, overrides)
    with console.reporter() as rep:
        result = async_sgd.study(exp, rates, open_store(), Path(exp.run.out_dir), rep)
    if as_json:
        console.print_json(result)
        return
    console.print_table(
        f"study {result['study_id']}: sync SGD vs {len(rates)} asynchronous learners",
        ["", "run", "val accuracy", "val loss", "mean staleness"],
        [
            [mode, result[mode]["run_id"], result[mode]["val_accuracy"],
             result[mode]["val_loss"], result[mode]["mean_staleness"]]
            for mode in ("sync", "async")
        ],
    )  # fmt: skip
    _tell([], result["figure"])
