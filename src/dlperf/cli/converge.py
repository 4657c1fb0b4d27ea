"""`dlperf converge fit | predict | regress | speed fit | plan` and `dlperf staleness`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dlperf.cli import console
from dlperf.cli.app import app, open_store
from dlperf.errors import UserError

if TYPE_CHECKING:
    from dlperf.converge.curve import Curve, FitReport, Prediction
    from dlperf.converge.speed import SpeedFit

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
X = typer.Option(None, "--x", help="CSV column of the step (default: the row number, 1, 2, ...).")
Y = typer.Option(None, "--y", help="CSV column of the metric.")
METRIC = typer.Option(
    "loss", "--metric", help="loss | accuracy | error (accuracy is fitted as 1 − accuracy)."
)
KEY = typer.Option(None, "--key", help="Stored metric key (default val/loss or val/acc1).")
UPTO = typer.Option(None, "--upto", help="Fit the first FRACTION of the points, e.g. 0.3.")
UPTO_STEP = typer.Option(None, "--upto-step", help="Fit the points up to step K.")
JSON = typer.Option(False, "--json", help="Print one JSON document.")
PLOT = typer.Option(None, "--plot", help="Save a figure to this file (PNG, PDF, SVG).")


def _curves(
    run_ids: list[int] | None,
    csv: Path | None,
    x: str | None,
    y: str | None,
    metric: str,
    key: str | None,
) -> list[Curve]:
    from dlperf.converge import curve

    if metric not in curve.METRICS:
        raise UserError(f"unknown metric '{metric}'", f"choose one of {', '.join(curve.METRICS)}")
    if bool(run_ids) == (csv is not None):
        raise UserError("give RUN_ID ... or --csv FILE (not both)")
    if csv is not None:
        if y is None:
            raise UserError("--csv needs --y COLUMN (the metric)")
        return [curve.from_csv(csv, x, y)]
    store = open_store()
    return [curve.from_run(store, i, key or curve.RUN_KEYS[metric]) for i in run_ids or []]


def _reports(
    curves: list[Curve], metric: str, upto: float | None, upto_step: float | None
) -> list[FitReport]:
    from dlperf.converge import curve

    reports = []
    with console.reporter() as rep:
        rep.task("fitting", total=len(curves))
        for c in curves:
            n_fit = curve.window(c.steps, upto, upto_step)
            reports.append(curve.analyse(c, metric, n_fit))
            rep.advance()
    for r in reports:
        for form, f in r.fits.items():
            if not f.converged:
                console.warn(
                    f"{r.curve.label}: the {form} fit did not converge ({f.message}); "
                    "showing the best attempt"
                )
    return reports


def _fit_json(r: FitReport) -> dict[str, Any]:
    optimus, power = r.fits["optimus"], r.fits["power"]
    return {
        "source": r.curve.label,
        "metric": r.metric,
        "form": "optimus",
        **optimus.params,
        "ci": {k: list(v) for k, v in r.ci["optimus"].items()},
        "rmse": optimus.rmse,
        "n_points": optimus.n_points,
        "last_step": optimus.last_step,
        "steps_per_epoch": r.curve.steps_per_epoch,
        "converged": optimus.converged,
        "power": {
            **power.params,
            "ci": {k: list(v) for k, v in r.ci["power"].items()},
            "rmse": power.rmse,
            "converged": power.converged,
        },
        "heldout": r.heldout,
    }


def _plot_fits(path: Path | None, reports: list[FitReport], metric: str) -> None:
    if path is None:
        return
    from dlperf.converge.plots import plot_curves

    plot_curves(
        path,
        [(r.curve.label, r.curve.steps, r.curve.values, r.n_fit, r.params) for r in reports],
        metric,
    )
    console.err.print(f"saved {path}", markup=False)


def _one_or_list(documents: list[dict[str, Any]]) -> Any:
    return documents[0] if len(documents) == 1 else documents


@converge_app.command("fit")
def fit(
    run_ids: list[int] = RUN_IDS,
    csv: Path = CSV,
    x: str = X,
    y: str = Y,
    metric: str = METRIC,
    key: str = KEY,
    upto: float = UPTO,
    upto_step: float = UPTO_STEP,
    plot: Path = PLOT,
    as_json: bool = JSON,
) -> None:
    """Fit l(k) = 1/(β0·k + β1) + β2 (Optimus) and a·k^−b + c to a loss or accuracy curve,
    with bootstrap 90% intervals; say which form predicts later points better.

    The JSON output is what `dlperf converge plan --curve` reads.

    Example: dlperf converge fit --csv ../shared/data/pollux/cifar10_validation-128.csv
    --y metric --metric accuracy --upto 0.3
    """
    curves = _curves(run_ids, csv, x, y, metric, key)
    reports = _reports(curves, metric, upto, upto_step)
    _plot_fits(plot, reports, metric)
    if as_json:
        console.print_json(_one_or_list([_fit_json(r) for r in reports]))
        return
    for r in reports:
        rows = []
        for form, f in r.fits.items():
            for name, value in f.params.items():
                lo, hi = r.ci[form][name]
                rows.append([form, name, value, lo, hi])
        console.print_table(
            f"{r.curve.label}: {r.n_fit} points to step {r.fits['optimus'].last_step:g}, "
            f"{r.metric}",
            ["form", "coefficient", "value", "5%", "95%"],
            rows,
        )
        h = r.heldout
        forms = [[form, f.rmse, h.get(f"{form}_rmse")] for form, f in r.fits.items()]
        console.print_table(
            f"fit error (held out: {h['n_points']} later points)",
            ["form", "rmse fit", "rmse held out"],
            forms,
        )
        if "better" in h:
            console.out.print(f"{h['better']} predicts the held-out points better", markup=False)


def _prediction_json(r: FitReport, form: str, p: Prediction) -> dict[str, Any]:
    spe = r.curve.steps_per_epoch
    return {
        "source": r.curve.label,
        "form": form,
        "target": p.target,
        "reachable": p.reachable,
        "predicted_step": p.predicted_step,
        "interval": list(p.interval) if p.interval else None,
        "predicted_epoch": p.predicted_step / spe if spe and p.predicted_step else None,
        "actual_step": p.actual_step,
        "error_pct": p.error_pct,
        "asymptote": r.fits[form].params["beta2" if form == "optimus" else "c"],
        "n_points": r.n_fit,
    }


@converge_app.command("predict")
def predict(
    run_ids: list[int] = RUN_IDS,
    target: float = typer.Option(..., "--target", help="Value to reach, in the metric's units."),
    csv: Path = CSV,
    x: str = X,
    y: str = Y,
    metric: str = METRIC,
    key: str = KEY,
    upto: float = UPTO,
    upto_step: float = UPTO_STEP,
    form: str = typer.Option("optimus", "--form", help="optimus | power."),
    plot: Path = PLOT,
    as_json: bool = JSON,
) -> None:
    """The step at which the fitted curve reaches a target, with a 90% interval, and the
    error against the measured curve when it goes on beyond the fit window.

    Example: dlperf converge predict --csv ../shared/data/pollux/cifar10_validation-128.csv
    --y metric --metric accuracy --upto 0.3 --target 0.94 --form power
    """
    from dlperf.converge import curve

    if form not in curve.PARAMS:
        raise UserError(f"unknown form '{form}'", "choose optimus or power")
    curve.check_target(target, metric)
    reports = _reports(_curves(run_ids, csv, x, y, metric, key), metric, upto, upto_step)
    _plot_fits(plot, reports, metric)
    documents = []
    for r in reports:
        p = curve.predict(
            form, r.params[form], r.samples[form], target, metric, r.curve.steps, r.curve.values
        )
        documents.append(_prediction_json(r, form, p))
    if as_json:
        console.print_json(_one_or_list(documents))
        return
    rows = []
    for d in documents:
        lo, hi = d["interval"] or (None, None)
        rows.append(
            [
                d["source"],
                d["predicted_step"] if d["reachable"] else "unreachable",
                lo,
                hi,
                d["predicted_epoch"],
                d["actual_step"],
                d["error_pct"],
                d["asymptote"],
            ]
        )
    asym = "asymptote (β2)" if form == "optimus" else "asymptote (c)"
    console.print_table(
        f"{form} model: step reaching {metric} {target:g}",
        ["source", "predicted step", "5%", "95%", "epoch", "actual step", "error %", asym],
        rows,
    )
    for d in documents:
        if not d["reachable"]:
            console.warn(
                f"{d['source']}: unreachable, the fitted curve levels off at "
                f"{curve.to_decreasing(d['asymptote'], metric):.4g} {metric}"
            )


def _regress_sources(
    sources: list[str],
    features: list[str],
    x: str | None,
    y: str | None,
    metric: str,
    key: str | None,
) -> list[tuple[Curve, dict[str, Any]]]:
    """Each source's curve and features: a run ID, or PATH.csv:feature=value,..."""
    from dlperf.converge import curve, regress

    store = None
    found = []
    for source in sources:
        if source.isdigit():
            store = store or open_store()
            run = store.get_run(int(source))
            c = curve.from_run(store, int(source), key or curve.RUN_KEYS[metric])
            found.append((c, regress.run_features(run, features)))
            continue
        path, _, given = source.partition(":")
        if y is None:
            raise UserError("CSV sources need --y COLUMN (the metric)")
        values: dict[str, Any] = {}
        for part in filter(None, given.split(",")):
            name, sep, value = part.partition("=")
            if not sep:
                raise UserError(f"{source!r}: give features as PATH:feature=value,...")
            values[name.strip()] = value.strip()
        missing = [f for f in features if f not in values]
        if missing:
            raise UserError(f"{path} has no {', '.join(missing)}", f"e.g. {path}:{features[0]}=20")
        found.append((curve.from_csv(Path(path), x, y), values))
    return found


@converge_app.command("regress")
def regress(
    sources: list[str] = typer.Argument(
        ..., help="Run IDs, or CSV files given as PATH:feature=value,...", show_default=False
    ),
    features: str = typer.Option(..., "--features", help="Comma-separated, e.g. depth,device."),
    x: str = X,
    y: str = Y,
    metric: str = METRIC,
    key: str = KEY,
    upto: float = UPTO,
    upto_step: float = UPTO_STEP,
    predict_at: str = typer.Option(
        None, "--predict", help="A configuration to predict, e.g. depth=50,device=T4."
    ),
    target: float = typer.Option(None, "--target", help="With --predict: the step reaching it."),
    plot: Path = PLOT,
    as_json: bool = JSON,
) -> None:
    """Fit β0, β1, β2 of each run, regress log β on run features, and predict the curve of an
    unseen configuration (and the step reaching --target).

    Features are run config, summary or system keys (depth also reads resnet56's 56).

    Example: dlperf converge regress 1 2 3 4 --features depth --metric accuracy
    --predict depth=50 --target 0.9
    """
    import numpy as np

    from dlperf.converge import curve
    from dlperf.converge import regress as reg

    wanted = [f.strip() for f in features.split(",") if f.strip()]
    if not wanted:
        raise UserError("--features needs at least one name", "e.g. --features depth")
    if metric not in curve.METRICS:
        raise UserError(f"unknown metric '{metric}'", f"choose one of {', '.join(curve.METRICS)}")
    if target is not None:
        if predict_at is None:
            raise UserError("--target needs --predict (the configuration to predict)")
        curve.check_target(target, metric)
    found = _regress_sources(sources, wanted, x, y, metric, key)
    fits = []
    for c, _ in found:
        k, values = c.steps, curve.to_decreasing(c.values, metric)
        n_fit = curve.window(k, upto, upto_step)
        fitted, params = curve.fit(k[:n_fit], values[:n_fit])
        if not fitted.converged:
            console.warn(f"{c.label}: the fit did not converge ({fitted.message}); best attempt")
        fits.append(params)
    result = reg.fit([f for _, f in found], np.array(fits), wanted)
    document: dict[str, Any] = {
        "features": wanted,
        "columns": result.columns,
        "coef": result.coef,
        "rmse_log": result.rmse_log,
        "runs": [
            {"source": c.label, **f, **dict(zip(reg.BETAS, map(float, p), strict=True))}
            for (c, f), p in zip(found, fits, strict=True)
        ],
    }
    predicted = None
    if predict_at is not None:
        values = {}
        for part in predict_at.split(","):
            name, sep, value = part.partition("=")
            if not sep:
                raise UserError(f"--predict takes feature=value,..., got {predict_at!r}")
            values[name.strip()] = value.strip()
        predicted = reg.predict(result, values)
        last = max(float(c.steps.max()) for c, _ in found)
        steps = np.linspace(last / 50, last, 50)
        document["prediction"] = {
            "features": values,
            **dict(zip(reg.BETAS, map(float, predicted), strict=True)),
            "curve": [
                [float(k), float(curve.to_decreasing(v, metric))]
                for k, v in zip(steps, curve.model("optimus")(steps, predicted), strict=True)
            ],
        }
        if target is not None:
            reach = curve.steps_to("optimus", predicted, curve.to_decreasing(target, metric))[0]
            document["prediction"]["target"] = target
            document["prediction"]["predicted_step"] = (
                int(curve.whole_step(reach)) if math.isfinite(reach) else None
            )
    if plot is not None:
        from dlperf.converge.plots import plot_regression

        plot_regression(plot, found, result, predicted, metric)
        console.err.print(f"saved {plot}", markup=False)
    if as_json:
        console.print_json(document)
        return
    console.print_table(
        f"log β regressed on {', '.join(wanted)} over {len(found)} runs",
        ["column", *reg.BETAS],
        [[col, *(result.coef[b][i] for b in reg.BETAS)] for i, col in enumerate(result.columns)]
        + [["rmse (log)", *(result.rmse_log[b] for b in reg.BETAS)]],
    )
    if "prediction" in document:
        pred = document["prediction"]
        rows = [[b, pred[b]] for b in reg.BETAS]
        if target is not None:
            rows.append([f"step reaching {target:g}", pred["predicted_step"] or "unreachable"])
        console.print_table(f"prediction for {predict_at}", ["", "value"], rows)


def _parse_assignments(text: str, option: str, allowed: tuple[str, ...]) -> dict[str, float]:
    """'workers=8,ps=2' as {'workers': 8.0, 'ps': 2.0}."""
    values = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in allowed:
            raise UserError(f"{option} takes {', '.join(f'{a}=N' for a in allowed)}, got {text!r}")
        try:
            values[name] = float(value)
        except ValueError:
            raise UserError(f"{option}: {name} must be a number, got {value!r}") from None
    return values


@speed_app.command("fit")
def speed_fit(
    study_id: int = typer.Argument(
        None, help="A `dlperf scale` study (or use --csv).", show_default=False
    ),
    csv: Path = typer.Option(None, "--csv", help="A speed table or a Pollux trace CSV."),
    model: str = typer.Option(..., "--model", help="optimus-sync | optimus-async | pollux."),
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
    the same keys in their summaries. The JSON output is what `converge plan --speed` reads.

    Example: dlperf converge speed fit --csv ../shared/data/pollux/cifar10_placements.csv
    --model pollux --predict workers=32,nodes=8,batch=2048
    """
    from dataclasses import asdict

    from dlperf.converge import speed

    if (study_id is None) == (csv is None):
        raise UserError("give STUDY_ID or --csv FILE (not both)")
    if model not in speed.MODELS:
        raise UserError(
            f"unknown speed model '{model}'", f"choose one of {', '.join(speed.MODELS)}"
        )
    data = speed.load_csv(csv) if csv is not None else speed.from_study(open_store(), study_id)
    result = speed.fit(data, model)
    if not result.converged:
        console.warn(f"the {model} fit did not converge ({result.message}); best attempt shown")
    for note in result.notes:
        console.warn(note)
    predictions = []
    for text in predict_at:
        at = _parse_assignments(text, "--predict", ("workers", "ps", "nodes", "batch"))
        if "workers" not in at:
            raise UserError(f"--predict needs workers=N, got {text!r}")
        at = {"ps": 1.0, "nodes": 1.0, "batch": result.typical_batch, **at}
        t = float(speed.step_time(result, at["workers"], at["batch"], at["ps"], at["nodes"])[0])
        predictions.append({**at, "step_time_s": t, "samples_per_s": at["batch"] / t})
    if as_json:
        console.print_json(
            {**asdict(result), "meanings": speed.MEANINGS[model], "predictions": predictions}
        )
        return
    console.print_table(
        f"{model}: {result.n_points} measurements, step-time error {result.error_pct:.2f}% "
        f"mean, {result.max_error_pct:.1f}% max",
        ["coefficient", "value", "meaning"],
        [[k, v, speed.MEANINGS[model][k]] for k, v in result.params.items()],
    )
    if predictions:
        console.print_table(
            "predictions",
            ["workers", "ps", "nodes", "global batch", "step time (s)", "samples/s"],
            [
                [
                    p["workers"],
                    p["ps"],
                    p["nodes"],
                    p["batch"],
                    p["step_time_s"],
                    p["samples_per_s"],
                ]
                for p in predictions
            ],
        )


def _load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except OSError as e:
        raise UserError(f"cannot read {what} {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not JSON: {e}", f"write it with --json > {path}") from None
    if not isinstance(document, dict):
        raise UserError(f"{path} holds no single {what}", "fit one curve or table at a time")
    return document


def _remaining_steps(curve_doc: dict[str, Any], target: float, path: Path) -> float:
    """Steps still to go from the end of the fit window to the target, by the Optimus fit."""
    from dlperf.converge import curve

    try:
        metric = curve_doc["metric"]
        beta = [float(curve_doc[k]) for k in curve.PARAMS["optimus"]]
        done = float(curve_doc["last_step"])
    except (KeyError, TypeError, ValueError):
        raise UserError(
            f"{path} is not a curve fit", "write it with `converge fit --json`"
        ) from None
    curve.check_target(target, metric)
    steps = float(curve.steps_to("optimus", beta, curve.to_decreasing(target, metric))[0])
    if not math.isfinite(steps):
        raise UserError(
            f"target {target:g} is unreachable: the curve in {path} levels off at "
            f"{curve.to_decreasing(beta[2], metric):.4g} {metric}"
        )
    return max(steps - done, 0.0)


def _speed_from(path: Path) -> SpeedFit:
    from dlperf.converge.speed import SpeedFit

    document = _load_json(path, "speed fit")
    document.pop("meanings", None)
    document.pop("predictions", None)
    try:
        return SpeedFit(**document)
    except TypeError:
        raise UserError(
            f"{path} is not a speed fit", "write it with `converge speed fit --json`"
        ) from None


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
        _plan_cluster(cluster, gpus, as_json)
        return
    if curve_path is None or speed_path is None or target is None:
        raise UserError("plan needs --curve, --speed and --target (or --cluster and --gpus)")
    speed_fit_ = _speed_from(speed_path)
    steps = _remaining_steps(_load_json(curve_path, "curve fit"), target, curve_path)
    rows = planner.plan(
        steps,
        speed_fit_,
        planner.parse_range(ps, "ps"),
        planner.parse_range(workers, "workers"),
        batch or speed_fit_.typical_batch,
        price if price is not None else 1.0,
    )
    if plot is not None:
        from dlperf.converge.plots import plot_plan

        plot_plan(plot, rows)
        console.err.print(f"saved {plot}", markup=False)
    cost = "cost" if price is not None else "device-hours"
    if as_json:
        from dataclasses import asdict

        console.print_json(
            {"steps": steps, "cost_unit": cost, "allocations": [asdict(r) for r in rows]}
        )
        return
    console.print_table(
        f"{steps:.0f} steps to {target:g}",
        ["ps", "workers", "hours", cost, "best"],
        [
            [
                r.ps,
                r.workers,
                r.time_s / 3600,
                r.cost,
                ", ".join(n for n, on in (("fastest", r.fastest), ("cheapest", r.cheapest)) if on),
            ]
            for r in rows
        ],
    )


def _plan_cluster(path: Path, gpus: int | None, as_json: bool) -> None:
    import tomllib

    from dlperf.converge import plan as planner

    if gpus is None:
        raise UserError("--cluster needs --gpus N")
    try:
        jobs_doc = tomllib.loads(path.read_text())
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path} is not valid TOML: {e}") from None
    entries = jobs_doc.get("job")
    if not isinstance(entries, list) or not entries:
        raise UserError(f"{path} has no [[job]] tables", "each with name, curve, speed, target")
    jobs = []
    for i, entry in enumerate(entries):
        missing = [k for k in ("curve", "speed", "target") if k not in entry]
        if missing:
            raise UserError(f"{path}: job {i + 1} has no {', '.join(missing)}")
        here = path.parent
        speed_fit_ = _speed_from(here / entry["speed"])
        curve_path = here / entry["curve"]
        steps = _remaining_steps(
            _load_json(curve_path, "curve fit"), float(entry["target"]), curve_path
        )
        name = str(entry.get("name", f"job{i + 1}"))
        jobs.append(
            planner.Job(
                name, steps, speed_fit_, float(entry.get("batch", speed_fit_.typical_batch))
            )
        )
    result = planner.allocate(jobs, gpus)
    if as_json:
        from dataclasses import asdict

        console.print_json({"gpus": gpus, "jobs": [asdict(a) for a in result]})
        return
    console.print_table(
        f"{gpus} devices, Optimus greedy allocation",
        ["job", "workers", "ps", "hours to target"],
        [[a.name, a.workers, a.ps, a.time_s / 3600] for a in result],
    )


def _parse_learners(specs: list[str], option: str) -> dict[str, list[float]]:
    """['L1=1,2,3', 'L2=2.5'] as {'L1': [1, 2, 3], 'L2': [2.5]}, in the order given."""
    learners: dict[str, list[float]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not name.strip():
            raise UserError(f"{option} takes NAME=values, got {spec!r}", f"e.g. {option} L1=1,2,3")
        if name in learners:
            raise UserError(f"learner {name} is given twice")
        try:
            learners[name.strip()] = [float(v) for v in values.split(",")]
        except ValueError:
            raise UserError(f"{option} {spec!r}: values must be numbers") from None
    return learners


def _parse_rates(text: str) -> dict[str, float]:
    """'L1=1.0,L2=0.4' as {'L1': 1.0, 'L2': 0.4}, in the order given."""
    rates = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        try:
            rates[name.strip()] = float(value)
        except ValueError:
            raise UserError(
                f"--speeds takes NAME=rate,..., got {text!r}", "e.g. L1=1.0,L2=0.4"
            ) from None
    return rates


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
        rates = _parse_rates(speeds)
        if horizon is None:
            raise UserError("--speeds needs --horizon")
        times = sim.from_speeds(rates, horizon)
    else:
        times = _parse_learners(learner, "--learner")
    gradients = sim.simulate(times, push_latency, pull_latency)
    if as_json:
        console.print_json(sim.to_json(gradients))
        return
    console.print_table(
        None,
        ["learner", "index", "time", "read version", "applied to", "staleness"],
        [
            [g.learner, g.index, g.time, g.read_version, g.applied_version, g.staleness]
            for g in gradients
        ],
    )
    s = sim.summary(gradients)
    console.out.print(
        f"{s['gradients']} gradients, staleness mean {s['mean_staleness']:.3g}, "
        f"max {s['max_staleness']}; histogram "
        + ", ".join(f"{k}: {v}" for k, v in s["histogram"].items()),
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
    rates = _parse_rates(speeds) if speeds else {f"L{i + 1}": 1.0 for i in range(learners or 0)}
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
    console.err.print(f"saved {result['figure']}", markup=False)
