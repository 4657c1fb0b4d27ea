"""`dlperf converge fit | predict | regress` (`speed fit` and `plan`: dlperf.cli.speed)."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from dlperf.cli import console, outputs
from dlperf.cli.app import Json, app, config_option, open_store, set_option
from dlperf.cli.shortcuts import Flag, with_flags
from dlperf.converge import options
from dlperf.errors import UserError
from dlperf.parsing import parse_names, parse_pairs

if TYPE_CHECKING:  # the views load only when a command prints
    from dlperf.converge.views import Block

# The store as the commands that only read it open it: never made or written.
reader = functools.partial(open_store, create=False)

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

# The curve options fit, predict and regress share, after their --config and --set: the keys of
# [converge] that say how to read a curve.
CURVE_CONFIG = config_option("[converge] section")
CURVE_SET = set_option("converge.upto=0.3")
CURVE_FLAGS = {
    "x": Flag(str, "CSV column of the step (default: the row number, 1, 2, ...)."),
    "y": Flag(str, "CSV column of the metric."),
    "metric": Flag(str, "loss (default) | accuracy | error (accuracy is fitted as 1 − accuracy)."),
    "key": Flag(str, "Stored metric key (default val/loss, val/acc1; error: 1 − val/acc1)."),
    "upto": Flag(float, "Fit the first FRACTION of the points, e.g. 0.3."),
    "upto_step": Flag(float, "Fit the points up to step K."),
}
curve_flags = with_flags(CURVE_FLAGS, CURVE_FLAGS)


def show(blocks: Iterable[Block]) -> None:
    """Tables and lines on stdout, in order (`converge.views`' blocks)."""
    for block in blocks:
        if isinstance(block, str):
            console.out.print(block)
        else:
            console.print_table(block.title, block.columns, block.rows)


def _one_or_list(documents: list[dict[str, Any]]) -> Any:
    return documents[0] if len(documents) == 1 else documents


@converge_app.command("fit")
@curve_flags
def fit(
    run_ids: list[int] = RUN_IDS,
    csv: Path = CSV,
    plot: Path = outputs.PLOT,
    to_csv: Path = outputs.out_file(
        None, "Also write the β table (one row per curve) to this CSV file.", "--to-csv"
    ),
    as_json: Json = False,
    config: Path = CURVE_CONFIG,
    set_: list[str] = CURVE_SET,
    **curve: Any,
) -> None:
    """Fit l(k) = 1/(β0·k + β1) + β2 (Optimus) and a·k^−b + c to a loss or accuracy curve,
    with bootstrap 90% intervals; say which form predicts later points better.

    Several runs give one table: run, model, depth, device, β0, β1, β2 with their intervals,
    and the fit's error (--to-csv writes it as CSV). The JSON output, one document per curve,
    is what `dlperf converge plan --curve` reads.

    Example: dlperf converge fit --csv examples/pollux/cifar10_validation-128.csv
    --y metric --metric accuracy --upto 0.3
    """
    from dlperf.converge import fitting, views

    opts, _ = options.load(config, set_, curve)
    if to_csv is not None:  # before the fits, not after them
        from dlperf.paths import check_writable, within

        if csv is not None and within(to_csv, csv) is not None:  # a link or another name too
            raise UserError(
                f"--to-csv {to_csv} is the --csv file {csv}: the β table would replace the curve",
                "give --to-csv another file",
            )
        check_writable(to_csv, make_parents=False, streams=True)  # /dev/stdout written through
    with console.reporter() as rep:
        done = fitting.fit(run_ids or [], csv, opts, reader, rep)
    if plot is not None:
        from dlperf.report.curves import plot_curves

        plot_curves(plot, done.reports, opts.metric)
    table = fitting.beta_table(done.reports)
    if to_csv is not None:
        fitting.write_table(to_csv, table)
    console.tell(done.warnings, plot, to_csv)
    if as_json:
        console.print_json(_one_or_list([fitting.fit_result(r).to_dict() for r in done.reports]))
        return
    if len(table) > 1:
        show([views.beta_table(table, opts.metric)])
        return
    for r in done.reports:
        show(views.fit_blocks(r))


@converge_app.command("predict")
@curve_flags
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
    plot: Path = outputs.PLOT,
    as_json: Json = False,
    config: Path = CURVE_CONFIG,
    set_: list[str] = CURVE_SET,
    **curve: Any,
) -> None:
    """The step at which the fitted curve reaches a target, with a 90% interval, and the
    error against the measured curve when it goes on beyond the fit window. The ensemble says
    "cannot tell", with the reason, where the points seen do not determine it.

    Example: dlperf converge predict --csv examples/pollux/cifar10_validation-128.csv
    --y metric --metric accuracy --upto 0.3 --target 0.94 --form power
    """
    from dlperf.converge import fitting, views

    opts, section = options.load(config, set_, curve | {"target": target, "form": form})
    target, form = section.target, section.form
    if target is None:  # before the fits, not after them
        raise UserError("give converge.target, the value to reach", "e.g. --target 0.94")
    with console.reporter() as rep:
        done = fitting.predict(run_ids or [], csv, opts, reader, target, form, rep)
    if plot is not None:
        from dlperf.report import curves

        if form == "ensemble":  # the posterior's median and band
            curves.plot_bands(plot, fitting.band_rows(done, opts.metric), opts.metric, target)
        else:
            curves.plot_curves(plot, done.reports, opts.metric)
    console.tell(done.warnings, plot)
    if as_json:
        console.print_json(_one_or_list([p.to_dict() for p in done.predictions]))
        return
    blocks, warnings = views.prediction_view(done.predictions, form, target, opts.metric)
    show(blocks)
    console.tell(warnings)


@converge_app.command("regress")
@curve_flags
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
    plot: Path = outputs.PLOT,
    as_json: Json = False,
    config: Path = CURVE_CONFIG,
    set_: list[str] = CURVE_SET,
    **curve: Any,
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
    from dlperf.converge import fitting, views

    opts, section = options.load(config, set_, curve | {"target": target})
    at = parse_pairs(predict_at, "--predict", "--predict depth=50") if predict_at else None
    done = fitting.regress(
        sources, parse_names(features), opts, reader, at, section.target, compare
    )
    if plot is not None:
        from dlperf.report.curves import plot_regression

        plot_regression(plot, done.runs, done.unseen, opts.metric, predict_at, done.compared)
    console.tell(done.warnings, plot)
    if as_json:
        console.print_json(done.result.to_dict())
    else:
        show(views.regression_blocks(done.result, predict_at))
