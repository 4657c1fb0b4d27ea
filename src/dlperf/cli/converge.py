"""`dlperf converge fit | predict | regress | speed fit | plan` and `dlperf staleness`."""

from __future__ import annotations

import functools
import inspect
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
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


@dataclass
class CurveOptions:
    """How fit, predict and regress read a curve and which of its points they fit."""

    x: str | None
    y: str | None
    metric: str
    key: str | None
    upto: float | None
    upto_step: float | None


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


def _pairs(text: str, option: str, example: str) -> dict[str, str]:
    """'a=1,b=x' as {'a': '1', 'b': 'x'}, in the order given."""
    pairs: dict[str, str] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name or not value.strip():
            raise UserError(f"{option} takes NAME=VALUE,..., got {text!r}", f"e.g. {example}")
        if name in pairs:
            raise UserError(f"{option}: {name} is given twice in {text!r}")
        pairs[name] = value.strip()
    return pairs


def _numbers(pairs: dict[str, str], option: str) -> dict[str, float]:
    bad = UserError(f"{option}: every value must be a number, got {pairs}")
    try:
        numbers = {name: float(value) for name, value in pairs.items()}
    except ValueError:
        raise bad from None
    if not all(map(math.isfinite, numbers.values())):  # float() reads 'nan' and 'inf' too
        raise bad
    return numbers


def _curves(run_ids: list[int] | None, csv: Path | None, opts: CurveOptions) -> list[Curve]:
    from dlperf.converge import curve

    curve.check_metric(opts.metric)
    if bool(run_ids) == (csv is not None):
        raise UserError("give RUN_ID ... or --csv FILE (not both)")
    if csv is not None:
        if opts.y is None:
            raise UserError("--csv needs --y COLUMN (the metric)")
        return [curve.from_csv(csv, opts.x, opts.y)]
    store = open_store()
    return [curve.from_run(store, i, opts.metric, opts.key) for i in run_ids or []]


def _warn_untrusted(label: str, form: str, fit: Any) -> None:
    if not fit.converged:
        console.warn(f"{label}: the {form} fit {fit.message}; showing the best attempt")


def _reports(curves: list[Curve], opts: CurveOptions) -> list[FitReport]:
    from dlperf.converge import curve

    reports = []
    with console.reporter() as rep:
        rep.task("fitting", total=len(curves))
        for c in curves:
            n_fit = curve.window(c.steps, opts.upto, opts.upto_step)
            reports.append(curve.analyse(c, opts.metric, n_fit))
            rep.advance()
    for r in reports:
        for form, f in r.fits.items():
            _warn_untrusted(r.curve.label, form, f)
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
    reports = _reports(_curves(run_ids, csv, opts), opts)
    _plot_fits(plot, reports, opts.metric)
    if as_json:
        console.print_json(_one_or_list([_fit_json(r) for r in reports]))
        return
    for r in reports:
        rows = [
            [form, name, value, *r.ci[form][name]]
            for form, f in r.fits.items()
            for name, value in f.params.items()
        ]
        console.print_table(
            f"{r.curve.label}: {r.n_fit} points to step {r.fits['optimus'].last_step:g}, "
            f"{r.metric}",
            ["form", "coefficient", "value", "5%", "95%"],
            rows,
        )
        h = r.heldout
        console.print_table(
            f"fit error (held out: {h['n_points']} later points)",
            ["form", "rmse fit", "rmse held out"],
            [[form, f.rmse, h.get(f"{form}_rmse")] for form, f in r.fits.items()],
        )
        if "better" in h:
            console.out.print(f"{h['better']} predicts the held-out points better", markup=False)


def _prediction_json(r: FitReport, form: str, p: Prediction) -> dict[str, Any]:
    from dlperf.converge.curve import to_decreasing

    spe = r.curve.steps_per_epoch
    asymptote = r.fits[form].params["beta2" if form == "optimus" else "c"]
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
        "asymptote": asymptote,
        "plateau": float(to_decreasing(asymptote, r.metric)),
        "n_points": r.n_fit,
    }


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
    from dlperf.converge import curve

    if form not in curve.PARAMS:
        raise UserError(f"unknown form '{form}'", "choose optimus or power")
    curve.check_metric(opts.metric)
    curve.check_target(target, opts.metric)
    reports = _reports(_curves(run_ids, csv, opts), opts)
    _plot_fits(plot, reports, opts.metric)
    documents = [
        _prediction_json(
            r,
            form,
            curve.predict(
                form, r.params[form], r.samples[form], target, opts.metric, r.curve.steps,
                r.curve.values,
            ),
        )
        for r in reports
    ]  # fmt: skip
    if as_json:
        console.print_json(_one_or_list(documents))
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
            for d in documents
        ],
    )  # fmt: skip
    for d in documents:
        if not d["reachable"]:
            console.warn(
                f"{d['source']}: unreachable, the fitted curve levels off at "
                f"{d['plateau']:.4g} {opts.metric} ({asymptote} = {d['asymptote']:.4g})"
            )


def _regress_sources(
    sources: list[str], features: list[str], opts: CurveOptions
) -> list[tuple[Curve, dict[str, Any]]]:
    """Each source's curve and features: a run ID, or PATH.csv:feature=value,..."""
    from dlperf.converge import curve, regress

    store = None
    found = []
    for source in sources:
        if source.isdigit():
            store = store or open_store()
            run = store.get_run(int(source))
            c = curve.from_run(store, int(source), opts.metric, opts.key)
            found.append((c, regress.run_features(run, features)))
            continue
        path, _, given = source.partition(":")
        if opts.y is None:
            raise UserError("CSV sources need --y COLUMN (the metric)")
        values = _pairs(given, "a CSV source", f"{path}:{features[0]}=20") if given else {}
        missing = [f for f in features if f not in values]
        if missing:
            raise UserError(f"{path} has no {', '.join(missing)}", f"e.g. {path}:{features[0]}=20")
        found.append((curve.from_csv(Path(path), opts.x, opts.y), values))
    return found


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
    import numpy as np

    from dlperf.converge import curve
    from dlperf.converge import regress as reg

    wanted = [f.strip() for f in features.split(",") if f.strip()]
    if not wanted:
        raise UserError("--features needs at least one name", "e.g. --features depth")
    curve.check_metric(opts.metric)
    if target is not None:
        if predict_at is None:
            raise UserError("--target needs --predict (the configuration to predict)")
        curve.check_target(target, opts.metric)
    at = _pairs(predict_at, "--predict", "--predict depth=50") if predict_at else None
    found = _regress_sources(sources, wanted, opts)
    fits = []
    for c, _ in found:
        k, values = c.steps, curve.to_decreasing(c.values, opts.metric)
        n_fit = curve.window(k, opts.upto, opts.upto_step)
        fitted, params = curve.fit(k[:n_fit], values[:n_fit])
        _warn_untrusted(c.label, "optimus", fitted)
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
    if at is not None:
        predicted = reg.predict(result, at)
        last = max(float(c.steps.max()) for c, _ in found)
        steps = np.linspace(last / 50, last, 50)
        prediction: dict[str, Any] = {
            "features": at,
            **dict(zip(reg.BETAS, map(float, predicted), strict=True)),
            "curve": [
                [float(k), float(curve.to_decreasing(v, opts.metric))]
                for k, v in zip(steps, curve.model("optimus")(steps, predicted), strict=True)
            ],
        }
        if target is not None:
            reach = curve.steps_to("optimus", predicted, curve.to_decreasing(target, opts.metric))
            step = int(curve.whole_step(reach[0])) if math.isfinite(reach[0]) else None
            # The epoch only when every source counts the same steps per epoch.
            per_epoch = {c.steps_per_epoch for c, _ in found}
            spe = per_epoch.pop() if len(per_epoch) == 1 else None
            prediction |= {
                "target": target,
                "predicted_step": step,
                "predicted_epoch": step / spe if step is not None and spe else None,
            }
        document["prediction"] = prediction
    if plot is not None:
        from dlperf.converge.plots import plot_regression

        plot_regression(plot, found, result, predicted, opts.metric)
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
            if pred["predicted_epoch"] is not None:
                rows.append([f"epoch reaching {target:g}", pred["predicted_epoch"]])
        console.print_table(f"prediction for {predict_at}", ["", "value"], rows)


def _speed_prediction(fit: SpeedFit, keys: tuple[str, ...], text: str) -> dict[str, float]:
    """The step time at a configuration such as 'workers=8,ps=2' (1 node or server unless
    given; the batch is global)."""
    from dlperf.converge import speed

    at = _numbers(_pairs(text, "--predict", "--predict workers=8,ps=2"), "--predict")
    if set(at) - set(keys) or "workers" not in at:
        raise UserError(
            f"--predict for {fit.model} takes {', '.join(f'{k}=N' for k in keys)} "
            f"(workers required), got {text!r}"
        )
    counts = {k: v for k, v in at.items() if k != "batch"}
    if any(v < 1 or not v.is_integer() for v in counts.values()) or at.get("batch", 1) <= 0:
        raise UserError(
            f"--predict {text!r}: workers, ps and nodes are whole numbers ≥ 1, batch is > 0"
        )
    at = {"ps": 1.0, "nodes": 1.0, "batch": fit.default_batch(at["workers"]), **at}
    t = float(speed.step_time(fit, at["workers"], at["batch"], at["ps"], at["nodes"])[0])
    return {**{k: at[k] for k in keys}, "step_time_s": t, "samples_per_s": at["batch"] / t}


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

    if (study_id is None) == (csv is None):
        raise UserError("give STUDY_ID or --csv FILE (not both)")
    if where and study_id is None:
        raise UserError("--where selects runs of a study: give STUDY_ID")
    if model not in speed.MODELS:
        raise UserError(
            f"unknown speed model '{model}'", f"choose one of {', '.join(speed.MODELS)}"
        )
    selected: dict[str, str] = {}
    for text in where:
        selected |= _pairs(text, "--where", "--where comm=allreduce")
    data = (
        speed.load_csv(csv)
        if csv is not None
        else speed.from_study(open_store(), study_id, selected)
    )
    result = speed.fit(data, model)
    if not result.converged:
        console.warn(f"the {model} fit did not converge ({result.message}); best attempt shown")
    for note in result.notes:
        console.warn(note)
    keys = ("workers", "nodes", "batch") if model == "pollux" else ("workers", "ps", "batch")
    predictions = [_speed_prediction(result, keys, text) for text in predict_at]
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
            [*keys[:2], "global batch", "step time (s)", "samples/s"],
            [[*(p[k] for k in keys), p["step_time_s"], p["samples_per_s"]] for p in predictions],
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


def _remaining_steps(path: Path, target: float) -> float:
    """Steps still to go from the end of the fit window to the target, by the Optimus fit."""
    from dlperf.converge import curve

    curve_doc = _load_json(path, "curve fit")
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
    speed = _speed_from(speed_path)
    steps = _remaining_steps(curve_path, target)
    rows = planner.plan(
        steps,
        speed,
        planner.parse_range(ps, "ps"),
        planner.parse_range(workers, "workers"),
        batch if batch is not None else speed.typical_batch,
        price if price is not None else 1.0,
    )
    if plot is not None:
        from dlperf.converge.plots import plot_plan

        plot_plan(plot, rows)
        console.err.print(f"saved {plot}", markup=False)
    cost = "cost" if price is not None else "device-hours"
    if as_json:
        console.print_json(
            {"steps": steps, "cost_unit": cost, "allocations": [asdict(r) for r in rows]}
        )
        return
    console.print_table(
        f"{steps:.0f} steps to {target:g}",
        ["ps", "workers", "hours", cost, "best"],
        [
            [r.ps, r.workers, r.time_s / 3600, r.cost,
             ", ".join(n for n, on in (("fastest", r.fastest), ("cheapest", r.cheapest)) if on)]
            for r in rows
        ],
    )  # fmt: skip


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
        speed = _speed_from(path.parent / entry["speed"])
        steps = _remaining_steps(path.parent / entry["curve"], float(entry["target"]))
        batch = float(entry.get("batch", speed.typical_batch))
        jobs.append(planner.Job(str(entry.get("name", f"job{i + 1}")), steps, speed, batch))
    result = planner.allocate(jobs, gpus)
    if as_json:
        console.print_json({"gpus": gpus, "jobs": [asdict(a) for a in result]})
        return
    console.print_table(
        f"{gpus} devices, Optimus greedy allocation",
        ["job", "workers", "ps", "hours to target"],
        [[a.name, a.workers, a.ps, a.time_s / 3600] for a in result],
    )


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
        try:
            learners[name] = [float(v) for v in values.split(",")]
        except ValueError:
            raise UserError(f"--learner {spec!r}: times must be numbers") from None
    return learners


def _rates(text: str) -> dict[str, float]:
    """'L1=1.0,L2=0.4' as {'L1': 1.0, 'L2': 0.4}, in the order given."""
    return _numbers(_pairs(text, "--speeds", "--speeds L1=1.0,L2=0.4"), "--speeds")


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
    console.err.print(f"saved {result['figure']}", markup=False)
