"""`dlperf converge fit | predict | regress | speed fit | plan` and `dlperf staleness`."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dlperf.cli import console
from dlperf.cli.app import Json, app, config_option, open_store, set_option
from dlperf.converge.options import CurveOptions
from dlperf.errors import UserError
from dlperf.formatting import fmt
from dlperf.parsing import parse_names, parse_pairs

if TYPE_CHECKING:  # dlperf.config loads pydantic: only when a command runs
    from dlperf.config import ConvergeConfig

converge_app = typer.Typer(
    help="Loss-curve and speed models (Optimus, Pollux): when a job converges, how fast it "
    "runs, what to give it.\n\nThe curve options of fit, predict and regress (--x to "
    "--upto-step, --target, --form) are short for --set converge.KEY=VALUE; `dlperf config "
    "keys` explains every key.\n\nExample: dlperf converge fit --csv "
    "examples/pollux/cifar10_validation-128.csv --y metric --metric accuracy --upto 0.3",
    no_args_is_help=True,
)
speed_app = typer.Typer(
    help="Resource-speed models (Optimus, Pollux).\n\nExample: dlperf converge speed fit "
    "--csv examples/pollux/cifar10_placements.csv --model pollux",
    no_args_is_help=True,
)
app.add_typer(converge_app, name="converge")
converge_app.add_typer(speed_app, name="speed")

RUN_IDS = typer.Argument(None, help="Stored run IDs (or use --csv).", show_default=False)
CSV = typer.Option(None, "--csv", help="A CSV file with the curve.")


# The curve options fit, predict and regress share: shortcuts for the keys of [converge].
CURVE_CONFIG = config_option("[converge] section")
CURVE_SET = set_option("converge.upto=0.3")
X = typer.Option(None, "--x", help="CSV column of the step (default: the row number, 1, 2, ...).")
Y = typer.Option(None, "--y", help="CSV column of the metric.")
METRIC = typer.Option(
    None, "--metric", help="loss (default) | accuracy | error (accuracy is fitted as 1 − accuracy)."
)
KEY = typer.Option(
    None, "--key", help="Stored metric key (default val/loss, val/acc1; error: 1 − val/acc1)."
)
UPTO = typer.Option(None, "--upto", help="Fit the first FRACTION of the points, e.g. 0.3.")
UPTO_STEP = typer.Option(None, "--upto-step", help="Fit the points up to step K.")


def _curve(
    config: Path | None, set_: list[str], flags: dict[str, Any]
) -> tuple[CurveOptions, ConvergeConfig]:
    """[converge] of `config` < --set < the flags given: the curve options and the section."""
    from dlperf.config import ConvergeJob, load_job

    section = load_job(ConvergeJob, config, set_, converge=flags).converge
    opts = CurveOptions(**{f.name: getattr(section, f.name) for f in fields(CurveOptions)})
    return opts, section


def _one_or_list(documents: list[dict[str, Any]]) -> Any:
    return documents[0] if len(documents) == 1 else documents


@converge_app.command("fit")
def fit(
    run_ids: list[int] = RUN_IDS,
    csv: Path = CSV,
    plot: Path = console.PLOT,
    to_csv: Path = typer.Option(
        None, "--to-csv", help="Also write the β table (one row per curve) to this CSV file."
    ),
    as_json: Json = False,
    config: Path = CURVE_CONFIG,
    set_: list[str] = CURVE_SET,
    x: str = X,
    y: str = Y,
    metric: str = METRIC,
    key: str = KEY,
    upto: float = UPTO,
    upto_step: float = UPTO_STEP,
) -> None:
    """Fit l(k) = 1/(β0·k + β1) + β2 (Optimus) and a·k^−b + c to a loss or accuracy curve,
    with bootstrap 90% intervals; say which form predicts later points better.

    Several runs give one table: run, model, depth, device, β0, β1, β2 with their intervals,
    and the fit's error (--to-csv writes it as CSV). The JSON output, one document per curve,
    is what `dlperf converge plan --curve` reads.

    Example: dlperf converge fit --csv examples/pollux/cifar10_validation-128.csv
    --y metric --metric accuracy --upto 0.3
    """
    from dlperf.converge import fitting

    curve = {"x": x, "y": y, "metric": metric, "key": key, "upto": upto, "upto_step": upto_step}
    opts, _ = _curve(config, set_, curve)
    if to_csv is not None:
        from dlperf.paths import check_writable

        check_writable(to_csv, make_parents=False)  # before the fits, not after them
    with console.reporter() as rep:
        done = fitting.fit(run_ids or [], csv, opts, open_store, rep)
    if plot is not None:
        from dlperf.report.curves import plot_curves

        plot_curves(plot, done.reports, opts.metric)
    table = fitting.beta_table(done.reports)
    if to_csv is not None:
        fitting.write_table(to_csv, table)
    console.tell(done.warnings, plot, to_csv)
    if console.printed_json(as_json, _one_or_list([fitting.fit_document(r) for r in done.reports])):
        return
    if len(table) > 1:
        console.print_table(
            f"Optimus fits of {len(table)} curves, {opts.metric} (90% intervals)",
            ["run", "model", "depth", "device", "β0", "β0 5–95%", "β1", "β1 5–95%", "β2",
             "β2 5–95%", "rmse fit", "rmse held out"],
            [
                [row["source"], row["model"], row["depth"], row["device"],
                 *(cell for b in ("beta0", "beta1", "beta2") for cell in
                   (row[b], f"{fmt(row[f'{b}_5%'])}–{fmt(row[f'{b}_95%'])}")),
                 row["rmse"], row["heldout_rmse"]]
                for row in table
            ],
        )  # fmt: skip
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
            console.out.print(f"{h['better']} predicts the held-out points better")


@converge_app.command("predict")
def predict(
    run_ids: list[int] = RUN_IDS,
    target: float | None = typer.Option(
        None, "--target", help="Value to reach, in the metric's units."
    ),
    csv: Path = CSV,
    form: str = typer.Option(
        None,
        "--form",
        help="ensemble (default: a distribution over 5 curve families) | optimus | power.",
    ),
    plot: Path = console.PLOT,
    as_json: Json = False,
    config: Path = CURVE_CONFIG,
    set_: list[str] = CURVE_SET,
    x: str = X,
    y: str = Y,
    metric: str = METRIC,
    key: str = KEY,
    upto: float = UPTO,
    upto_step: float = UPTO_STEP,
) -> None:
    """The step at which the fitted curve reaches a target, with a 90% interval, and the
    error against the measured curve when it goes on beyond the fit window. The ensemble says
    "cannot tell", with the reason, where the points seen do not determine it.

    Example: dlperf converge predict --csv examples/pollux/cifar10_validation-128.csv
    --y metric --metric accuracy --upto 0.3 --target 0.94 --form power
    """
    from dlperf.converge import fitting

    curve = {"x": x, "y": y, "metric": metric, "key": key, "upto": upto, "upto_step": upto_step}
    opts, section = _curve(config, set_, {**curve, "target": target, "form": form})
    target, form = section.target, section.form
    if target is None:  # before the fits, not after them
        raise UserError("give converge.target, the value to reach", "e.g. --target 0.94")
    with console.reporter() as rep:
        done = fitting.predict(run_ids or [], csv, opts, open_store, target, form, rep)
    if plot is not None:
        from dlperf.report import curves

        if form == "ensemble":  # the posterior's median and band
            curves.plot_bands(plot, fitting.band_rows(done, opts.metric), opts.metric, target)
        else:
            curves.plot_curves(plot, done.reports, opts.metric)
    console.tell(done.warnings, plot)
    if console.printed_json(as_json, _one_or_list(done.predictions)):
        return
    if form == "ensemble":
        _print_ensemble(done.predictions, target, opts.metric)
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
    _print_basis(done.predictions)
    for d in done.predictions:
        if not d["reachable"]:
            console.warn(
                f"{d['source']}: unreachable, the fitted curve levels off at "
                f"{d['plateau']:.4g} {opts.metric} ({asymptote} = {d['asymptote']:.4g})"
            )


def _print_basis(predictions: list[dict[str, Any]]) -> None:
    for d in predictions:
        console.out.print(f"{d['source']}: {d['basis']}")


def _print_ensemble(predictions: list[dict[str, Any]], target: float, metric: str) -> None:
    console.print_table(
        f"ensemble: step reaching {metric} {target:g} (posterior median, 90% interval)",
        ["source", "predicted step", "5%", "95%", "P(reach)", "epoch", "actual step",
         "error %", "plateau", "plateau 5%", "plateau 95%"],
        [
            [d["source"], d["predicted_step"] if d["reachable"] else d["verdict"],
             *(d["interval"] or (None, None)), d["p_reachable"], d["predicted_epoch"],
             d["actual_step"], d["error_pct"], d["plateau"], *d["plateau_interval"]]
            for d in predictions
        ],
    )  # fmt: skip
    _print_basis(predictions)
    for d in predictions:
        # Why there is no answer, or what an answer's open upper end (95% "-") means.
        if d["reason"]:
            console.warn(f"{d['source']}: {d['verdict']}, {d['reason']}")


@converge_app.command("regress")
def regress(
    sources: list[str] = typer.Argument(
        ..., help="Run IDs, or CSV files given as PATH:feature=value,...", show_default=False
    ),
    features: str = typer.Option(..., "--features", help="Comma-separated, e.g. depth,gpu."),
    predict_at: str = typer.Option(
        None, "--predict", help="A configuration to predict, e.g. depth=50,gpu=T4."
    ),
    target: float | None = typer.Option(
        None, "--target", help="With --predict: the value whose step to predict."
    ),
    compare: str = typer.Option(
        None,
        "--compare",
        help="With --predict: a run ID (or PATH.csv:feature=value,...) of that configuration, "
        "left out of the regression, to measure the prediction against.",
    ),
    plot: Path = console.PLOT,
    as_json: Json = False,
    config: Path = CURVE_CONFIG,
    set_: list[str] = CURVE_SET,
    x: str = X,
    y: str = Y,
    metric: str = METRIC,
    key: str = KEY,
    upto: float = UPTO,
    upto_step: float = UPTO_STEP,
) -> None:
    """Fit β0, β1, β2 of each run, regress log β on run features, and predict the curve of an
    unseen configuration (and the step, and epoch, reaching --target).

    Features are run summary, system or config keys; depth reads resnet56's 56, gpu the
    first GPU's name. With --compare, the real run of the predicted configuration is drawn
    beside the predicted curve, with the curve's error and the error of the epochs to the
    target.

    Example: dlperf converge regress 1 2 3 4 --features depth --metric accuracy
    --predict depth=56 --target 0.9 --compare 5 --plot regress.png
    """
    from dlperf.converge import fitting
    from dlperf.converge.regress import BETAS

    curve = {"x": x, "y": y, "metric": metric, "key": key, "upto": upto, "upto_step": upto_step}
    opts, section = _curve(config, set_, {**curve, "target": target})
    target = section.target
    at = parse_pairs(predict_at, "--predict", "--predict depth=50") if predict_at else None
    done = fitting.regress(sources, parse_names(features), opts, open_store, at, target, compare)
    if plot is not None:
        from dlperf.report.curves import plot_regression

        plot_regression(plot, done.runs, done.unseen, opts.metric, predict_at, done.compared)
    console.tell(done.warnings, plot)
    doc = done.document
    if console.printed_json(as_json, doc):
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
            if pred["actual_step"] is not None:
                rows.append(["measured step (a run with these features)", pred["actual_step"]])
                rows.append(["error %", pred["error_pct"]])
        if "compare" in pred:
            c = pred["compare"]
            rows += [
                [f"compared with {c['legend']}: curve error % (mean, {c['n_points']} points)",
                 c["curve_error_pct"]],
                ["curve rmse", c["curve_rmse"]],
            ]  # fmt: skip
            if target is not None:
                rows += [
                    [f"measured step reaching {target:g}", c["actual_step"] or "not reached"],
                    [f"measured epoch reaching {target:g}", c["actual_epoch"]],
                    ["predicted epoch", c["predicted_epoch"]],
                    ["error % on the steps (and epochs) to the target", c["error_pct"]],
                ]  # fmt: skip
        console.print_table(f"prediction for {predict_at}", ["", "value"], rows)
        console.out.print(f"basis: {pred['basis']}")
